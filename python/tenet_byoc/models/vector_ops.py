"""Every call one prefill or decode call of a dense decoder (GPT-2, the Llama family) runs,
from its config alone: the GEMMs, the epilogues fused behind them, and the operators the
vector unit runs beside them.

One walk of the layers (:func:`decoder_calls`) describes all three, per family by a few
config facts (biases, norm kind, gated MLP, windows, soft-capping), so the GEMM list
(``models.gemms.model_gemms``) and the plan's vector calls cannot drift apart. The vector
operators are those a real run charges (``tenet_byoc.vector_plan`` classifies the built
module's operators; the runtime charges them once per call, in binding order): embedding
lookup, norms (Qwen3's per-head QK norms too), rotary embeddings, KV-cache writes (at the
cache's stored width) and an int cache's quantization, the attention scale, the causal
mask, softmax, residual adds, SwiGLU's product, activation quantization.
``tests/estimate`` checks the lists against a run's ledger entry for entry.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .decoder import MatmulShape, attended_keys, call_rows_and_keys
from .gpt2 import GPT2Config
from .llama import LlamaConfig

__all__ = ["DecoderCalls", "KVCache", "VectorOpShape", "decoder_calls"]


class VectorOpShape(NamedTuple):
    """One charged operator: kind, output shape, second operand's elements (0: none)."""

    name: str
    op: str
    shape: tuple[int, ...]
    operand: int = 0
    bits_out: int = 32
    quantize: bool = False  #: an activation quantization (charged under the scheme's name)


class KVCache(NamedTuple):
    """How the KV cache stores keys and values (a scheme's ``kv_bits``, ``kv_granularity``,
    ``kv_group``): the width its writes take and, for an int cache (< 16 bits), the
    quantization of the new keys (values), one row per scale ("token": a token's over all
    KV heads, "head": one head's, "group": ``group`` channels of a head)."""

    bits: int = 32
    granularity: str = "none"
    group: int = 0

    def write(self, name: str, b: int, kv_heads: int, rows: int, hd: int) -> VectorOpShape:
        """The write of ``rows`` tokens' keys (values) to a cache ``[b, kv_heads, ., hd]``."""
        return VectorOpShape(name, "kv_write", (b, kv_heads, rows, hd), 0, min(self.bits, 32))

    def quantize(self, name: str, b: int, kv_heads: int, rows: int, hd: int
                 ) -> list[VectorOpShape]:
        """An int cache's quantization of ``rows`` new tokens' keys (values), named
        ``name + ".quantize"``: ``(b, rows, kv heads x head dim)``, or ``(b, rows, scales a
        token, row)`` for a head's or a group's scales; none for a float cache."""
        if self.bits >= 16:
            return []
        width = kv_heads * hd  # one token's keys (or values)
        row = {"token": width, "head": hd, "group": self.group}[self.granularity]
        shape = (b, rows, width) if row == width else (b, rows, width // row, row)
        return [VectorOpShape(name + ".quantize", "quantize", shape, 0, self.bits, True)]


class DecoderCalls(NamedTuple):
    """The calls of one prefill or decode call: ``gemms`` in execution order (linear layers
    with their weight as the rhs ``[k, n]``, attention's with ``weight=None``, the head
    last), the fused ``epilogues`` (bias add, activation) of each GEMM that has any, by name,
    and the other charged operators ``vectors`` in the order a run charges them."""

    gemms: list[MatmulShape]
    epilogues: dict[str, list[str]]
    vectors: list[VectorOpShape]


def decoder_calls(config: Any, phase: str, tokens: int, activation_bits: int = 32,
                  k_multiple: int = 1, batch: int = 1, float_gemm: bool = True,
                  batched: bool | None = None, context: int = 0,
                  logit_rows: int | None = None, kv_cache: KVCache = KVCache()
                  ) -> DecoderCalls:
    """Every call of one prefill or decode call of ``config`` (a ``GPT2Config`` or
    ``LlamaConfig``).

    ``tokens`` is the prompt length P of a ``prefill``, or the cache length L before a
    ``decode`` step (whose token attends to L + 1 keys; with a sliding window W to at most
    W). ``context`` > 0 makes a prefill a later chunk of a prompt: its ``tokens`` rows attend
    to the ``context`` cached keys too (the last W - 1 of them in a layer with a window), so
    Q x K^T, P x V and the score-wise calls (scale, masks, softmax, soft-capping) widen to
    those keys while norms, activations and KV writes stay over the rows.
    ``activation_bits`` < 32 adds a quantize entry before each linear layer (its K padded
    to ``k_multiple``); ``float_gemm``: the linear layers run as float GEMMs, so a decode
    step of one sequence fuses a residual add without a bias of its own into its GEMM
    (``patterns.py``; a prefill's symbolic rows or a batch's do not pass the check).
    ``batch`` > 1 lists the batched functions (``prefill_batch``/``decode_batch``): their
    positions per sequence (prefill: slot minus pad, clamped at 0), one per-sequence mask
    (pads and causality, built at the first layer and reused) added to every layer's
    scores, decode included. ``batched`` forces that form (and no residual fused into a
    GEMM) for any ``batch``: a group of sequences inside a larger step (default:
    ``batch > 1``). The GEMMs are those of one sequence either way. ``logit_rows``: the
    rows of each sequence the head runs over (default all its new tokens; 0: none, the
    head's GEMM listed with no rows and its vector calls left out). ``kv_cache``: how the
    cache stores keys and values (:class:`KVCache`): its writes at that width and, for an
    int cache, each layer's new keys and new values quantized (all the call's rows, where
    a window's cache keeps fewer).

    Raises
    ------
    TypeError
        If ``config`` is neither a ``GPT2Config`` nor a ``LlamaConfig``.
    ValueError
        If ``phase`` is unknown or ``tokens`` out of the model's context.
    """
    gpt2 = isinstance(config, GPT2Config)
    if not gpt2 and not isinstance(config, LlamaConfig):
        raise TypeError(f"config must be a GPT2Config or LlamaConfig, got {type(config).__name__}")
    limit = "n_positions" if gpt2 else "max_position_embeddings"
    rows, _ = call_rows_and_keys(phase, tokens, getattr(config, limit), limit)
    prefill = phase == "prefill"
    b, head = batch, rows if logit_rows is None else logit_rows
    if batched is None:
        batched = batch > 1
    # A decode step of one sequence has static [1, 1, d] activations: the residual add after
    # a linear layer without a bias of its own runs as that GEMM's epilogue (patterns.py);
    # the quantized patterns take only a 1-D bias.
    fused = phase == "decode" and not batched and b == 1 and float_gemm and activation_bits == 32
    gemms: list[MatmulShape] = []
    epilogues: dict[str, list[str]] = {}
    out: list[VectorOpShape] = []

    def linear(name: str, n: int, k: int, epilogue: list[str] | None = None,
               m: int = rows) -> None:
        if activation_bits < 32 and m:
            kp = -(-k // k_multiple) * k_multiple
            out.append(VectorOpShape(name + ".quantize", "quantize", (b, m, kp), 0,
                                     activation_bits, True))
        gemms.append(MatmulShape(name, 1, m, n, k))
        if epilogue:
            epilogues[name] = epilogue

    def attention(p: str, batch_heads: int, q_rows: int, keys: int, hd: int) -> None:
        gemms.append(MatmulShape(p + "attn.qk", batch_heads, q_rows, keys, hd))
        gemms.append(MatmulShape(p + "attn.pv", batch_heads, q_rows, hd, keys))

    def add(name, op, shape, operand=0):
        out.append(VectorOpShape(name, op, tuple(shape), operand))

    def kv_write(name: str, kv_heads: int, kept: int, hd: int) -> None:
        out.append(kv_cache.write(name, b, kv_heads, kept, hd))

    def kv_quantize(name: str, kv_heads: int, hd: int) -> None:  # the new rows, as stored
        out.extend(kv_cache.quantize(name, b, kv_heads, rows, hd))

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
            add(p + "mask", "mask", (rows, keys))
            if window:
                add(p + "window_mask", "mask", (rows, keys))
            add(p + "masked", "add", (b, *heads, rows, keys), rows * keys)

    other_keys = None
    d = config.n_embd if gpt2 else config.hidden_size
    act = (b, rows, d)
    if batched and prefill:  # slot - pad[b], then pad slots' negative positions clamped to 0
        add("positions", "add", (b, rows), rows)
        add("positions.clamp", "relu", (b, rows))
    if gpt2:
        h, hd, ff = config.n_head, config.head_dim, config.inner_dim
        keys = attended_keys(phase, tokens, None, context)
        add("wte", "take", act)
        if batched:
            add("wpe", "take", act)
            add("wpe.add", "add", act, b * rows * d)
        else:
            add("wpe", "add", act, rows * d)
        for i in range(config.n_layer):
            p = f"h.{i}."
            add(p + "ln_1", "layer_norm", act)
            linear(p + "attn.c_attn", 3 * d, d, ["add"])
            attention(p, h, rows, keys, hd)
            caches = (p + "attn.k_cache", p + "attn.v_cache")
            for cache in caches:  # a prefill's new keys (values), as stored, are its cache
                kv_quantize(cache, h, hd)
                if prefill:
                    kv_write(cache, h, rows, hd)
            for cache in () if prefill else caches:  # a decode step's, appended to it
                kv_write(cache, h, rows, hd)
            add(p + "attn.scale", "multiply", (b, h, rows, keys), 1)
            masks(i, p + "attn.", (h,), keys)
            add(p + "attn.softmax", "softmax", (b, h, rows, keys))
            linear(p + "attn.c_proj", d, d, ["add"])
            add(p + "attn.residual", "add", act, b * rows * d)
            add(p + "ln_2", "layer_norm", act)
            linear(p + "mlp.c_fc", ff, d, ["add", "gelu_tanh"])
            linear(p + "mlp.c_proj", d, ff, ["add"])
            add(p + "mlp.residual", "add", act, b * rows * d)
        add("ln_f", "layer_norm", act)
        linear("lm_head", config.vocab_size, d, m=head)
        return DecoderCalls(gemms, epilogues, out)
    hd, ff = config.dim_per_head, config.intermediate_size
    nh, nkv = config.num_attention_heads, config.num_key_value_heads
    g, rolling, gemma = nh // nkv, config.window, config.gemma
    rope = 2 * rows * hd * (b if batched else 1)  # a batch reads each sequence's rows
    qkv_bias, mlp_bias = ["add"] if config.qkv_bias else None, ["add"] if config.mlp_bias else None
    # Gemma norms the outputs of o_proj and down_proj before their residual adds.
    o_fused, mlp_fused = (fused and not gemma and not bias for bias in (config.o_bias,
                                                                        config.mlp_bias))
    other_keys = None if config.uniform_layers else next(  # those of the other kind of layer
        attended_keys(phase, tokens, config.layer_window(i), context)
        for i in range(config.num_hidden_layers) if config.layer_window(i) != config.layer_window(0))
    add("embed_tokens", "take", act)
    if gemma:
        add("embed_tokens.scale", "multiply", act, 1)
    for i in range(config.num_hidden_layers):
        p = f"layers.{i}."
        window = config.layer_window(i)
        keys = attended_keys(phase, tokens, window, context)
        add(p + "input_layernorm", "rms_norm", act)
        linear(p + "self_attn.q_proj", nh * hd, d, qkv_bias)
        if config.qk_norm:  # Qwen3: each head's query and key RMS-normed before RoPE
            add(p + "self_attn.q_norm", "rms_norm", (b, rows, nh, hd))
        add(p + "self_attn.q_rotary", "rotary", (b, rows, nh, hd), rope)
        linear(p + "self_attn.k_proj", nkv * hd, d, qkv_bias)
        if config.qk_norm:
            add(p + "self_attn.k_norm", "rms_norm", (b, rows, nkv, hd))
        add(p + "self_attn.k_rotary", "rotary", (b, rows, nkv, hd), rope)
        kv_quantize(p + "self_attn.k_cache", nkv, hd)
        if prefill and not rolling:
            kv_write(p + "self_attn.k_cache", nkv, rows, hd)
        linear(p + "self_attn.v_proj", nkv * hd, d, qkv_bias)
        kv_quantize(p + "self_attn.v_cache", nkv, hd)
        if prefill and not rolling:
            kv_write(p + "self_attn.v_cache", nkv, rows, hd)
        elif not prefill:
            kv_write(p + "self_attn.k_cache", nkv, 1, hd)
            kv_write(p + "self_attn.v_cache", nkv, 1, hd)
        attention(p, nkv, g * rows, keys, hd)
        add(p + "self_attn.scale", "multiply", (b, nkv, g * rows, keys), 1)
        if config.attn_logit_softcapping:  # cap * tanh(score / cap), the 1 / cap in the scale
            add(p + "self_attn.softcap", "tanh", (b, nkv, g * rows, keys))
            add(p + "self_attn.softcap.scale", "multiply", (b, nkv, g * rows, keys), 1)
        masks(i, p + "self_attn.", (nkv, g), keys, window)
        add(p + "self_attn.softmax", "softmax", (b, nkv, g * rows, keys))
        linear(p + "self_attn.o_proj", d, nh * hd, ["add"] if config.o_bias or o_fused else None)
        if prefill and rolling:
            kept = min(rolling, rows)
            kv_write(p + "self_attn.k_cache", nkv, kept, hd)
            kv_write(p + "self_attn.v_cache", nkv, kept, hd)
        if gemma:
            add(p + "post_attention_layernorm", "rms_norm", act)
        if not o_fused:
            add(p + "attn_residual", "add", act, b * rows * d)
        add(p + ("pre_feedforward_layernorm" if gemma else "post_attention_layernorm"),
            "rms_norm", act)
        if config.hidden_act == "silu":
            linear(p + "mlp.gate_proj", ff, d, mlp_bias)
            add(p + "mlp.silu", "silu", (b, rows, ff))
        else:  # GeGLU's GELU is gate_proj's epilogue
            linear(p + "mlp.gate_proj", ff, d, (mlp_bias or []) + ["gelu_tanh"])
        linear(p + "mlp.up_proj", ff, d, mlp_bias)
        add(p + "mlp.gate_x_up", "multiply", (b, rows, ff), b * rows * ff)
        linear(p + "mlp.down_proj", d, ff, ["add"] if config.mlp_bias or mlp_fused else None)
        if gemma:
            add(p + "post_feedforward_layernorm", "rms_norm", act)
        if not mlp_fused:
            add(p + "mlp_residual", "add", act, b * rows * d)
    add("norm", "rms_norm", act)
    linear("lm_head", config.vocab_size, d, m=head)
    if config.final_logit_softcapping and head:  # cap * tanh(logits / cap)
        logits = (b, head, config.vocab_size)
        add("lm_head.softcap.scale", "multiply", logits, 1)
        add("lm_head.softcap", "tanh", logits)
        add("lm_head.softcap.unscale", "multiply", logits, 1)
    return DecoderCalls(gemms, epilogues, out)
