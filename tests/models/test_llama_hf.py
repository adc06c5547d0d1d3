"""Tiny models built by Hugging Face transformers, saved with save_pretrained, against its logits.

Each model is built with seeded weights, written with ``save_pretrained`` (one file, sharded,
or bfloat16), loaded through ``from_pretrained`` and run offloaded to tenet; prefill and
decode logits must match transformers' within 1e-4. Skipped where torch or transformers
is absent (the numpy reference in test_llama_numerics.py still runs there).
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from llama_testing import TINY_LLAMA, TINY_MISTRAL, TINY_QWEN2

import tenet_byoc
from tenet_byoc.models import from_pretrained
from tenet_byoc.models.checkpoint import Checkpoint

pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("torch", "transformers")),
    reason="torch and transformers are not installed",
)

ATOL = 1e-4
PROMPT = [3, 17, 0, 88, 42, 42, 8, 63, 1, 70]
# (config, how it is saved): GQA Llama in one file, sharded, in bfloat16; Qwen2 (biases,
# tied); Mistral (a sliding window, a head_dim that is not hidden_size / heads).
CASES = {
    "llama": (TINY_LLAMA, {}),
    "llama-sharded": (TINY_LLAMA, {"max_shard_size": "40KB"}),
    "llama-bf16": (TINY_LLAMA, {"bf16": True}),
    "qwen2-tied": (TINY_QWEN2, {}),
    "mistral-head-dim": (TINY_MISTRAL, {}),
}


def _hf_model(cfg: dict, seed: int = 0):
    import torch
    import transformers

    values = {k: v for k, v in cfg.items() if k not in ("model_type", "architectures")}
    kind = {"llama": "Llama", "qwen2": "Qwen2", "mistral": "Mistral"}[cfg["model_type"]]
    config = getattr(transformers, kind + "Config")(**values, attn_implementation="eager")
    torch.manual_seed(seed)
    model = getattr(transformers, kind + "ForCausalLM")(config).eval()
    with torch.no_grad():  # weights large enough that every one shows in the logits
        for name, p in model.named_parameters():
            if p.ndim == 1 and "norm" in name:
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif p.ndim == 1:
                p.copy_(0.3 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * p.shape[1] ** -0.5)
    return model


def _hf_logits(model, ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """transformers' prefill logits of ``ids[:-1]`` and its cached decode step for ``ids[-1]``."""
    import torch

    with torch.no_grad():
        out = model(torch.tensor([ids[:-1]]), use_cache=True)
        step = model(torch.tensor([ids[-1:]]), past_key_values=out.past_key_values, use_cache=True)
    return out.logits[0].float().numpy(), step.logits[0, -1].float().numpy()


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request, tmp_path_factory):
    """``(transformers model in float32, our offloaded runner of its saved checkpoint)``."""
    import torch

    cfg, how = CASES[request.param]
    model = _hf_model(cfg)
    folder = tmp_path_factory.mktemp(request.param)
    if how.get("bf16"):
        model.to(torch.bfloat16).save_pretrained(folder)
        # The reference: transformers' own float32 load of the stored bf16 weights (a
        # model cast back with .float() would keep bf16-rounded rotary frequencies).
        model = type(model).from_pretrained(folder, dtype=torch.float32,
                                            attn_implementation="eager").eval()
    else:
        model.save_pretrained(folder, **how)
    sharded = (folder / "model.safetensors.index.json").exists()
    assert sharded == ("max_shard_size" in how)
    dtypes = {t.dtype for t in Checkpoint(folder).tensors.values()}
    assert dtypes == ({"BF16"} if how.get("bf16") else {"F32"})
    return model, from_pretrained(folder, build=tenet_byoc.build)


def test_prefill_and_decode_match_transformers(case):
    model, runner = case
    want_prefill, want_step = _hf_logits(model, PROMPT)
    assert np.abs(want_prefill).max() > 1.0  # not a comparison of near-zeros
    logits, cache = runner.prefill(PROMPT[:-1])
    step, cache = runner.decode(PROMPT[-1], cache)
    np.testing.assert_allclose(logits, want_prefill, rtol=0, atol=ATOL)
    np.testing.assert_allclose(step, want_step, rtol=0, atol=ATOL)
    assert cache.length == len(PROMPT)
    assert len(tenet_byoc.ledger(runner.vm).entries) > 0  # the matmuls ran on tenet


def test_greedy_generation_matches_transformers(case):
    import torch

    model, runner = case
    with torch.no_grad():
        ids = torch.tensor([PROMPT[:4]])  # holds id 0: an explicit mask keeps it unpadded
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6,
                             do_sample=False, pad_token_id=0)
    assert runner.generate(PROMPT[:4], 6) == out[0, 4:].tolist()


def test_sliding_window_beyond_the_window_matches_transformers(tmp_path):
    import torch

    model = _hf_model(TINY_MISTRAL, seed=1)
    model.save_pretrained(tmp_path)
    runner = from_pretrained(tmp_path, build=tenet_byoc.build)
    ids = [(11 * i + 4) % TINY_MISTRAL["vocab_size"] for i in range(30)]
    with torch.no_grad():  # the whole sequence at once: window 16 of 30 tokens
        want = model(torch.tensor([ids])).logits[0].numpy()
    logits, cache = runner.prefill(ids[:20])
    np.testing.assert_allclose(logits, want[:20], rtol=0, atol=ATOL)
    for pos in range(20, 30):
        step, cache = runner.decode(ids[pos], cache)
        np.testing.assert_allclose(step, want[pos], rtol=0, atol=ATOL)
    assert cache.tensors[0].shape[2] == 16  # the rolling cache keeps the window
