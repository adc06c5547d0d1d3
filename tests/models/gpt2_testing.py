"""Test helpers for GPT-2: an HF-layout checkpoint writer and an independent numpy GPT-2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

TINY_HF_CONFIG = {
    "model_type": "gpt2",
    "architectures": ["GPT2LMHeadModel"],
    "activation_function": "gelu_new",
    "n_layer": 2,
    "n_embd": 64,
    "n_head": 4,
    "vocab_size": 97,
    "n_positions": 32,
    "n_inner": None,
    "layer_norm_epsilon": 1e-5,
}


def make_hf_weights(cfg: dict, seed: int = 1) -> dict[str, np.ndarray]:
    """Random GPT-2 weights named and laid out as Hugging Face stores them.

    Conv1D weights are ``[in, out]``; every bias and LayerNorm parameter is random (not
    zero/one) so that a mix-up between them shows in the logits.
    """
    rng = np.random.default_rng(seed)
    d, v, n = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"]
    inner = cfg.get("n_inner") or 4 * d

    def normal(*shape: int, std: float = 0.1) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    w = {"wte.weight": normal(v, d, std=0.3), "wpe.weight": normal(n, d, std=0.3)}
    for i in range(cfg["n_layer"]):
        p = f"h.{i}."
        w[p + "ln_1.weight"] = 1 + normal(d)
        w[p + "ln_1.bias"] = normal(d)
        w[p + "attn.c_attn.weight"] = normal(d, 3 * d, std=0.2)
        w[p + "attn.c_attn.bias"] = normal(3 * d)
        w[p + "attn.c_proj.weight"] = normal(d, d)
        w[p + "attn.c_proj.bias"] = normal(d)
        w[p + "ln_2.weight"] = 1 + normal(d)
        w[p + "ln_2.bias"] = normal(d)
        w[p + "mlp.c_fc.weight"] = normal(d, inner)
        w[p + "mlp.c_fc.bias"] = normal(inner)
        w[p + "mlp.c_proj.weight"] = normal(inner, d)
        w[p + "mlp.c_proj.bias"] = normal(d)
    w["ln_f.weight"] = 1 + normal(d)
    w["ln_f.bias"] = normal(d)
    return w


def write_hf_checkpoint(
    folder: Path, cfg: dict, weights: dict[str, np.ndarray], prefix: str = "transformer."
) -> Path:
    """Write ``config.json`` and ``model.safetensors`` as ``save_pretrained`` would."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    tensors = {prefix + k: np.ascontiguousarray(t) for k, t in weights.items()}
    # Extras a real checkpoint may hold, which the loader must ignore.
    n = cfg["n_positions"]
    for i in range(cfg["n_layer"]):
        tensors[f"{prefix}h.{i}.attn.bias"] = np.tril(np.ones((1, 1, n, n), np.float32))
    tensors["lm_head.weight"] = np.ascontiguousarray(weights["wte.weight"])
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def _gelu_new(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def numpy_gpt2_logits(hf: dict[str, np.ndarray], cfg: dict, ids: list[int]) -> np.ndarray:
    """Logits ``[len(ids), vocab]`` of the full sequence, computed without any cache.

    ``hf`` holds weights as Hugging Face stores them (Conv1D ``[in, out]``, no prefix).
    """
    w = {k: v.astype(np.float64) for k, v in hf.items()}
    eps = cfg["layer_norm_epsilon"]
    n_head = cfg["n_head"]
    t = len(ids)
    x = w["wte.weight"][np.asarray(ids)] + w["wpe.weight"][:t]
    causal = np.tril(np.ones((t, t), bool))
    for i in range(cfg["n_layer"]):
        p = f"h.{i}."
        a = _layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = np.split(qkv, 3, axis=-1)
        hd = q.shape[-1] // n_head
        q, k, v = (m.reshape(t, n_head, hd).transpose(1, 0, 2) for m in (q, k, v))
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(hd)
        scores = np.where(causal, scores, -np.inf)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        probs = scores / scores.sum(-1, keepdims=True)
        att = (probs @ v).transpose(1, 0, 2).reshape(t, n_head * hd)
        x = x + att @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        m = _layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        m = _gelu_new(m @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + m @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = _layer_norm(x, w["ln_f.weight"], w["ln_f.bias"], eps)
    return x @ w["wte.weight"].T


def numpy_greedy(hf: dict[str, np.ndarray], cfg: dict, prompt: list[int], n: int) -> list[int]:
    """Greedy generation by re-running the whole sequence each step."""
    seq = list(prompt)
    for _ in range(n):
        seq.append(int(np.argmax(numpy_gpt2_logits(hf, cfg, seq)[-1])))
    return seq[len(prompt) :]


CONV1D_WEIGHTS = (
    "attn.c_attn.weight",
    "attn.c_proj.weight",
    "mlp.c_fc.weight",
    "mlp.c_proj.weight",
)


def to_hf_layout(params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Our ``[out, in]`` weights back to Hugging Face's Conv1D ``[in, out]`` layout."""
    return {k: (v.T if k.endswith(CONV1D_WEIGHTS) else v) for k, v in params.items()}
