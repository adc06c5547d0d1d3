"""from_pretrained picks the family from config.json: GPT-2 here (Llama in test_llama_*.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from gpt2_testing import TINY_HF_CONFIG, numpy_gpt2_logits

from tenet_byoc.models import from_pretrained
from tenet_byoc.models.gpt2 import GPT2Runner


def test_gpt2_checkpoint_gives_a_gpt2_runner(tiny_checkpoint, tiny_hf_weights):
    runner = from_pretrained(tiny_checkpoint)
    assert isinstance(runner, GPT2Runner) and runner.config.n_layer == 2
    prompt = [5, 17, 0, 96]
    logits, cache = runner.prefill(prompt[:-1])
    step, _ = runner.decode(prompt[-1], cache)
    expected = numpy_gpt2_logits(tiny_hf_weights, TINY_HF_CONFIG, prompt)
    np.testing.assert_allclose(logits, expected[:-1], rtol=0, atol=1e-4)
    np.testing.assert_allclose(step, expected[-1], rtol=0, atol=1e-4)


def test_missing_model_type_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"n_layer": 2}))
    with pytest.raises(ValueError, match=r"config.json': model_type=None is not supported; known"):
        from_pretrained(tmp_path)
