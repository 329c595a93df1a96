"""Which files of the C tier run under AddressSanitizer and UndefinedBehaviorSanitizer
(test_sanitizers.py), and which of them run unsanitized too (tests/conftest.py)."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess


def compiler_file(name: str, cc: str) -> str | None:
    """The path of a file of the compiler's own (a runtime library), or None where it has none."""
    if shutil.which(cc) is None:
        return None
    path = subprocess.run([cc, f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
    return path if os.path.isabs(path) else None


def sanitizer_compiler() -> tuple[str, str] | None:
    """(the compiler that builds the pass's trainers, its AddressSanitizer runtime as a shared library,
    UBSan's handlers in it too, which the pass preloads into Python); None without one. clang where it
    has its runtimes (libclang-rt-dev): instrumented at -O0, a conv gradient case's model.c takes it
    1.3 s and gcc 2.5 s, and the pass builds one for each gradient case. Else gcc."""
    for cc, runtime in (("clang", f"libclang_rt.asan-{platform.machine()}.so"), ("gcc", "libasan.so")):
        path = compiler_file(runtime, cc)
        if path is not None:
            return cc, path
    return None


# The C tier's files that run sanitized: every kernel family and every C API call. The others run
# whole models through kernels these reach (imports, accuracy, ONNX Runtime's API), compile without
# running, or drive QEMU or Flower's processes; the whole tier ran sanitized until it took 23 of
# the suite's 54 minutes on a 2-core machine.
SANITIZED = [
    "tests/c/test_kernel_references.py",  # every fast path of the product and the convolutions, random shapes
    "tests/c/test_runtime_kernels.py",  # the other kernels on their own, over sweeps of sizes
    "tests/c/test_api.py",
    "tests/c/test_demo.py",
    "tests/c/test_api_misuse.py",  # every C API call with bad arguments
    "tests/c/test_checkpoint_roundtrips.py",
    "tests/c/test_checkpoint_robustness.py",  # damaged and forged checkpoints through the C parser
    "tests/c/test_flash_slots.py",
    "tests/c/test_frozen_writable.py",
    "tests/c/test_non_finite.py",
    "tests/c/test_nothing_to_train.py",
    "tests/c/test_export_federated.py",
    "tests/c/test_dynamic_batch.py",  # every batch from 1 to the compiled one: the arena's batch expressions
    # every op family's gradient cases
    "tests/c/test_gradients.py",  # elementwise, activations, reductions, products
    "tests/c/test_gradients_conv.py",  # convolutions and pooling, 1-D to 3-D, every padding and stride
    "tests/c/test_gradients_norm.py",  # normalizations, Pad, Resize
    "tests/c/test_gradients_more.py",
    "tests/c/test_gradients_extra_ops.py",
    "tests/c/test_gradients_function_ops.py",
    "tests/c/test_gradients_indexing_ops.py",  # gather, scatter, slicing: indices read from tensors
    "tests/c/test_gradients_rnn.py",
    "tests/c/test_gradients_sequence.py",
    "tests/c/test_losses.py",
    "tests/c/test_random_ops.py",
    "tests/c/test_relu_mask.py",
    "tests/c/test_optimizers.py",
    "tests/c/test_int8_layers.py",
    "tests/c/test_int8_qas.py",
    "tests/c/test_row_bands.py",  # band slices and joins at every offset, in every function
    "tests/c/test_integer_tensors.py",
]
# Within them, compile-only checks run no C, and the normal pass compiles the same.
DESELECT = [
    "tests/c/test_runtime_kernels.py::test_every_kernel_instantiates_without_warnings",
    "tests/c/test_runtime_kernels.py::test_headers_compile_for_cortex_m4",
]
# Where the sanitizer pass runs, the files it runs sanitized are not also run unsanitized
# (tests/conftest.py): they make the same assertions there, on trainers built from the same C with
# the same -march, with ASan and UBSan on top; running them twice was a sixth of the suite's time.
# These two run in both passes: they hold every fast path to its reference bit for bit, and the
# optimized build (-O2, vectorized) is where a sum could change its order; the sanitized one is -O0.
BOTH_PASSES = ["tests/c/test_kernel_references.py", "tests/c/test_runtime_kernels.py"]
