"""C-literal filters for the templates. Everything from the model file that reaches the C text
passes through one of these (convention 6)."""

from __future__ import annotations

import re

import numpy as np


def c_float(value) -> str:
    """An exact C float literal (hexadecimal, so no decimal rounding differs between compilers).

    >>> c_float(0.5)
    '0x1p-1f'
    >>> c_float(0.1)
    '0x1.99999ap-4f'
    >>> c_float(-3.0)
    '-0x1.8p+1f'
    >>> c_float(0.0), c_float(float('inf')), c_float(float('-inf'))
    ('0.0f', 'HUGE_VALF', '(-HUGE_VALF)')
    """
    value = float(np.float32(value))
    if np.isnan(value):
        return "NAN"
    if np.isinf(value):
        return "HUGE_VALF" if value > 0 else "(-HUGE_VALF)"
    if value == 0.0:
        return "-0.0f" if np.signbit(value) else "0.0f"
    mantissa, exponent = float(value).hex().split("p")
    return mantissa.rstrip("0").rstrip(".") + "p" + exponent + "f"


def c_int(value) -> str:
    """A C int literal; INT32_MIN has no literal of its own.

    >>> c_int(7), c_int(-2**31)
    ('7', '(-2147483647 - 1)')
    """
    value = int(value)
    if not -(2**31) <= value < 2**31:
        raise ValueError(f"{value} does not fit a C int")
    return "(-2147483647 - 1)" if value == -(2**31) else str(value)


def c_ints(values) -> str:
    """A C99 compound literal for an int array argument.

    >>> c_ints((2, 3))
    '(const int[]){2, 3}'
    """
    return "(const int[]){" + ", ".join(c_batch(v) for v in values) + "}"  # entries may change with the batch


def c_batch(value) -> str:
    """An int, or a value that changes with the batch (codegen's Affine: a * n + b, n the batch count
    of the C function's call; inverse: the float nearest 1 / (a * n + b), a double division rounded
    to float as Python's np.float32(1.0 / count) is), as a C expression.

    >>> from edgetrain.codegen.emit import Affine
    >>> c_batch(Affine(3, 0)), c_batch(Affine(1, -1)), c_batch(Affine(6, 2, inverse=True)), c_batch(Affine(1, 0))
    ('(3 * n)', '(n - 1)', '(float)(1.0 / (double)(6 * n + 2))', 'n')
    >>> c_batch(5)
    '5'
    """
    if not hasattr(value, "inverse"):
        return c_int(value)
    terms = ("n" if value.a == 1 else f"{c_int(value.a)} * n") + (
        f" + {c_int(value.b)}" if value.b > 0 else f" - {c_int(-value.b)}" if value.b else "")
    if value.inverse:
        return f"(float)(1.0 / (double)({terms}))"
    return terms if terms == "n" else f"({terms})"


def c_array(values, per_line: int = 8, fmt=None) -> str:
    """An initializer list, a few values per line.

    >>> c_array([1.0, 2.0], fmt=c_float)
    '0x1p+0f, 0x1p+1f'
    """
    fmt = fmt or c_float
    items = [fmt(v) for v in values]
    return ",\n    ".join(", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line))


def c_bytes(data: bytes) -> str:
    """Bytes as a uint8_t initializer list.

    >>> c_bytes(b'a*/')
    '0x61, 0x2a, 0x2f'
    """
    return c_array(list(data), per_line=16, fmt=lambda b: f"0x{b:02x}")


# How each byte is spelled inside a C string literal: letters and digits as themselves, every other
# byte as a three-digit octal escape (never shorter: a digit after it would join it), so no quote,
# backslash, question mark (trigraphs) or line break can form. Then three more pieces of text: the
# splice (backslash-newline, which continues a literal on the next line), the quote, and nothing.
# Each is NUL-padded to 4 bytes and read as a uint32: numpy looks all up at once, and one pass over
# the result deletes the padding.
_TEXT = np.array([bytes([b]) if bytes([b]).isalnum() else b"\\%03o" % b for b in range(256)]
                 + [b"\\\n", b'"', b""], "S4").view(np.uint32)
_SPLICE, _QUOTE, _NOTHING = 256, 257, 258


def c_float_bytes(values, per_line: int = 32) -> str:
    r"""float32 values as one C string literal of their little-endian bytes, `per_line` bytes a line.
    A compiler reads this several times faster than as many float literals (gcc: 3 s for 11 M
    floats, not 45), and every value keeps its bits.

    >>> c_float_bytes([1.0, -2.5, 12.0])
    '"\\000\\000\\200\\077\\000\\000\\040\\300\\000\\000\\100A"'
    >>> print(c_float_bytes([0.0, 2.0, -0.0], per_line=8))
    "\000\000\000\000\000\000\000\100\
    \000\000\000\200"
    >>> c_float_bytes([])
    '""'
    """
    data = np.ascontiguousarray(values, "<f4").reshape(-1).view(np.uint8)
    full, rest = divmod(data.size, per_line)
    lines = full + (rest > 0)
    # What to write, as indices into _TEXT: the quote, each line's bytes and a splice but after the
    # last line, the quote.
    index = np.full(2 + lines * (per_line + 1), _NOTHING, np.uint16)
    rows = index[1:-1].reshape(lines, per_line + 1)
    rows[:full, :per_line] = data[:full * per_line].reshape(full, per_line)
    rows[full:, :rest] = data[full * per_line:]
    rows[:-1, per_line] = _SPLICE
    index[0] = index[-1] = _QUOTE
    return _TEXT[index].tobytes().translate(None, b"\0").decode("ascii")


_UNSAFE = re.compile(r"[^A-Za-z0-9_.:()\[\], -]")


def c_comment(text: str, limit: int = 60) -> str:
    """Model text made safe inside /* */: only plain characters survive, so no comment terminator,
    line break, trigraph or directive can form.

    >>> c_comment('x */ #include "evil.h"\\n// y')
    'x __ _include _evil.h____ y'
    """
    text = _UNSAFE.sub("_", str(text))
    return text if len(text) <= limit else text[:limit - 3] + "..."


def c_ident(text: str) -> str:
    """A C identifier made from generated text (prefixes), refusing anything else.

    >>> c_ident('my_model')
    'my_model'
    """
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,40}", text):
        raise ValueError(f"{text!r} is not a C identifier")
    return text


FILTERS = {f.__name__: f for f in (c_float, c_int, c_ints, c_batch, c_array, c_bytes, c_float_bytes, c_comment,
                                   c_ident)}
