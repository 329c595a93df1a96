"""Build the generated C with the system compiler and load it through cffi, cached by content."""

from __future__ import annotations

import functools
import hashlib
import mmap
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cffi

from ..codegen.emit import SOURCES  # the files codegen writes, which a build compiles
from ..errors import EdgetrainError

# The default build is the reproducible one: no FMA contraction, so every target rounds alike.
# The cheap cost model lets -O2 vectorize the kernels' loops over independent outputs (the default
# very-cheap one refuses loops of unknown length); that never reorders a sum, so results keep their bits.
# The step functions are long runs of kernel calls, where value numbering made up to 1000 alias
# queries for each memory access (resnet18: about 0.3 s of its build); 200 gives the same machine
# code for resnet18, the digits MLP and the MLPerf Tiny models, function by function.
CFLAGS = [
    "-std=c99",
    "-O2",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-pedantic",
    "-Wdouble-promotion",
    "-ffp-contract=off",
    "-fno-math-errno",
    "-fvect-cost-model=cheap",
    "--param=sccvn-max-alias-queries-per-access=200",
]
# Both builds use this machine's vector units (-march=native, where the compiler can say what they
# are): the kernels fix the order of every sum in their C text and nothing contracts, so wider
# vectors change no bit (tests/target compare the host's results with the ARM targets').
NATIVE = ["-march=native"]
# EDGETRAIN_BUILD=fast: FMA, and sums the compiler may reorder (so it vectorizes reductions too).
# Faster on the host, no longer bit-identical to other targets; NaN and infinity keep their meaning,
# which the non-finite checks need.
# EDGETRAIN_BUILD=quick: -Og, which builds a large model several times faster (the zoo's mobilenet_v2:
# 2.6 s against 15.3 s) and runs it slower, with the same bits: nothing contracts or reorders at any
# level. For a program that compiles many models to run a few steps of each (the zoo's tests).
BUILD_MODES = {
    "reproducible": [],
    "fast": ["-O3", "-ffp-contract=fast", "-fassociative-math", "-fno-signed-zeros", "-fno-trapping-math"],
    "quick": ["-Og"],
}
# EDGETRAIN_SANITIZE=1: every trainer is built under AddressSanitizer and UndefinedBehaviorSanitizer,
# any report aborts (the C test tier's second pass, which builds with clang where it can; the process
# must preload the compiler's ASan runtime).
SANITIZE = [
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
    "-fno-omit-frame-pointer",
    "-O0",
]  # instrumentation catches as much at -O0, and compiles faster than at -O2
# No -g, about a sixth of each build: the library Python loads is a private copy, deleted once
# loaded (load_library), so no report reads its debug information. UBSan's carry their line anyway.

# Every Python use of a trainer goes through load_library, which keeps frozen parameters in RAM so
# api.Parameter.data can set them (ONNX Runtime's semantics); target builds keep them in flash.
FROZEN_WRITABLE = ["-DET_FROZEN_WRITABLE"]


PROGRESS_AFTER = 2.0  # seconds of compiling before saying what is being compiled


def cache_dir() -> Path:
    root = os.environ.get("EDGETRAIN_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "edgetrain"
    )
    return Path(root)


def _compiler() -> str:
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        raise EdgetrainError(f"C compiler {cc!r} not found; install gcc or set CC")
    return cc


# Tuning of gcc's that clang refuses; clang, unlike gcc, warns of the static inline kernels a file
# pastes and never calls (a fast path's scalar twin under ET_VECTORS).
GCC_ONLY = ["-fvect-cost-model=cheap", "--param=sccvn-max-alias-queries-per-access=200"]
CLANG_ONLY = ["-Wno-unused-function"]


@functools.cache
def _is_clang(cc: str) -> bool:
    version = subprocess.run([cc, "--version"], capture_output=True, text=True)
    return "clang" in version.stdout


def _compiler_flags(cc: str) -> list[str]:
    """CFLAGS in the dialect of `cc`: gcc's, or clang's."""
    return [f for f in CFLAGS if f not in GCC_ONLY] + CLANG_ONLY if _is_clang(cc) else CFLAGS


def build_mode_flags() -> list[str]:
    mode = os.environ.get("EDGETRAIN_BUILD") or "reproducible"
    if mode not in BUILD_MODES:
        raise EdgetrainError(f"EDGETRAIN_BUILD={mode!r}: known build modes are {', '.join(BUILD_MODES)}")
    return BUILD_MODES[mode]


@functools.cache
def _native_target(cc: str) -> str:
    """What -march=native means to `cc` on this machine ("" where it cannot say): part of the cache
    key, so that a cache shared between machines never hands one a library built for another's
    vector units."""
    result = subprocess.run([cc, *NATIVE, "-Q", "--help=target"], capture_output=True, text=True)
    return " ".join(line.split()[-1] for line in result.stdout.splitlines() if line.strip().startswith("-march="))


def declarations(header: str) -> str:
    """The prototypes of model.h, which is the one description of the C API."""
    match = re.search(r"/\* declarations-begin \*/(.*)/\* declarations-end \*/", header, re.S)
    if not match:
        raise EdgetrainError("model.h has no declarations block; regenerate the artifacts")
    return match.group(1)


def run_compiler(cmd: list[str], what: str, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run(cmd) for a C compiler, capturing its output; once it has run PROGRESS_AFTER
    seconds, stderr says what it compiles: a line counting the seconds on a terminal (with tqdm),
    else one plain line."""
    start = time.monotonic()
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs) as process:
        try:
            out, err = process.communicate(timeout=PROGRESS_AFTER)
        except subprocess.TimeoutExpired:
            description = f"compiling {what} with {os.path.basename(cmd[0])}"
            bar = _progress(description)
            try:
                while True:
                    if bar is not None:
                        bar.set_description_str(f"{description}: {time.monotonic() - start:.0f} s")
                    try:
                        out, err = process.communicate(timeout=0.5)  # no output is lost between tries
                        break
                    except subprocess.TimeoutExpired:
                        pass
            finally:
                if bar is not None:
                    bar.close()
    return subprocess.CompletedProcess(cmd, process.returncode, out, err)


def _progress(description: str):
    """A tqdm line on a terminal, or None after printing one plain line."""
    if sys.stderr.isatty():
        try:
            from tqdm import tqdm

            return tqdm(desc=description, bar_format="{desc}", leave=False, file=sys.stderr)
        except ImportError:
            pass
    print(f"edgetrain: {description} ...", file=sys.stderr, flush=True)
    return None


def _hash_file(key, path: Path) -> None:
    """key.update(the file's bytes), read through a memory map rather than into a Python buffer."""
    with open(path, "rb") as file:
        if os.fstat(file.fileno()).st_size:  # an empty file cannot be mapped
            with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
                key.update(data)


def load_library(directory: str | os.PathLike, extra_flags: tuple[str, ...] = ()):
    """(ffi, lib) for the trainer generated in `directory`."""
    directory = Path(directory)
    cc = _compiler()
    native = _native_target(cc)
    flags = [
        *_compiler_flags(cc),
        *FROZEN_WRITABLE,
        *(NATIVE if native else []),
        *build_mode_flags(),
        *extra_flags,
        "-fPIC",
        "-shared",
    ]
    sanitize = os.environ.get("EDGETRAIN_SANITIZE") == "1"
    flags += SANITIZE if sanitize else []
    # The sanitizer pass preloads AddressSanitizer into Python (tests/sanitize), for the trainers it
    # loads; the compiler it starts need not run under it too, which slowed each build by about a fifth.
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"} if sanitize else None
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    # The sources are copied by the kernel (resnet18's weights are 120 MB of text) and hashed from
    # the copies, which are what gets compiled: a file rewritten meanwhile cannot reach the cache
    # under the key of its other contents.
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        key = hashlib.sha256("\0".join([cc, native, *flags]).encode())
        # Artifacts of earlier versions have their initial values in model.c, and no model_weights.h.
        for name in (n for n in SOURCES if n != "model_weights.h" or (directory / n).exists()):
            copy = shutil.copyfile(directory / name, Path(tmp, name))
            key.update(f"\0{name}\0{copy.stat().st_size}\0".encode())
            _hash_file(key, copy)
        header = Path(tmp, "model.h").read_text()
        entry = cache / f"{key.hexdigest()[:24]}.so"
        library = _cached(entry, key.digest())
        if library is None:
            result = run_compiler(
                [cc, *flags, "-o", "model.so", "model.c", "-lm"], f"{directory / 'model.c'}", cwd=tmp, env=env
            )
            if result.returncode != 0:
                raise EdgetrainError(f"compiling the generated C failed: {result.stderr.strip()[:2000]}")
            library = Path(tmp, "model.so").read_bytes()
            Path(tmp, "entry").write_bytes(library + _seal(key.digest(), library))
            os.replace(Path(tmp, "entry"), entry)  # atomic: concurrent builds of the same model agree
    ffi = cffi.FFI()
    ffi.cdef(declarations(header))
    # The trainer's state is static in the library, and dlopen shares one instance per path:
    # load a private copy so every caller gets a trainer of its own. The copy is written from the
    # bytes just checked, so nothing changed in the cache since can reach dlopen.
    with tempfile.TemporaryDirectory() as tmp:
        private = Path(tmp, "model.so")
        private.write_bytes(library)
        return ffi, ffi.dlopen(str(private))


# A cache entry is the shared library followed by a seal: SHA-256 of (its key, the library), then this
# tag. dlopen never sees an entry unchecked: a truncated one (a crash, a full disk) would die with
# SIGBUS when mapped, an altered one would run other code than the model's.
SEAL_TAG = b"edgetrain cache entry 1\n"
SEAL_SIZE = hashlib.sha256().digest_size + len(SEAL_TAG)


def _seal(key: bytes, library: bytes) -> bytes:
    digest = hashlib.sha256(key)
    digest.update(library)
    return digest.digest() + SEAL_TAG


def _cached(entry: Path, key: bytes) -> bytes | None:
    """The library stored at `entry` under `key`, or None (to build it again) where the entry is
    missing, truncated, altered or another key's."""
    try:
        data = entry.read_bytes()
    except OSError:
        return None
    library = data[:-SEAL_SIZE]
    return library if len(data) > SEAL_SIZE and data[-SEAL_SIZE:] == _seal(key, library) else None
