"""Tests for the C runtime kernels in runtime_c/.

The headers are compiled exactly as the generated file uses them (pasted in
order into one C99 translation unit, strict warnings as errors) plus a few
exported wrappers, and the wrappers are called through cffi's ABI mode.
"""

import re
import shutil
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest

from edgetrain.ops.registry import broadcast_strides, merged_axes
from edgetrain.runtime_c import headers

cffi = pytest.importorskip("cffi")

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "runtime_c"
# These and the headers they #include, in the order that pastes them into one file.
HEADERS = headers("et_conv.h", "et_elementwise.h", "et_loss.h", "et_optim.h", "et_shape.h")
STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-Wdouble-promotion", "-ffp-contract=off", "-O2"]

# Wrappers have external linkage because the kernels are static inline.
WRAPPERS = r"""
void t_expf(int n, const float *x, float *y) { int i; for (i = 0; i < n; ++i) y[i] = et_expf(x[i]); }
void t_logf(int n, const float *x, float *y) { int i; for (i = 0; i < n; ++i) y[i] = et_logf(x[i]); }
void t_tanhf(int n, const float *x, float *y) { int i; for (i = 0; i < n; ++i) y[i] = et_tanhf(x[i]); }
void t_sigmoidf(int n, const float *x, float *y) { int i; for (i = 0; i < n; ++i) y[i] = et_sigmoidf(x[i]); }
void t_tanh_rows(int n, const float *x, float *y) { et_tanh_f32(n, x, y); }
void t_sigmoid_rows(int n, const float *x, float *y) { et_sigmoid_f32(n, x, y); }
void t_exp_rows(int n, const float *x, float *y) { et_exp_f32(n, x, y); }
uint32_t t_crc32(uint32_t crc, const uint8_t *p, size_t n) { return et_crc32(crc, p, n); }
uint32_t t_hash_u32(uint32_t h) { return et_hash_u32(h); }
void t_dropout(int n, float ratio, uint32_t seed, uint32_t counter, const float *X, float *Y, float *Mask)
{ et_dropout_f32(n, ratio, seed, counter, X, Y, Mask); }
void t_add(int rank, const int *shape, const float *A, const int *as, const float *B, const int *bs, float *Y)
{ et_add_f32(rank, shape, A, as, B, bs, Y); }
void t_gemm(int M, int N, int K, float alpha, const float *A, int ta, const float *B, int tb,
            float beta, const float *C, int c_rs, int c_cs, float *Y)
{ et_gemm_f32(M, N, K, alpha, A, ta, B, tb, beta, C, c_rs, c_cs, Y); }
void t_sce(int N, int C, int D, const float *X, const int32_t *labels, const float *w, int ignore,
           float *loss, float *log_prob)
{ et_softmax_cross_entropy_f32(N, C, D, X, labels, w, ignore, loss, log_prob); }
void t_sce_grad(int N, int C, int D, const float *dloss, const float *log_prob, const int32_t *labels,
                const float *w, int ignore, float *dX)
{ et_softmax_cross_entropy_grad_f32(N, C, D, dloss, log_prob, labels, w, ignore, dX); }
int t_check_labels(int n, const int32_t *labels, int classes, int ignore)
{ return et_check_labels(n, labels, classes, ignore); }
void t_bce(int n, const float *X, const float *T, float *L) { et_bce_with_logits_f32(n, X, T, L); }
float t_adam_step_size(float lr, float b1, float b2, uint32_t t) { return et_adam_step_size(lr, b1, b2, t); }
void t_conv(int N, int C, int M, int G, const int *in, const int *out, const int *k, const int *s, const int *d,
            const int *p, const float *X, const float *W, const float *B, float *Y)
{ et_conv_f32(N, C, M, G, in, out, k, s, d, p, X, W, B, Y); }
void t_conv_transpose(int N, int C, int M, int G, const int *in, const int *out, const int *k, const int *s,
                      const int *d, const int *p, const float *X, const float *W, const float *B, float *Y)
{ et_conv_transpose_f32(N, C, M, G, in, out, k, s, d, p, X, W, B, Y); }
void t_conv_grad_w(int N, int C, int M, int G, const int *in, const int *out, const int *k, const int *s,
                   const int *d, const int *p, const float *dY, const float *X, float *dW)
{ et_conv_grad_w_f32(N, C, M, G, in, out, k, s, d, p, dY, X, dW); }
void t_reduce_sum(int rank, const int *shape, const int *out_strides, float scale, const float *X, float *Y,
                  int y_size)
{ et_reduce_sum_f32(rank, shape, out_strides, scale, X, Y, y_size); }
void t_adamw(int n, float step, float lr, float b1, float b2, float eps, float wd, float *W,
             const float *G, float *M, float *V)
{ et_adamw_f32(n, step, lr, b1, b2, eps, wd, W, G, M, V); }
"""

CDEF = """
void t_expf(int, const float *, float *);
void t_logf(int, const float *, float *);
void t_tanhf(int, const float *, float *);
void t_sigmoidf(int, const float *, float *);
void t_tanh_rows(int, const float *, float *);
void t_sigmoid_rows(int, const float *, float *);
void t_exp_rows(int, const float *, float *);
uint32_t t_crc32(uint32_t, const uint8_t *, size_t);
uint32_t t_hash_u32(uint32_t);
void t_dropout(int, float, uint32_t, uint32_t, const float *, float *, float *);
void t_add(int, const int *, const float *, const int *, const float *, const int *, float *);
void t_gemm(int, int, int, float, const float *, int, const float *, int, float, const float *,
            int, int, float *);
void t_sce(int, int, int, const float *, const int32_t *, const float *, int, float *, float *);
void t_sce_grad(int, int, int, const float *, const float *, const int32_t *, const float *, int,
                float *);
int t_check_labels(int, const int32_t *, int, int);
void t_bce(int, const float *, const float *, float *);
float t_adam_step_size(float, float, float, uint32_t);
void t_adamw(int, float, float, float, float, float, float, float *, const float *, float *,
             float *);
void t_reduce_sum(int, const int *, const int *, float, const float *, float *, int);
void t_conv(int, int, int, int, const int *, const int *, const int *, const int *, const int *, const int *,
            const float *, const float *, const float *, float *);
void t_conv_transpose(int, int, int, int, const int *, const int *, const int *, const int *, const int *,
                      const int *, const float *, const float *, const float *, float *);
void t_conv_grad_w(int, int, int, int, const int *, const int *, const int *, const int *, const int *,
                   const int *, const float *, const float *, float *);
"""


def runtime_source():
    """The runtime as the generated file contains it: pasted in order."""
    return "\n".join((RUNTIME / h).read_text() for h in HEADERS)


# The kernels as SIMD hosts build them, and in the scalar forms of the microcontrollers (no vector
# tiles, no padded scratch): both must give the very same bits.
@pytest.fixture(scope="module", params=["vectors", "scalar"])
def lib(tmp_path_factory, request):
    build = tmp_path_factory.mktemp("et_runtime")
    src = build / "wrappers.c"
    src.write_text(runtime_source() + WRAPPERS)
    so = build / "libet_runtime_test.so"
    scalar = ["-DET_NO_VECTORS"] if request.param == "scalar" else []
    subprocess.run(
        ["gcc", *STRICT, *scalar, "-shared", "-fPIC", str(src), "-o", str(so)],
        check=True,
        capture_output=True,
        text=True,
    )
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    return ffi, ffi.dlopen(str(so))


def fptr(ffi, a, ctype="float *"):
    return ffi.cast(ctype, a.ctypes.data)


def ordered(a):
    """Float32 bits mapped to integers that are consecutive in float order."""
    i = a.view(np.int32).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF), i)


def ulp_distance(got, ref64):
    """Distance in ulps from got to the correctly rounded float32 of ref64."""
    with np.errstate(over="ignore"):  # overflow to inf is the rounding we want
        ref = ref64.astype(np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    ok = ~np.isnan(ref)
    return np.abs(ordered(got[ok]) - ordered(ref[ok]))


# ---- compilation ----

SIGNATURE = re.compile(r"static inline\s+([\w ]+?[\s*])(et_\w+)\(([^)]*)\)\s*\{", re.S)


def use_every_kernel(source):
    """One external caller per runtime function.

    Some warnings (e.g. -Wmaybe-uninitialized) only appear once a static
    inline function is instantiated, as the generated code does."""
    conditional = guarded_spans(source)
    found = [(m.start(), *m.groups()) for m in SIGNATURE.finditer(source)]
    sigs = [(r.strip(), name, " ".join(params.split())) for _, r, name, params in found]
    binary = (
        "int rank, const int *shape, const float *A, const int *a_strides, "
        "const float *B, const int *b_strides, float *Y"
    )
    sigs += [("void", name, binary) for name in re.findall(r"ET_DEFINE_BINARY_\((et_\w+),", source)]
    guards = {name: guard for at, _, name, _ in found for a, b, guard in conditional if a <= at < b}
    out = []
    for ret, name, params in sigs:
        args = ", ".join(re.findall(r"(\w+)\s*(?:,|$)", params)) if params != "void" else ""
        call = f"{name}({args})"
        body = f"return {call};" if ret != "void" else f"{call};"
        caller = f"{ret} use_{name}({params});\n{ret} use_{name}({params}) {{ {body} }}"
        out.append(f"#if {guards[name]}\n{caller}\n#endif" if name in guards else caller)
    return sigs, "\n".join(out)


def guarded_spans(source):
    """Where the source's outermost `#if ET_VECTORS`, `#if ET_WIDE` and `#if ET_VMLA` blocks run, and
    which: what they define exists only with vectors (wide ones), or on 32-bit ARM's FPU."""
    spans, depth, start, guard = [], 0, None, ""
    for line in re.finditer(r"^\s*#\s*(if|ifdef|ifndef|endif)\b(.*)$", source, re.M):
        if start is None and line.group(1) == "if" and line.group(2).strip() in ("ET_VECTORS", "ET_WIDE", "ET_VMLA"):
            start, guard = line.start(), line.group(2).strip()
        if start is not None:
            depth += -1 if line.group(1) == "endif" else 1
            if depth == 0:
                spans.append((start, line.start(), guard))
                start = None
    return spans


def test_headers_compile_strict_and_unused_is_silent(tmp_path):
    # No wrappers: every static inline function is unused and must not warn.
    src = tmp_path / "all.c"
    src.write_text(runtime_source() + "\nint et_dummy_symbol;\n")
    extra = ["-Wshadow", "-Wstrict-prototypes", "-Wmissing-prototypes", "-Wcast-qual", "-Wundef"]
    r = subprocess.run(
        ["gcc", *STRICT, *extra, "-c", str(src), "-o", str(tmp_path / "all.o")], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    for h in HEADERS:  # each file is self-contained given the ones before it
        text = (RUNTIME / h).read_text()
        assert text.lstrip().startswith("/*"), h
        assert "#ifndef ET_" in text, h
        assert "double" not in text.replace("double-promotion", ""), h


@pytest.mark.parametrize("opt", ["-O0", "-O2", "-O3", "-Os"])
def test_every_kernel_instantiates_without_warnings(tmp_path, opt):
    source = runtime_source()
    sigs, callers = use_every_kernel(source)
    names = {name for _, name, _ in sigs}
    assert {"et_expf", "et_add_f32", "et_div_f32", "et_gemm_f32", "et_sgd_f32"} <= names
    src = tmp_path / "use.c"
    src.write_text(source + "\n" + callers + "\n")
    strict = [f for f in STRICT if f != "-O2"]
    r = subprocess.run(
        ["gcc", *strict, opt, "-Wmissing-prototypes", "-c", str(src), "-o", str(tmp_path / "use.o")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr


def test_headers_compile_for_cortex_m4(tmp_path):
    cc = shutil.which("arm-none-eabi-gcc")
    if cc is None:
        pytest.skip("arm-none-eabi-gcc not installed")
    src = tmp_path / "all.c"
    source = runtime_source()
    src.write_text(source + "\n" + use_every_kernel(source)[1] + "\n")
    r = subprocess.run(
        [
            cc,
            *STRICT,
            "-mcpu=cortex-m4",
            "-mthumb",
            "-mfloat-abi=hard",
            "-mfpu=fpv4-sp-d16",
            "-c",
            str(src),
            "-o",
            str(tmp_path / "all.o"),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr


# ---- math ----


def sweep_inputs():
    # ~2M bit patterns spread over all 2^32 (both signs, subnormals, inf,
    # NaN), plus dense coverage where the functions are used most.
    grid = np.arange(0, 1 << 32, 2147, dtype=np.uint64).astype(np.uint32).view(np.float32)
    rng = np.random.default_rng(0)
    dense = rng.uniform(-20.0, 20.0, 200_000).astype(np.float32)
    special = np.array(
        [
            0.0,
            -0.0,
            np.inf,
            -np.inf,
            np.nan,
            1.0,
            -1.0,
            2.0,
            0.5,
            88.72283172607421875,
            88.72284,
            88.7,
            -87.3,
            -103.97207,
            -103.97208,
            -104.0,
            1e-45,
            -1e-45,
            1.17549435e-38,
            3.4028235e38,
            -3.4028235e38,
            1e-8,
            -1e-8,
            0.625,
            0.62499994,
            9.0,
            9.000001,
            -9.0,
        ],
        dtype=np.float32,
    )
    return np.concatenate([grid, dense, special])


@pytest.mark.parametrize(
    "name,ref,bound",
    [
        ("t_expf", np.exp, 2),
        ("t_logf", np.log, 2),
        ("t_tanhf", np.tanh, 3),
    ],
)
def test_math_ulp(lib, name, ref, bound):
    ffi, L = lib
    x = sweep_inputs()
    y = np.empty_like(x)
    getattr(L, name)(len(x), fptr(ffi, x), fptr(ffi, y))
    with np.errstate(all="ignore"):
        r = ref(x.astype(np.float64))
    d = ulp_distance(y, r)
    assert d.max() <= bound, (name, int(d.max()), x[~np.isnan(r)][np.argmax(d)])


@pytest.mark.parametrize(
    "rows,one", [("t_sigmoid_rows", "t_sigmoidf"), ("t_tanh_rows", "t_tanhf"), ("t_exp_rows", "t_expf")]
)
def test_math_rows_match_the_scalar_function(lib, rows, one):
    """The kernels over arrays (eight lanes at a time where the host has vectors, each lane taking
    every branch) give the bits of the scalar function, value by value."""
    ffi, L = lib
    x = sweep_inputs()
    want, got = np.empty_like(x), np.empty_like(x)
    getattr(L, one)(len(x), fptr(ffi, x), fptr(ffi, want))
    getattr(L, rows)(len(x), fptr(ffi, x), fptr(ffi, got))
    assert np.array_equal(np.isnan(got), np.isnan(want))
    same = np.isnan(want) | (got.view(np.uint32) == want.view(np.uint32))
    assert same.all(), x[~same][:5]


def test_math_special_values(lib):
    ffi, L = lib

    def call(name, vals):
        x = np.array(vals, dtype=np.float32)
        y = np.empty_like(x)
        getattr(L, name)(len(x), fptr(ffi, x), fptr(ffi, y))
        return y

    e = call("t_expf", [0.0, np.inf, -np.inf, 89.0, -105.0, np.nan])
    assert e[0] == 1.0 and e[1] == np.inf and e[2] == 0.0 and e[3] == np.inf and e[4] == 0.0
    assert np.isnan(e[5])
    lg = call("t_logf", [1.0, 0.0, -0.0, -1.0, np.inf, np.nan, 1e-45])
    assert lg[0] == 0.0 and lg[1] == -np.inf and lg[2] == -np.inf and np.isnan(lg[3])
    assert lg[4] == np.inf and np.isnan(lg[5])
    assert abs(lg[6] - np.log(np.float64(np.float32(1e-45)))) < 1e-4
    t = call("t_tanhf", [-0.0, 0.0, np.inf, -np.inf, 50.0, np.nan])
    assert np.signbit(t[0]) and not np.signbit(t[1])
    assert list(t[2:5]) == [1.0, -1.0, 1.0] and np.isnan(t[5])


# ---- common ----


def test_crc32_matches_zlib(lib):
    ffi, L = lib
    assert L.t_crc32(0, b"123456789", 9) == 0xCBF43926
    data = np.random.default_rng(1).integers(0, 256, 10_000, dtype=np.uint8).tobytes()
    crc = L.t_crc32(0, data[:3333], 3333)
    crc = L.t_crc32(crc, data[3333:], len(data) - 3333)
    assert crc == zlib.crc32(data)
    assert L.t_crc32(0, b"", 0) == 0


def np_hash(h):
    h = h.astype(np.uint32)
    h ^= h >> np.uint32(16)
    h *= np.uint32(0x85EBCA6B)
    h ^= h >> np.uint32(13)
    h *= np.uint32(0xC2B2AE35)
    h ^= h >> np.uint32(16)
    return h


def test_hash_and_dropout(lib):
    ffi, L = lib
    for v in [0, 1, 0xDEADBEEF, 0xFFFFFFFF]:
        assert L.t_hash_u32(v) == int(np_hash(np.array([v], dtype=np.uint32))[0])
    n, seed, counter = 5000, 1234, 77
    x = np.random.default_rng(2).standard_normal(n).astype(np.float32)
    for ratio in [0.0, 0.1, 0.5]:
        y = np.empty_like(x)
        mask = np.empty_like(x)
        L.t_dropout(n, ratio, seed, counter, fptr(ffi, x), fptr(ffi, y), fptr(ffi, mask))
        i = np.arange(n, dtype=np.uint32)
        h = np_hash(np.uint32(seed) ^ np_hash(np.uint32(counter) ^ np_hash(i)))
        u = (h >> np.uint32(8)).astype(np.float32) * np.float32(1.0 / 16777216.0)
        scale = np.float32(1.0) / (np.float32(1.0) - np.float32(ratio))
        ref_mask = np.where(u >= np.float32(ratio), scale, np.float32(0.0)).astype(np.float32)
        assert np.array_equal(mask, ref_mask)
        assert np.array_equal(y, x * ref_mask)
        if ratio == 0.5:
            assert 0.45 < (mask == 0).mean() < 0.55
    # In place.
    y = x.copy()
    L.t_dropout(n, 0.5, seed, counter, fptr(ffi, y), fptr(ffi, y), fptr(ffi, mask))
    assert np.array_equal(y, x * mask)


# ---- elementwise broadcast ----


def call_add(lib, shape, a, a_strides, b, b_strides, out=None):
    ffi, L = lib
    # Named so the arrays outlive the call: a cast pointer holds no reference.
    shape_a = np.array(shape, dtype=np.int32)
    as_a = np.array(a_strides, dtype=np.int32)
    bs_a = np.array(b_strides, dtype=np.int32)
    y = np.empty(shape, dtype=np.float32) if out is None else out
    L.t_add(
        len(shape),
        fptr(ffi, shape_a, "int *"),
        fptr(ffi, a),
        fptr(ffi, as_a, "int *"),
        fptr(ffi, b),
        fptr(ffi, bs_a, "int *"),
        fptr(ffi, y),
    )
    return y


@pytest.mark.parametrize(
    "a_shape, b_shape, merged",
    [
        ((1, 6, 5, 5), (1, 6, 1, 1), (6, 25)),  # a per-channel scale: rows of 25 against one value
        ((2, 3, 4), (3, 1), (2, 3, 4)),
        ((4, 1, 3), (1, 5, 1), (4, 5, 3)),
        ((3, 1, 1), (1, 2, 7), (3, 14)),
        ((2, 3), (), (6,)),
        ((1, 1), (1,), (1,)),
    ],
)
def test_broadcast_over_merged_axes(lib, a_shape, b_shape, merged):
    """The binary ops' binding merges axes both operands read as one run; the kernel then adds
    over fewer, longer axes what NumPy adds over the original ones."""
    out = np.broadcast_shapes(a_shape, b_shape)
    shape, a_strides, b_strides = merged_axes(
        out or (1,), broadcast_strides(a_shape, out or (1,)), broadcast_strides(b_shape, out or (1,))
    )
    assert shape == merged
    rng = np.random.default_rng(4)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    assert np.array_equal(call_add(lib, list(shape), a, a_strides, b, b_strides).reshape(out), a + b)


def test_broadcast_add(lib):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    b = rng.standard_normal((3, 1)).astype(np.float32)
    assert np.array_equal(call_add(lib, [2, 3, 4], a, [12, 4, 1], b, [0, 1, 0]), a + b)
    # Both operands broadcast: [2,1,4] + [3,1] -> [2,3,4].
    c = rng.standard_normal((2, 1, 4)).astype(np.float32)
    assert np.array_equal(call_add(lib, [2, 3, 4], c, [4, 0, 1], b, [0, 1, 0]), c + b)
    # Same-shape and scalar fast paths, scalar on either side.
    d = rng.standard_normal((2, 3, 4)).astype(np.float32)
    assert np.array_equal(call_add(lib, [2, 3, 4], a, [12, 4, 1], d, [12, 4, 1]), a + d)
    s = np.array([1.5], dtype=np.float32)
    assert np.array_equal(call_add(lib, [2, 3, 4], s, [0, 0, 0], a, [12, 4, 1]), s + a)
    assert np.array_equal(call_add(lib, [1], s, [0], s, [0]), s + s)
    # Extent-1 axes may carry any stride and still be contiguous.
    e = rng.standard_normal((1, 5)).astype(np.float32)
    assert np.array_equal(call_add(lib, [1, 5], e, [99, 1], e, [5, 1]), e + e)
    # Y aliasing the full-size operand, on the general path.
    y = a.copy()
    call_add(lib, [2, 3, 4], y, [12, 4, 1], b, [0, 1, 0], out=y)
    assert np.array_equal(y, a + b)
    # A row against one value on the left, and strided rows on both sides (the general loop).
    assert np.array_equal(call_add(lib, [2, 3, 4], b, [0, 1, 0], a, [12, 4, 1]), b + a)
    f = rng.standard_normal(3).astype(np.float32)
    assert np.array_equal(call_add(lib, [2, 4, 3], a, [12, 1, 4], f, [0, 0, 1]), a.transpose(0, 2, 1) + f)
    # Empty tensors write nothing.
    z = np.zeros((0, 3), dtype=np.float32)
    call_add(lib, [0, 3], z, [3, 1], b, [0, 1], out=z)


# ---- linalg ----

LANES = 8  # et_linalg.h's ET_LANES


def lane_dot_ref(a, b):
    """float32 dot products of a's rows with b's columns, rounded as et_dot_lanes_f32_ does: lane l
    sums k = l, l + 8, ... in order, then the lanes add pairwise in a fixed order."""
    lanes = [np.zeros((a.shape[0], b.shape[1]), dtype=np.float32) for _ in range(LANES)]
    for k in range(a.shape[1]):
        lanes[k % LANES] = lanes[k % LANES] + a[:, k : k + 1] * b[k : k + 1, :]
    s = lanes
    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]))


def seq_gemm_ref(a, b, alpha, beta, c, trans_b=0):
    """float32 reference with the kernel's exact rounding: sum over k in order, or in lanes when
    op(B) is stored transposed (then each output is a dot product of two contiguous rows)."""
    if trans_b:
        acc = lane_dot_ref(a, b)
    else:
        acc = np.zeros((a.shape[0], b.shape[1]), dtype=np.float32)
        for k in range(a.shape[1]):
            acc = acc + a[:, k : k + 1] * b[k : k + 1, :]
    y = np.float32(alpha) * acc
    if c is not None:
        y = y + np.float32(beta) * c
    return y


# (5, 7, 9): a row block and a leftover row, lanes with a tail; (9, 70, 21): two column blocks;
# (21, 9, 70): narrow, so with op(A) stored transposed the tiles run along its rows (a whole tile, a
# leftover of 5), four output columns at a time and a leftover one, k in three slices.
@pytest.mark.parametrize("M,N,K", [(5, 7, 9), (9, 70, 21), (21, 9, 70)])
@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm(lib, trans_a, trans_b, M, N, K):
    ffi, L = lib
    rng = np.random.default_rng(4 + 2 * trans_a + trans_b)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    a_in = np.ascontiguousarray(a.T) if trans_a else a
    b_in = np.ascontiguousarray(b.T) if trans_b else b
    bias = rng.standard_normal(N).astype(np.float32)
    alpha, beta = 0.75, 2.0

    y = np.empty((M, N), dtype=np.float32)
    # C broadcast along rows (row stride 0), as for a Gemm bias.
    L.t_gemm(
        M, N, K, alpha, fptr(ffi, a_in), trans_a, fptr(ffi, b_in), trans_b, beta, fptr(ffi, bias), 0, 1, fptr(ffi, y)
    )
    cfull = np.broadcast_to(bias, (M, N))
    np.testing.assert_allclose(y, alpha * (a.astype(np.float64) @ b) + beta * cfull, rtol=1e-5, atol=1e-5)
    assert np.array_equal(y, seq_gemm_ref(a, b, alpha, beta, cfull, trans_b))

    # No C: beta is ignored.
    L.t_gemm(M, N, K, 1.0, fptr(ffi, a_in), trans_a, fptr(ffi, b_in), trans_b, 123.0, ffi.NULL, 0, 0, fptr(ffi, y))
    assert np.array_equal(y, seq_gemm_ref(a, b, 1.0, 0.0, None, trans_b))

    # Column-major C via strides.
    c = rng.standard_normal((N, M)).astype(np.float32)
    L.t_gemm(M, N, K, 1.0, fptr(ffi, a_in), trans_a, fptr(ffi, b_in), trans_b, 1.0, fptr(ffi, c), 1, M, fptr(ffi, y))
    assert np.array_equal(y, seq_gemm_ref(a, b, 1.0, 1.0, c.T, trans_b))


# ---- long sums (et_linalg.h) ----

SUM_PIECE, SUM_LEVELS = 128, 16  # et_linalg.h's ET_SUM_PIECE, ET_SUM_LEVELS


def lanes_pairwise(lane):
    """et_dot_total_f32_: the eight lanes' sum, pairwise in a fixed order."""
    s = lane
    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]))


def piece_lanes(values):
    """Lane l of one piece: values l, l + 8, ... added in order, from 0 (in float32)."""
    lane = np.zeros(LANES, np.float32)
    values = np.asarray(values, np.float32)
    for at in range(0, len(values), LANES):
        block = values[at : at + LANES]
        lane[: len(block)] += block
    return lane


def cascade(pieces):
    """et_cascade_push_ / et_cascade_total_: level k holds 2^k pieces' sum while bit k of the count is
    set, merges adding the older sum on the left (the top level, once used, takes every carry that
    reaches it); the total adds the levels in use from the lowest up."""
    levels = {}
    for count, piece in enumerate(pieces):
        k = 0
        while k + 1 < SUM_LEVELS and count & 1:
            piece, k, count = levels[k] + piece, k + 1, count >> 1
        if k + 1 == SUM_LEVELS and count:  # the top level, in use: it goes on adding
            piece = levels[k] + piece
        levels[k] = piece
    total = np.zeros_like(pieces[0]) if pieces else np.float32(0)
    count = len(pieces)
    for k in range(SUM_LEVELS):
        if count & 1 or (count and k + 1 == SUM_LEVELS):
            total = levels[k] + total
        count >>= 1
    return total


def long_sum(runs):
    """The long sum of et_linalg.h: each run in pieces of SUM_PIECE from its start, lanes within a
    piece, the pieces' lanes through the cascade, then the lanes' pairwise total."""
    pieces = [piece_lanes(run[i : i + SUM_PIECE]) for run in runs for i in range(0, len(run), SUM_PIECE)]
    return lanes_pairwise(cascade(pieces)) if pieces else np.float32(0)


def test_cascade_is_pairwise():
    """Pieces 1, e, e, ... (e = 2^-24, half of 1's ulp): in order each e rounds away against 1; the
    cascade adds them pairwise first: 16 pieces make ((1 + e) + 2e) + 4e + 8e = 1 + 14e (1 + e is a
    tie, to even: 1), and 5 pieces ((1 + e) + 2e) + e = 1 + 4e (1 + 3e is a tie, to even)."""
    e = 2.0**-24
    pieces = [np.array([1.0 if i == 0 else e], np.float32) for i in range(16)]
    assert cascade(pieces)[0] == np.float32(1 + 14 * e)
    assert cascade(pieces[:5])[0] == np.float32(1 + 4 * e)
    assert np.cumsum(np.array(pieces)[:, 0], dtype=np.float32)[-1] == 1


def reduce_sum_ref(x, axes):
    """et_reduce_sum_f32's order: [outer][kept][inner] with inner > 1 (a bias gradient): each output a
    long sum over its runs of inner values; [a][rows][b] (kept, summed, kept): each column in pieces of
    SUM_PIECE rows, in order from 0, the pieces through the cascade; anything else in memory order."""
    shape = x.shape
    kept = [d for d in range(len(shape)) if d not in axes]
    out_shape = [shape[d] for d in kept]
    last_kept = max((d for d in kept if shape[d] > 1), default=-1)
    last_summed = max((d for d in axes if shape[d] > 1), default=-1)

    def size(ds):
        return int(np.prod([shape[d] for d in ds], dtype=np.int64))

    sig = "".join("k" if d in kept else "r" for d in range(len(shape)) if shape[d] > 1)
    if re.fullmatch(r"r*k*r+", sig):
        inner = size([d for d in axes if d > last_kept])
        groups = np.moveaxis(x, kept, range(len(kept))).reshape(size(kept), -1)
        return np.array([long_sum(list(g.reshape(-1, inner))) for g in groups], np.float32).reshape(out_shape)
    if re.fullmatch(r"k*r*k*", sig):
        rows = size(axes)
        blocks = x.reshape(-1, rows, size([d for d in kept if d > last_summed]))
        return np.array(
            [
                cascade(
                    [np.cumsum(blk[i : i + SUM_PIECE], axis=0, dtype=np.float32)[-1] for i in range(0, rows, SUM_PIECE)]
                )
                for blk in blocks
            ],
            np.float32,
        ).reshape(out_shape)
    ref = np.zeros(out_shape, np.float32)
    for idx in np.ndindex(*shape):
        at = tuple(idx[d] for d in kept)
        ref[at] = np.float32(ref[at] + x[idx])
    return ref


# ---- reductions ----


# A bias gradient (N and the spatial axes summed) over short and over long planes (several pieces a
# run), leading axes (over 300 rows: three pieces; 40 columns: a block of 32 and one of 8), trailing
# axes, a middle axis, a pattern that is neither (memory order), and a sum of 2^16 + 8 pieces, whose
# cascade fills its top level and goes on adding there.
@pytest.mark.parametrize(
    "shape,axes",
    [
        ((2, 11, 3, 5), (0, 2, 3)),
        ((3, 5, 300), (0, 2)),
        ((6, 20), (0,)),
        ((2, 300, 40), (1,)),
        ((4, 9, 7), (1, 2)),
        ((3, 4, 5), (1,)),
        ((2, 3, 4, 5), (0, 2)),
        ((2**23 + 1000,), (0,)),
    ],
)
def test_reduce_sum_keeps_its_stated_order(lib, shape, axes):
    ffi, L = lib
    rng = np.random.default_rng(len(shape) + sum(axes))
    # Magnitudes over six decades, so that another order of the additions rounds differently.
    x = (rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 3, shape)).astype(np.float32)
    kept = [d for d in range(len(shape)) if d not in axes]
    out_shape = [shape[d] for d in kept]
    strides = [0] * len(shape)
    for d, stride in zip(kept, np.cumprod([1] + out_shape[:0:-1])[::-1]):
        strides[d] = int(stride)
    ref = reduce_sum_ref(x, axes)
    y = np.empty(out_shape, np.float32)
    L.t_reduce_sum(
        len(shape), ffi.new("int[]", list(shape)), ffi.new("int[]", strides), 0.5, fptr(ffi, x), fptr(ffi, y), y.size
    )
    assert np.array_equal(y, ref * np.float32(0.5))


# ---- convolution ----


def plane_pieces(oh, ow):
    """et_conv_piece_ over an oh x ow plane: (start, end) of each piece of its flat positions, whole rows
    as many as SUM_PIECE positions hold, or pieces of SUM_PIECE positions of rows that are longer."""
    if ow > SUM_PIECE:
        return [(r * ow + i, r * ow + min(ow, i + SUM_PIECE)) for r in range(oh) for i in range(0, ow, SUM_PIECE)]
    rows = SUM_PIECE // ow
    return [(r * ow, min(oh, r + rows) * ow) for r in range(0, oh, rows)]


def lanes_total(planes, ow):
    """A weight's gradient as et_conv_grad_w_f32 sums it: each image's plane of products (flat, rows
    of ow) in pieces, lanes within a piece from 0, the pieces' lanes added in order from 0, the lanes'
    pairwise total; the planes' totals in order of n."""
    total = None
    for plane in planes:
        lane = np.zeros(LANES, np.float32)
        for start, end in plane_pieces(len(plane) // ow, ow):
            lane = lane + piece_lanes(plane[start:end])
        t = lanes_pairwise(lane)
        total = t if total is None else total + t
    return total


def in_order_total(planes):
    """Each plane's products in order from 0, the planes' sums in order of n."""
    total = None
    for plane in planes:
        t = np.cumsum(np.asarray(plane, np.float32), dtype=np.float32)[-1]
        total = t if total is None else total + t
    return total


# 2-D, 5 input and 6 output channels (blocks of four, then channels one by one), 11x7 inputs: a 3x3
# window with padding, with stride (1, 2) (the input gradient scatters; 44 outputs) and without (it
# gathers, as the forward pass does; 77 outputs, two chunks split in a row), and a pointwise kernel
# (a matrix product per image). Weight gradients over more than 64 positions (ET_CONV_GRAD_SHORT)
# add their products in lanes; over fewer, with at least 4 output channels, in order. Then a
# pointwise kernel over 15 positions with 19 input and 21 output channels (its products run along
# channels), and 3x3 windows over 7x8 outputs and, with stride (1, 2), over 7x5. Then planes of
# several pieces: 20x16 outputs (rows of whole lane blocks, read in place: two pieces of 8 rows to a
# call, and a piece of 4), with stride (1, 2) 20x20 (pieces of 6 rows, gathered), pointwise over
# 20x16, and rows longer than a piece: 4x136 (read in place: 128 + 8) and 3x150 (gathered: 128 + 22).
@pytest.mark.parametrize(
    "kernel,stride,pad,c,m,h,w",
    [
        (3, (1, 2), 1, 5, 6, 11, 7),
        (3, (1, 1), 1, 5, 6, 11, 7),
        (1, (1, 1), 0, 5, 6, 11, 7),
        (1, (1, 1), 0, 19, 21, 3, 5),
        (3, (1, 1), 1, 5, 6, 7, 8),
        (3, (1, 2), 1, 5, 6, 7, 9),
        (3, (1, 1), 1, 3, 5, 20, 16),
        (3, (1, 2), 1, 3, 5, 20, 40),
        (1, (1, 1), 0, 3, 5, 20, 16),
        (3, (1, 1), 1, 2, 5, 4, 136),
        (3, (1, 1), 1, 2, 5, 3, 150),
    ],
)
def test_conv_kernels_keep_their_stated_summation_order(lib, kernel, stride, pad, c, m, h, w):
    """Forward and input gradient: each output summed in float32 over its taps in (channel, ky, kx)
    order, the bias last; weight gradient: each image's plane of products (0 where the tap falls outside
    X) in pieces and lanes (lanes_total), or with at least 4 output channels over at most 64 positions
    in order; the planes in order. Bit for bit, so running output channels together changes no
    rounding."""
    ffi, L = lib
    rng = np.random.default_rng(7)
    n = 2
    oh, ow = (h + 2 * pad - kernel) // stride[0] + 1, (w + 2 * pad - kernel) // stride[1] + 1
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((m, c, kernel, kernel)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    dy = rng.standard_normal((n, m, oh, ow)).astype(np.float32)
    k, s, d, p = ([1, kernel, kernel], [1, *stride], [1, 1, 1], [0, pad, pad])

    def ints(v):
        return ffi.new("int[3]", v)

    def call(fn, c_in, c_out, size_in, size_out, *arrays):
        """fn over batch n, one group, this test's geometry; None for a NULL array."""
        sizes = (ints([1, *size_in]), ints([1, *size_out]), ints(k), ints(s), ints(d), ints(p))
        fn(n, c_in, c_out, 1, *sizes, *(ffi.NULL if a is None else fptr(ffi, a) for a in arrays))

    def taps(ky, kx):
        """(output rows, output columns, input rows, input columns) that tap (ky, kx) connects."""
        oy = np.array([o for o in range(oh) if 0 <= o * stride[0] + ky - pad < h], int)
        ox = np.array([o for o in range(ow) if 0 <= o * stride[1] + kx - pad < w], int)
        return oy, ox, oy * stride[0] + ky - pad, ox * stride[1] + kx - pad

    y_ref = np.zeros((n, m, oh, ow), np.float32)
    for ci in range(c):
        for ky in range(kernel):
            for kx in range(kernel):
                oy, ox, iy, ix = taps(ky, kx)
                y_ref[:, :, oy[:, None], ox] += wt[None, :, ci, ky, kx, None, None] * x[:, None, ci][:, :, iy][..., ix]
    y = np.empty_like(y_ref)
    call(L.t_conv, c, m, (h, w), (oh, ow), x, wt, b, y)
    assert np.array_equal(y, y_ref + b[None, :, None, None])

    dx_ref = np.zeros((n, c, h, w), np.float32)
    for mi in range(m):
        for ky in range(kernel):
            for kx in range(kernel):
                oy, ox, iy, ix = taps(ky, kx)
                taken = dy[:, None, mi][:, :, oy][..., ox]
                dx_ref[:, :, iy[:, None], ix] += wt[None, mi, :, ky, kx, None, None] * taken
    dx = np.empty_like(dx_ref)
    call(L.t_conv_transpose, m, c, (oh, ow), (h, w), dy, wt, None, dx)
    assert np.array_equal(dx, dx_ref)

    dw_ref = np.zeros_like(wt)
    for mi, ci, ky, kx in np.ndindex(*wt.shape):
        oy, ox, iy, ix = taps(ky, kx)
        pieces = []
        for i in range(n):  # a whole plane per image, 0 where the tap falls outside X
            plane = np.zeros((oh, ow), np.float32)
            plane[oy[:, None], ox] = x[i, ci][iy[:, None], ix] * dy[i, mi][oy[:, None], ox]
            pieces.append(plane.ravel())
        dw_ref[mi, ci, ky, kx] = in_order_total(pieces) if m >= 4 and oh * ow <= 64 else lanes_total(pieces, ow)
    dw = np.empty_like(dw_ref)
    call(L.t_conv_grad_w, c, m, (h, w), (oh, ow), dy, x, dw)
    assert np.array_equal(dw, dw_ref)


# Depthwise convolutions: 11 channels (a block of 8 side by side, then 3), over rows shorter than a
# lane block (5x7 outputs, and 3x3 with stride 2), and over 6x8 outputs (the long runs and, for the
# weight gradient, rows of whole lane blocks read in place); then planes of several pieces: 15x17
# with stride 2 (channels side by side) and 12x24 (read in place).
@pytest.mark.parametrize(
    "stride,h,w", [((1, 1), 5, 7), ((2, 2), 6, 6), ((1, 1), 6, 8), ((2, 2), 30, 34), ((1, 1), 12, 24)]
)
def test_depthwise_kernels_keep_their_stated_summation_order(lib, stride, h, w):
    """Forward and input gradient: each output summed over its taps in (ky, kx) order, the bias last;
    weight gradient: each image's plane of products (0 where the tap falls outside X) in pieces and
    lanes (lanes_total). Bit for bit, whichever way the channels run."""
    ffi, L = lib
    rng = np.random.default_rng(8)
    n, c, kernel, pad = 2, 11, 3, 1
    oh, ow = (h + 2 * pad - kernel) // stride[0] + 1, (w + 2 * pad - kernel) // stride[1] + 1
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    dy = rng.standard_normal((n, c, oh, ow)).astype(np.float32)
    wt = rng.standard_normal((c, 1, kernel, kernel)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)

    def ints(v):
        return ffi.new("int[3]", v)

    geometry = (ints([1, kernel, kernel]), ints([1, *stride]), ints([1, 1, 1]), ints([0, pad, pad]))

    y_ref = np.zeros((n, c, oh, ow), np.float32)
    dx_ref = np.zeros((n, c, h, w), np.float32)
    for ky, kx in np.ndindex(kernel, kernel):  # tap by tap, so every output adds its taps in order
        for oy, ox in np.ndindex(oh, ow):
            iy, ix = oy * stride[0] + ky - pad, ox * stride[1] + kx - pad
            if 0 <= iy < h and 0 <= ix < w:
                y_ref[:, :, oy, ox] += wt[:, 0, ky, kx] * x[:, :, iy, ix]
        for iy, ix in np.ndindex(h, w):
            oy, ox = divmod(iy + pad - ky, stride[0])[0], divmod(ix + pad - kx, stride[1])[0]
            if (iy + pad - ky) % stride[0] == 0 and (ix + pad - kx) % stride[1] == 0 and 0 <= oy < oh and 0 <= ox < ow:
                dx_ref[:, :, iy, ix] += wt[:, 0, ky, kx] * dy[:, :, oy, ox]
    y = np.empty_like(y_ref)
    L.t_conv(
        n,
        c,
        c,
        c,
        ints([1, h, w]),
        ints([1, oh, ow]),
        *geometry,
        fptr(ffi, x),
        fptr(ffi, wt),
        fptr(ffi, b),
        fptr(ffi, y),
    )
    assert np.array_equal(y, y_ref + b[None, :, None, None])
    dx = np.empty_like(dx_ref)
    L.t_conv_transpose(
        n, c, c, c, ints([1, oh, ow]), ints([1, h, w]), *geometry, fptr(ffi, dy), fptr(ffi, wt), ffi.NULL, fptr(ffi, dx)
    )
    assert np.array_equal(dx, dx_ref)

    dw_ref = np.zeros((c, 1, kernel, kernel), np.float32)
    for ci, ky, kx in np.ndindex(c, kernel, kernel):
        oy = np.array([o for o in range(oh) if 0 <= o * stride[0] + ky - pad < h], int)
        ox = np.array([o for o in range(ow) if 0 <= o * stride[1] + kx - pad < w], int)
        iy, ix = oy * stride[0] + ky - pad, ox * stride[1] + kx - pad
        pieces = []
        for i in range(n):
            plane = np.zeros((oh, ow), np.float32)
            plane[oy[:, None], ox] = x[i, ci][iy[:, None], ix] * dy[i, ci][oy[:, None], ox]
            pieces.append(plane.ravel())
        dw_ref[ci, 0, ky, kx] = lanes_total(pieces, ow)
    dw = np.empty_like(dw_ref)
    L.t_conv_grad_w(
        n, c, c, c, ints([1, h, w]), ints([1, oh, ow]), *geometry, fptr(ffi, dy), fptr(ffi, x), fptr(ffi, dw)
    )
    assert np.array_equal(dw, dw_ref)


# ---- loss ----


def np_sce(x, labels, weights, ignore):
    x = x.astype(np.float64)
    N, C, D = x.shape
    m = x.max(axis=1, keepdims=True)
    lp = x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))
    w = np.ones(C) if weights is None else weights.astype(np.float64)
    keep = labels != ignore
    safe = np.where(keep, labels, 0)
    wt = np.where(keep, w[safe], 0.0)  # [N, D]
    picked = np.take_along_axis(lp, safe[:, None, :], axis=1)[:, 0, :]  # [N, D]
    den = wt.sum()
    loss = (wt * -picked).sum() / den if den else 0.0
    onehot = np.zeros_like(lp)
    np.put_along_axis(onehot, safe[:, None, :], 1.0, axis=1)
    grad = (wt / den if den else 0.0 * wt)[:, None, :] * (np.exp(lp) - onehot)
    return loss, lp, grad


@pytest.mark.parametrize("D,weighted", [(1, False), (1, True), (3, True)])
def test_softmax_cross_entropy(lib, D, weighted):
    ffi, L = lib
    rng = np.random.default_rng(5 + D)
    N, C, ignore = 6, 4, -100
    x = (3 * rng.standard_normal((N, C, D))).astype(np.float32)
    labels = rng.integers(0, C, (N, D)).astype(np.int32)
    labels[1, 0] = ignore
    labels[4, D - 1] = ignore
    weights = rng.uniform(0.2, 2.0, C).astype(np.float32) if weighted else None
    wptr = fptr(ffi, weights) if weighted else ffi.NULL

    assert L.t_check_labels(N * D, fptr(ffi, labels, "int32_t *"), C, ignore) == 0
    loss = np.zeros(1, dtype=np.float32)
    lp = np.empty_like(x)
    L.t_sce(N, C, D, fptr(ffi, x), fptr(ffi, labels, "int32_t *"), wptr, ignore, fptr(ffi, loss), fptr(ffi, lp))
    ref_loss, ref_lp, ref_grad = np_sce(x, labels, weights, ignore)
    np.testing.assert_allclose(lp, ref_lp, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(loss[0], ref_loss, rtol=1e-5)

    dloss = np.array([0.5], dtype=np.float32)
    dx = np.empty_like(x)
    L.t_sce_grad(N, C, D, fptr(ffi, dloss), fptr(ffi, lp), fptr(ffi, labels, "int32_t *"), wptr, ignore, fptr(ffi, dx))
    np.testing.assert_allclose(dx, 0.5 * ref_grad, rtol=1e-5, atol=1e-7)
    assert np.all(dx[1, :, 0] == 0.0)


def test_softmax_cross_entropy_all_ignored_and_bad_labels(lib):
    ffi, L = lib
    N, C, D = 3, 5, 1
    x = np.random.default_rng(6).standard_normal((N, C, D)).astype(np.float32)
    labels = np.full((N, D), 7, dtype=np.int32)
    loss = np.array([np.nan], dtype=np.float32)
    lp = np.empty_like(x)
    L.t_sce(N, C, D, fptr(ffi, x), fptr(ffi, labels, "int32_t *"), ffi.NULL, 7, fptr(ffi, loss), fptr(ffi, lp))
    assert loss[0] == 0.0
    dx = np.full_like(x, np.nan)
    one = np.ones(1, dtype=np.float32)
    L.t_sce_grad(N, C, D, fptr(ffi, one), fptr(ffi, lp), fptr(ffi, labels, "int32_t *"), ffi.NULL, 7, fptr(ffi, dx))
    assert np.all(dx == 0.0)
    bad = np.array([0, 4, 5], dtype=np.int32)
    assert L.t_check_labels(3, fptr(ffi, bad, "int32_t *"), 5, -100) == 1
    neg = np.array([0, -1], dtype=np.int32)
    assert L.t_check_labels(2, fptr(ffi, neg, "int32_t *"), 5, -100) == 1
    assert L.t_check_labels(2, fptr(ffi, neg, "int32_t *"), 5, -1) == 0


def test_bce_with_logits_extremes(lib):
    ffi, L = lib
    x = np.array([100, -100, 100, -100, 0, 3.5, -2.25, 1e-3], dtype=np.float32)
    t = np.array([1, 0, 0, 1, 0.5, 0.3, 1, 0], dtype=np.float32)
    out = np.empty_like(x)
    L.t_bce(len(x), fptr(ffi, x), fptr(ffi, t), fptr(ffi, out))
    x64, t64 = x.astype(np.float64), t.astype(np.float64)
    ref = np.maximum(x64, 0) - x64 * t64 + np.log1p(np.exp(-np.abs(x64)))
    assert np.all(np.isfinite(out))
    # atol: exp(-100) is subnormal in float32, where ulps are 1.4e-45.
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1.5e-45)


# ---- optimizer ----


def test_adamw_one_step(lib):
    ffi, L = lib
    rng = np.random.default_rng(7)
    n = 1000
    w = rng.standard_normal(n).astype(np.float32)
    g = rng.standard_normal(n).astype(np.float32)
    m = (0.1 * rng.standard_normal(n)).astype(np.float32)
    v = rng.uniform(0.0, 0.1, n).astype(np.float32)
    # The reference uses the float32 values the kernel actually receives.
    lr, b1, b2, eps, wd = (float(np.float32(v)) for v in (1e-3, 0.9, 0.999, 1e-8, 0.01))
    t = 3

    step = L.t_adam_step_size(lr, b1, b2, t)
    ref_step = lr * np.sqrt(1 - b2**t) / (1 - b1**t)
    # 1 - beta2^t cancels, so float rounding of beta2^t is amplified ~300x.
    assert abs(step - ref_step) <= 2e-5 * ref_step
    for t_big in (1, 10, 1000, 100000):
        s = L.t_adam_step_size(lr, b1, b2, t_big)
        r = lr * np.sqrt(1 - b2**t_big) / (1 - b1**t_big)
        assert abs(s - r) <= 2e-5 * r, t_big

    W, M, V = w.copy(), m.copy(), v.copy()
    L.t_adamw(n, step, lr, b1, b2, eps, wd, fptr(ffi, W), fptr(ffi, g), fptr(ffi, M), fptr(ffi, V))
    w64, g64 = w.astype(np.float64), g.astype(np.float64)
    m64 = b1 * m.astype(np.float64) + (1 - b1) * g64
    v64 = b2 * v.astype(np.float64) + (1 - b2) * g64 * g64
    w64 = w64 - step * m64 / (np.sqrt(v64) + eps)
    w64 = w64 - lr * wd * w64
    np.testing.assert_allclose(M, m64, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(V, v64, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(W, w64, rtol=1e-6, atol=1e-6)
