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
    """A C99 compound literal for an int array argument; an empty one holds a 0, since C99 has no
    empty initializer (a kernel given no entries reads none: a GatherND of no rows).

    >>> c_ints((2, 3)), c_ints(())
    ('(const int[]){2, 3}', '(const int[]){0}')
    """
    entries = [c_batch(v) for v in values] or ["0"]  # entries may change with the batch
    return "(const int[]){" + ", ".join(entries) + "}"


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
        f" + {c_int(value.b)}" if value.b > 0 else f" - {c_int(-value.b)}" if value.b else ""
    )
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
    return ",\n    ".join(", ".join(items[i : i + per_line]) for i in range(0, len(items), per_line))


def c_bytes(data: bytes) -> str:
    """Bytes as a uint8_t initializer list.

    >>> c_bytes(b'a*/')
    '0x61, 0x2a, 0x2f'
    """
    return c_array(list(data), per_line=16, fmt=lambda b: f"0x{b:02x}")


# How each byte is spelled inside a C string literal: a character of C99's basic source character set
# as itself, except the quote, the backslash and the question mark (so no trigraph can form); those
# three and the control characters that have one take their two-character escape; every other byte a
# three-digit octal escape (never shorter: a digit after it would join it). gcc's time goes by the
# escapes it interprets more than by the characters it reads. Each spelling is NUL-padded to 4 bytes
# and read as a uint32, so numpy spells a whole line at once and translate drops the padding.
_ESCAPES = {
    7: b"\\a",
    8: b"\\b",
    9: b"\\t",
    10: b"\\n",
    11: b"\\v",
    12: b"\\f",
    13: b"\\r",
    34: b'\\"',
    63: b"\\?",
    92: b"\\\\",
}
_BASIC = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789 !#%&'()*+,-./:;<=>[]^_{|}~")
_SPELLING = np.array(
    [_ESCAPES.get(b) or (bytes([b]) if b in _BASIC else b"\\%03o" % b) for b in range(256)], "S4"
).view(np.uint32)


def c_float_bytes(values, per_line: int = 4096) -> str:
    r"""float32 values as one C string literal of their little-endian bytes, `per_line` bytes a line
    (lines joined by backslash-newline). A compiler reads this several times faster than as many
    float literals (gcc: 3 s for 11 M floats, not 45), and every value keeps its bits.

    >>> c_float_bytes([1.0, -2.5, 12.0])
    '"\\000\\000\\200\\?\\000\\000 \\300\\000\\000\\100A"'
    >>> print(c_float_bytes([0.0, 2.0, -0.0], per_line=8))
    "\000\000\000\000\000\000\000\100\
    \000\000\000\200"
    >>> c_float_bytes([])
    '""'
    """
    data = np.ascontiguousarray(values, "<f4").reshape(-1).view(np.uint8)
    lines = [_SPELLING[data[i : i + per_line]].tobytes().translate(None, b"\0") for i in range(0, data.size, per_line)]
    return str(b"".join((b'"', b"\\\n".join(lines), b'"')), "ascii")


_UNSAFE = re.compile(r"[^A-Za-z0-9_.:()\[\], -]")


def c_comment(text: str, limit: int = 60) -> str:
    """Model text made safe inside /* */: only plain characters survive, so no comment terminator,
    line break, trigraph or directive can form.

    >>> c_comment('x */ #include "evil.h"\\n// y')
    'x __ _include _evil.h____ y'
    """
    text = _UNSAFE.sub("_", str(text))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def c_ident(text: str) -> str:
    """A C identifier made from generated text (prefixes), refusing anything else.

    >>> c_ident('my_model')
    'my_model'
    """
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,40}", text):
        raise ValueError(f"{text!r} is not a C identifier")
    return text


FILTERS = {
    f.__name__: f for f in (c_float, c_int, c_ints, c_batch, c_array, c_bytes, c_float_bytes, c_comment, c_ident)
}
