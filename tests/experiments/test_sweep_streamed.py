"""The sweep's GPT-2 case quantizes each scheme from weights drawn again, not from a kept
float32 module; the modules and the sweep's rows must be what the kept module gives.

References: quantize() of a freshly exported float32 module with random_params' weights
(the usual way in), and a sweep of a case whose float32 module is exported and kept (its
schemes quantized from it).
"""

from __future__ import annotations

from dataclasses import asdict

import pytest
import tvm

from tenet_byoc.experiments.cases import gpt2_case
from tenet_byoc.experiments.sweep import sweep
from tenet_byoc.models.gpt2 import GPT2Config, export_gpt2, random_params
from tenet_byoc.quantization import CLASSIC_SCHEMES, quantize

TINY = GPT2Config.preset("tiny")
TIMINGS = ("build_s", "wall_s")


@pytest.mark.parametrize("float_first", [True, False])
def test_each_scheme_equals_quantizing_a_fresh_float_module(float_first):
    case = gpt2_case("tiny", prompt_len=4, context_len=4, seed=2)
    fresh = export_gpt2(TINY, random_params(TINY, seed=2))
    schemes = list(CLASSIC_SCHEMES) if float_first else list(reversed(CLASSIC_SCHEMES))
    for scheme in schemes:
        tvm.ir.assert_structural_equal(case.quantized(scheme), quantize(fresh, scheme))
    assert case._module is None  # the sweep's way keeps no float32 module


def test_sweep_rows_equal_those_of_a_kept_float_module():
    schemes = ["none", "w8a8_per_tensor", "w4a16_group32"]
    streamed = gpt2_case("tiny", prompt_len=6, context_len=6)
    kept = gpt2_case("tiny", prompt_len=6, context_len=6)
    kept.module()  # exported and kept: every scheme is quantized from it
    got = sweep([streamed], schemes, ["os16"], progress=False)
    want = sweep([kept], schemes, ["os16"], progress=False)

    def values(items):
        return [{k: v for k, v in asdict(i).items() if k not in TIMINGS} for i in items]

    assert len(got.rows) == 2 * len(schemes)
    assert values(got.rows) == values(want.rows)
    assert values(got.layers) == values(want.layers)
