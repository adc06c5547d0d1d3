"""A built-in model's real shapes (Qwen2.5-0.5B: 7 query heads per key/value head, a tied
151936-token head) with seeded random weights, offloaded, against the numpy forward."""

from __future__ import annotations

import numpy as np
import pytest
from llama_testing import numpy_llama_logits

import tenet_byoc
from tenet_byoc.models.configs import BUILTIN, resolve_config
from tenet_byoc.models.gemms import model_gemms
from tenet_byoc.models.llama import LlamaRunner, random_params


@pytest.mark.slow
def test_qwen2_5_0_5b_shapes_match_numpy():
    config = resolve_config("qwen2.5-0.5b")
    params = random_params(config, seed=0, std=0.05)
    runner = LlamaRunner(config, params, build=tenet_byoc.build)
    prompt = [151643, 40, 1079, 264, 9219]
    hf = {"model." + k: v for k, v in params.items()}
    expected = numpy_llama_logits(hf, dict(BUILTIN["qwen2.5-0.5b"].values), prompt)
    del hf
    assert np.abs(expected).max() > 0.1
    logits, cache = runner.prefill(prompt[:-1])
    step, cache = runner.decode(prompt[-1], cache)
    np.testing.assert_allclose(logits, expected[:-1], rtol=0, atol=1e-3)
    np.testing.assert_allclose(step, expected[-1], rtol=0, atol=1e-3)
    assert cache.tensors[0].shape == (1, 2, 5, 64)
    entries = tenet_byoc.ledger(runner.vm).entries
    gemms = model_gemms(config, "prefill", 4) + model_gemms(config, "decode", 4)
    assert [(e.batch, e.m, e.n, e.k) for e in entries] == [(g.batch, g.m, g.n, g.k) for g in gemms]
