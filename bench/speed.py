"""Training-step speed: edgetrain beside ONNX Runtime training 1.19.2 and PyTorch eager.

    python bench/speed.py [--models mlp,kws,vww,ic,ad] [--batches 1,16] [--repeat 3] [--quick]
                          [--systems python,c,python-fast,c-fast,ort,torch] [--json out.json]
    python bench/speed.py --baseline REV     # record the starting point (bench/baseline.json)

Systems, all single-threaded, all training the same eval-mode graph (models.py) with plain SGD:
  python       the generated C through edgetrain.api (Module call, Optimizer.step, lazy_reset_grad)
  c            the same shared library from driver.c, no Python in the loop
  *-fast       both again, built with EDGETRAIN_BUILD=fast
  ort          ONNX Runtime training in bench/.venv-ort (`make bench/.venv-ort/.installed`)
  torch        PyTorch eager
Every measurement is a process of its own (its peak RSS is its own); repetitions go round all
systems and models in turn, so machine noise hits all alike; each figure is a run's median step
time, the lowest over the repetitions (noise only ever slows a run down).

FLOPs: 2 per multiply-accumulate of the forward Conv, Gemm and MatMul nodes (shapes from the ONNX
graph), times 3 for a training step (forward, input gradient, weight gradient).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

import numpy as np
import onnx
import torch

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
ORT_PYTHON = BENCH / ".venv-ort" / "bin" / "python"
BASELINE = BENCH / "baseline.json"
LEARNING_RATE = 1e-3
OURS = ("python", "c", "python-fast", "c-fast", "c-start")
SYSTEMS = ("ort", "python", "c", "python-fast", "c-fast", "torch", "c-start")
NAMES = {"ort": "ORT", "python": "python", "c": "C", "python-fast": "python fast", "c-fast": "C fast",
         "c-start": "C start", "torch": "torch"}

sys.path.insert(0, str(BENCH))
from models import MODELS, export, torch_model  # noqa: E402
from workers import cache_dir  # noqa: E402


def forward_flops(graph: onnx.ModelProto) -> int:
    """2 x multiply-accumulates of the Conv, Gemm and MatMul nodes of a graph with static shapes."""
    graph = onnx.shape_inference.infer_shapes(graph).graph
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in [*graph.input, *graph.output, *graph.value_info]}
    shapes.update({t.name: list(t.dims) for t in graph.initializer})
    flops = 0
    for node in graph.node:
        out = int(np.prod(shapes[node.output[0]]))
        if node.op_type == "Conv":
            flops += 2 * out * int(np.prod(shapes[node.input[1]][1:]))
        elif node.op_type == "Gemm":
            trans_a = next((a.i for a in node.attribute if a.name == "transA"), 0)
            flops += 2 * out * shapes[node.input[0]][0 if trans_a else 1]
        elif node.op_type == "MatMul":
            flops += 2 * out * shapes[node.input[0]][-1]
    return flops


def source_tree(revision: str, into: Path) -> Path:
    """The edgetrain package of a git revision, laid out for PYTHONPATH (the sub-packages that
    pyproject.toml maps from the top level put back inside it)."""
    archive = subprocess.run(["git", "archive", revision, "compiler", "templates", "runtime_c", "targets"],
                             cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into / "src", filter="data")
    package = into / "edgetrain"
    (into / "src" / "compiler").rename(package)
    for part, name in (("templates", "templates"), ("runtime_c", "runtime_c"), ("targets", "target_files")):
        (into / "src" / part).rename(package / name)
    return into


def build_mode(system: str) -> str:
    return "fast" if system.endswith("-fast") else "reproducible"


class Case:
    """One model at one batch: its graph, data and every system's artifacts under `directory`."""

    def __init__(self, name: str, batch: int, directory: Path):
        self.name, self.batch, self.directory = name, batch, directory
        self.key = f"{name}/{batch}"

    def prepare(self) -> None:
        """The graph every system trains, the data, and PyTorch's copy of the weights."""
        d = self.directory
        d.mkdir(parents=True, exist_ok=True)
        model = torch_model(self.name)
        graph, trainable, frozen = export(model, self.name, self.batch)
        self.flops = 3 * forward_flops(graph)
        onnx.save(graph, d / "model.onnx")
        _, sample, classes = MODELS[self.name]
        rng = np.random.default_rng(0)
        x = rng.standard_normal((self.batch, *sample), dtype=np.float32)
        y = rng.integers(0, classes, self.batch) if classes else x  # no classes: reconstruct the input
        np.save(d / "x.npy", x)
        np.save(d / "y.npy", y)
        x.tofile(d / "x.bin")  # the C driver's copies: its label type is int32 or float
        y.astype(np.int32 if classes else np.float32).tofile(d / "y.bin")
        (d / "spec.json").write_text(json.dumps({
            "model": self.name, "lr": LEARNING_RATE, "requires_grad": trainable, "frozen": frozen,
            "loss": "CrossEntropyLoss" if classes else "MSELoss"}))
        for system in ("ort", "torch", "current", "start"):
            (d / system).mkdir(exist_ok=True)
        torch.save(model.state_dict(), d / "torch" / "state.pt")

    def ours(self, system: str) -> Path:
        return self.directory / ("start" if system == "c-start" else "current")

    def library(self, system: str) -> Path:
        """The shared library the system's build made (workers.py keeps one cache per build mode)."""
        library, = cache_dir(self.ours(system), build_mode(system)).glob("*.so")
        return library

    def build_driver(self, system: str) -> None:
        library = self.library(system)
        label = "int32_t" if np.issubdtype(np.load(self.directory / "y.npy").dtype, np.integer) else "float"
        x_size, y_size = ((self.directory / name).stat().st_size // 4 for name in ("x.bin", "y.bin"))
        cc = os.environ.get("CC", "cc")
        subprocess.run([cc, "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-pedantic", f"-DET_LABEL={label}",
                        f"-DET_X_FLOATS={x_size}", f"-DET_Y_COUNT={y_size}", f"-I{self.ours(system)}", "-o",
                        str(library.parent / "driver"), str(BENCH / "driver.c"), str(library),
                        f"-Wl,-rpath,{library.parent}"], check=True)

    def run(self, system: str, budget: float) -> dict:
        d = self.directory
        if system == "ort":
            return _measure([ORT_PYTHON, BENCH / "workers.py", "ort", d / "ort", budget])
        if system == "torch":
            return _measure([sys.executable, BENCH / "workers.py", "torch", d / "torch", budget])
        if system.startswith("python"):
            return _measure([sys.executable, BENCH / "workers.py", "edgetrain", self.ours(system), budget],
                            build_mode(system))
        return _measure([self.library(system).parent / "driver", d / "x.bin", d / "y.bin", budget])


def prepare(cases: list[Case], systems: list[str], work: Path, start_tree: Path | None) -> list[str]:
    """Every system's artifacts, one process per tool for all cases (imports are slow); returns the
    systems to measure: the fast ones are left out when the fast build is the default one."""
    for case in cases:
        print(f"preparing {case.key}", file=sys.stderr)
        case.prepare()
    if "ort" in systems:
        _prepare(ORT_PYTHON, "ort-artifacts", [c.directory / "ort" for c in cases], cwd=work)  # ORT's scratch files
    ours = [s for s in systems if s in OURS]
    fast = [s for s in ours if build_mode(s) == "fast"]
    builds = {(s == "c-start", build_mode(s)) for s in ours} | ({(False, "reproducible")} if fast else set())
    for start in sorted({start for start, _ in builds}):
        tree = {"PYTHONPATH": str(start_tree)} if start else {}
        dirs = [c.ours("c-start" if start else "c") for c in cases]
        _prepare(sys.executable, "edgetrain-generate", dirs, env=tree)
        for mode in sorted(m for s, m in builds if s == start):
            _prepare(sys.executable, "edgetrain-build", dirs, mode, env=tree)
    if fast and cases[0].library("c-fast").name == cases[0].library("c").name:
        print(f"EDGETRAIN_BUILD=fast builds what the default build does: {', '.join(fast)} left out", file=sys.stderr)
        systems = [s for s in systems if s not in fast]
    for case in cases:
        for system in systems:
            if system in ("c", "c-fast", "c-start"):
                case.build_driver(system)
    return systems


def build_env(mode: str) -> dict:
    return {"EDGETRAIN_BUILD": "fast"} if mode == "fast" else {}


def _run(args: list, mode: str = "reproducible", env=None, cwd=None) -> str:
    """What the process printed; single-threaded, in the build mode given (and no other)."""
    args = [str(a) for a in args]
    environ = {k: v for k, v in os.environ.items() if k != "EDGETRAIN_BUILD"}
    result = subprocess.run(args, env={**environ, **build_env(mode), "OMP_NUM_THREADS": "1", **(env or {})},
                            capture_output=True, text=True, cwd=cwd)
    if result.returncode != 0:
        raise RuntimeError(f"{shlex.join(args)} failed:\n{result.stderr.strip()[-3000:]}")
    return result.stdout


def _prepare(python, command: str, directories: list[Path], mode: str = "reproducible", env=None, cwd=None) -> None:
    _run([python, BENCH / "workers.py", command, *directories], mode, env, cwd)


def _measure(args: list, mode: str = "reproducible") -> dict:
    """Run one measuring process; it prints one JSON line."""
    return json.loads(_run(args, mode).strip().splitlines()[-1])


def machine() -> str:
    lscpu = dict(line.split(":", 1) for line in subprocess.run(["lscpu"], capture_output=True, text=True)
                 .stdout.splitlines() if ":" in line)
    return (f"{lscpu.get('Model name', platform.processor()).strip()}, {os.cpu_count()} cores, "
            f"load average {os.getloadavg()[0]:.2f}")


def measure(cases: list[Case], systems: list[str], repeat: int, budget: float) -> dict:
    """{case key: {system: {"ms": the fastest repetition's median, "runs_ms": every repetition's,
    "rss_mb": peak}}}, interleaved. Load from other processes only slows a run down, so the
    fastest repetition is the one least disturbed."""
    runs = {c.key: {s: [] for s in systems} for c in cases}
    for rep in range(repeat):
        order = systems[rep % len(systems):] + systems[:rep % len(systems)]  # no system always first
        for case in cases:
            for system in order:
                runs[case.key][system].append(case.run(system, budget))
                print(f"  {case.key:>7} {system:<11} rep {rep + 1}/{repeat}: "
                      f"{runs[case.key][system][-1]['median_ns'] / 1e6:9.3f} ms", file=sys.stderr)
    return {key: {s: {"ms": min(r["median_ns"] for r in rs) / 1e6, "runs_ms": [r["median_ns"] / 1e6 for r in rs],
                      "rss_mb": max(r["peak_rss_kb"] for r in rs) / 1024} for s, rs in by_system.items()}
            for key, by_system in runs.items()}


def tables(cases: list[Case], systems: list[str], results: dict, baseline: dict | None, revision: str | None) -> str:
    """Markdown tables; the speed-up over the starting point uses C start's figures when it ran
    alongside, else those bench/baseline.json recorded before the kernel work."""
    def table(title, columns, rows):
        lines = [f"**{title}**", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows]) + "\n"

    head = ["model", "batch"]
    out = []
    time_rows, rss_rows, flop_rows, start_rows = [], [], [], []
    for case in cases:
        r = results[case.key]
        ort = r.get("ort", {}).get("ms")
        time_rows.append([case.name, str(case.batch)] + [
            f"{r[s]['ms']:.3f}" + (f" ({r[s]['ms'] / ort:.2f}×)" if ort and s != "ort" else "") for s in systems])
        rss_rows.append([case.name, str(case.batch)] + [f"{r[s]['rss_mb']:.1f}" for s in systems])
        flop_rows.append([case.name, str(case.batch), f"{case.flops / 1e6:.2f}"] + [
            f"{case.flops / r[s]['ms'] / 1e6:.2f}" for s in systems])
        start = r["c-start"]["ms"] if "c-start" in r else (baseline or {}).get("c_step_ms", {}).get(case.key)
        if start and {"c", "c-fast"} & set(systems):
            start_rows.append([case.name, str(case.batch), f"{start:.3f}"] + [
                f"{start / r[s]['ms']:.2f}×" for s in ("c", "c-fast") if s in systems])
    columns = [NAMES[s] for s in systems]
    out.append(table("Median step time, ms (ratio to ORT)", head + columns, time_rows))
    if start_rows:
        out.append(table(f"Speed-up of the C driver over the starting point (C start: revision "
                         f"{revision[:10]}{'' if 'c-start' in systems else ', bench/baseline.json'})",
                         head + ["start ms"] + [NAMES[s] for s in ("c", "c-fast") if s in systems], start_rows))
    out.append(table("Peak RSS, MB (each system in its own process)", head + columns, rss_rows))
    out.append(table("Achieved GFLOP/s", head + ["MFLOP/step"] + columns, flop_rows))
    return "\n".join(out)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--budget", type=float, default=0.3, help="seconds of timed steps per run")
    parser.add_argument("--quick", action="store_true", help="one repetition, short runs")
    parser.add_argument("--baseline", metavar="REV", help="time the C driver of git revision REV's generator "
                        "and record it as the starting point in bench/baseline.json")
    parser.add_argument("--json", type=Path, help="write the raw results here")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeat, args.budget = 1, 0.05
    systems = ["c-start"] if args.baseline else args.systems.split(",")
    unknown = set(systems) - set(SYSTEMS)
    if unknown or set(args.models.split(",")) - set(MODELS):
        parser.error(f"unknown systems or models: {sorted(unknown) or args.models}")
    if "ort" in systems and not ORT_PYTHON.exists():
        parser.error(f"ort needs ONNX Runtime training in {ORT_PYTHON.parent.parent}: "
                     "make bench/.venv-ort/.installed (or leave ort out of --systems)")
    baseline = json.loads(BASELINE.read_text()) if BASELINE.exists() else None
    revision = args.baseline or (baseline or {}).get("revision")
    if "c-start" in systems and not revision:
        parser.error("c-start needs --baseline REV or bench/baseline.json")

    command = "python bench/speed.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    with tempfile.TemporaryDirectory(prefix="edgetrain-bench-") as tmp:
        tmp = Path(tmp)
        start_tree = source_tree(revision, tmp / "start") if "c-start" in systems else None
        cases = [Case(m, int(b), tmp / f"{m}-{b}") for m in args.models.split(",") for b in args.batches.split(",")]
        systems = prepare(cases, systems, tmp, start_tree)
        before = machine()
        results = measure(cases, systems, args.repeat, args.budget)
    if args.json:
        args.json.write_text(json.dumps({"command": command, "machine": before, "results": results}, indent=1))
    if args.baseline:
        sha = subprocess.run(["git", "rev-parse", args.baseline], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
        BASELINE.write_text(json.dumps({"revision": sha, "command": command, "machine": before,
                                        "c_step_ms": {k: r["c-start"]["ms"] for k, r in results.items()}},
                                       indent=1) + "\n")
    print(f"`{command}`\n\nMachine: {before} before the runs, {machine().rsplit(' ', 1)[1]} after.\n")
    print(tables(cases, systems, results, baseline, revision))


if __name__ == "__main__":
    main()
