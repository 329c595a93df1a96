"""Instructions per training step on a Cortex-M4 (or another Cortex-M or RISC-V target), counted by QEMU.

    python bench/instructions.py [--models kws,vww,ic,ad] [--steps 1] [--target cortex-m4] [--int8]

speed.py counts them too (batch-1 cases, cortex-m4); this runs the count alone. Each model (batch 1,
the graph and SGD step of speed.py) is built for the target with count.c as its harness and run on
QEMU's board (MPS2 AN386 for cortex-m4, AN500 for cortex-m7, AN505 for cortex-m33, MPS3 AN547 for
cortex-m55, virt for riscv32 and riscv32-hf) with `-icount shift=0`: the count is the same on every
run and every machine, for the same compiler. A step is a training step, an optimizer step and a
gradient reset.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np

from edgetrain import targets

BENCH = Path(__file__).resolve().parent
TARGET = "cortex-m4"
# Where count.c can read an instruction count: QEMU's system emulators under -icount (the user-mode
# ones, which run the Linux targets, have no -icount).
COUNTABLE = ("cortex-m3", "cortex-m4", "cortex-m7", "cortex-m33", "cortex-m55", "riscv32", "riscv32-hf")
ICOUNT = "-icount shift=0,align=off,sleep=off"  # 1 instruction = 1 ns of virtual time, no idling
# count.c's timer on the MPS2 and MPS3 boards, as data.h defines it: CMSDK timer 0's address and
# instructions per tick (1 ns each), or the core's SysTick. The AN505 starts its Cortex-M33 in the
# secure state, which reaches the timer at its secure alias; the AN547's SSE-300 has no CMSDK
# timers, and its SysTick runs at 32 MHz.
TIMERS = {
    "cortex-m33": "#define BENCH_TIMER0 0x50000000u\n#define INSTRUCTIONS_PER_TICK 50u\n",
    "cortex-m55": "#define BENCH_SYSTICK 1\n#define INSTRUCTIONS_PER_4_TICKS 125u\n",
}
TIMER = "#define BENCH_TIMER0 0x40000000u\n#define INSTRUCTIONS_PER_TICK 40u\n"  # AN385, AN386, AN500
RUN_TIMEOUT = 1800  # seconds: counting slows QEMU down, and VWW runs hundreds of millions of instructions


def c_type(values: np.ndarray) -> str:
    """The C type the trainer takes `values` in: int32_t for integers (token ids, labels), else float."""
    return "int32_t" if np.issubdtype(values.dtype, np.integer) else "float"


def c_array(values: np.ndarray, name: str) -> str:
    """`values` as a C array of the type the trainer takes them in."""
    kind = c_type(values)
    text = ", ".join(f"{float(v)!r}f" if kind == "float" else str(int(v)) for v in values.ravel())
    return f"static const {kind} {name}[{values.size}] = {{{text}}};\n"


def firmware(data: Path, ours: Path, steps: int, target: str = TARGET) -> Path:
    """The directory where targets/Makefile builds the trainer generated in `ours` for `target` with
    count.c as its harness, training on the batch in `data` (x.npy, y.npy) for `steps` counted steps."""
    build = ours / target
    (build / "model").mkdir(parents=True, exist_ok=True)
    for name in ("model.c", "model.h", "model_weights.h"):
        if (ours / name).exists():  # the starting point's revision may put its weights in model.c
            shutil.copy(ours / name, build / "model" / name)
    shutil.copy(BENCH / "count.c", build / "harness.c")
    x, y = np.load(data / "x.npy"), np.load(data / "y.npy")
    (build / "data.h").write_text(
        f"#define ET_STEPS {steps}u\n" + TIMERS.get(target, TIMER) + c_array(x, "bench_x") + c_array(y, "bench_y")
    )
    (build / "firmware.elf").unlink(missing_ok=True)  # targets/Makefile does not know the harness reads data.h
    return build


def count(data: Path, ours: Path, steps: int = 1, target: str = TARGET) -> int:
    """Instructions per step on `target` of the trainer generated in `ours`, on the batch in `data`."""
    targets.load(target).require()
    build = firmware(data, ours, steps, target)
    result = targets.make(
        f"TARGET={target}",
        "BUILD=.",
        "MODELS=model",
        f"QEMU_FLAGS={ICOUNT}",
        f"RUN_TIMEOUT={RUN_TIMEOUT}",
        "run",
        cwd=build,
    )
    if result.returncode != 0 or "instructions per step" not in result.stdout:
        raise RuntimeError(f"counting instructions in {ours} failed:\n{(result.stdout + result.stderr)[-3000:]}")
    return int(result.stdout.split("instructions per step")[1].split()[0])


def int8_trainer(directory: Path) -> Path:
    """The case's trainer (speed.py's graph, parameters and SGD step) with quantize="int8", calibrated
    on the case's batch and 3 random ones: its BatchNormalization folded into the convolutions first,
    as quantize="int8" folds it (the folded statistics and affine parameters then train no more)."""
    import onnx
    from edgetrain.frontend.quantize import fold_batchnorm
    from workers import edgetrain_generate

    model = onnx.load(str(directory / "model.onnx"))
    fold_batchnorm(model.graph)
    (directory / "int8").mkdir(exist_ok=True)
    onnx.save(model, str(directory / "int8" / "folded.onnx"))
    x = np.load(directory / "x.npy")
    rng = np.random.default_rng(1)
    calibration = [x] + [rng.standard_normal(x.shape, dtype=np.float32) for _ in range(3)]
    edgetrain_generate(
        directory / "int8", directory / "int8" / "folded.onnx", quantize="int8", calibration_data=calibration
    )
    return directory / "int8"


def main(argv=None) -> None:
    from cases import generated

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="kws,vww,ic,ad")
    parser.add_argument("--steps", type=int, default=1, help="steps counted (after one uncounted step)")
    parser.add_argument("--target", default=TARGET, choices=COUNTABLE)
    parser.add_argument("--int8", action="store_true", help='also count each model with quantize="int8"')
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="edgetrain-instructions-") as tmp:
        cases = generated(args.models.split(","), Path(tmp))
        columns = ("float32", "int8") if args.int8 else ("float32",)
        print(
            f"| model (batch 1) | {' | '.join(f'instructions per step on {args.target}, {c}' for c in columns)} |\n"
            f"|---|{'---|' * len(columns)}"
        )
        for case in cases:
            counts = [count(case.directory, case.ours("c"), args.steps, args.target)]
            if args.int8:
                counts.append(count(case.directory, int8_trainer(case.directory), args.steps, args.target))
            print(f"| {case.name} | {' | '.join(f'{n:,}' for n in counts)} |", flush=True)


if __name__ == "__main__":
    main()
