"""Built-in model shapes by name, and one way to get a config from a name, a file or a folder.

Each built-in entry holds the fields of the model's Hugging Face ``config.json`` that fix its
GEMMs (and its ``model_type``), copied from the file named as its source, so models too big
to download or run can be described by name. No weights are involved.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from .._names import did_you_mean
from .checkpoint import read_folder_config
from .gpt2 import GPT2Config
from .llama import FAMILIES, LlamaConfig
from .moe import MOE_FAMILIES, MoEConfig

__all__ = ["BUILTIN", "BuiltinModel", "config_from_dict", "resolve_config"]


@dataclass(frozen=True)
class BuiltinModel:
    """A model's ``config.json`` fields and where they were read."""

    name: str
    source: str  #: the Hugging Face ``config.json`` the values come from
    values: Mapping[str, Any]
    note: str = ""  #: how the entry differs from the model, when it stands in for one


def _gpt2(name: str, repo: str, n_layer: int, n_embd: int, n_head: int, note: str = "",
          **other: Any) -> BuiltinModel:
    values = {
        "model_type": "gpt2",
        "n_layer": n_layer,
        "n_embd": n_embd,
        "n_head": n_head,
        "vocab_size": 50257,
        "n_positions": 1024,
        "layer_norm_epsilon": 1e-5,
        "activation_function": "gelu_new",
        **other,
    }
    return BuiltinModel(name, f"https://huggingface.co/{repo}/blob/main/config.json", values,
                        note)


# Llama-family fields, one model a row:
_LLAMA_FIELDS = (
    "model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "max_position_embeddings", "rms_norm_eps",
    "rope_theta", "tie_word_embeddings",
)


def _LLAMA3_ROPE(factor: float) -> dict[str, Any]:  # noqa: N802 (reads as a constant)
    # Llama 3.1 / 3.2's rope_scaling: only the factor differs between them.
    return {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


_LLAMAS = (
    # name, Hugging Face repo, then _LLAMA_FIELDS, then other fields
    ("llama-2-7b", "meta-llama/Llama-2-7b-hf",
     ("llama", 32000, 4096, 11008, 32, 32, 32, 4096, 1e-5, 10000.0, False), {}),
    ("llama-3-8b", "meta-llama/Meta-Llama-3-8B",
     ("llama", 128256, 4096, 14336, 32, 32, 8, 8192, 1e-5, 500000.0, False), {}),
    ("llama-3.1-8b", "meta-llama/Llama-3.1-8B",
     ("llama", 128256, 4096, 14336, 32, 32, 8, 131072, 1e-5, 500000.0, False),
     {"rope_scaling": _LLAMA3_ROPE(8.0)}),
    ("llama-3.2-1b", "meta-llama/Llama-3.2-1B",
     ("llama", 128256, 2048, 8192, 16, 32, 8, 131072, 1e-5, 500000.0, True),
     {"head_dim": 64, "rope_scaling": _LLAMA3_ROPE(32.0)}),
    ("llama-3-70b", "meta-llama/Meta-Llama-3-70B",
     ("llama", 128256, 8192, 28672, 80, 64, 8, 8192, 1e-5, 500000.0, False), {}),
    ("mistral-7b", "mistralai/Mistral-7B-v0.1",
     ("mistral", 32000, 4096, 14336, 32, 32, 8, 32768, 1e-5, 10000.0, False),
     {"sliding_window": 4096}),
    ("qwen2.5-0.5b", "Qwen/Qwen2.5-0.5B",
     ("qwen2", 151936, 896, 4864, 24, 14, 2, 32768, 1e-6, 1000000.0, True),
     {"use_sliding_window": False}),
)


def _llama(name: str, repo: str, row: tuple, extra: dict[str, Any]) -> BuiltinModel:
    values = {**dict(zip(_LLAMA_FIELDS, row, strict=True)), "hidden_act": "silu", **extra}
    return BuiltinModel(name, f"https://huggingface.co/{repo}/blob/main/config.json", values)


# GPT-J 6B's GEMMs through the GPT-2 family. From EleutherAI/gpt-j-6b's config.json:
# n_layer 28, n_embd 4096, n_head 16 (head_dim 256), n_inner null (4 x 4096 = 16384),
# vocab_size 50400, n_positions 2048, gelu_new, layer_norm_epsilon 1e-5.
_GPTJ = _gpt2(
    "gpt-j-6b", "EleutherAI/gpt-j-6b", 28, 4096, 16, n_inner=16384, vocab_size=50400,
    n_positions=2048,
    note=("GPT-J (model_type gptj) estimated as a GPT-2-shaped model: the same GEMM shapes "
          "and weight count per layer, except that q, k and v are one fused [d, 3d] GEMM "
          "(GPT-J has three [d, d] ones, the same MACs) and the head is charged as GPT-2's "
          "tied one (GPT-J's lm_head is its own [d, vocab] matrix: the same GEMM). Not "
          "modelled, as they are not GEMMs: GPT-J's parallel attention + MLP block with one "
          "LayerNorm, and its partial rotary embedding (64 of 256 dims) in place of learned "
          "positions. Under tensor parallelism the parallel block needs one all-reduce per "
          "layer where this stand-in charges two."),
)

# Mixture-of-experts models, their config.json fields as published (the fields that do not
# change shapes, such as dropout or initializer ranges, left out).
_MOES = (
    BuiltinModel(
        "mixtral-8x7b", "https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json",
        {"model_type": "mixtral", "vocab_size": 32000, "hidden_size": 4096,
         "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
         "num_key_value_heads": 8, "max_position_embeddings": 32768, "rms_norm_eps": 1e-5,
         "rope_theta": 1e6, "num_local_experts": 8, "num_experts_per_tok": 2,
         "sliding_window": None, "tie_word_embeddings": False, "hidden_act": "silu"}),
    BuiltinModel(
        "qwen3-30b-a3b", "https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json",
        {"model_type": "qwen3_moe", "vocab_size": 151936, "hidden_size": 2048,
         "intermediate_size": 6144, "moe_intermediate_size": 768, "num_hidden_layers": 48,
         "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
         "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": True,
         "max_position_embeddings": 40960, "rope_theta": 1e6, "rms_norm_eps": 1e-6,
         "tie_word_embeddings": False, "decoder_sparse_step": 1, "mlp_only_layers": [],
         "hidden_act": "silu", "use_sliding_window": False}),
    BuiltinModel(
        "deepseek-v3", "https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json",
        {"model_type": "deepseek_v3", "vocab_size": 129280, "hidden_size": 7168,
         "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
         "num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts": 1,
         "n_routed_experts": 256, "routed_scaling_factor": 2.5, "kv_lora_rank": 512,
         "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128,
         "qk_nope_head_dim": 128, "topk_method": "noaux_tc", "n_group": 8, "topk_group": 4,
         "num_experts_per_tok": 8, "moe_layer_freq": 1, "first_k_dense_replace": 3,
         "norm_topk_prob": True, "scoring_func": "sigmoid", "max_position_embeddings": 163840,
         "rms_norm_eps": 1e-6, "rope_theta": 10000,
         "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                          "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                          "type": "yarn"},
         "tie_word_embeddings": False, "num_nextn_predict_layers": 1, "hidden_act": "silu"},
        note="the multi-token-prediction layer (num_nextn_predict_layers) is not modelled"),
    *(BuiltinModel(
        f"gpt-oss-{size}", f"https://huggingface.co/openai/gpt-oss-{size}/blob/main/config.json",
        {"model_type": "gpt_oss", "vocab_size": 201088, "hidden_size": 2880,
         "intermediate_size": 2880, "num_hidden_layers": layers, "num_attention_heads": 64,
         "num_key_value_heads": 8, "head_dim": 64, "num_local_experts": experts,
         "num_experts_per_tok": 4, "experts_per_token": 4, "attention_bias": True,
         "layer_types": ["sliding_attention", "full_attention"] * (layers // 2),
         "sliding_window": 128, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
         "rope_theta": 150000, "rope_scaling": {
             "rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
             "truncate": False, "original_max_position_embeddings": 4096},
         "swiglu_limit": 7.0, "tie_word_embeddings": False, "hidden_act": "silu"},
        note="the experts are stored in MXFP4 (quantization_config quant_method mxfp4); "
             "this entry is their shapes")
      for size, layers, experts in (("120b", 36, 128), ("20b", 24, 32))),
)

# Gemma-2 / Gemma-3 text decoders, their config.json fields as published (Gemma-3-4B's file
# is the multimodal one: its text_config lists only what differs from transformers'
# Gemma3TextConfig defaults of the release, 4.50, written out here).
_GEMMA = {"head_dim": 256, "rms_norm_eps": 1e-6, "query_pre_attn_scalar": 256,
          "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True}
_GEMMAS = (
    BuiltinModel(
        "gemma-2-9b", "https://huggingface.co/google/gemma-2-9b/blob/main/config.json",
        {**_GEMMA, "model_type": "gemma2", "vocab_size": 256000, "hidden_size": 3584,
         "intermediate_size": 14336, "num_hidden_layers": 42, "num_attention_heads": 16,
         "num_key_value_heads": 8, "max_position_embeddings": 8192, "rope_theta": 10000.0,
         "sliding_window": 4096, "attn_logit_softcapping": 50.0,
         "final_logit_softcapping": 30.0}),
    BuiltinModel(
        "gemma-3-4b", "https://huggingface.co/google/gemma-3-4b-it/blob/main/config.json",
        {**_GEMMA, "model_type": "gemma3_text", "vocab_size": 262208, "hidden_size": 2560,
         "intermediate_size": 10240, "num_hidden_layers": 34, "num_attention_heads": 8,
         "num_key_value_heads": 4, "max_position_embeddings": 131072, "rope_theta": 1e6,
         "rope_local_base_freq": 10000.0, "sliding_window": 1024, "sliding_window_pattern": 6,
         "rope_scaling": {"rope_type": "linear", "factor": 8.0}},
        note="the text decoder (text_config) only: the SigLIP vision encoder and its "
             "projector are not modelled"),
)

_ENTRIES = (
    _gpt2("gpt2", "openai-community/gpt2", 12, 768, 12),
    _gpt2("gpt2-medium", "openai-community/gpt2-medium", 24, 1024, 16),
    _gpt2("gpt2-large", "openai-community/gpt2-large", 36, 1280, 20),
    _gpt2("gpt2-xl", "openai-community/gpt2-xl", 48, 1600, 25),
    *(_llama(*row) for row in _LLAMAS),
    _GPTJ,
    *_MOES,
    *_GEMMAS,
)

#: Built-in models by name.
BUILTIN: Mapping[str, BuiltinModel] = MappingProxyType({e.name: e for e in _ENTRIES})


def config_from_dict(values: Mapping[str, Any], name: str = "custom") -> Any:
    """The family's config (``GPT2Config``, ``LlamaConfig`` or ``MoEConfig``) for ``config.json``.

    Raises
    ------
    ValueError
        If ``model_type`` is missing or not one of ``gpt2``, ``llama``, ``mistral``,
        ``qwen2``, ``gemma2``, ``gemma3_text``, ``mixtral``, ``qwen2_moe``, ``qwen3_moe``, ``deepseek_v3``.
    """
    model_type = values.get("model_type")
    if model_type == "gpt2":
        return GPT2Config.from_hf_dict(values, name=name)
    if model_type in FAMILIES:
        return LlamaConfig.from_hf_dict(values, name=name)
    if model_type in MOE_FAMILIES:
        return MoEConfig.from_hf_dict(values, name=name)
    known = ["gpt2", *FAMILIES, *MOE_FAMILIES]
    raise ValueError(
        f"model_type={model_type!r} is not supported{did_you_mean(model_type, known)}; "
        f"known: {known}"
    )


def resolve_config(model: str | os.PathLike[str]) -> Any:
    """A model's ``GPT2Config``, ``LlamaConfig`` or ``MoEConfig`` from a name in
    :data:`BUILTIN`, a path to a ``config.json`` or a checkpoint folder holding one.

    ValueError if ``model`` is neither a built-in name nor an existing path (the message
    suggests near names and lists the built-in ones), or the config is not one this package
    implements (naming the file and the field).
    """
    text = os.fspath(model)
    if text in BUILTIN:
        return config_from_dict(BUILTIN[text].values, name=text)
    if not os.path.exists(text):
        raise ValueError(
            f"model {text!r} is neither a built-in name nor an existing config.json or "
            f"checkpoint folder{did_you_mean(text, BUILTIN)}; built-in: {sorted(BUILTIN)}"
        )
    # A field of the wrong type is the file's fault, whatever Python calls it.
    return read_folder_config(text, config_from_dict, ValueError)
