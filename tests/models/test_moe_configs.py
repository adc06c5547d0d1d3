"""Mixture-of-experts configs read from config.json, and their parameter counts.

Totals of tiny configs are checked against the tensors transformers makes and saves for the
same config.json (Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V3, gpt-oss), active counts against those
parameters less the experts a token does not use, and the built-ins against the figures their
publishers give (Mixtral 8x7B 46.7 B / 12.9 B, DeepSeek-V3 671 B / 37 B, Qwen3-30B-A3B
30.5 B / 3.3 B, gpt-oss-120b 116.8 B / 5.1 B and gpt-oss-20b 20.9 B / 3.6 B, Llama-3.1-8B
8.03 B).
"""

from __future__ import annotations

import importlib.util
import re

import pytest

from tenet_byoc.models.configs import config_from_dict, resolve_config
from tenet_byoc.models.llama import param_count
from tenet_byoc.models.moe import MoEConfig, param_counts

_COMMON = {"vocab_size": 97, "hidden_size": 32, "num_hidden_layers": 4,
           "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
           "rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": False}
TINY = {
    "mixtral": {**_COMMON, "model_type": "mixtral", "intermediate_size": 48,
                "num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen2_moe": {**_COMMON, "model_type": "qwen2_moe", "intermediate_size": 40,
                  "moe_intermediate_size": 24, "shared_expert_intermediate_size": 56,
                  "num_experts": 6, "num_experts_per_tok": 2, "decoder_sparse_step": 2,
                  "mlp_only_layers": [3], "norm_topk_prob": False},
    "qwen3_moe": {**_COMMON, "model_type": "qwen3_moe", "intermediate_size": 40,
                  "moe_intermediate_size": 24, "num_experts": 8, "num_experts_per_tok": 3,
                  "head_dim": 16, "mlp_only_layers": [0], "norm_topk_prob": True},
    "deepseek_v3": {**_COMMON, "model_type": "deepseek_v3", "num_key_value_heads": 4,
                    "intermediate_size": 40, "moe_intermediate_size": 24,
                    "n_routed_experts": 8, "n_shared_experts": 2, "num_experts_per_tok": 2,
                    "n_group": 4, "topk_group": 2, "first_k_dense_replace": 1,
                    "q_lora_rank": 20, "kv_lora_rank": 12, "qk_nope_head_dim": 8,
                    "qk_rope_head_dim": 4, "v_head_dim": 6, "routed_scaling_factor": 2.5},
    "gpt_oss": {**_COMMON, "model_type": "gpt_oss", "intermediate_size": 24, "head_dim": 8,
                "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 8},
}
_HF = {"mixtral": "Mixtral", "qwen2_moe": "Qwen2Moe", "qwen3_moe": "Qwen3Moe",
       "deepseek_v3": "DeepseekV3", "gpt_oss": "GptOss"}


@pytest.mark.skipif(not importlib.util.find_spec("transformers"),
                    reason="transformers is not installed")
@pytest.mark.parametrize("family", sorted(TINY))
def test_tiny_counts_equal_the_parameters_transformers_makes(family):
    import transformers

    values = TINY[family]
    kind = _HF[family]
    hf_config = getattr(transformers, kind + "Config")(
        **{k: v for k, v in values.items() if k != "model_type"})
    model = getattr(transformers, kind + "ForCausalLM")(hf_config)
    params = model.state_dict()  # what it saves: DeepSeek's router bias is a buffer
    config = config_from_dict(values)
    assert isinstance(config, MoEConfig)
    total, active = param_counts(config)
    assert total == sum(p.numel() for p in params.values())
    # A token reads all but the experts it is not routed to.
    e, k = config.experts.num_experts, config.experts.experts_per_token
    routed = sum(p.numel() for name, p in params.items()
                 if re.search(r"\.experts\.", name) and "shared" not in name)
    assert routed % e == 0
    assert active == total - routed // e * (e - k)
    layers_with_experts = {int(m.group(1)) for name in params
                           if (m := re.search(r"layers\.(\d+)\.mlp\.experts", name))}
    assert set(config.experts.moe_layers) == layers_with_experts


# Publishers round the totals; Mistral rounds the active count, DeepSeek and Qwen truncate it
# (37.55 B and 3.35 B with embeddings and head counted, as Mistral's 12.88 B is).
@pytest.mark.parametrize("name,total,active,digits,truncated", [
    ("mixtral-8x7b", 46.7, 12.9, 1, False),
    ("qwen3-30b-a3b", 30.5, 3.3, 1, True),
    ("deepseek-v3", 671, 37, 0, True),
])
def test_builtin_counts_equal_the_published_ones(name, total, active, digits, truncated):
    got_total, got_active = param_counts(resolve_config(name))
    assert round(got_total / 1e9, digits) == total
    unit = 10.0 ** -digits
    if truncated:
        assert active <= got_active / 1e9 < active + unit
    else:
        assert round(got_active / 1e9, digits) == active


# OpenAI's model card (gpt-oss-120b & gpt-oss-20b, 2025, table 1): 116.83 B / 5.13 B and
# 20.91 B / 3.61 B; its active count leaves out the embedding table (a lookup) and keeps
# the unembedding.
@pytest.mark.parametrize("name,total,active", [("gpt-oss-120b", 116.8, 5.1),
                                               ("gpt-oss-20b", 20.9, 3.6)])
def test_gpt_oss_counts_equal_openai_model_card(name, total, active):
    config = resolve_config(name)
    got_total, got_active = param_counts(config)
    assert round(got_total / 1e9, 1) == total
    embedding = config.vocab_size * config.hidden_size
    assert round((got_active - embedding) / 1e9, 1) == active


def test_gpt_oss_fields():
    config = resolve_config("gpt-oss-120b")
    e = config.experts
    assert (e.num_experts, e.experts_per_token, e.biased, e.swiglu_limit) == (128, 4, True, 7.0)
    assert config.sinks and config.sliding_layers == tuple(range(0, 36, 2))
    assert [config.window(i) for i in (0, 1)] == [128, None]
    a = config.attention
    assert (a.qkv_bias, a.o_bias, a.rope_scaling.rope_type, a.rope_scaling.truncate) == (
        True, True, "yarn", False)


def test_gpt_oss_bad_layer_types_are_refused():
    values = {**TINY["gpt_oss"], "layer_types": ["sliding_attention", "local"]}
    with pytest.raises(ValueError, match="layer_types"):
        config_from_dict(values)


def test_llama_3_1_8b_has_8_03_billion_parameters():
    assert round(param_count(resolve_config("llama-3.1-8b"))[1] / 1e9, 2) == 8.03


def test_deepseek_v3_fields():
    config = resolve_config("deepseek-v3")
    e, m = config.experts, config.latent
    assert (e.num_experts, e.experts_per_token, e.shared_intermediate_size) == (256, 8, 2048)
    assert (e.groups, e.top_groups, e.scoring, e.router_bias) == (8, 4, "sigmoid", True)
    assert e.moe_layers == tuple(range(3, 61))
    assert (m.q_lora_rank, m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim,
            m.v_head_dim) == (1536, 512, 128, 64, 128)
    assert config.attention.rope_scaling.rope_type == "yarn"


@pytest.mark.parametrize("family,changes,message", [
    ("mixtral", {"num_experts_per_tok": 5}, r"experts_per_token=5 exceeds num_experts=4"),
    ("mixtral", {"num_local_experts": None}, r"\(mixtral\) lacks 'num_local_experts'"),
    ("mixtral", {"num_local_experts": "8"}, r"num_experts=.8. must be an integer"),
    ("mixtral", {"num_local_experts": 2**30}, r"num_experts=1073741824 must be an integer in"),
    ("qwen2_moe", {"mlp_only_layers": ["1"]}, r"mlp_only_layers=\['1'\] must be a list"),
    ("qwen2_moe", {"decoder_sparse_step": 0}, r"decoder_sparse_step=0 must be >= 1"),
    ("qwen3_moe", {"use_sliding_window": True}, r"use_sliding_window=true"),
    ("deepseek_v3", {"n_group": 3}, r"groups=3 must divide num_experts=8"),
    ("deepseek_v3", {"topk_group": 5}, r"be at least top_groups=5"),
    ("deepseek_v3", {"kv_lora_rank": "12"}, r"kv_lora_rank='12' must be an integer"),
    ("deepseek_v3", {"first_k_dense_replace": -1}, r"first_k_dense_replace=-1"),
    ("deepseek_v3", {"routed_scaling_factor": "2.5"}, r"scale='2.5' must be a positive"),
    ("deepseek_v3", {"rope_interleave": "yes"}, r"rope_interleave='yes' must be a bool"),
])
def test_bad_moe_fields_are_named(family, changes, message):
    values = {**TINY[family], **changes}
    with pytest.raises(ValueError, match=message):
        config_from_dict(values)


def test_a_mixtral_config_is_read_not_answered_did_you_mean_mistral(tmp_path):
    import json

    (tmp_path / "config.json").write_text(json.dumps(TINY["mixtral"]))
    config = resolve_config(tmp_path)
    assert config.model_type == "mixtral" and config.experts.num_experts == 4


def test_moe_matmuls_default_routing_and_bad_counts():
    from tenet_byoc.models.moe import moe_matmuls

    config = resolve_config("mixtral-8x7b")
    # One decode token: its 2 experts' 3 GEMMs of one row per layer, 14336 wide.
    calls = moe_matmuls(config, 100, "decode")
    experts = [g for g in calls if ".experts." in g.name]
    assert len(experts) == 32 * 2 * 3 and {g.m for g in experts} == {1}
    # Weight MACs of one token equal the active weights less the embedding table and norms.
    _, active = param_counts(config)
    weights = sum(g.macs for g in calls if not g.name.endswith(("attn.qk", "attn.pv")))
    assert weights == active - 32000 * 4096 - (2 * 32 + 1) * 4096
    with pytest.raises(ValueError, match=r"tokens_per_expert must give 32 layers of 8 counts"):
        moe_matmuls(config, 4, "prefill", [[2] * 8] * 32)  # 16 rows, not 4 x 2


def test_serve_refuses_latent_attention_by_name(tmp_path, capsys):
    # serve charges grouped-query mixtures (tests/serving/test_serve_moe.py); DeepSeek-V3's
    # latent attention caches one compressed latent a token, which its KV cache does not
    # model: one line naming it and exit code 2, as argparse does.
    from tenet_byoc_cli import main

    with pytest.raises(SystemExit) as exc:
        main(["serve", "--model", "deepseek-v3", "--accelerator", "h200", "--rate", "1",
              "--requests", "2", "--out",
              str(tmp_path / "s"), "--no-progress"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "deepseek-v3: serving's KV cache of multi-head latent attention" in err
    assert "Traceback" not in err
