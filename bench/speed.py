"""Training-step speed: edgetrain beside ONNX Runtime training 1.19.2 and PyTorch eager.

    python bench/speed.py [--models mlp,kws,vww,ic,ad,gru,lstm] [--batches 1,16] [--repeat 3] [--quick]
                          [--systems ort,python,c,python-fast,c-fast,torch,c-start] [--json out.json]
                          [--no-instructions]
    python bench/speed.py --models resnet18,squeezenet ...   # held-out models (models.py), not in the default sweep
    python bench/speed.py --baseline REV     # record the starting point (bench/baseline.json)
    python bench/speed.py --start REV        # c-start from REV for this run only

Systems, all single-threaded, all training the same eval-mode graph (models.py) with plain SGD:
  python       the generated C through edgetrain.api (Module call, Optimizer.step, lazy_reset_grad)
  c            the same shared library from driver.c, no Python in the loop
  *-fast       both again, built with EDGETRAIN_BUILD=fast
  ort          ONNX Runtime training in bench/.venv-ort (`make bench/.venv-ort/.installed`)
  torch        PyTorch eager
  c-start      the C driver of the trainer that bench/baseline.json's revision generates and builds
Every measurement is a process of its own (its peak RSS is its own); repetitions go round all
systems and models in turn, so machine noise hits all alike; each figure is a run's median step
time, the lowest over the repetitions (noise only ever slows a run down). Each process also reports
its first steps' losses, which must agree between systems (same model, same batch, same update).

FLOPs: 2 per multiply-accumulate of the Conv, Gemm and MatMul nodes (shapes from the ONNX graph),
for the forward product, the weight gradient and the input gradient (none for a node reading the
model's input); the other nodes' work is left out.

Instructions per step on a Cortex-M4 (instructions.py) are counted for the batch-1 cases, of the
current trainer and of the starting point's: deterministic, so counted once and not interleaved.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from edgetrain import targets

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
BASELINE = BENCH / "baseline.json"
LOSS_TOLERANCE = 1e-4  # relative, between systems' first losses (summation orders differ)
OURS = ("python", "c", "python-fast", "c-fast", "c-start")
SYSTEMS = ("ort", "python", "c", "python-fast", "c-fast", "torch", "c-start")
NAMES = {
    "ort": "ORT",
    "python": "python",
    "c": "C",
    "python-fast": "python fast",
    "c-fast": "C fast",
    "c-start": "C start",
    "torch": "torch",
}

sys.path.insert(0, str(BENCH))
import instructions  # noqa: E402
from cases import ORT_PYTHON, Case, build_mode, run_worker  # noqa: E402
from models import HELD_OUT, MODELS  # noqa: E402
from trees import source_tree  # noqa: E402


def prepare(
    cases: list[Case], systems: list[str], work: Path, start_tree: Path | None, counting: bool = False
) -> tuple[list[str], dict]:
    """Every system's artifacts, one process per tool for all cases (imports are slow), independent
    ones side by side (nothing is timed yet), and the instruction counts when `counting`. Returns
    the systems to measure (the fast ones are left out when the fast build is the default one) and
    the counts."""
    current_tree = source_tree(None, work / "current-tree")
    for case in cases:
        print(f"preparing {case.key}", file=sys.stderr)
        case.prepare()
        case.trees = {False: current_tree, True: start_tree}
    ours = [s for s in systems if s in OURS]
    fast = [s for s in ours if build_mode(s) == "fast"]
    builds = {(s == "c-start", build_mode(s)) for s in ours} | ({(False, "reproducible")} if fast else set())
    trees = {start: cases[0].env("c-start" if start else "c") for start, _ in builds}
    dirs = {start: [c.ours("c-start" if start else "c") for c in cases] for start in trees}
    with ThreadPoolExecutor() as pool:
        jobs = [
            pool.submit(run_worker, sys.executable, "edgetrain-generate", dirs[start], env=trees[start])
            for start in trees
        ]
        if "ort" in systems:  # ORT's scratch files go to the working directory
            jobs.append(
                pool.submit(run_worker, ORT_PYTHON, "ort-artifacts", [c.directory / "ort" for c in cases], cwd=work)
            )
        for job in jobs:
            job.result()
        jobs = [
            pool.submit(run_worker, sys.executable, "edgetrain-build", dirs[start], mode, env=trees[start])
            for start, mode in sorted(builds)
        ]
        counts = pool.submit(count_instructions, cases) if counting else None
        for job in jobs:
            job.result()
        counts = counts.result() if counts else {}
    if fast and cases[0].library("c-fast").name == cases[0].library("c").name:
        print(f"EDGETRAIN_BUILD=fast builds what the default build does: {', '.join(fast)} left out", file=sys.stderr)
        systems = [s for s in systems if s not in fast]
    for case in cases:
        for system in systems:
            if system in ("c", "c-fast", "c-start"):
                case.build_driver(system)
    return systems, counts


def count_instructions(cases: list[Case]) -> dict:
    """{case key: {"c": instructions per step, "c-start": the same at the starting point}} for the
    batch-1 cases, on the microcontroller target (deterministic: counted once, not timed). The
    held-out models are a host's: their weights alone outgrow a microcontroller's memory."""
    counts = {}
    for case in (c for c in cases if c.batch == 1 and c.name not in HELD_OUT):
        counts[case.key] = {
            s: instructions.count(case.directory, case.ours(s))
            for s in ("c", "c-start")
            if (case.ours(s) / "model.c").exists()
        }
        print(f"  {case.key:>7} instructions per step on {instructions.TARGET}: {counts[case.key]}", file=sys.stderr)
    return counts


def machine() -> str:
    """The CPU model (/proc/cpuinfo), the CPUs this process may use (nproc) and the load averages."""
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next(
        (line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")),
        platform.processor() or platform.machine(),
    )
    return f"{model}, nproc {len(os.sched_getaffinity(0))}, {load()}"


def load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def measure(cases: list[Case], systems: list[str], repeat: int, budget: float) -> dict:
    """{case key: {system: {"ms": the fastest repetition's median, "runs_ms": every repetition's,
    "rss_mb": peak, "losses": the first steps' losses}}}, interleaved. Load from other processes only
    slows a run down, so the fastest repetition is the one least disturbed."""
    runs = {c.key: {s: [] for s in systems} for c in cases}
    for rep in range(repeat):
        order = systems[rep % len(systems) :] + systems[: rep % len(systems)]  # no system always first
        for case in cases:
            for system in order:
                runs[case.key][system].append(case.run(system, budget))
                print(
                    f"  {case.key:>7} {system:<11} rep {rep + 1}/{repeat}: "
                    f"{runs[case.key][system][-1]['median_ns'] / 1e6:9.3f} ms",
                    file=sys.stderr,
                )
    return {
        key: {
            s: {
                "ms": min(r["median_ns"] for r in rs) / 1e6,
                "runs_ms": [r["median_ns"] / 1e6 for r in rs],
                "rss_mb": max(r["peak_rss_kb"] for r in rs) / 1024,
                "losses": rs[0]["losses"],
            }
            for s, rs in by_system.items()
        }
        for key, by_system in runs.items()
    }


def disagreements(cases: list[Case], results: dict) -> list[str]:
    """Where the first steps' losses show that two systems did not train alike: the Python API and the
    C driver run one shared library, so they must agree bit for bit; every system must agree with
    PyTorch within LOSS_TOLERANCE, relative. Except ORT on models with BatchNormalization: its
    training graph turns the frozen eval-mode node back into its training form (batch statistics)."""
    problems = []
    for case in cases:
        losses = {s: np.float32(v["losses"]) for s, v in results[case.key].items()}
        for python, c in (("python", "c"), ("python-fast", "c-fast")):
            if python in losses and c in losses and not np.array_equal(losses[python], losses[c]):
                problems.append(
                    f"{case.key}: {NAMES[python]} {losses[python].tolist()} != {NAMES[c]} {losses[c].tolist()}"
                )
        reference = losses.get("torch")
        for system, values in losses.items():
            if reference is None or (system == "ort" and case.batch_norm):
                continue
            if (np.abs(values - reference) > LOSS_TOLERANCE * np.abs(reference)).any():
                problems.append(f"{case.key}: {NAMES[system]} {values.tolist()}, torch {reference.tolist()}")
    return problems


def loss_check(systems: list[str], problems: list[str]) -> str:
    if problems:
        return "Losses of the first steps DISAGREE:\n" + "\n".join(f"- {p}" for p in problems)
    against_torch = (
        f"every system within a relative {LOSS_TOLERANCE:g} of torch's (ORT on models without BatchNormalization), "
        if "torch" in systems
        else ""
    )
    return f"Losses of the first steps: {against_torch}the Python API and the C driver bit-identical in each build."


def acceptance(cases: list[Case], systems: list[str], results: dict) -> list[str]:
    """Whether the step-time targets hold through the Python API: at most ORT's time everywhere, at
    most half of it at batch 1 for the MLP and the autoencoder, and the geometric mean of the ratios
    to ORT's over every case (issue 22's sweep: at most 0.5)."""
    goals = [
        ("≤ 1.0× ORT", 1.0, [c.key for c in cases]),
        (
            "≤ 0.5× ORT at batch 1 for mlp and ad",
            0.5,
            [c.key for c in cases if c.batch == 1 and c.name in ("mlp", "ad")],
        ),
    ]
    lines = []
    for system in (s for s in ("python", "python-fast") if s in systems and "ort" in systems):
        for label, bound, keys in (goal for goal in goals if goal[2]):
            ratios = {k: results[k][system]["ms"] / results[k]["ort"]["ms"] for k in keys}
            missed = [f"{k} {ratio:.2f}×" for k, ratio in ratios.items() if ratio > bound]
            lines.append(
                f"- {NAMES[system]}, {label}: holds for {len(keys) - len(missed)} of {len(keys)}"
                + (f"; missed: {', '.join(missed)}" if missed else "")
            )
        ratios = [results[c.key][system]["ms"] / results[c.key]["ort"]["ms"] for c in cases]
        lines.append(
            f"- {NAMES[system]}, geometric mean of the {len(ratios)} ratios to ORT: "
            f"{np.exp(np.mean(np.log(ratios))):.2f}× (worst {max(ratios):.2f}×)"
        )
    return lines


def tables(cases: list[Case], systems: list[str], results: dict, baseline: dict | None, counts: dict) -> str:
    """Markdown tables. The speed-up over the starting point divides by C start's time in this run
    when it ran (the same load for both), else by the one bench/baseline.json recorded."""

    def table(title, columns, rows):
        lines = [f"**{title}**", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows]) + "\n"

    head = ["model", "batch"]
    columns = [NAMES[s] for s in systems]
    recorded = (baseline or {}).get("c_step_ms", {})
    time_rows, rss_rows, flop_rows, start_rows = [], [], [], []
    for case in cases:
        r, row = results[case.key], [case.name, str(case.batch)]
        ort = r.get("ort", {}).get("ms")
        time_rows.append(
            row + [f"{r[s]['ms']:.3f}" + (f" ({r[s]['ms'] / ort:.2f}×)" if ort and s != "ort" else "") for s in systems]
        )
        rss_rows.append(row + [f"{r[s]['rss_mb']:.1f}" for s in systems])
        flop_rows.append(row + [f"{case.flops / 1e6:.2f}"] + [f"{case.flops / r[s]['ms'] / 1e6:.2f}" for s in systems])
        start = r.get("c-start", {}).get("ms") or recorded.get(case.key)
        if start:
            start_rows.append(
                row
                + [
                    f"{recorded[case.key]:.3f}" if case.key in recorded else "",
                    f"{r['c-start']['ms']:.3f}" if "c-start" in r else "",
                ]
                + [f"{start / r[s]['ms']:.2f}×" for s in ("c", "c-fast") if s in systems]
            )
    out = [table("Median step time, ms (ratio to ORT)", head + columns, time_rows)]
    if start_rows:
        revision = (baseline or {}).get("revision", "")[:10]
        out.append(
            table(
                f"Speed-up of the C driver over the starting point (revision {revision})",
                head + ["recorded ms", "this run ms"] + [NAMES[s] for s in ("c", "c-fast") if s in systems],
                start_rows,
            )
        )
    out.append(table("Peak RSS, MB (each system in its own process)", head + columns, rss_rows))
    out.append(table("Achieved GFLOP/s", head + ["MFLOP/step"] + columns, flop_rows))
    if counts:
        rows = []
        for case in (c for c in cases if c.key in counts):
            now, start = counts[case.key]["c"], counts[case.key].get("c-start")
            rows.append(
                [case.name, f"{now:,}", f"{case.flops / now:.3f}"]
                + ([f"{start:,}", f"{start / now:.2f}×"] if start else [])
            )
        out.append(
            table(
                f"Instructions per training step on {instructions.TARGET} (batch 1, QEMU -icount)",
                ["model", "instructions", "FLOP/instruction"]
                + (["at the starting point", "speed-up"] if any("c-start" in c for c in counts.values()) else []),
                rows,
            )
        )
    return "\n".join(out)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--budget", type=float, default=0.3, help="seconds of timed steps per run")
    parser.add_argument("--quick", action="store_true", help="one repetition, short runs")
    parser.add_argument(
        "--baseline",
        metavar="REV",
        help="time the C driver of git revision REV's generator "
        "and record it as the starting point in bench/baseline.json",
    )
    parser.add_argument(
        "--start",
        metavar="REV",
        help="c-start is git revision REV's generator this run (default: bench/baseline.json's revision)",
    )
    parser.add_argument("--json", type=Path, help="write the raw results here")
    parser.add_argument(
        "--no-instructions",
        action="store_true",
        help=f"skip counting instructions per step on {instructions.TARGET} (batch 1)",
    )
    return parser


def main(argv=None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.quick:
        args.repeat, args.budget = 1, 0.05
    systems = ["c-start"] if args.baseline else args.systems.split(",")
    unknown = set(systems) - set(SYSTEMS)
    if unknown or set(args.models.split(",")) - set(MODELS) - set(HELD_OUT):
        parser.error(f"unknown systems or models: {sorted(unknown) or args.models}")
    if "ort" in systems and not ORT_PYTHON.exists():
        parser.error(
            f"ort needs ONNX Runtime training in {ORT_PYTHON.parent.parent}: "
            "make bench/.venv-ort/.installed (or leave ort out of --systems)"
        )
    baseline = json.loads(BASELINE.read_text()) if BASELINE.exists() else None
    revision = args.baseline or args.start or (baseline or {}).get("revision")
    if args.start:  # the tables compare with this run's start, not the recorded one
        baseline = {"revision": revision}
    if "c-start" in systems and not revision:
        parser.error("c-start needs --baseline REV or bench/baseline.json")

    counting = not (args.no_instructions or args.baseline)
    missing = targets.load(instructions.TARGET).missing() if counting else []
    if missing:
        parser.error(
            f"counting instructions needs {', '.join(tool for tool, _ in missing)}: make "
            f"TARGET={instructions.TARGET} tools (or --no-instructions)"
        )

    command = "python bench/speed.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    with tempfile.TemporaryDirectory(prefix="edgetrain-bench-") as tmp:
        tmp = Path(tmp)
        start_tree = source_tree(revision, tmp / "start") if "c-start" in systems else None
        cases = [Case(m, int(b), tmp / f"{m}-{b}") for m in args.models.split(",") for b in args.batches.split(",")]
        systems, counts = prepare(cases, systems, tmp, start_tree, counting)
        before = machine()
        results = measure(cases, systems, args.repeat, args.budget)
    problems = disagreements(cases, results)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "command": command,
                    "machine": before,
                    "results": results,
                    "instructions": counts,
                    "disagreements": problems,
                },
                indent=1,
            )
        )
    if args.baseline:
        sha = subprocess.run(
            ["git", "rev-parse", args.baseline], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        BASELINE.write_text(
            json.dumps(
                {
                    "revision": sha,
                    "command": command,
                    "machine": before,
                    "c_step_ms": {k: r["c-start"]["ms"] for k, r in results.items()},
                },
                indent=1,
            )
            + "\n"
        )
    print(f"`{command}`\n\nMachine: {before} before the runs; {load()} after.\n")
    print(tables(cases, systems, results, baseline, counts))
    print(loss_check(systems, problems))
    lines = acceptance(cases, systems, results)
    if lines:
        print("\nAcceptance:\n" + "\n".join(lines))


if __name__ == "__main__":
    main()
