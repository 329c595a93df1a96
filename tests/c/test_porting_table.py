"""README's table "ONNX Runtime training → edgetrain" names every public name of ONNX Runtime
1.19.2's onnxruntime.training.artifacts, .api and .onnxblock: classes and functions defined in
onnxruntime (what those modules import from elsewhere is not their API), with the public members
each class defines and every argument of their functions and methods. The names are read from the
installed ONNX Runtime, not from a list of ours."""

import inspect
import json
import re
import subprocess

import pytest

from ort_venv import ROOT, ort_python

LIST_NAMES = r"""
import inspect, json
import onnxruntime.training.api as api, onnxruntime.training.artifacts as artifacts
import onnxruntime.training.onnxblock as onnxblock

def ours(obj):
    return (getattr(obj, "__module__", "") or "").startswith("onnxruntime.training")

names, signatures = set(), {}
modules = [artifacts, api, onnxblock] + [getattr(onnxblock, m) for m in ("blocks", "loss", "optim", "checkpoint_utils")]
modules += [getattr(api, m) for m in ("checkpoint_state", "module", "optimizer", "lr_scheduler")]
for module in modules:
    for name, obj in vars(module).items():
        if name.startswith("_") or inspect.ismodule(obj):
            continue
        constant = name.isupper() and isinstance(obj, (int, str)) and not isinstance(obj, bool)
        if constant or ((inspect.isclass(obj) or inspect.isfunction(obj)) and ours(obj)):
            names.add(name)
        if inspect.isclass(obj) and ours(obj):
            members = {m: v for m, v in vars(obj).items() if not m.startswith("_") or m == "__init__"}
            names.update(m for m in members if m != "__init__")
            callables = [getattr(v, "__func__", v) for v in members.values()]
        elif inspect.isfunction(obj) and ours(obj):
            callables = [obj]
        else:
            continue
        for function in filter(inspect.isfunction, callables):  # and the arguments each takes
            arguments = [p for p in inspect.signature(function).parameters if p not in ("self", "cls")]
            if module.__name__.startswith("onnxruntime.training.onnxblock"):
                signatures[f"{module.__name__.split('.')[-1]}.{name}.{function.__name__}"] = arguments
            else:
                names.update(arguments)
print(json.dumps({"names": sorted(names), "signatures": signatures}))
"""


def porting_section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("### ONNX Runtime training → edgetrain")
    return text[start : text.index("\n## ", start)]


@pytest.fixture(scope="module")
def ort_api() -> dict:
    return json.loads(
        subprocess.run([ort_python(), "-c", LIST_NAMES], capture_output=True, text=True, check=True).stdout
    )


def test_readme_porting_table_names_every_public_name(ort_api):
    names = ort_api["names"]
    assert len(names) > 80  # every class and function of the three modules, their members and arguments
    section = porting_section()
    in_code = " ".join(re.findall(r"`([^`]*)`", section))
    missing = [name for name in names if not re.search(rf"\b{re.escape(name)}\b", in_code)]
    assert not missing, f"README's porting table does not name: {', '.join(missing)}"


def test_onnxblock_takes_onnx_runtimes_arguments(ort_api):
    """Each onnxblock class edgetrain has takes ORT's arguments, by the same names in the same order
    (the README's table names the classes, not each argument)."""
    import edgetrain.onnxblock as ours

    compared, different = 0, []
    for qualified, arguments in ort_api["signatures"].items():
        module, cls, function = qualified.split(".")
        owner = getattr(ours if module == "onnxblock" else getattr(ours, module, None), cls, None)
        method = getattr(owner, function, None) if owner is not None else None
        if method is None:
            continue  # not in edgetrain's subset: the README's table says so (checked above)
        mine = [p for p in inspect.signature(method).parameters if p not in ("self", "cls")]
        compared += 1
        if mine != arguments:
            different.append(f"{qualified}: ORT {arguments}, edgetrain {mine}")
    assert compared > 30
    assert not different, "; ".join(different)
