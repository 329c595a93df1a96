"""The memory report of a compiled trainer: RAM by category, each function's planned arena beside its
liveness lower bound, the labelled arena blocks, and a plot of arena occupancy over the schedule."""

from __future__ import annotations

import importlib.util
import io
import json
from dataclasses import asdict
from pathlib import Path

from ..errors import EdgetrainError
from ..files import write_artifact
from .planner import KINDS

F32 = 4
COLOURS = {"activation": "tab:blue", "gradient": "tab:orange", "optimizer_state": "tab:green", "workspace": "tab:gray"}
PLOT = "memory.png"
NO_MATPLOTLIB = "the memory plot needs matplotlib: pip install 'edgetrain[report]'"


def memory_report(trainer, memory) -> dict:
    """report.json's contents for the MemoryPlan `memory` (edgetrain.memory.plan) of `trainer`."""
    breakdown = dict(memory.ram)
    c_names = {"train_step": "train", "eval_step": "eval", "infer": "infer"}
    functions = {name: _function(memory.functions[f]) for name, f in c_names.items()}
    return {
        "target": "host",
        "arena_bytes": breakdown["arena"],
        "ram_bytes": memory.ram_bytes,
        "ram_breakdown": breakdown,
        "flash_constants_bytes": memory.flash_constants_bytes,
        "liveness_lower_bound_bytes": {name: f["liveness_lower_bound_bytes"] for name, f in functions.items()},
        "arena_by_function_bytes": {name: f["arena_bytes"] for name, f in functions.items()},
        "trainable_parameters": memory.trainable_elements,
        "frozen_parameters": memory.frozen_floats,
        "optimizer": trainer.optimizer.kind.value,
        # "fused": train_step updates each parameter as soon as its gradient is final, so there are no
        # gradient buffers and gradients do not accumulate across calls; "accumulate": ONNX Runtime's
        # semantics, gradients add up until lazy_reset_grad and Optimizer.step applies them.
        "update": "fused" if memory.fused_update else "accumulate",
        # Forward ops train_step runs again in the backward pass (recomputation), instead of keeping
        # their results.
        "recomputed_ops": _recomputed(trainer),
        "functions": functions,
        "bytes_by_type": _by_type(memory, functions["train_step"]),
        **_int8_trained_weights(trainer),
    }


def _by_type(memory, train_step: dict) -> dict:
    """Each category's bytes by the C type of its elements (int8_t beside float, where a model is
    quantized): the arena as what is live at train_step's peak statement (the arena itself is one
    block of bytes that tensors of every type share in turn), the other RAM categories (float, but
    the trained weights stored as int8), and the constants in flash. Categories without bytes are
    left out."""
    at_peak: dict[str, int] = {}
    for by_type in train_step["peak_bytes_by_kind_and_type"].values():
        for c_type, size in by_type.items():
            at_peak[c_type] = at_peak.get(c_type, 0) + size
    ram = {k: {"float": v} for k, v in memory.ram.items() if k not in ("arena", "other") and v}
    if memory.integer_bytes:
        floats = memory.ram["parameters"] - memory.integer_bytes
        ram["parameters"] = {**({"float": floats} if floats else {}), "int8_t": memory.integer_bytes}
    flash = {t: v for t, v in memory.flash_constants_by_type.items() if v}
    return {"arena_at_peak": at_peak, **ram, **({"flash_constants": flash} if flash else {})}


def _int8_trained_weights(trainer) -> dict:
    """{"int8_trained_weights": ...} where the trainer trains weights that the model quantizes to
    integers, else nothing: how they are updated and what they cost. They are stored as their
    integers and updated by quantization-aware scaling with stochastic rounding ("QAS"), which
    reached the float32 trainer's accuracy in examples/personalization/quantized.py, where rounding
    to the nearest integer ended 3.0 to 5.3 points below it; with qas=False or federated learning
    (float references and deltas), as float32 masters that the forward pass quantizes again."""
    quantized = {n.inputs[0] for n in trainer.train_nodes if n.op in ("QuantizeLinear", "QuantizeLinearMask")}
    weights = {p: trainer.graph.values[p].size for p in trainer.trainable if p in quantized}
    weights |= {p: trainer.graph.values[p].size for p in trainer.integer_weights}
    if not weights:
        return {}
    total = sum(weights.values())
    stored = [p for p in weights if p in trainer.integer_weights]
    update = "QAS, stochastic rounding" if stored else "float32 master"
    if stored and len(stored) < len(weights):  # the others are not symmetric int8
        update = f"QAS, stochastic rounding ({', '.join(stored)}); float32 master (the others)"
    return {
        "int8_trained_weights": {
            "update": update,
            "weights": weights,
            "bytes": sum(size if p in stored else size * F32 for p, size in weights.items()),
            "master_bytes": total * F32,
            "as_integers_bytes": total,
        }
    }


def _recomputed(trainer) -> int:
    forward = {(n.op, n.name) for n in trainer.train_nodes[: trainer.backward_start]}
    return sum((n.op, n.name) in forward for n in trainer.train_nodes[trainer.backward_start :])


def _function(f) -> dict:
    blocks = [asdict(b) for b in f.blocks]
    peak, live = _peak(blocks)
    return {
        "arena_bytes": f.arena_floats * F32,
        "liveness_lower_bound_bytes": f.lower_bound * F32,
        "peak_statement": peak,
        "peak_bytes_by_kind": {k: sum(b["size"] for b in live if b["kind"] == k) for k in KINDS},
        # the same bytes by the C type of their elements: quantized tensors' int8_t beside float
        "peak_bytes_by_kind_and_type": {
            k: {t: sum(b["size"] for b in live if (b["kind"], b["c_type"]) == (k, t)) for t in _types(live)}
            for k in KINDS
        },
        "blocks": blocks,
        # the ops the function starts with that run a band of output rows at a time, in how many bands
        **({"row_bands": dict(zip(("ops", "bands"), f.row_bands))} if f.row_bands[0] else {}),
        # the ops it ends with (the backward pass's widest layers) that run in row bands, likewise
        **({"gradient_bands": dict(zip(("ops", "bands"), f.gradient_bands))} if f.gradient_bands[0] else {}),
    }


def _types(blocks: list[dict]) -> list[str]:
    return sorted({b["c_type"] for b in blocks})


def _peak(blocks: list[dict]) -> tuple[int | None, list[dict]]:
    """The statement at which the blocks' live bytes are highest, and the blocks live there."""
    best, best_live, best_bytes = None, [], -1
    for point in sorted({b["start"] for b in blocks}):
        live = [b for b in blocks if b["start"] <= point <= b["end"]]
        if sum(b["size"] for b in live) > best_bytes:
            best, best_live, best_bytes = point, live, sum(b["size"] for b in live)
    return best, best_live


def format_report(report: dict) -> str:
    """report.txt: RAM by category, then each function's arena beside its lower bound."""
    ram = report["ram_breakdown"]
    rows = [
        ("arena (by function below)", ram["arena"]),
        ("trainable parameters", ram["parameters"]),
        ("gradients" + (" (fused update: none kept)" if report["update"] == "fused" else ""), ram["gradients"]),
        ("optimizer state", ram["optimizer_state"]),
        *([("federated reference", ram["federated_reference"])] if ram["federated_reference"] else []),
        ("other (buffers, counters, alignment)", ram["other"]),
        ("total RAM", report["ram_bytes"]),
        ("constants in flash (frozen weights)", report["flash_constants_bytes"]),
    ]
    width = max(len(r[0]) for r in rows)
    lines = [f"{label:<{width}}  {value:>12,} B" for label, value in rows]
    if "int8_trained_weights" in report:
        q = report["int8_trained_weights"]
        lines.append(
            f"{len(q['weights'])} trained int8 weights, {q['update']}: {q['bytes']:,} B "
            f"(float32 masters: {q['master_bytes']:,} B; as integers: {q['as_integers_bytes']:,} B)"
        )
    if report["recomputed_ops"]:
        lines.append(f"train_step recomputes {report['recomputed_ops']} forward ops instead of keeping their results")
    for name, f in report["functions"].items():
        if "row_bands" in f:
            bands = f["row_bands"]
            lines.append(f"{name} runs its first {bands['ops']} ops in {bands['bands']} row bands")
        if "gradient_bands" in f:
            bands = f["gradient_bands"]
            lines.append(f"{name} runs its last {bands['ops']} ops in {bands['bands']} row bands")
    lines += format_sizes(report, width)
    lines += [
        "",
        "arena per function (bytes; by kind: what is live at the function's peak statement)",
        f"{'function':<10} {'arena':>10} {'lower bound':>12} {'ratio':>6} "
        + " ".join(f"{k.replace('_', ' '):>15}" for k in KINDS),
    ]
    for name, f in report["functions"].items():
        ratio = f["arena_bytes"] / f["liveness_lower_bound_bytes"] if f["liveness_lower_bound_bytes"] else 1.0
        lines.append(
            f"{name:<10} {f['arena_bytes']:>10,} {f['liveness_lower_bound_bytes']:>12,} {ratio:>6.3f} "
            + " ".join(f"{f['peak_bytes_by_kind'][k]:>15,}" for k in KINDS)
        )
    return "\n".join(lines) + "\n"


def format_sizes(report: dict, width: int) -> list[str]:
    """report.txt's rows for the measured sizes."""
    if "size_note" in report:
        return [report["size_note"]]
    if "size_breakdown" not in report:
        return []
    b = report["size_breakdown"]
    rows = [
        ("  code", b["code"]),
        ("  constant weights", b["constant_weights"]),
        ("  initial values of RAM data", b["initial_values"]),
        ("  total flash", report["flash_bytes"]),
        ("  arena", b["arena"]),
        ("  state (parameters, gradients, ...)", b["state"]),
        ("  total RAM", report["ram_bytes"]),
    ]
    if "wasm_module_bytes" in report:
        rows.append(("  WebAssembly module", report["wasm_module_bytes"]))
    width = max(width, *(len(label) for label, _ in rows))
    return [f"measured for {report['target']} by {report['size_tool']}:"] + [
        f"{label:<{width}}  {value:>12,} B" for label, value in rows
    ]


def can_plot() -> bool:
    """Whether matplotlib, the optional `report` extra, is installed."""
    return importlib.util.find_spec("matplotlib") is not None


def write_report(report: dict, directory: Path, with_plot: bool) -> None:
    """report.json and report.txt, and the occupancy plot if asked for. The plot is opt-in in the
    Python API because drawing it costs more than compiling a small model (matplotlib's import
    alone takes seconds), and every figure it shows is in report.json."""
    write_artifact(directory / "report.json", json.dumps(report, indent=2) + "\n")
    write_artifact(directory / "report.txt", format_report(report))
    if with_plot:
        plot(report, directory / PLOT)
    else:
        (directory / PLOT).unlink(missing_ok=True)  # a plot of an earlier build would disagree with the report


def plot(report: dict, path: Path) -> Path:
    """Arena occupancy of train_step (the function that sizes the arena) over its schedule: x is the
    statement index, y the byte offset; each block is a rectangle coloured by kind, and lines mark
    the planned arena and its liveness lower bound."""
    # The Figure API with the Agg canvas, not pyplot: no GUI backend and no global state in a library.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import StrMethodFormatter

    f = report["functions"]["train_step"]
    fig = Figure(figsize=(10, 4))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    fig.subplots_adjust(left=0.1, right=0.78)  # room for the legend
    for kind in KINDS:
        blocks = [b for b in f["blocks"] if b["kind"] == kind]
        if blocks:
            ax.bar(
                [b["start"] - 0.5 for b in blocks],
                [b["size"] for b in blocks],
                width=[b["end"] - b["start"] + 1 for b in blocks],
                bottom=[b["offset"] for b in blocks],
                align="edge",
                color=COLOURS[kind],
                edgecolor="white",
                linewidth=0.3,
                label=kind.replace("_", " "),
            )
    ax.axhline(f["arena_bytes"], color="black", linewidth=1, label="planned arena")
    ax.axhline(f["liveness_lower_bound_bytes"], color="red", linestyle="--", linewidth=1, label="liveness lower bound")
    ax.set_title(
        f"train_step: arena {f['arena_bytes']:,} B, liveness lower bound {f['liveness_lower_bound_bytes']:,} B",
        fontsize=10,
    )
    ax.set_xlabel("statement")
    ax.set_ylabel("arena offset (bytes)")
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    image = io.BytesIO()
    fig.savefig(image, format="png", dpi=100)
    write_artifact(path, image.getvalue())
    return path


def plot_directory(directory: str) -> Path:
    """`edgetrain report DIR --plot`: draw DIR's plot again from its report.json."""
    try:
        report = json.loads(Path(directory, "report.json").read_text())
    except OSError:
        raise EdgetrainError(f"no report in {directory}; run `edgetrain compile` first") from None
    try:
        return plot(report, Path(directory, PLOT))
    except ModuleNotFoundError:
        raise EdgetrainError(NO_MATPLOTLIB) from None
