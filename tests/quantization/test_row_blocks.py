"""Weights quantized a block of rows at a time equal the whole weight quantized at once
(the reference), and a refusal still names indices in the whole weight."""

from __future__ import annotations

import numpy as np
import pytest

from tenet_byoc.quantization import get_scheme, numerics, quantize_weight, weight_codes
from tenet_byoc.quantization.rewrite import _by_row_blocks

SCHEMES = ["w8a8_per_tensor", "w8a8_per_channel_per_token", "w8a16_per_channel",
           "w4a16_group32", "w4a16_group64", "q4f16_1", "w4a8", "mxint8", "mxfp4"]


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(numerics, "_BLOCK_ELEMENTS", 1000)  # a 333 x 64 weight: 21 blocks


@pytest.mark.parametrize("name", SCHEMES)
def test_blocks_equal_whole_weight(name, small_blocks):
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((333, 64)) * 0.1).astype(np.float32)
    w[5] = 0  # an all-zero row keeps scale 1
    s = get_scheme(name)
    whole = quantize_weight if s.weight_format == "int" and s.weight_bits == 8 else weight_codes
    expected = whole(w, s)
    got = _by_row_blocks(w, s, lambda rows: whole(rows, s))
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)


def test_refusal_names_whole_weight_indices(small_blocks):
    w = np.ones((333, 64), np.float32)
    w[200, 7] = np.nan
    s = get_scheme("w4a16_group32")
    with pytest.raises(ValueError, match=r"first nan at \[200, 7\]"):
        _by_row_blocks(w, s, lambda rows: weight_codes(rows, s, "W"))
