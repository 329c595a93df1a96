import doctest
import struct

import numpy as np
import pytest

from edgetrain.codegen import filters


def test_filter_doctests():
    result = doctest.testmod(filters)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("value", [0.1, -1e-30, 3.4e38, 1e-45, 123.456, -0.0, 1.0])
def test_float_literal_is_exact(value):
    """The hex literal, read back as C would, is the same float32 bit pattern."""
    literal = filters.c_float(value)
    parsed = np.float32(float.fromhex(literal.rstrip("f")))
    assert struct.pack("<f", parsed) == struct.pack("<f", np.float32(value))


@pytest.mark.parametrize("hostile", ["*/ int x; /*", "a\nb", "#include <stdio.h>", '"); system("rm', "??/", "é" * 5000])
def test_comment_filter_neutralizes_model_text(hostile):
    text = filters.c_comment(hostile)
    assert "*/" not in text and "\n" not in text and "#" not in text and '"' not in text and "?" not in text
    assert len(text) <= 60


def test_identifier_filter_refuses_non_identifiers():
    with pytest.raises(ValueError):
        filters.c_ident("a b")
