"""The build targets, as targets/<name>.mk describes them (read through make, so the .mk files stay
the one source), and the flash/RAM figures of a compiled trainer from the target's size tool."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from .errors import EdgetrainError
from .host.build import run_compiler


def directory() -> Path:
    return Path(str(resources.files("edgetrain.target_files")))


def names() -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in directory().glob("*.mk")))


@dataclass(frozen=True)
class Target:
    name: str
    cc: str
    cflags: tuple[str, ...]
    size: str
    nm: str
    needs: tuple[tuple[str, str], ...]  # (command or file, Debian package providing it)

    def missing(self) -> list[tuple[str, str]]:
        """(tool, package) for every tool of this target that is not installed."""
        return [
            (tool, package)
            for tool, package in self.needs
            if not (os.path.exists(tool) if tool.startswith("/") else shutil.which(tool))
        ]

    def require(self) -> None:
        missing = self.missing()
        if missing:
            packages = " ".join(dict.fromkeys(p for _, p in missing))
            raise EdgetrainError(
                f"target {self.name} needs {', '.join(t for t, _ in missing)}: install them with "
                f"`apt-get install {packages}` (or `make TARGET={self.name} tools`)"
            )


def make(*args: str, cwd=None, timeout: float | None = None) -> subprocess.CompletedProcess:
    if shutil.which("make") is None:
        raise EdgetrainError("`make` not found: install it with `apt-get install make`")
    # Under `make run`, the outer make's variables (MAKEFLAGS) must not leak into this one.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    return subprocess.run(
        ["make", "-s", "--no-print-directory", "-f", str(directory() / "Makefile"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@functools.cache
def load(name: str) -> Target:
    if name not in names():
        raise EdgetrainError(f"unknown target {name!r}; known targets: {', '.join(names())}")
    result = make(f"TARGET={name}", "vars")
    if result.returncode != 0:
        raise EdgetrainError(f"cannot read targets/{name}.mk: {result.stderr.strip()}")
    v = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    return Target(
        name=name,
        cc=v["CC"],
        cflags=tuple(v["CFLAGS"].split()),
        size=v["SIZE"],
        nm=v["NM"],
        needs=tuple(tuple(n.rsplit(":", 1)) for n in v["NEEDS"].split()),
    )


# Storage symbols of the generated C (templates/model.c.j2).
_CONSTANT_WEIGHTS, _ARENA = ("et_frozen", "et_consts"), "et_arena"


def measure(target: Target, model_c: Path) -> dict:
    """Flash and RAM of the compiled trainer object, as the target's size tool counts them.

    flash = code + constant weights + initial values of RAM data (copied out of flash at start-up);
    RAM = arena + state (parameters, gradients, optimizer state, buffers, counters). Library routines
    the trainer calls (memcpy, sqrtf, soft-float arithmetic) come from the C library and are not counted."""
    missing = [(t, p) for t, p in target.missing() if t in (target.cc, target.size, target.nm)]
    if missing:
        return {
            "size_tool": None,
            "size_note": f"flash and RAM not measured: {', '.join(t for t, _ in missing)} "
            f"missing (apt-get install {' '.join(dict.fromkeys(p for _, p in missing))})",
        }
    with tempfile.TemporaryDirectory() as tmp:
        obj = Path(tmp, "model.o")
        _tool([target.cc, *target.cflags, "-c", str(model_c), "-o", str(obj)], target, f"{model_c} for {target.name}")
        text, data, bss = (int(n) for n in _tool([target.size, "-B", str(obj)], target).splitlines()[1].split()[:3])
        symbols = _symbol_sizes(_tool([target.nm, "-S", str(obj)], target))
        if obj.read_bytes()[:4] == b"\0asm":
            text, data, bss, symbols = _wasm_sizes(text, obj.read_bytes())
    weights, arena = sum(symbols.get(s, 0) for s in _CONSTANT_WEIGHTS), symbols.get(_ARENA, 0)
    return {
        "size_tool": target.size,
        "flash_bytes": text + data,
        "ram_bytes": data + bss,
        "size_breakdown": {
            "code": text - weights,
            "constant_weights": weights,
            "initial_values": data,
            "arena": arena,
            "state": data + bss - arena,
        },
    }


def add_sizes(report: dict, target: str | None, model_c: Path) -> dict:
    """The memory report with the target's measured flash and RAM. RAM replaces the planner's total;
    what the planner's categories leave out (buffers, counters, alignment) becomes ram_breakdown["other"]."""
    if target is None:
        return report
    sizes = measure(load(target), model_c)
    report = {**report, **sizes, "target": target}
    if "size_breakdown" in sizes:
        planned = {k: v for k, v in report["ram_breakdown"].items() if k != "other"}
        report["ram_breakdown"] = {**planned, "other": sizes["ram_bytes"] - sum(planned.values())}
    return report


def _tool(cmd: list[str], target: Target, compiling: str | None = None) -> str:
    """What `cmd` printed; `compiling` says what a compiler compiles, should it take a while."""
    result = run_compiler(cmd, compiling) if compiling else subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise EdgetrainError(f"{cmd[0]} failed for target {target.name}: {result.stderr.strip()[:2000]}")
    return result.stdout


def _wasm_sizes(code: int, module: bytes) -> tuple[int, int, int, dict[str, int]]:
    """(text, data, bss, symbol sizes) of a wasm object as size -B and nm -S give them for ELF: llvm-size
    counts the code as text but every data segment as data, and llvm-nm gives data no sizes; the
    segments (one per variable under -fdata-sections) tell read-only data, which goes with the text,
    initialized data and zeroed data apart."""
    from .wasm import data_segments

    segments = data_segments(module)
    kinds = {
        kind: sum(n for name, n in segments.items() if name.startswith(f".{kind}."))
        for kind in ("rodata", "data", "bss")
    }
    return (
        code + kinds["rodata"],
        kinds["data"],
        kinds["bss"],
        {name.split(".", 2)[2]: n for name, n in segments.items()},
    )


def _symbol_sizes(nm_output: str) -> dict[str, int]:
    """{symbol: bytes} from `nm -S` lines `address size type name`."""
    sizes = {}
    for line in nm_output.splitlines():
        match = re.fullmatch(r"[0-9a-fA-F]+ ([0-9a-fA-F]+) \w (\S+)", line.strip())
        if match:
            sizes[match.group(2)] = int(match.group(1), 16)
    return sizes
