"""A decode step's attention on the GPU presets against the KV-stream bound: reading the cache once at the data sheet's HBM bandwidth.

Llama-3-8B keeps 32 layers x 8 KV heads x 128 channels of keys and values, 2 bytes each in
an fp16 cache (``+kv16``): 131,072 bytes a token. A decode after ``L`` tokens reads ``L + 1``
tokens' keys and values (its own included). Bandwidths from NVIDIA's data sheets: H100 SXM
3.35 TB/s (HBM3), A100 80 GB SXM 2.039 TB/s (HBM2e). The charge may not go below the bound
(the roofline) and, its GEMMs being tiny (4 query rows a KV head), should stay near it: the
one-array h100_sxm of an earlier preset charged 16x the bound (array fills of 4-row GEMMs).
The attention here is the unfused plan's (the GPU presets run it fused by default: one
cuDNN-like kernel per KV head at batch 1, which the H200 measured at ~6x this bound,
``benchmarks/silicon/h200_ops.py``).
"""

from __future__ import annotations

import pytest

from tenet_byoc.serving.cost import model_step_cost

KV_BYTES_PER_TOKEN = 2 * 32 * 8 * 128 * 2


@pytest.mark.parametrize("preset, bandwidth", [("h100_sxm", 3.35e12), ("a100", 2.039e12)])
def test_decode_attention_near_the_kv_stream(preset, bandwidth):
    cost = model_step_cost("llama-3-8b", "q0f16+kv16", preset, attention="unfused")
    for context in (512, 2048):
        bound = KV_BYTES_PER_TOKEN * (context + 1) / bandwidth
        ratio = cost.attention(1, context) / bound
        assert 0.999 <= ratio <= 1.5, (preset, context, ratio)
