"""Instructions per training step on a Cortex-M4, counted deterministically by QEMU.

    python bench/instructions.py [--models kws,vww,ic,ad] [--steps 2] [--baseline REV]

Each model (batch 1, the graph and SGD step of speed.py) is built for cortex-m4 with count.c as
its harness and run on QEMU's MPS2 AN386 board with `-icount shift=0`: the count is the same on
every run and every machine, for the same compiler. A step is a training step, an optimizer step
and a gradient reset. --baseline REV adds a column for the trainer that revision generates.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from edgetrain import targets
from speed import BENCH, Case, _prepare, source_tree

TARGET = "cortex-m4"
ICOUNT = "-icount shift=0,align=off,sleep=off"  # 1 instruction = 1 ns of virtual time, no idling
RUN_TIMEOUT = 1800  # seconds: counting slows QEMU down, and VWW runs billions of instructions


def c_array(values: np.ndarray, c_type: str, name: str) -> str:
    text = ", ".join(f"{float(v)!r}f" if c_type == "float" else str(int(v)) for v in values.ravel())
    return f"static const {c_type} {name}[{values.size}] = {{{text}}};\n"


def count(case: Case, ours: Path, steps: int) -> int:
    """Instructions per step of the trainer generated in `ours`."""
    build = ours / TARGET
    (build / "model").mkdir(parents=True, exist_ok=True)
    for name in ("model.c", "model.h"):
        shutil.copy(ours / name, build / "model" / name)
    shutil.copy(BENCH / "count.c", build / "harness.c")
    x, y = np.load(case.directory / "x.npy"), np.load(case.directory / "y.npy")
    labels = "int32_t" if np.issubdtype(y.dtype, np.integer) else "float"
    (build / "data.h").write_text(f"#define ET_STEPS {steps}u\n" + c_array(x, "float", "bench_x")
                                  + c_array(y, labels, "bench_y"))
    result = targets.make(f"TARGET={TARGET}", "BUILD=.", "MODELS=model", f"QEMU_FLAGS={ICOUNT}",
                          f"RUN_TIMEOUT={RUN_TIMEOUT}", "run", cwd=build)
    if result.returncode != 0 or "instructions per step" not in result.stdout:
        raise RuntimeError(f"counting {case.key} failed:\n{(result.stdout + result.stderr)[-3000:]}")
    return int(result.stdout.split("instructions per step")[1].split()[0])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="kws,vww,ic,ad")
    parser.add_argument("--steps", type=int, default=1, help="steps counted (after one uncounted step)")
    parser.add_argument("--baseline", metavar="REV", help="also count the trainer git revision REV generates")
    args = parser.parse_args(argv)
    targets.load(TARGET).require()
    with tempfile.TemporaryDirectory(prefix="edgetrain-instructions-") as tmp:
        tmp = Path(tmp)
        start_tree = source_tree(args.baseline, tmp / "start") if args.baseline else None
        cases = [Case(name, 1, tmp / name) for name in args.models.split(",")]
        for case in cases:
            case.prepare()
        systems = ["c"] + (["c-start"] if start_tree else [])
        for system in systems:
            _prepare(sys.executable, "edgetrain-generate", [c.ours(system) for c in cases],
                     env={"PYTHONPATH": str(start_tree)} if system == "c-start" else None)
        rows = []
        for case in cases:
            now, *start = (count(case, case.ours(s), args.steps) for s in systems)
            rows.append([case.name, f"{now:,}", f"{case.flops / now:.2f}"]
                        + ([f"{start[0]:,}", f"{start[0] / now:.2f}×"] if start else []))
            print(f"  {case.name}: {now:,}", file=sys.stderr)
    columns = ["model (batch 1)", "instructions/step", "FLOP/instruction"]
    if start_tree:
        columns += [f"at {args.baseline}", "fewer by"]
    print("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns))
    print("\n".join("| " + " | ".join(row) + " |" for row in rows))


if __name__ == "__main__":
    main()
