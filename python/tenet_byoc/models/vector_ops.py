"""Every operator a prefill or decode call runs beside its GEMMs, from a model's config alone.

The list the vector unit is charged for in a real run (``tenet_byoc.vector_plan`` classifies
the built module's operators; the runtime charges them once per call, in binding order):
embedding lookup, norms (Qwen3's per-head QK norms too), rotary embeddings, KV-cache writes, the attention scale, the causal
mask, softmax, residual adds, SwiGLU's product, activation quantization; the GEMMs' fused
epilogues (bias, GELU) are listed with the GEMMs (:func:`gemm_epilogues`).
``tests/estimate`` checks the list against a run's ledger entry for entry.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .gpt2 import GPT2Config
from .llama import LlamaConfig

__all__ = ["VectorOpShape", "gemm_epilogues", "model_vector_ops"]


class VectorOpShape(NamedTuple):
    """One charged operator: kind, output shape, second operand's elements (0: none)."""

    name: str
    op: str
    shape: tuple[int, ...]
    operand: int = 0
    bits_out: int = 32
    quantize: bool = False  #: an activation quantization (charged under the scheme's name)


def _residual_fused(phase: str, batch: int, bias: bool, float_gemm: bool = True) -> bool:
    # A decode step of one sequence has static [1, 1, d] activations: the residual add after
    # a linear layer without a bias of its own passes the bias pattern's check and runs as
    # that GEMM's epilogue (patterns.py); a prefill's (symbolic rows) or a batch's does not.
    # The quantized patterns take only a 1-D bias.
    return phase == "decode" and batch == 1 and not bias and float_gemm


def gemm_epilogues(config: Any, name: str, phase: str = "prefill", batch: int = 1,
                   float_gemm: bool = True) -> list[str]:
    """The fused epilogue operators of the GEMM ``name`` (bias add, activation), in order
    (``float_gemm``: the linear layers run as float GEMMs, not quantized patterns)."""
    if isinstance(config, LlamaConfig):
        # Gemma norms the outputs of o_proj and down_proj before their residual adds.
        fused = _residual_fused(phase, batch, False, float_gemm) and not config.gemma
        if name.endswith("o_proj") and fused and not config.o_bias:
            return ["add"]
        if name.endswith("down_proj") and fused and not config.mlp_bias:
            return ["add"]
        if name.endswith("gate_proj") and config.hidden_act != "silu":  # GeGLU's GELU
            return ["add", "gelu_tanh"] if config.mlp_bias else ["gelu_tanh"]
    if isinstance(config, GPT2Config):
        if name.endswith(("attn.qk", "attn.pv", "lm_head")):
            return []
        return ["add", "gelu_tanh"] if name.endswith("mlp.c_fc") else ["add"]
    if name.endswith(("q_proj", "k_proj", "v_proj")) and config.qkv_bias:
        return ["add"]
    if name.endswith("o_proj") and config.o_bias:
        return ["add"]
    if name.endswith(("gate_proj", "up_proj", "down_proj")) and getattr(config, "mlp_bias", False):
        return ["add"]
    return []


def model_vector_ops(config: Any, phase: str, tokens: int, activation_bits: int = 32,
                     k_multiple: int = 1, batch: int = 1, float_gemm: bool = True,
                     batched: bool | None = None) -> list[VectorOpShape]:
    """The non-GEMM operators of one call in the order a run charges them.

    ``tokens`` as for :func:`tenet_byoc.models.gemms.model_gemms`; ``activation_bits`` < 32
    adds a quantize entry before each linear layer (its K padded to ``k_multiple``).
    ``batch`` > 1 lists the batched functions (``prefill_batch``/``decode_batch``): their
    positions per sequence (prefill: slot minus pad, clamped at 0), the position rows
    gathered per sequence, one per-sequence mask (pads and causality, built at the first
    layer and reused) added to every layer's scores, decode included. ``batched`` forces
    that form (and no residual fused into a GEMM) for any ``batch``: a group of sequences
    inside a larger step (default: ``batch > 1``).
    """
    prefill = phase == "prefill"
    rows = tokens if prefill else 1
    b = batch
    if batched is None:
        batched = batch > 1
    fuse_batch = 2 if batched else batch  # a step of several sequences fuses no residual
    out: list[VectorOpShape] = []

    def q(name: str, k: int) -> None:
        if activation_bits < 32:
            kp = -(-k // k_multiple) * k_multiple
            out.append(VectorOpShape(name + ".quantize", "quantize", (b, rows, kp), 0,
                                     activation_bits, True))

    def add(name, op, shape, operand=0):
        out.append(VectorOpShape(name, op, tuple(shape), operand))

    def positions(rows: int) -> None:
        if prefill:  # slot - pad[b], then pad slots' negative positions clamped to 0
            add("positions", "add", (b, rows), rows)
            add("positions.clamp", "relu", (b, rows))

    def masks(i: int, p: str, heads: tuple[int, ...], keys: int, window: Any = None) -> None:
        # A batch's per-sequence mask, built at the first layer (a model of sliding and
        # full layers builds one of each there, the other's over its own keys), or a
        # prefill's causal (and window) mask; added to the scores [b, *heads, rows, keys].
        if batched:
            if i == 0:
                add(p + "batch_mask", "mask", (b, 1, rows, keys))
                if other_keys is not None:
                    add(p + "batch_mask.other", "mask", (b, 1, rows, other_keys))
            add(p + "masked", "add", (b, *heads, rows, keys), b * rows * keys)
        elif prefill:
            add(p + "mask", "mask", (rows, rows))
            if window:
                add(p + "window_mask", "mask", (rows, rows))
            add(p + "masked", "add", (b, *heads, rows, rows), rows * rows)

    other_keys = None
    if isinstance(config, GPT2Config):
        d, h, hd, ff = config.n_embd, config.n_head, config.head_dim, config.inner_dim
        keys = tokens if prefill else tokens + 1
        act = (b, rows, d)
        if batched:
            positions(rows)
            add("wte", "take", act)
            add("wpe", "take", act)
            add("wpe.add", "add", act, b * rows * d)
        else:
            add("wte", "take", act)
            add("wpe", "add", act, rows * d)
        for i in range(config.n_layer):
            p = f"h.{i}."
            add(p + "ln_1", "layer_norm", act)
            q(p + "attn.c_attn", d)
            add(p + "attn.k_cache", "kv_write", (b, h, rows, hd))
            add(p + "attn.v_cache", "kv_write", (b, h, rows, hd))
            add(p + "attn.scale", "multiply", (b, h, rows, keys), 1)
            masks(i, p + "attn.", (h,), keys)
            add(p + "attn.softmax", "softmax", (b, h, rows, keys))
            q(p + "attn.c_proj", d)
            add(p + "attn.residual", "add", act, b * rows * d)
            add(p + "ln_2", "layer_norm", act)
            q(p + "mlp.c_fc", d)
            q(p + "mlp.c_proj", ff)
            add(p + "mlp.residual", "add", act, b * rows * d)
        add("ln_f", "layer_norm", act)
        q("lm_head", d)
        return out
    if not isinstance(config, LlamaConfig):
        raise TypeError(f"config must be a GPT2Config or LlamaConfig, got {type(config).__name__}")
    d, hd, ff = config.hidden_size, config.dim_per_head, config.intermediate_size
    nh, nkv = config.num_attention_heads, config.num_key_value_heads
    g, rolling = nh // nkv, config.window
    act = (b, rows, d)
    rope = 2 * rows * hd * (b if batched else 1)  # a batch reads each sequence's rows
    gemma = config.gemma

    def layer_keys(i: int) -> int:  # keys a query of layer i attends to (a window's last W)
        window = config.layer_window(i)
        return tokens if prefill else min(window - 1, tokens) + 1 if window else tokens + 1

    other_keys = None if config.uniform_layers else next(  # those of the other kind of layer
        layer_keys(i) for i in range(config.num_hidden_layers)
        if config.layer_window(i) != config.layer_window(0))
    if batched:
        positions(rows)
    add("embed_tokens", "take", act)
    if gemma:
        add("embed_tokens.scale", "multiply", act, 1)
    for i in range(config.num_hidden_layers):
        p = f"layers.{i}."
        window, keys = config.layer_window(i), layer_keys(i)
        add(p + "input_layernorm", "rms_norm", act)
        q(p + "self_attn.q_proj", d)
        if config.qk_norm:  # Qwen3: each head's query and key RMS-normed before RoPE
            add(p + "self_attn.q_norm", "rms_norm", (b, rows, nh, hd))
        add(p + "self_attn.q_rotary", "rotary", (b, rows, nh, hd), rope)
        q(p + "self_attn.k_proj", d)
        if config.qk_norm:
            add(p + "self_attn.k_norm", "rms_norm", (b, rows, nkv, hd))
        add(p + "self_attn.k_rotary", "rotary", (b, rows, nkv, hd), rope)
        if prefill and not rolling:
            add(p + "self_attn.k_cache", "kv_write", (b, nkv, rows, hd))
            q(p + "self_attn.v_proj", d)
            add(p + "self_attn.v_cache", "kv_write", (b, nkv, rows, hd))
        else:
            q(p + "self_attn.v_proj", d)
            if not prefill:
                add(p + "self_attn.k_cache", "kv_write", (b, nkv, 1, hd))
                add(p + "self_attn.v_cache", "kv_write", (b, nkv, 1, hd))
        add(p + "self_attn.scale", "multiply", (b, nkv, g * rows, keys), 1)
        if config.attn_logit_softcapping:  # cap * tanh(score / cap), the 1 / cap in the scale
            add(p + "self_attn.softcap", "tanh", (b, nkv, g * rows, keys))
            add(p + "self_attn.softcap.scale", "multiply", (b, nkv, g * rows, keys), 1)
        masks(i, p + "self_attn.", (nkv, g), keys, window)
        add(p + "self_attn.softmax", "softmax", (b, nkv, g * rows, keys))
        q(p + "self_attn.o_proj", nh * hd)
        if prefill and rolling:
            kept = min(rolling, rows)
            add(p + "self_attn.k_cache", "kv_write", (b, nkv, kept, hd))
            add(p + "self_attn.v_cache", "kv_write", (b, nkv, kept, hd))
        float_run = activation_bits == 32 and float_gemm
        if gemma:
            add(p + "post_attention_layernorm", "rms_norm", act)
        if gemma or not _residual_fused(phase, fuse_batch, config.o_bias, float_run):
            add(p + "attn_residual", "add", act, b * rows * d)
        add(p + ("pre_feedforward_layernorm" if gemma else "post_attention_layernorm"),
            "rms_norm", act)
        q(p + "mlp.gate_proj", d)
        if config.hidden_act == "silu":  # GeGLU's GELU is gate_proj's epilogue
            add(p + "mlp.silu", "silu", (b, rows, ff))
        q(p + "mlp.up_proj", d)
        add(p + "mlp.gate_x_up", "multiply", (b, rows, ff), b * rows * ff)
        q(p + "mlp.down_proj", ff)
        if gemma:
            add(p + "post_feedforward_layernorm", "rms_norm", act)
        if gemma or not _residual_fused(phase, fuse_batch, config.mlp_bias, float_run):
            add(p + "mlp_residual", "add", act, b * rows * d)
    add("norm", "rms_norm", act)
    q("lm_head", d)
    if config.final_logit_softcapping:  # cap * tanh(logits / cap)
        logits = (b, rows, config.vocab_size)
        add("lm_head.softcap.scale", "multiply", logits, 1)
        add("lm_head.softcap", "tanh", logits)
        add("lm_head.softcap.unscale", "multiply", logits, 1)
    return out
