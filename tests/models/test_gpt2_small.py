"""GPT-2 small (124M shapes, random weights) through TVM's own build, against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from gpt2_testing import numpy_gpt2_logits, to_hf_layout

from tenet_byoc.models.gpt2 import GPT2Config, GPT2Runner, random_params


@pytest.mark.slow
def test_gpt2_small_prefill_and_decode_match_numpy():
    config = GPT2Config.preset("small")
    params = random_params(config, seed=0)
    runner = GPT2Runner(config, params)
    prompt = [50256, 464, 2068, 7586, 21831]
    hf_cfg = {"n_layer": 12, "n_head": 12, "layer_norm_epsilon": 1e-5}
    expected = numpy_gpt2_logits(to_hf_layout(params), hf_cfg, prompt)
    assert np.abs(expected).max() > 0.1  # not a comparison of near-zeros
    logits, cache = runner.prefill(prompt[:-1])
    np.testing.assert_allclose(logits, expected[:-1], rtol=0, atol=1e-4)
    step, cache = runner.decode(prompt[-1], cache)
    np.testing.assert_allclose(step, expected[-1], rtol=0, atol=1e-4)
    assert cache.length == 5 and cache.tensors[0].shape == (1, 12, 5, 64)
