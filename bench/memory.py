"""RAM of one training step: edgetrain on a Cortex-M4 under each update policy, beside ONNX Runtime
training 1.19.2's peak RSS for the same step and the Tiny Training Engine's published figures; and,
for KWS, the fused update's parameters beside the accumulating build's after 20 SGD steps.

    python bench/memory.py [--models kws,vww,ic,mlp] [--json out.json]     (or: make bench-memory)

edgetrain: each model is compiled for cortex-m4 (batch 1, SGD) and its report.json read:
  ram_bytes    every mutable static byte of the trainer, as arm-none-eabi-size counts the object;
  arena        the planned arena (the largest of train_step, eval_step, infer);
  bound        the liveness lower bound of that arena (the most bytes live at one statement).
ORT: the eval-mode export with BatchNormalization frozen (ORT cannot train the training-mode export,
DESIGN.md), trained with SGD on the same parameters minus BatchNormalization's; each figure is a
process of its own in bench/.venv-ort, and README.md explains the RSS method.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from trees import source_tree

BENCH = Path(__file__).resolve().parent
ORT_PYTHON = BENCH / ".venv-ort" / "bin" / "python"
TARGET = "cortex-m4"
LEARNING_RATE = 0.01
KB = 1024

# model: K of its last-K policies, in layers (ops with parameters) counted from the output.
MODELS = {
    "kws": 5,  # KWS DS-CNN: the last depthwise-separable block (2 Conv, 2 BatchNormalization) and the classifier
    "vww": 1,  # VWW MobileNetV1-0.25 at 96x96: the classifier
    "ic": 1,  # ResNet-8 on CIFAR-10: the classifier
    "mlp": 1,  # the digits MLP of `edgetrain demo`: its last Gemm
    # VWW's eval-mode export, BatchNormalization frozen (running statistics and scale fixed, bias
    # trainable): the form TTE trains (its graphs fold BatchNormalization into the convolutions) and
    # the only one ORT can. Only the bias-plus-classifier policy, the one issue 6 sets a figure for.
    "vww-eval": 1,
    # The eval-mode exports with each BatchNormalization folded into its convolution
    # (frontend.quantize.fold_batchnorm), as an int8 deployment has them: issue 24's float32 and int8
    # figures. KWS's last block (2 Conv) and classifier are then its last 3 layers.
    "kws-fused": 3,
    "vww-fused": 1,
    # torchvision's MobileNetV2 at the Tiny Training Engine's setting (width 0.35, 128 x 128), folded
    # as above, under a sparse update as TTE's: the biases of its last 22 layers (the last 7 of its
    # 17 blocks, its last Conv and the classifier) and the classifier's weights.
    "mbv2-sparse": 22,
}
FROZEN_BN_SUFFIX = "-eval"
FUSED_BN_SUFFIX = "-fused"
SPARSE_SUFFIX = "-sparse"
FOLDED_BN = (FUSED_BN_SUFFIX, SPARSE_SUFFIX)
# The one policy of each variant above (all from the eval-mode export): the name's suffix -> policy.
VARIANT_POLICIES = {
    FROZEN_BN_SUFFIX: ("bias + last {k}", {"update_policy": "bias+last:{k}"}),
    # row bands (compiler/lower/bands.py): the frozen layers in front of the first trained one, and
    # the backward pass's widest layers where the biases train back to them
    FUSED_BN_SUFFIX: (
        "bias + last {k}, fused SGD, row bands",
        {"update_policy": "bias+last:{k}", "fused_update": True, "row_bands": True},
    ),
    SPARSE_SUFFIX: (
        "bias of last {k} + last 1, fused SGD, row bands",
        {"update_policy": "bias:{k}+last:1", "fused_update": True, "row_bands": True},
    ),
}
# The autoencoder (MLPerf Tiny AD) is left out: at batch 1 its BatchNorm1d layers see a single
# value per channel, which training mode cannot normalize (torch refuses to export it).

# (label, generate_artifacts arguments); "{k}" is the model's k.
POLICIES = (
    ("full model, accumulate", {}),
    ("full model, fused SGD", {"fused_update": True}),
    ("bias only", {"update_policy": "bias"}),
    ("last {k}", {"update_policy": "last:{k}"}),
    ("bias + last {k}", {"update_policy": "bias+last:{k}"}),
)
# The policies whose fused and accumulating builds must give the same parameters, and the model.
SAME_NUMBERS_POLICIES = ("full model", "bias only", "last {k}", "bias + last {k}")
SAME_NUMBERS_MODEL, SAME_NUMBERS_STEPS, SAME_NUMBERS_TOLERANCE = "kws", 20, 1e-6
# Issue 6's targets: (model, policy, at most this many KB of ram_bytes). Each is compiled once more
# with that RAM budget, which lets the compiler fall back on recomputation to meet it.
TARGETS = (
    ("kws", "full model, fused SGD", 400),
    ("kws", "bias + last 5", 160),
    ("vww", "bias + last 1", 256),
    ("vww-eval", "bias + last 1", 256),
)

# Issue 24's targets for int8 (quantize="int8"): (model, policy, at most this many KB of ram_bytes).
# Each is compiled once more quantized, calibrated on CALIBRATION_BATCHES random batches.
QUANTIZED_TARGETS = (
    ("kws-fused", "bias + last 3, fused SGD, row bands", 64),
    ("vww-fused", "bias + last 1, fused SGD, row bands", 96),
    ("mbv2-sparse", "bias of last 22 + last 1, fused SGD, row bands", 128),
)
CALIBRATION_BATCHES = 4


def _table_cell(error: str) -> str:
    """An error line as a markdown table cell."""
    return error[:240].replace("|", "/")


def _status(field: str) -> int:
    """A /proc/self/status figure in KiB."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field + ":"))


def ort_artifacts(directory: Path) -> None:
    """In ORT's venv: ORT's training artifacts for directory/spec.json, from the graph one level up."""
    import onnx
    from onnxruntime.training import artifacts

    spec = json.loads((directory / "spec.json").read_text())
    # A ModelProto, not a path: from a path, ORT 1.19 saves scratch external data twice, which the
    # onnx of its venv refuses.
    artifacts.generate_artifacts(
        onnx.load(str(directory.parent / "model.onnx")),
        requires_grad=spec["requires_grad"],
        frozen_params=spec["frozen"],
        loss=artifacts.LossType[spec["loss"]],
        optimizer=artifacts.OptimType.SGD,
        artifact_directory=str(directory),
    )
    optimizer = onnx.load(str(directory / "optimizer_model.onnx"))
    optimizer.ir_version = 10  # ORT 1.19 reads IR 10 at most
    onnx.save(optimizer, str(directory / "optimizer_model.onnx"))


def ort_rss(directory: Path) -> None:
    """In ORT's venv: print the RSS, in KiB, that loading the artifacts in `directory` and running
    one training step (forward, backward, optimizer step, gradient reset) add to the process."""
    import onnxruntime
    from onnxruntime.training import api

    x, y = np.load(directory.parent / "x.npy"), np.load(directory.parent / "y.npy")
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    gc.collect()
    before_load = _status("VmRSS")
    state = api.CheckpointState.load_checkpoint(str(directory / "checkpoint"))
    module = api.Module(
        str(directory / "training_model.onnx"), state, str(directory / "eval_model.onnx"), session_options=options
    )
    optimizer = api.Optimizer(str(directory / "optimizer_model.onnx"), module)
    module.train()
    gc.collect()
    loaded = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # resets the peak (VmHWM) to the current RSS, so the peak read next is the step's
    module(x, y)
    optimizer.step()
    module.lazy_reset_grad()
    peak = _status("VmHWM")
    print(json.dumps({"step_kib": peak - loaded, "load_and_step_kib": peak - before_load}))


def _run(args: list[str], cwd: Path | None = None) -> str:
    result = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=cwd)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{result.stderr.strip()[-3000:]}")
    return result.stdout


def _ort(work: Path, name: str, requires_grad: list[str], parameters: list[str], cache: dict) -> dict:
    """ORT's figures for training `requires_grad` of `parameters` (measured once per parameter set)."""
    key = tuple(sorted(requires_grad))
    if key not in cache:
        d = work / name / f"ort{len(cache)}"
        d.mkdir()
        loss = "CrossEntropyLoss" if np.issubdtype(np.load(work / name / "y.npy").dtype, np.integer) else "MSELoss"
        frozen = [p for p in parameters if p not in requires_grad]
        (d / "spec.json").write_text(
            json.dumps({"requires_grad": requires_grad, "frozen": frozen, "loss": loss, "lr": LEARNING_RATE})
        )
        # ORT writes scratch files into the working directory: give it its own.
        _run([str(ORT_PYTHON), __file__, "--ort", "artifacts", str(d)], cwd=d)
        cache[key] = json.loads(_run([str(ORT_PYTHON), __file__, "--ort", "rss", str(d)]).splitlines()[-1])
    return cache[key]


def generate_start(spec_path: Path) -> None:
    """Under the starting point's PYTHONPATH: generate_artifacts as spec.json says, and print the
    figures of its report.json that the table compares."""
    from edgetrain import artifacts

    spec = json.loads(spec_path.read_text())
    out = artifacts.generate_artifacts(spec.pop("graph"), **spec)
    report = json.loads((out / "report.json").read_text())
    print(json.dumps({k: report.get(k) for k in ("ram_bytes", "arena_bytes", "flash_bytes")}))


def _at_start(start_tree: Path, graph, kwargs: dict, out: Path) -> dict:
    """The starting point's figures for the same compile (same graph, same arguments)."""
    import onnx

    out.mkdir(parents=True)
    onnx.save(graph, str(out / "model.onnx"))
    spec = {**kwargs, "graph": str(out / "model.onnx"), "artifact_directory": str(out / "out")}
    (out / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "PYTHONPATH": str(start_tree)}
    result = subprocess.run(
        [sys.executable, __file__, "--generate-start", str(out / "spec.json")], capture_output=True, text=True, env=env
    )
    if result.returncode != 0:
        return {"error": _table_cell(result.stderr.strip().splitlines()[-1])}
    return json.loads(result.stdout.splitlines()[-1])


def _trained(directory: Path) -> list[str]:
    """The parameters a build trains: those training_model.onnx returns a gradient for."""
    import onnx

    outputs = onnx.load(str(directory / "training_model.onnx"), load_external_data=False).graph.output
    return [o.name[: -len("_grad")] for o in outputs if o.name.endswith("_grad")]


def measure(
    models: list[str], work: Path, with_ort: bool, start_tree: Path | None = None, count: bool = False
) -> list[dict]:
    import onnx
    from edgetrain import artifacts
    from edgetrain.errors import EdgetrainError
    from edgetrain.frontend.quantize import fold_batchnorm
    from models import MEMORY_MODELS as BUILDERS, export, torch_model
    from mlperf_tiny import export_training

    rows = []
    for name in models:
        # edgetrain trains the training-mode export (BatchNormalization with batch statistics) but
        # for the variants of VARIANT_POLICIES.
        variant = _variant(name)
        base = name.removesuffix(variant)
        ort_graph, ort_trainable, ort_frozen = export(torch_model(base), base, 1)
        if variant in FOLDED_BN:
            graph = onnx.ModelProto.FromString(ort_graph.SerializeToString())
            fold_batchnorm(graph.graph)
        elif name == "mlp" or variant:
            graph = ort_graph  # the MLP has no BatchNormalization: one form only
        else:
            graph, _ = export_training(BUILDERS[name][0](), batch=1)
        (work / name).mkdir()
        onnx.save(ort_graph, str(work / name / "model.onnx"))
        _, sample, classes = BUILDERS[base]
        np.save(work / name / "x.npy", np.random.default_rng(0).normal(size=(1, *sample)).astype(np.float32))
        np.save(work / name / "y.npy", np.zeros(1, np.int64) if classes else np.zeros((1, *sample), np.float32))
        ort_cache: dict = {}
        policies = list(_policy_options(name).items())
        policies += [
            (f"{label}, ram_budget {kb} KB", {**kwargs, "ram_budget": kb * KB})
            for label, kwargs in policies
            for model, policy, kb in TARGETS
            if (model, policy) == (name, label)
        ]
        for label, kwargs in policies:
            row = {"model": name, "policy": label}
            try:
                options = dict(
                    loss="CrossEntropyLoss" if classes else "MSELoss",
                    optimizer="SGD",
                    learning_rate=LEARNING_RATE,
                    batch_size=1,
                    target=TARGET,
                    **kwargs,
                )
                directory = work / name / label.replace(" ", "_").replace(",", "")
                out = artifacts.generate_artifacts(graph, artifact_directory=directory, **options)
            except EdgetrainError as exc:  # the table says so, and the other rows still get measured
                rows.append({**row, "error": _table_cell(str(exc).splitlines()[0])})
                print(f"  {name:<4} {label:<24} failed: {exc}", file=sys.stderr)
                continue
            report = json.loads((out / "report.json").read_text())
            bound = max(report["liveness_lower_bound_bytes"].values())
            trained = _trained(out)
            row.update(
                ram_bytes=report["ram_bytes"],
                arena_bytes=report["arena_bytes"],
                flash_bytes=report.get("flash_bytes"),
                bound_bytes=bound,
                ratio=report["arena_bytes"] / bound,
                trained_parameters=report["trainable_parameters"],
                recomputed_ops=report["recomputed_ops"],
            )
            if start_tree is not None:
                row["start"] = _at_start(start_tree, graph, options, directory.with_name(directory.name + "-start"))
            if any((name, label) == (model, policy) for model, policy, _ in QUANTIZED_TARGETS):
                int8 = directory.with_name(directory.name + "-int8")
                row["int8"] = _quantized(graph, options, sample, int8, work / name if count else None)
            if with_ort and variant not in FOLDED_BN:  # ORT trains the unfused graph's parameters
                ort_params = [p for p in trained if p in ort_trainable]
                row["ort"] = _ort(work, name, ort_params, ort_trainable + ort_frozen, ort_cache) if ort_params else None
            rows.append(row)
            print(f"  {name:<4} {label:<24} {row['ram_bytes'] / KB:9.1f} KB", file=sys.stderr)
    return rows


def _quantized(graph, options: dict, sample, out: Path, data: Path | None = None) -> dict:
    """The same compile with quantize="int8": its ram_bytes, or why it failed. With `data` (the
    row's x.npy and y.npy), a build with row bands also counts the instructions of a step on
    cortex-m4 (instructions.py), beside the same build's without them: what the bands cost."""
    from edgetrain import artifacts
    from edgetrain.errors import EdgetrainError
    from instructions import count

    rng = np.random.default_rng(1)
    calibration = [rng.normal(size=(1, *sample)).astype(np.float32) for _ in range(CALIBRATION_BATCHES)]

    def build(directory: Path, **changed) -> Path:
        return artifacts.generate_artifacts(
            graph, artifact_directory=directory, quantize="int8", calibration_data=calibration, **options | changed
        )

    try:
        built = build(out)
    except EdgetrainError as exc:
        return {"error": _table_cell(str(exc).splitlines()[0])}
    report = json.loads((built / "report.json").read_text())
    row = {"ram_bytes": report["ram_bytes"], "arena_bytes": report["arena_bytes"]}
    if data is not None and options.get("row_bands"):
        whole = build(out.with_name(out.name + "-whole"), row_bands=False)
        row["instructions"] = {"row bands": count(data, built), "whole": count(data, whole)}
    return row


def quantized_table(rows: list[dict]) -> str:
    """Issue 24's int8 figures beside the float32 ones of the same policies."""
    lines = [
        "| model | update policy | float32 ram_bytes | int8 ram_bytes | int8 / float32 | int8 target |",
        "|---|---|--:|--:|--:|--:|",
    ]
    for model, policy, kb in QUANTIZED_TARGETS:
        r = next((r for r in rows if (r["model"], r["policy"]) == (model, policy) and "int8" in r), None)
        if r is None:
            continue
        q = r["int8"]
        if "error" in q:
            lines.append(
                f"| {model} | {policy} | {r['ram_bytes'] / KB:,.1f} KB | failed: {q['error']} | – | ≤ {kb} KB |"
            )
            continue
        met = "met" if q["ram_bytes"] <= kb * KB else "not met"
        lines.append(
            f"| {model} | {policy} | {r['ram_bytes'] / KB:,.1f} KB | {q['ram_bytes'] / KB:,.1f} KB "
            f"| {q['ram_bytes'] / r['ram_bytes']:.2f} | ≤ {kb} KB ({met}) |"
        )
    for model, policy, _ in QUANTIZED_TARGETS:
        r = next((r for r in rows if (r["model"], r["policy"]) == (model, policy) and "int8" in r), None)
        counted = r["int8"].get("instructions") if r else None
        if counted:
            banded, whole = counted["row bands"], counted["whole"]
            lines.append(
                f"\n{model}, int8, instructions per step on {TARGET}: {banded:,} with row bands, {whole:,} "
                f"without ({banded / whole:.2f}x)"
            )
    return "\n".join(lines) + "\n"


def _policy_options(name: str) -> dict[str, dict]:
    """{label: generate_artifacts arguments} of model `name`'s policies ("{k}" filled in)."""
    k, variant = MODELS[name], _variant(name)
    return {
        label.format(k=k): {
            key: value.format(k=k) if isinstance(value, str) else value for key, value in kwargs.items()
        }
        for label, kwargs in ([VARIANT_POLICIES[variant]] if variant else POLICIES)
    }


def _variant(name: str) -> str:
    """The suffix of VARIANT_POLICIES that model `name` ends with, or ""."""
    return next((suffix for suffix in VARIANT_POLICIES if name.endswith(suffix)), "")


def same_numbers(work: Path) -> list[dict]:
    """For each policy, SGD on the same batches with a fused update and with accumulated gradients
    (host builds through the Python API, the loop ONNX Runtime's): max |fused - accumulate| over
    max |accumulate| of the parameters after SAME_NUMBERS_STEPS steps."""
    from edgetrain import api, artifacts
    from models import MODELS as BUILDERS
    from mlperf_tiny import export_training

    name = SAME_NUMBERS_MODEL
    build, sample, classes = BUILDERS[name]
    graph, _ = export_training(build(), batch=1)
    rng = np.random.default_rng(1)
    batches = [
        (rng.normal(size=(1, *sample)).astype(np.float32), rng.integers(0, classes, 1))
        for _ in range(SAME_NUMBERS_STEPS)
    ]
    options = {"full model": {}, **_policy_options(name)}
    rows = []
    for label in (p.format(k=MODELS[name]) for p in SAME_NUMBERS_POLICIES):
        trained = {}
        for update, fused in (("accumulate", False), ("fused", True)):
            out = artifacts.generate_artifacts(
                graph,
                loss="CrossEntropyLoss",
                optimizer="SGD",
                learning_rate=LEARNING_RATE,
                batch_size=1,
                fused_update=fused,
                artifact_directory=work / "same" / f"{label}-{update}".replace(" ", "_"),
                **options[label],
            )
            module = api.Module(out / "training_model.onnx", api.CheckpointState.load_checkpoint(out / "checkpoint"))
            optimizer = api.Optimizer(None, module)
            trained["initial"] = module.get_contiguous_parameters()  # the same for both builds
            module.train()
            for x, y in batches:
                module(x, y)
                optimizer.step()
                module.lazy_reset_grad()
            trained[update] = module.get_contiguous_parameters()
        want, got = trained["accumulate"], trained["fused"]
        rows.append(
            {
                "model": name,
                "policy": label,
                "relative": float(np.abs(got - want).max() / np.abs(want).max()),
                "moved": float(np.abs(want - trained["initial"]).max()),
            }
        )
        print(f"  {name:<4} {label:<24} fused vs accumulate: {rows[-1]['relative']:.2e}", file=sys.stderr)
    return rows


def same_numbers_table(rows: list[dict]) -> str:
    lines = [
        f"| model | update policy | max \\|fused − accumulate\\| / max \\|parameter\\| after "
        f"{SAME_NUMBERS_STEPS} SGD steps | largest parameter change |",
        "|---|---|--:|--:|",
    ]
    lines += [f"| {r['model']} | {r['policy']} | {r['relative']:.2e} | {r['moved']:.3g} |" for r in rows]
    return "\n".join(lines) + "\n"


MAX_RATIO = 1.10  # planned arena / liveness lower bound


def targets(rows: list[dict], same: list[dict]) -> str:
    """The targets as met or missed, with the measured figures."""
    found = {(r["model"], r["policy"]): r for r in rows}
    lines = []
    for model, policy, limit in TARGETS:
        r = found.get((model, f"{policy}, ram_budget {limit} KB"))
        if r and "error" in r:
            lines.append(f"- {model}, {r['policy']}: NOT met ({r['error']})")
        elif r:
            ok = r["ram_bytes"] <= limit * KB
            lines.append(
                f"- {model}, {r['policy']}: {r['ram_bytes'] / KB:,.1f} KB "
                f"{'≤' if ok else '>'} {limit} KB: {'met' if ok else 'NOT met'}"
            )
    built = [r for r in rows if "error" not in r]
    if built:
        worst = max(built, key=lambda r: r["ratio"])
        ok = worst["ratio"] <= MAX_RATIO
        lines.append(
            f"- arena / lower bound, worst: {worst['ratio']:.3f} ({worst['model']}, {worst['policy']}) "
            f"{'≤' if ok else '>'} {MAX_RATIO:.2f}: {'met' if ok else 'NOT met'}"
        )
    if same:
        worst = max(same, key=lambda r: r["relative"])
        ok = worst["relative"] <= SAME_NUMBERS_TOLERANCE
        lines.append(
            f"- fused vs accumulate after {SAME_NUMBERS_STEPS} SGD steps, worst: {worst['relative']:.2e} "
            f"({worst['model']}, {worst['policy']}) {'≤' if ok else '>'} {SAME_NUMBERS_TOLERANCE:g}: "
            f"{'met' if ok else 'NOT met'}"
        )
    return "\n".join(lines) + "\n"


# The Tiny Training Engine's published peak memory (Lin et al., "On-Device Training Under 256KB
# Memory", NeurIPS 2022): int8 graphs, sparse update, measured on an STM32F746 at batch 1.
TTE = (("MCUNet", 173), ("MobileNetV2", 141))


def table(rows: list[dict]) -> str:
    lines = [
        "| model | update policy | trained floats | RAM: ram_bytes (cortex-m4) | arena | lower bound "
        "| arena / bound | ORT step ΔRSS | ORT load + step ΔRSS |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['policy']} | failed: {r['error']} |||||||")
            continue
        ort = r.get("ort")
        policy = r["policy"] + (f" (recomputes {r['recomputed_ops']} ops)" if r["recomputed_ops"] else "")
        lines.append(
            f"| {r['model']} | {policy} | {r['trained_parameters']:,} | {r['ram_bytes'] / KB:,.1f} KB "
            f"| {r['arena_bytes'] / KB:,.1f} KB | {r['bound_bytes'] / KB:,.1f} KB | {r['ratio']:.3f} | "
            + (f"{ort['step_kib']:,} KB | {ort['load_and_step_kib']:,} KB |" if ort else "– | – |")
        )
    lines += [
        f"| {model} (TTE, published) | sparse update, int8 | – | {kb} KB peak | – | – | – | – | – |"
        for model, kb in TTE
    ]
    return "\n".join(lines) + "\n"


def start_table(rows: list[dict], revision: str) -> str:
    """Each row's RAM and flash (cortex-m4) beside those of the same compile at the starting point."""
    lines = [
        f"| model | update policy | ram_bytes | at {revision[:10]} | ratio "
        f"| flash_bytes | at {revision[:10]} | ratio |",
        "|---|---|--:|--:|--:|--:|--:|--:|",
    ]
    for r in rows:
        start = r.get("start") or {}
        if "error" in r or "error" in start:
            lines.append(f"| {r['model']} | {r['policy']} | failed: {r.get('error') or start['error']} ||||||")
            continue
        cells = []
        for key in ("ram_bytes", "flash_bytes"):
            now, then = r[key], start.get(key)
            cells.append(f"{now:,} | {then:,} | {now / then:.3f}" if now and then else f"{now} | {then} | –")
        lines.append(f"| {r['model']} | {r['policy']} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


def machine() -> str:
    lscpu = dict(line.split(":", 1) for line in _run(["lscpu"]).splitlines() if ":" in line)
    return f"{lscpu['Model name'].strip()}, {os.cpu_count()} cores"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from {', '.join(MODELS)}")
    parser.add_argument("--no-ort", action="store_true", help="leave ONNX Runtime training out")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="also count, on QEMU, the instructions of an int8 step with row bands and without them",
    )
    parser.add_argument(
        "--start",
        metavar="REV",
        help="also compile every row with git revision REV's edgetrain and compare RAM and flash",
    )
    parser.add_argument("--generate-start", type=Path, help=argparse.SUPPRESS)  # under REV's PYTHONPATH
    parser.add_argument("--ort", nargs=2, metavar=("artifacts|rss", "DIR"), help=argparse.SUPPRESS)  # in ORT's venv
    args = parser.parse_args(argv)
    if args.ort:
        return {"artifacts": ort_artifacts, "rss": ort_rss}[args.ort[0]](Path(args.ort[1]))
    if args.generate_start:
        return generate_start(args.generate_start)
    models = args.models.split(",")
    if set(models) - set(MODELS):
        parser.error(f"unknown models: {sorted(set(models) - set(MODELS))}")
    if not args.no_ort and not ORT_PYTHON.exists():
        parser.error(
            f"ONNX Runtime training goes in {ORT_PYTHON.parent.parent}: make bench/.venv-ort/.installed (or --no-ort)"
        )
    sys.path[:0] = [str(BENCH), str(BENCH.parent / "examples" / "models")]
    with tempfile.TemporaryDirectory() as tmp:
        start_tree = source_tree(args.start, Path(tmp) / "start") if args.start else None
        rows = measure(models, Path(tmp), not args.no_ort, start_tree, args.instructions)
        same = same_numbers(Path(tmp)) if SAME_NUMBERS_MODEL in models else []
    if args.json:
        Path(args.json).write_text(json.dumps({"ram": rows, "same_numbers": same}, indent=2) + "\n")
    print(f"machine: {machine()}\n")
    print(table(rows))
    if same:
        print(same_numbers_table(same))
    print(targets(rows, same))
    print(quantized_table(rows))
    if args.start:
        print(start_table(rows, args.start))


if __name__ == "__main__":
    main()
