"""estimate()'s MACs against counts derived by hand from the published configs, and the
phases, lengths and batch it is asked for."""

from __future__ import annotations

import pytest

import tenet_byoc


def llama_3_70b_macs(prompt: int, context: int, steps: int, batch: int) -> tuple[int, int]:
    """Prefill and decode MACs of Llama-3-70B, from its config.json written out by hand.

    d = 8192, 80 layers, 64 query heads and 8 key/value heads of 128 (GQA), SwiGLU MLP of
    28672, untied head over 128256 tokens. Per token and layer: q and o projections
    d x d each, k and v d x (8 x 128) each, gate, up and down d x 28672 each. Attention of
    one query row over n keys: 64 heads x (n x 128 for Q K^T + n x 128 for P V).
    """
    d, layers, heads, hd, ffn, vocab = 8192, 80, 64, 128, 28672, 128256
    linear = 2 * d * d + 2 * d * (8 * hd) + 3 * d * ffn
    prefill = layers * (prompt * linear + 2 * heads * hd * prompt * prompt) + prompt * d * vocab
    decode = 0
    for i in range(steps):
        keys = context + i + 1
        decode += layers * (linear + 2 * heads * hd * keys) + d * vocab
    return batch * prefill, batch * decode


@pytest.mark.parametrize("batch", [1, 3])
def test_llama_3_70b_macs_equal_the_hand_count(batch):
    # The benchmark's case (2048-token prompt, 128 decode steps), on a smaller array so the
    # per-call figures differ from the benchmark's; its time is reported there, not here.
    ledger = tenet_byoc.estimate("llama-3-70b", "q4f16_1", "os16", prompt_len=2048,
                                 decode_steps=128, batch=batch)
    prefill, decode = llama_3_70b_macs(2048, 2048, 128, batch)
    phases = ledger.group_by("phase")
    assert (phases["prefill"].macs, phases["decode"].macs) == (prefill, decode)
    gemms = [e for e in ledger if e.unit == "array"]  # vector entries beside them
    assert sum(e.phase == "prefill" for e in gemms) == 80 * 9 + 1
    assert sum(e.phase == "decode" for e in gemms) == 128 * (80 * 9 + 1)
    assert prefill / batch == pytest.approx(2 * 70.6e9 * 2048 / 2, rel=0.1)  # ~params x tokens


def test_gpt2_small_macs_and_keys_follow_context_len():
    # d = 768, 12 layers of 12 heads, MLP 3072, tied head over 50257 tokens.
    d, layers, vocab = 768, 12, 50257
    linear = 3 * d * d + d * d + 2 * d * 4 * d
    ledger = tenet_byoc.estimate("gpt2", "none", "os16", prompt_len=0, context_len=100,
                                 decode_steps=3)
    assert {e.phase for e in ledger} == {"decode"}
    want = sum(layers * (linear + 2 * d * (100 + i + 1)) + d * vocab for i in range(3))
    assert ledger.totals().macs == want
    keys = [e.n for e in ledger if e.name.endswith("attn.qk")]
    assert keys == [101] * 12 + [102] * 12 + [103] * 12


def test_prefill_only_and_default_context():
    ledger = tenet_byoc.estimate("qwen2.5-0.5b", "per_token", "os16", prompt_len=9,
                                 decode_steps=0)
    assert {e.phase for e in ledger} == {"prefill"}
    assert sum(e.unit == "array" for e in ledger) == 24 * 9 + 1
    ledger = tenet_byoc.estimate("qwen2.5-0.5b", prompt_len=9, decode_steps=1)
    qk = [e for e in ledger if e.phase == "decode" and e.name.endswith("attn.qk")]
    # Qwen2.5-0.5B: 14 query heads share 2 key/value heads; a decode row per query head.
    assert {(e.batch, e.m, e.n, e.k) for e in qk} == {(2, 7, 10, 64)}


@pytest.mark.parametrize("accelerator", ["os16", "h200"])
def test_fused_attention_macs_by_hand(accelerator):
    # Tiny Llama: d = 64, 2 layers, 4 query heads and 2 KV heads of 16, SwiGLU of 96, untied
    # head over 101 tokens; 2 prompts of 6, then 2 decode steps. A fused kernel does
    # 2 x B x H x (query, key) pairs x D MACs: a prefill of S with no cache has
    # S x S - S(S-1)/2 causal pairs per head (the upper triangle skipped), a decode over n
    # keys n. The unfused plan's Q K^T and P V do all S x S; everything else is alike, so the
    # fused ledger is the unfused one less the triangle's products. h200 (132 cores) counts
    # each call's own MACs as os16 (one) does.
    from llama_testing import TINY_LLAMA

    from tenet_byoc.models.llama import LlamaConfig

    config = LlamaConfig.from_hf_dict(TINY_LLAMA, name="tiny-llama")
    d, layers, heads, kv, hd, ffn, vocab = 64, 2, 4, 2, 16, 96, 101
    b, s, steps = 2, 6, 2
    fused, unfused = (tenet_byoc.estimate(config, "none", accelerator, prompt_len=s,
                                          decode_steps=steps, batch=b, attention=a)
                      for a in ("fused", "unfused"))
    pairs = s * s - s * (s - 1) // 2
    per_kernel = [2 * b * heads * pairs * hd] * layers + [
        2 * b * heads * (s + i + 1) * hd for i in range(steps) for _ in range(layers)]
    assert [e.macs for e in fused if e.unit == "attention"] == per_kernel
    linear = 2 * d * d + 2 * d * (kv * hd) + 3 * d * ffn
    tokens = b * (s + steps)
    others = tokens * (layers * linear + d * vocab)
    full = layers * 2 * b * heads * hd * (s * s + sum(s + i + 1 for i in range(steps)))
    triangle = layers * 2 * b * heads * hd * s * (s - 1) // 2
    assert unfused.totals().macs == others + full
    assert fused.totals().macs == others + sum(per_kernel) == others + full - triangle
    assert fused.totals().macs == unfused.totals().macs - triangle
