"""Where a training step's instructions go on a Cortex-M: instructions executed per function.

    python bench/hotspots.py [--models kws] [--target cortex-m4] [--top 15] [--int8]

Each model (batch 1, the graph and SGD step of speed.py) is built for the target with count.c as
its harness, as instructions.py builds it, and run on QEMU with one instruction per translation
block and the execution log on (`-singlestep -d exec,nochain`): a log line per instruction
executed, read as it is written (through a pipe, since a VWW step writes gigabytes) and counted by
the function whose address range (arm-none-eabi-nm) holds its address. The uncounted first step and
the harness run too: the table is of the whole firmware run, in which the steps dominate.
"""

from __future__ import annotations

import argparse
import bisect
import os
import re
import subprocess
import tempfile
import threading
from collections import Counter
from pathlib import Path

from edgetrain import targets

from cases import generated
from instructions import TARGET, firmware, int8_trainer

TRACE = re.compile(rb"Trace \d+: 0x[0-9a-f]+ \[[0-9a-f]+/([0-9a-f]+)/")


def functions(elf: Path, nm: str) -> tuple[list[int], list[tuple[int, str]]]:
    """(sorted start addresses, (end, name) for each) of the firmware's functions."""
    listing = subprocess.run([nm, "-S", "--defined-only", str(elf)], capture_output=True, text=True, check=True)
    spans = []
    for line in listing.stdout.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "tTwW":
            start = int(parts[0], 16) & ~1  # Thumb functions' symbols have bit 0 set
            spans.append((start, start + int(parts[1], 16), parts[3]))
    spans.sort()
    return [s for s, _, _ in spans], [(e, n) for _, e, n in spans]


def profile(build: Path, target: str) -> tuple[Counter, Counter]:
    """Instructions executed per function, and per address, by the firmware that `build` makes for
    `target`."""
    spec = targets.load(target)
    result = targets.make(f"TARGET={target}", "BUILD=.", "MODELS=model", "firmware.elf", cwd=build)
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-3000:])
    starts, spans = functions(build / "firmware.elf", spec.nm)
    fifo = build / "trace.fifo"
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    addresses: Counter = Counter()

    def read() -> None:
        with open(fifo, "rb") as trace:
            for line in trace:
                match = TRACE.match(line)
                if match:
                    addresses[int(match.group(1), 16)] += 1

    reader = threading.Thread(target=read)
    reader.start()
    run = targets.make(
        f"TARGET={target}",
        "BUILD=.",
        "MODELS=model",
        f"QEMU_FLAGS=-singlestep -d exec,nochain -D {fifo}",
        "RUN_TIMEOUT=3600",
        "run",
        cwd=build,
    )
    reader.join()
    if run.returncode != 0:
        raise RuntimeError(run.stderr[-3000:])
    counts: Counter = Counter()
    for pc, n in addresses.items():
        i = bisect.bisect_right(starts, pc) - 1
        counts[spans[i][1] if i >= 0 and pc < spans[i][0] else "(other)"] += n
    return counts, addresses


def annotate(build: Path, target: str, function: str, addresses: Counter) -> str:
    """`function`'s disassembly (objdump), each instruction with the times it ran."""
    objdump = targets.load(target).nm.replace("-nm", "-objdump")
    listing = subprocess.run(
        [objdump, "-d", f"--disassemble={function}", str(build / "firmware.elf")], capture_output=True, text=True
    ).stdout
    lines = []
    for line in listing.splitlines():
        match = re.match(r"\s*([0-9a-f]+):", line)
        lines.append(f"{addresses.get(int(match.group(1), 16), 0) if match else '':>10} {line}")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="kws")
    parser.add_argument("--target", default=TARGET)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--int8", action="store_true", help='profile each model compiled with quantize="int8"')
    parser.add_argument("--annotate", metavar="FUNCTION", help="also print FUNCTION's disassembly with counts")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="edgetrain-profile-") as tmp:
        for case in generated(args.models.split(","), Path(tmp)):
            trainer = int8_trainer(case.directory) if args.int8 else case.ours("c")
            build = firmware(case.directory, trainer, 1, args.target)
            counts, addresses = profile(build, args.target)
            total = sum(counts.values())
            print(f"\n{case.name} on {args.target}: {total:,} instructions executed (two steps and the harness)\n")
            print("| function | instructions | share |\n|---|--:|--:|")
            for name, n in counts.most_common(args.top):
                print(f"| {name} | {n:,} | {n / total:.1%} |")
            if args.annotate:
                print(annotate(build, args.target, args.annotate, addresses))


if __name__ == "__main__":
    main()
