"""GEMM lists from a config alone against the exported module's matmuls and closed-form counts."""

from __future__ import annotations

import math

import pytest
from llama_testing import TINY_LLAMA, TINY_QWEN2

from ledger_testing import ir_matmul_shapes
from tenet_byoc.models.configs import BUILTIN, resolve_config
from tenet_byoc.models.gemms import llama_matmuls, model_gemms, total_macs
from tenet_byoc.models.gpt2 import GPT2Config, export_gpt2, param_shapes
from tenet_byoc.models.llama import LlamaConfig, export_llama
from tenet_byoc.models.llama import param_shapes as llama_param_shapes
from tenet_byoc.models.moe import MOE_FAMILIES


def _closed_form(c: LlamaConfig, phase: str, n: int) -> int:
    """Llama MACs by hand: projections, attention over the keys, MLP, head."""
    d, hd, inner, v = c.hidden_size, c.dim_per_head, c.intermediate_size, c.vocab_size
    q, kv = c.num_attention_heads * hd, c.num_key_value_heads * hd
    rows, keys = (n, n) if phase == "prefill" else (1, n + 1)
    linear = 2 * d * q + 2 * d * kv + 3 * d * inner  # q, o; k, v; gate, up, down
    attention = 2 * c.num_attention_heads * rows * keys * hd
    return c.num_hidden_layers * (rows * linear + attention) + rows * d * v


@pytest.mark.parametrize("cfg", [TINY_LLAMA, TINY_QWEN2], ids=["llama", "qwen2"])
@pytest.mark.parametrize("phase,n", [("prefill", 1), ("prefill", 7), ("decode", 0), ("decode", 9)])
def test_tiny_lists_match_the_exported_module(cfg, phase, n):
    config = LlamaConfig.from_hf_dict(cfg)
    sym = {"seq_len": n} if phase == "prefill" else {"past_len": n}
    ir = ir_matmul_shapes(export_llama(config), phase, sym)
    gemms = model_gemms(config, phase, n)
    assert [(g.batch, g.m, g.n, g.k) for g in gemms] == ir
    assert total_macs(config, phase, n) == _closed_form(config, phase, n)


def test_gpt2_list_matches_its_module_and_marks_weights():
    config = GPT2Config.preset("tiny")
    gemms = model_gemms(config, "decode", 5)
    ir = ir_matmul_shapes(export_gpt2(config), "decode", {"past_len": 5})
    assert [(g.batch, g.m, g.n, g.k) for g in gemms] == ir
    weights = [g for g in gemms if g.weight]
    assert {g.name.split(".")[-1] for g in gemms if not g.weight} == {"qk", "pv"}
    # One decoded token multiplies each weight matrix once (wte as the head; wpe never).
    stored = sum(math.prod(s) for n, s in param_shapes(config).items()
                 if len(s) == 2 and n != "wpe.weight")
    assert sum(g.macs for g in weights) == stored


# The dense built-ins: mixture-of-experts GEMMs come with the call plan's expert calls.
@pytest.mark.parametrize("name", sorted(n for n, b in BUILTIN.items()
                                        if b.values["model_type"] not in MOE_FAMILIES))
def test_builtin_decode_weight_macs_equal_the_weight_count(name):
    config = resolve_config(name)
    gemms = model_gemms(config, "decode", 100)
    if isinstance(config, GPT2Config):
        shapes = {n: s for n, s in param_shapes(config).items() if n != "wpe.weight"}
    else:
        shapes = llama_param_shapes(config)
        if config.tie_word_embeddings:  # the embedding is read twice: lookup and head
            shapes["lm_head.weight"] = shapes["embed_tokens.weight"]
        del shapes["embed_tokens.weight"]
    assert sum(g.macs for g in gemms if g.weight) == sum(
        math.prod(s) for s in shapes.values() if len(s) == 2
    )


def test_llama_3_70b_prefill_and_decode_counts():
    config = resolve_config("llama-3-70b")
    assert (config.num_hidden_layers, config.hidden_size, config.num_key_value_heads) == (80, 8192, 8)
    p = 2048
    # Written out for this model: d = 8192, 64 query heads and 8 kv heads of 128, MLP 28672.
    per_token = 2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672
    prefill = 80 * (p * per_token + 2 * 64 * p * p * 128) + p * 8192 * 128256
    assert total_macs(config, "prefill", p) == prefill
    assert prefill == _closed_form(config, "prefill", p)
    steps = sum(total_macs(config, "decode", p + i) for i in range(128))
    attention = 80 * 2 * 64 * 128 * sum(p + i + 1 for i in range(128))
    assert steps == 128 * (80 * per_token + 8192 * 128256) + attention
    # Its ~70.6e9 parameters less the 1.05e9 of the embedding: one MAC each per decoded token.
    assert 69e9 < total_macs(config, "decode", 0) < 71e9


def test_gqa_groups_query_heads_into_rows():
    config = LlamaConfig.from_hf_dict(TINY_LLAMA)
    qk = next(g for g in llama_matmuls(config, 6, "prefill") if g.name.endswith("attn.qk"))
    assert (qk.batch, qk.m, qk.n, qk.k) == (2, 2 * 6, 6, 16)  # 2 kv heads x (2 queries x 6)


def test_bad_arguments_are_refused():
    config = LlamaConfig.from_hf_dict(TINY_LLAMA)
    with pytest.raises(ValueError, match="phase='train'"):
        model_gemms(config, "train", 4)
    with pytest.raises(ValueError, match="seq_len=33 .* max_position_embeddings=32"):
        model_gemms(config, "prefill", 33)
    with pytest.raises(ValueError, match="seq_len=32"):
        model_gemms(config, "decode", 32)
    with pytest.raises(ValueError, match="seq_len=0"):
        model_gemms(config, "prefill", 0)
    with pytest.raises(TypeError, match="seq_len=2.0"):
        model_gemms(config, "prefill", 2.0)
    with pytest.raises(TypeError, match="GPT2Config or LlamaConfig"):
        model_gemms({"model_type": "llama"}, "prefill", 2)
    with pytest.raises(ValueError, match="seq_len=32768 .* max_position_embeddings=32768"):
        model_gemms(resolve_config("mistral-7b"), "decode", 32768)


def test_sliding_window_bounds_decode_keys_not_prefill():
    config = resolve_config("mistral-7b")  # window 4096 of a 32768-token context
    mod = export_llama(config)
    for n, past in ((100, 100), (4095, 4095), (5000, 4096), (32767, 4096)):
        gemms = model_gemms(config, "decode", n)
        qk = next(g for g in gemms if g.name.endswith("attn.qk"))
        assert qk.n == min(n + 1, 4096)
        # The cache holds `past` tokens; the module's shapes follow from that alone.
        assert [(g.batch, g.m, g.n, g.k) for g in gemms] == ir_matmul_shapes(
            mod, "decode", {"past_len": past})
    qk = next(g for g in model_gemms(config, "prefill", 6000) if g.name.endswith("attn.qk"))
    assert (qk.m, qk.n) == (4 * 6000, 6000)  # all scores, those outside the window masked


@pytest.mark.parametrize("name", ["qwen2.5-0.5b", "llama-3-8b", "mistral-7b"])
def test_builtin_lists_match_their_exported_modules(name):
    # Exporting declares the weights without allocating them: cheap even at 8B.
    config = resolve_config(name)
    mod = export_llama(config)
    for phase, n, sym in (("prefill", 64, {"seq_len": 64}), ("decode", 100, {"past_len": 100})):
        gemms = model_gemms(config, phase, n)
        assert [(g.batch, g.m, g.n, g.k) for g in gemms] == ir_matmul_shapes(mod, phase, sym)
