"""Bytes per chip (weights at stored widths, KV cache, activations) against hand-derived counts."""

from __future__ import annotations

import pytest

from tenet_byoc.models.configs import resolve_config
from tenet_byoc.models.footprint import footprint

GB = 1e9


def _llama_gemm_elements(d, layers, kv, inner, vocab):
    # q and o [d, d], k and v [kv * 128, d], gate, up, down [inner, d]; the head [vocab, d].
    return layers * (2 * d * d + 2 * kv * 128 * d + 3 * inner * d), vocab * d


def test_llama_3_70b_in_float32_does_not_fit_16_gb_but_fits_80_gb_chips_at_tp_8():
    layers, d, vocab = 80, 8192, 128256
    body, head = _llama_gemm_elements(d, layers, 8, 28672, vocab)
    norms = (2 * layers + 1) * d
    want = 4 * (body + head + vocab * d + norms)  # float32, untied head
    one = footprint("llama-3-70b", "none")
    assert one.weights == want
    assert round(one.weights / GB) == 282
    assert not one.fits(16 * GB)
    assert "282.2 GB" in one.shortfall(16 * GB) and "16.0 GB of DRAM" in one.shortfall(16 * GB)
    eight = footprint("llama-3-70b", "none", tp=8)
    assert eight.weights == pytest.approx(4 * ((body + head + vocab * d) / 8 + norms))
    assert eight.fits(80 * GB) and eight.shortfall(80 * GB) == ""
    assert not eight.fits(32 * GB)


def test_stored_widths_with_scales_and_zero_points():
    layers, d, vocab = 32, 4096, 128256
    body, head = _llama_gemm_elements(d, layers, 8, 14336, vocab)
    gemm = body + head
    rest = 4 * (vocab * d + (2 * layers + 1) * d)  # float32 embeddings and norms
    # int4, one fp16 scale per 128 input channels of each row (every K divides by 128).
    got = footprint("llama-3-8b", "w4a16_group128").weights
    assert got == rest + gemm // 2 + gemm // 128 * 2
    # AWQ-style uint4: a 4-bit zero point beside each scale.
    got = footprint("llama-3-8b", "q4f16_awq").weights
    assert got == rest + gemm // 2 + gemm // 128 * 2 + gemm // 128 // 2
    # int8 per output channel: one fp16 scale a row.
    rows = layers * (2 * d + 2 * 1024 + 2 * 14336 + d) + vocab
    got = footprint("llama-3-8b", "w8a8_per_channel_per_token").weights
    assert got == rest + gemm + rows * 2


def test_kv_cache_per_sequence():
    # Llama-3-8B: 2 x 32 layers x 8 heads x 128 = 65,536 values a token; float32 2 GiB at 8k.
    f = footprint("llama-3-8b", "none", sequences=3, context=8192)
    assert f.kv_cache == 3 * 2**31
    # DeepSeek-V3's latent cache: 512 + 64 values a token and layer, for all 128 heads.
    f = footprint("deepseek-v3", "none", sequences=2, context=1000)
    assert f.kv_cache == 2 * 1000 * 61 * 576 * 4
    # Grouped-query heads split over chips; 8 key/value heads on 16 chips are replicated.
    assert footprint("llama-3-8b", context=100, tp=4).kv_cache == 100 * 65536 // 4 * 4
    assert footprint("llama-3-8b", context=100, tp=16).kv_cache == 100 * 65536 // 8 * 4


def test_activations_peak_is_the_widest_layer_step():
    c = resolve_config("llama-3-8b")
    # A 512-token prefill: the logits (512 x 128256) are wider than the MLP's gate, up and
    # product (3 x 512 x 14336) and the 32 heads' scores and probabilities (2 x 32 x 512^2).
    f = footprint(c, "none", sequences=1, context=0, step_tokens=512)
    assert 512 * 128256 > 3 * 512 * 14336 > 2 * 32 * 512 * 512
    assert footprint(c, "none", context=3584, step_tokens=512).activations == 4 * (
        2 * 512 * 4096 + 2 * 32 * 512 * 4096)  # 4,096 keys: now the scores are widest
    assert f.activations == 4 * (2 * 512 * 4096 + 512 * 128256)
    # A decode step of 4 sequences at 16-bit activations: the logits.
    f = footprint(c, "w4a16_group128", sequences=4, context=100)
    assert f.activations == 2 * (2 * 4 * 4096 + 4 * 128256)


def test_gpt2_counts_its_124_million_weights():
    assert footprint("gpt2").weights == 4 * 124_439_808  # Hugging Face's published count


@pytest.mark.parametrize("kwargs,message", [
    ({"tp": 0}, r"tp=0 must be an integer >= 1"),
    ({"context": 10**6}, r"context=1000000 is longer than the model's 8192"),
    ({"sequences": -1}, r"sequences=-1"),
    ({"pp": 99}, r"pp=99 exceeds the 32 layers"),
    ({"scheme": "w3"}, r"w3"),
])
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        footprint("llama-3-8b", **kwargs)


def test_one_weight_count_in_both_conventions_pads_k_by_hand():
    # GPT-2 small under int4 weights in groups of 512: K = 768 is padded to 1024 (as
    # quantize pads it), 3072 is a multiple. c_attn [2304, 768], attn c_proj [768, 768],
    # c_fc [3072, 768], mlp c_proj [768, 3072]; the tied head gets a quantized copy
    # [50257, 768 -> 1024] beside the table. Relax holds the table and the rest of the
    # 124,439,808 weights (norms, biases, positions) in float32; an engine the table at 16
    # bits and nothing else.
    from tenet_byoc.models.footprint import weight_bytes

    scheme = "w=int4/group512,a=f16"
    rows_k = [(2304, 1024), (768, 1024), (3072, 1024), (768, 3072)]
    codes = 12 * sum(r * k for r, k in rows_k) * 4 + 50257 * 1024 * 4
    scales = (12 * sum(r * k // 512 for r, k in rows_k) + 50257 * 2) * 16
    table = 50257 * 768
    gemms = 12 * (2304 * 768 + 768 * 768 + 2 * 3072 * 768)
    rest = 124_439_808 - gemms - table
    assert footprint("gpt2", scheme).weights == (codes + scales) / 8 + 4 * (table + rest)
    assert weight_bytes(resolve_config("gpt2"), scheme, engine=True) == \
        (codes + scales) / 8 + 2 * table
