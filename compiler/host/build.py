"""Build the generated C with the system compiler and load it through cffi, cached by content."""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import cffi

from ..errors import EdgetrainError

# The default build is the reproducible one: no FMA contraction, so every target rounds alike.
# The cheap cost model lets -O2 vectorize the kernels' loops over independent outputs (the default
# very-cheap one refuses loops of unknown length); that never reorders a sum, so results keep their bits.
CFLAGS = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-pedantic", "-Wdouble-promotion",
          "-ffp-contract=off", "-fno-math-errno", "-fvect-cost-model=cheap"]
# Both builds use this machine's vector units (-march=native, where the compiler can say what they
# are): the kernels fix the order of every sum in their C text and nothing contracts, so wider
# vectors change no bit (tests/target compare the host's results with the ARM targets').
NATIVE = ["-march=native"]
# EDGETRAIN_BUILD=fast: FMA, and sums the compiler may reorder (so it vectorizes reductions too).
# Faster on the host, no longer bit-identical to other targets; NaN and infinity keep their meaning,
# which the non-finite checks need.
BUILD_MODES = {"reproducible": [], "fast": ["-O3", "-ffp-contract=fast", "-fassociative-math",
                                            "-fno-signed-zeros", "-fno-trapping-math"]}
# EDGETRAIN_SANITIZE=1: every trainer is built under AddressSanitizer and UndefinedBehaviorSanitizer,
# any report aborts (the C test tier's second pass; the process must preload libasan).
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g",
            "-O0"]  # instrumentation catches as much at -O0, and compiles ten times faster than at -O2


def cache_dir() -> Path:
    root = os.environ.get("EDGETRAIN_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "edgetrain")
    return Path(root)


def _compiler() -> str:
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        raise EdgetrainError(f"C compiler {cc!r} not found; install gcc or set CC")
    return cc


def build_mode_flags() -> list[str]:
    mode = os.environ.get("EDGETRAIN_BUILD") or "reproducible"
    if mode not in BUILD_MODES:
        raise EdgetrainError(f"EDGETRAIN_BUILD={mode!r}: known build modes are {', '.join(BUILD_MODES)}")
    return BUILD_MODES[mode]


@functools.lru_cache(maxsize=None)
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


def load_library(directory: str | os.PathLike, extra_flags: tuple[str, ...] = ()):
    """(ffi, lib) for the trainer generated in `directory`."""
    directory = Path(directory)
    source, header = (directory / "model.c").read_text(), (directory / "model.h").read_text()
    cc = _compiler()
    native = _native_target(cc)
    flags = CFLAGS + (NATIVE if native else []) + build_mode_flags() + list(extra_flags) + ["-fPIC", "-shared"]
    flags += SANITIZE if os.environ.get("EDGETRAIN_SANITIZE") == "1" else []
    key = hashlib.sha256("\0".join([source, header, cc, native, *flags]).encode()).hexdigest()[:24]
    library = cache_dir() / f"{key}.so"
    if not library.exists():
        library.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=library.parent) as tmp:
            for name, text in (("model.c", source), ("model.h", header)):
                Path(tmp, name).write_text(text)
            built = Path(tmp, "model.so")
            result = subprocess.run([cc, *flags, "-o", str(built), "model.c", "-lm"], cwd=tmp,
                                    capture_output=True, text=True)
            if result.returncode != 0:
                raise EdgetrainError(f"compiling the generated C failed: {result.stderr.strip()[:2000]}")
            os.replace(built, library)  # atomic: concurrent builds of the same model agree
    ffi = cffi.FFI()
    ffi.cdef(declarations(header))
    # The trainer's state is static in the library, and dlopen shares one instance per path:
    # load a private copy so every caller gets a trainer of its own.
    with tempfile.TemporaryDirectory() as tmp:
        private = shutil.copy(library, Path(tmp, "model.so"))
        return ffi, ffi.dlopen(str(private))
