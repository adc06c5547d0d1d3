"""KV-cache sizing per scheme against hand counts of Llama-3-8B's tensors."""

from __future__ import annotations

import pytest

from tenet_byoc.models.configs import resolve_config
from tenet_byoc.models.footprint import kv_bytes_per_token
from tenet_byoc.serving import cache_sizing, weight_bytes

# Llama-3-8B (config.json): 32 layers, hidden 4096, 32 heads, 8 KV heads of 128, MLP 14336,
# vocabulary 128256, untied embeddings.
L, H, KV, D, F, V = 32, 4096, 8, 128, 14336, 128256
LINEAR = L * (2 * H * H + 2 * H * KV * D + 3 * H * F) + H * V  # q, o, k, v, MLP; lm_head


@pytest.fixture(scope="module")
def llama():
    return resolve_config("llama-3-8b")


def test_kv_bytes_per_token(llama):
    # fp16: K and V of 32 layers x 8 heads x 128 = 128 KiB a token.
    assert kv_bytes_per_token(llama, "q0f16+kv16") == 2 * L * KV * D * 2 == 131072
    assert kv_bytes_per_token(llama, "none") == 2 * 131072  # float32 cache
    # int4 per token: half a byte per code, one fp16 scale per token, layer and K / V.
    assert kv_bytes_per_token(llama, "w4a16_group128+kv4") == L * KV * D + 2 * L * 2
    assert kv_bytes_per_token(llama, "w4a16_group128+kv8/group32") == \
        2 * L * KV * D + 2 * L * KV * (D // 32) * 2


def test_weight_bytes(llama):
    # 8.03 B parameters less the norms; fp16 codes, the embedding table at fp16.
    assert LINEAR + V * H == pytest.approx(8.03e9, rel=0.001)
    assert weight_bytes(llama, "q0f16") == 2 * (LINEAR + V * H)
    # int4 with an fp16 scale per 128 weights of a column (every K here divides by 128).
    assert weight_bytes(llama, "w4a16_group128") == LINEAR / 2 + LINEAR / 128 * 2 + 2 * V * H
    # int8 per channel: a scale per output channel.
    channels = L * (H + 2 * KV * D + H + 2 * F + H) + V
    assert weight_bytes(llama, "w8a8_per_channel_per_token") == LINEAR + 2 * channels + 2 * V * H


def test_cache_sizing(llama):
    s = cache_sizing(llama, "q0f16+kv16", 80e9, block_size=16, utilization=0.9)
    left = 72e9 - 2 * (LINEAR + V * H)
    assert s.blocks == int(left // (16 * 131072))
    with pytest.raises(ValueError, match="no room for one KV block"):
        cache_sizing(llama, "none", 16e9)


def test_a_tied_head_is_the_embedding_table_unless_quantized():
    # GPT-2 small (tied): 12 layers of c_attn 768x2304, c_proj 768x768, c_fc and its
    # projection 768x3072; vocabulary 50,257. The head reads the embedding table, so a float
    # scheme holds that table once; int4 weights add a quantized copy of the head beside it.
    gpt2 = resolve_config("gpt2")
    layers = 12 * (768 * 2304 + 768 * 768 + 2 * 768 * 3072)
    table = 50257 * 768
    assert weight_bytes(gpt2, "none") == 4 * (layers + table)
    assert weight_bytes(gpt2, "q0f16") == 2 * (layers + table)
    head_int4 = table / 2 + table / 128 * 2  # 768 divides by 128
    assert weight_bytes(gpt2, "w4a16_group128") == layers / 2 + layers / 128 * 2 + head_int4 \
        + 2 * table
