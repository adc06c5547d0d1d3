"""Scaled rotary embeddings (Llama 3.1's ``llama3``, YaRN, linear, dynamic) against transformers.

The frequencies of real configs are compared with transformers' own RoPE functions, and tiny
checkpoints with each scaling, made and saved by transformers, run through tenet with
logits equal to transformers' within 1e-4 (prompts longer than the original context, so the
scaled frequencies decide the result).
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from llama_testing import TINY_LLAMA

import tenet_byoc
from tenet_byoc.models import from_pretrained
from tenet_byoc.models.configs import BUILTIN, config_from_dict, resolve_config

pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("torch", "transformers")),
    reason="torch and transformers are not installed",
)

ATOL = 1e-4
PROMPT = [3, 17, 0, 88, 42, 42, 8, 63, 1, 70, 5, 9, 33, 2]
# Each scaling with an original context of 8 tokens, shorter than the prompt.
SCALINGS = {
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8,
             "beta_fast": 8.0, "beta_slow": 1.0},
    "yarn-mscale": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8,
                    "mscale": 0.707, "mscale_all_dim": 1.0},
    "linear": {"rope_type": "linear", "factor": 3.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
}


def _tiny(name: str) -> dict:
    return {**TINY_LLAMA, "rope_parameters": {"rope_theta": 10000.0, **SCALINGS[name]}}


def _hf_inv_freq(cfg: dict):
    import transformers
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    values = {k: v for k, v in cfg.items() if k not in ("model_type", "architectures")}
    config = transformers.LlamaConfig(**values)
    kind = config.rope_parameters["rope_type"]
    inv_freq, scale = ROPE_INIT_FUNCTIONS[kind](config, "cpu")
    return inv_freq.double().numpy(), scale


@pytest.mark.parametrize("name", sorted(SCALINGS))
def test_tiny_frequencies_equal_transformers(name):
    config = config_from_dict(_tiny(name))
    want, scale = _hf_inv_freq(_tiny(name))
    got = config.rope_scaling.inv_freq(config.dim_per_head, config.rope_theta)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert config.rope_scaling.attention_scale() == pytest.approx(scale, rel=1e-12)


def test_llama_3_1_8b_frequencies_equal_transformers():
    config = resolve_config("llama-3.1-8b")
    values = dict(BUILTIN["llama-3.1-8b"].values)
    want, scale = _hf_inv_freq(values)
    got = config.rope_scaling.inv_freq(config.dim_per_head, config.rope_theta)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert scale == 1.0 == config.rope_scaling.attention_scale()
    # Meta's rule: the longest wavelengths (above 8192 positions) are 8x longer.
    plain = 1 / 500000.0 ** (np.arange(0, 128, 2) / 128)
    long = 2 * np.pi / plain > 8192
    assert long.sum() > 10
    np.testing.assert_allclose(got[long], plain[long] / 8, rtol=1e-12)
    np.testing.assert_allclose(got[:10], plain[:10], rtol=1e-12)  # the shortest kept


def _model(cfg: dict):
    import torch
    import transformers

    values = {k: v for k, v in cfg.items() if k not in ("model_type", "architectures")}
    model = transformers.LlamaForCausalLM(
        transformers.LlamaConfig(**values, attn_implementation="eager"))
    torch.manual_seed(0)
    with torch.no_grad():  # weights large enough that every one shows in the logits
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.copy_(1 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * p.shape[1] ** -0.5)
    return model.eval()


@pytest.mark.parametrize("name", ["llama3", pytest.param("yarn-mscale", marks=pytest.mark.slow),
                                  pytest.param("yarn", marks=pytest.mark.slow),
                                  pytest.param("linear", marks=pytest.mark.slow),
                                  pytest.param("dynamic", marks=pytest.mark.slow)])
def test_scaled_rope_checkpoint_matches_transformers(name, tmp_path):
    import torch

    model = _model(_tiny(name))
    model.save_pretrained(tmp_path)
    runner = from_pretrained(tmp_path, build=tenet_byoc.build)
    assert runner.config.rope_scaling.rope_type == name.split("-")[0]
    with torch.no_grad():
        out = model(torch.tensor([PROMPT[:-1]]), use_cache=True)
        step = model(torch.tensor([PROMPT[-1:]]), past_key_values=out.past_key_values,
                     use_cache=True)
    want_prefill, want_step = out.logits[0].numpy(), step.logits[0, -1].numpy()
    # The scaling matters, but for dynamic NTK, which inside the context is plain RoPE.
    plain = _model({**TINY_LLAMA, "rope_parameters": {"rope_type": "default",
                                                       "rope_theta": 10000.0}})
    with torch.no_grad():
        unscaled = plain(torch.tensor([PROMPT[:-1]])).logits[0].numpy()
    differs = np.abs(unscaled - want_prefill).max() > 1e-2
    assert differs == (name != "dynamic")
    logits, cache = runner.prefill(PROMPT[:-1])
    logits_step, _ = runner.decode(PROMPT[-1], cache)
    np.testing.assert_allclose(logits, want_prefill, rtol=0, atol=ATOL)
    np.testing.assert_allclose(logits_step, want_step, rtol=0, atol=ATOL)
