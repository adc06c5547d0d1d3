"""Test helpers for Llama-family models: HF-layout checkpoints and an independent numpy forward.

The numpy forward follows the published formulation, not this package's: RoPE rotates the
pairs ``(i, i + hd/2)`` by explicit angles, grouped-query attention repeats each key/value
head for its query heads, and everything runs in float64 over the whole sequence (no cache).
"""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

#: A tiny Llama with grouped-query attention (4 query heads, 2 key/value heads), written
#: as transformers 5 writes config.json (rope_parameters), with a non-default theta.
TINY_LLAMA = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "vocab_size": 101,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32,
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000.0},
    "tie_word_embeddings": False,
    "attention_bias": False,
    "mlp_bias": False,
}

#: Qwen2-style: q/k/v biases, tied embeddings, a top-level rope_theta as older files have,
#: one key/value head for 4 query heads.
TINY_QWEN2 = {
    "model_type": "qwen2",
    "architectures": ["Qwen2ForCausalLM"],
    "vocab_size": 89,
    "hidden_size": 32,
    "intermediate_size": 80,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "max_position_embeddings": 24,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "rope_theta": 20000.0,
    "tie_word_embeddings": True,
    "use_sliding_window": False,
}

#: Mistral-style: a sliding window shorter than the trained context, and an explicit
#: head_dim that is not hidden_size / heads.
TINY_MISTRAL = {
    "model_type": "mistral",
    "architectures": ["MistralForCausalLM"],
    "vocab_size": 97,
    "hidden_size": 48,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 24,
    "max_position_embeddings": 64,
    "sliding_window": 16,
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
}


def _head_dim(cfg: dict) -> int:
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def _theta(cfg: dict) -> float:
    rope = cfg.get("rope_parameters") or {}
    return float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0)))


def _biases(cfg: dict) -> tuple[bool, bool]:
    """(q/k/v have biases, o_proj has a bias)."""
    if cfg["model_type"] == "qwen2":
        return True, False
    return bool(cfg.get("attention_bias")), bool(cfg.get("attention_bias"))


def make_llama_weights(cfg: dict, seed: int = 1) -> dict[str, np.ndarray]:
    """Random weights named as Hugging Face stores them (``model.`` prefix, ``[out, in]``).

    Scales are large enough that logits are O(1) and every bias and norm scale matters.
    """
    rng = np.random.default_rng(seed)
    d, v, inner = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    hd = _head_dim(cfg)
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    qkv_bias, o_bias = _biases(cfg)

    def normal(*shape: int, std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    w = {"model.embed_tokens.weight": normal(v, d, std=1.0)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = 1 + normal(d, std=0.1)
        for name, rows, cols, bias in (
            ("q_proj", q, d, qkv_bias),
            ("k_proj", kv, d, qkv_bias),
            ("v_proj", kv, d, qkv_bias),
            ("o_proj", d, q, o_bias),
        ):
            w[f"{p}self_attn.{name}.weight"] = normal(rows, cols, std=cols**-0.5)
            if bias:
                w[f"{p}self_attn.{name}.bias"] = normal(rows, std=0.3)
        w[p + "post_attention_layernorm.weight"] = 1 + normal(d, std=0.1)
        w[p + "mlp.gate_proj.weight"] = normal(inner, d, std=d**-0.5)
        w[p + "mlp.up_proj.weight"] = normal(inner, d, std=d**-0.5)
        w[p + "mlp.down_proj.weight"] = normal(d, inner, std=inner**-0.5)
    w["model.norm.weight"] = 1 + normal(d, std=0.1)
    if not cfg.get("tie_word_embeddings"):
        w["lm_head.weight"] = normal(v, d, std=d**-0.5)
    return w


def write_checkpoint(
    folder: Path, cfg: dict, weights: dict[str, np.ndarray], *, shards: int = 1,
    dtype: str = "float32",
) -> Path:
    """Write ``config.json`` and safetensors weights as ``save_pretrained`` lays them out.

    ``shards > 1`` splits the tensors over that many files with a
    ``model.safetensors.index.json``; ``dtype`` is ``float32``, ``float16`` or ``bfloat16``.
    """
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    tensors = {k: np.ascontiguousarray(t.astype(_DTYPES[dtype])) for k, t in weights.items()}
    if shards == 1:
        save_file(tensors, str(folder / "model.safetensors"))
        return folder
    names = list(tensors)
    weight_map = {}
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[s::shards]}
        save_file(part, str(folder / file))
        weight_map.update(dict.fromkeys(part, file))
    index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


_DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def rounded(weights: dict[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    """The weights as a checkpoint of ``dtype`` holds them, back in float32."""
    return {k: v.astype(_DTYPES[dtype]).astype(np.float32) for k, v in weights.items()}


def _rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _linear(w: dict, name: str, x: np.ndarray) -> np.ndarray:
    out = x @ w[name + ".weight"].T
    return out + w[name + ".bias"] if name + ".bias" in w else out


def numpy_llama_logits(hf: dict[str, np.ndarray], cfg: dict, ids: list[int]) -> np.ndarray:
    """Logits ``[len(ids), vocab]`` of the whole sequence, computed without any cache.

    ``hf`` holds the weights as :func:`make_llama_weights` names them.
    """
    w = {k.removeprefix("model."): v.astype(np.float64) for k, v in hf.items()}
    eps, hd = cfg["rms_norm_eps"], _head_dim(cfg)
    h, kvh = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    t = len(ids)
    angle = np.arange(t)[:, None] * _theta(cfg) ** (-np.arange(0, hd, 2) / hd)[None, :]
    cos, sin = np.cos(angle), np.sin(angle)

    def rotate(m: np.ndarray) -> np.ndarray:  # [heads, t, hd]: pair i with i + hd/2
        a, b = m[..., : hd // 2], m[..., hd // 2 :]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)

    def split_heads(m: np.ndarray, n: int) -> np.ndarray:
        return m.reshape(t, n, hd).transpose(1, 0, 2)

    x = w["embed_tokens.weight"][np.asarray(ids)]
    # Key j is visible to query i if j <= i, and within the sliding window if there is one.
    back = np.arange(t)[:, None] - np.arange(t)[None, :]
    causal = (back >= 0) & (back < (cfg.get("sliding_window") or t + 1))
    for i in range(cfg["num_hidden_layers"]):
        p = f"layers.{i}."
        a = _rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = rotate(split_heads(_linear(w, p + "self_attn.q_proj", a), h))
        k = rotate(split_heads(_linear(w, p + "self_attn.k_proj", a), kvh))
        v = split_heads(_linear(w, p + "self_attn.v_proj", a), kvh)
        k, v = np.repeat(k, h // kvh, axis=0), np.repeat(v, h // kvh, axis=0)
        scores = np.where(causal, q @ k.transpose(0, 2, 1) / np.sqrt(hd), -np.inf)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        att = (probs @ v).transpose(1, 0, 2).reshape(t, h * hd)
        x = x + _linear(w, p + "self_attn.o_proj", att)
        m = _rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = _linear(w, p + "mlp.gate_proj", m)
        x = x + _linear(w, p + "mlp.down_proj", gate / (1 + np.exp(-gate)) * _linear(
            w, p + "mlp.up_proj", m))
    x = _rms_norm(x, w["norm.weight"], eps)
    return x @ w.get("lm_head.weight", w["embed_tokens.weight"]).T


def chunk_keys(model, config, ids: list[int], cached: int) -> tuple[list[int], list[int]]:
    """Keys each layer's rows attend to in a chunk ``ids[cached:]`` after ``ids[:cached]``:
    by transformers' eager attention of ``model`` (the last axis of each layer's weights),
    and by the plan of ``config`` (its ``attn.qk`` GEMMs' N)."""
    import torch

    from tenet_byoc.plan import Step, StepSequence, plan

    ids = torch.tensor([ids])
    with torch.no_grad():
        past = model(ids[:, :cached], use_cache=True).past_key_values
        chunk = model(ids[:, cached:], past_key_values=past, use_cache=True,
                      output_attentions=True)
    calls = plan(config, Step([StepSequence(ids.shape[1] - cached, cached)])).calls
    return ([a.shape[-1] for a in chunk.attentions],
            [c.call.n for c in calls if c.name.endswith("attn.qk")])
