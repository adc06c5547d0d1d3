"""The one decoder skeleton every family (GPT-2, Llama, the MoE layers) is built on.

Phases, matmul shapes and the mask; the attention over a key/value cache
(:class:`Attention`), the pre-norm block (:class:`Block`) and the model with its prefill
and decode entry points (:class:`DecoderLM`). A family chooses the parts (LayerNorm or
RMSNorm, learned or rotary positions, fused or separate q/k/v, its MLP) and names them as
its checkpoints do. The lowest layer of the models package (it imports no other module of
it), so no family imports another for a shared part.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import tvm
from tvm import relax, tirx
from tvm.ir import IRModule
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op

__all__ = [
    "MASK_VALUE",
    "PHASES",
    "LAYER_TYPES",
    "Attention",
    "BatchLayout",
    "Block",
    "DecoderLM",
    "MatmulShape",
    "attended_keys",
    "build_with_tvm",
    "call_rows_and_keys",
    "export_decoder",
    "read_layer_types",
    "take_rows",
]

#: The entry points of an exported decoder, one per phase of generation.
PHASES = ("prefill", "decode")

#: Added to attention scores a query must not see; exp() of it underflows to exactly 0 in
#: float32, so a masked key gets no weight at all.
MASK_VALUE = -1.0e9


#: A layer's attention as ``config.json``'s ``layer_types`` names it: every key, or a window.
LAYER_TYPES = ("full_attention", "sliding_attention")


def read_layer_types(values: Mapping[str, Any], period: int | None = None
                     ) -> tuple[str, ...] | None:
    """``config.json``'s ``layer_types`` (one of :data:`LAYER_TYPES` per layer), checked.

    Absent, every ``period``-th layer is full and the others sliding (Gemma's default), or
    None (every layer alike) without a ``period``. ``num_hidden_layers`` must be checked
    before.
    """
    n = values["num_hidden_layers"]
    types = values.get("layer_types")
    if types is None:
        if period is None:
            return None
        return tuple(LAYER_TYPES[(i + 1) % period != 0] for i in range(n))
    if (not isinstance(types, list | tuple) or len(types) != n
            or any(t not in LAYER_TYPES for t in types)):
        raise ValueError(f"config.json layer_types must list num_hidden_layers={n} values, "
                         f"each one of {list(LAYER_TYPES)}; got {types!r}")
    return tuple(types)


class MatmulShape(NamedTuple):
    """One matmul of a forward pass: ``batch`` independent ``[m, k] x [k, n]`` products."""

    name: str
    batch: int
    m: int
    n: int
    k: int

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the matmul."""
        return self.batch * self.m * self.n * self.k

    @property
    def weight(self) -> str | None:
        """The operand that is a weight (``"rhs"``), or None for attention's two products
        of activations (the KV cache)."""
        return None if self.name.endswith(("attn.qk", "attn.pv")) else "rhs"


def call_rows_and_keys(phase: str, seq_len: int, context: int, field: str) -> tuple[int, int]:
    """Rows (new tokens) and keys (tokens attended to) of one call, after checking them.

    ``seq_len`` is the prompt length for ``prefill`` and the cache length for ``decode``;
    ``context`` (named ``field`` in messages) bounds the keys.
    """
    if phase not in PHASES:
        raise ValueError(f"phase={phase!r}; expected one of {PHASES}")
    if isinstance(seq_len, bool) or not isinstance(seq_len, (int, np.integer)):
        raise TypeError(f"seq_len={seq_len!r} must be an integer")
    rows, keys = (seq_len, seq_len) if phase == "prefill" else (1, seq_len + 1)
    if seq_len < 0 or not 1 <= keys <= context:
        raise ValueError(f"seq_len={seq_len} out of range for {phase} with {field}={context}")
    return rows, keys


def attended_keys(phase: str, seq_len: int, window: int | None, context: int = 0) -> int:
    """Keys the queries of one layer attend to in a call (the whole block is charged).

    A ``prefill`` of ``seq_len`` new rows sees them and the ``context`` keys already cached
    (a later chunk of a prompt); a ``decode`` step's token sees the ``seq_len`` cached keys
    and its own. With a ``window`` W a query sees itself and the W - 1 tokens before it, so
    of the cache only the last W - 1 keys are read, by a chunk's first row as by a decode
    step (a one-token chunk is a decode step).
    """
    if phase == "prefill":
        return min(context, window - 1 if window else context) + seq_len
    return min(window - 1, seq_len) + 1 if window else seq_len + 1


def take_rows(table: nn.Parameter, ids: nn.Tensor) -> nn.Tensor:
    """Rows of an embedding table by token id, with ``take``'s ``clip`` mode.

    TVM's default ``fast`` take reads out of bounds (a segfault) for an id >= the table's
    rows, and warns so at every build. The runners refuse such ids before the VM runs; a
    caller of ``runner.vm`` directly gets the last row instead of a crash.
    """
    rows = relax.op.take(table._expr, ids._expr, axis=0, mode="clip")
    return op.wrap_nested(rows, name="embedding_rows")


class BatchLayout:
    """How a batched call lays out its tokens, for the layers that need the sequences apart.

    The hidden state of a batched call is ``[1, size * length, d]``: the sequences' rows one
    after another, so every linear layer is one GEMM of ``size * length`` rows sharing its
    weight (what ``estimate(batch=size)`` charges, and what an accelerator would run).
    Attention splits the rows back into ``[size, heads, length, head_dim]`` and adds
    :meth:`mask` to its scores. :meth:`DecoderLM.prefill_batch` and
    :meth:`DecoderLM.decode_batch` make one.

    Parameters
    ----------
    size, length
        Sequences B and new tokens per sequence S (the padded prompt length, or 1 in
        decode); symbolic in an exported function.
    positions : nn.Tensor
        ``[B, S]`` int32: each new token's position in its own sequence.
    first_key : nn.Tensor
        ``[B]`` int32: the keys of each sequence's attention before this index are pad
        slots, hidden from every query.
    causal : bool
        Hide keys after their query (prefill, where queries and keys are the same slots).
    window : int, optional
        With ``causal``, also hide keys W or more slots before their query (Mistral).
    """

    def __init__(self, size: Any, length: Any, positions: nn.Tensor, first_key: nn.Tensor,
                 causal: bool, window: int | None = None) -> None:
        self.size, self.length, self.positions = size, length, positions
        self.first_key, self.causal, self.window = first_key, causal, window
        self._mask: nn.Tensor | None = None

    def mask(self, keys: Any) -> nn.Tensor:
        """The additive mask ``[B, 1, S, keys]`` (0 or :data:`MASK_VALUE`) of attention.

        Built at the first layer and reused by the others (all attend to the same slots).
        Left padding keeps each sequence's tokens in consecutive slots, so slot distances
        are position distances and the window needs no per-sequence offset.
        """
        if self._mask is None:
            k = op.reshape(_arange(keys, "mask_keys"), [1, 1, 1, keys])._expr
            first = op.reshape(self.first_key, [self.size, 1, 1, 1])._expr
            hidden = relax.op.less(k, first)
            if self.causal:
                q = op.reshape(_arange(self.length, "mask_queries"),
                               [1, 1, self.length, 1])._expr
                hidden = relax.op.logical_or(hidden, relax.op.greater(k, q))
                if self.window is not None:
                    back = relax.op.greater_equal(relax.op.subtract(q, k),
                                                  relax.const(self.window, "int32"))
                    hidden = relax.op.logical_or(hidden, back)
            mask = relax.op.where(hidden, relax.const(MASK_VALUE, "float32"),
                                  relax.const(0.0, "float32"))
            self._mask = op.wrap_nested(mask, name="batch_mask")
        return self._mask


def _arange(end: Any, name: str) -> nn.Tensor:
    # From 0 only: a symbolic begin makes TVM 0.27's FuseTIR define the same variable twice
    # (once as the scalar argument, once from a shape) and fail to build.
    return op.wrap_nested(relax.op.arange(0, end, 1, dtype="int32"), name=name)


_Pair = tuple[nn.Tensor, nn.Tensor]  # (cos, sin) tables, or a layer's (K, V) cache
_Triple = tuple[nn.Tensor, nn.Tensor, nn.Tensor]  # (output, K, V)
_Out = tuple[nn.Tensor, tuple[nn.Tensor, ...]]  # (logits, cache)


def _rotate_half(x: nn.Tensor) -> nn.Tensor:
    first, second = op.split(x, 2, axis=-1)
    return op.concat([op.negative(second), first], dim=-1)


class Attention(nn.Module):
    """Causal (grouped-query) self-attention over a key/value cache, its parts chosen.

    With ``fused`` the projections are GPT-2's ``c_attn`` (q, k and v as one GEMM, split)
    and ``c_proj``, every head its own; otherwise ``q_proj``, ``k_proj``, ``v_proj`` and
    ``o_proj``, and the ``n_head / n_kv`` query heads that share a key/value head are
    stacked into the rows of one GEMM per key/value head: scores are ``R.matmul(Q[1, kv,
    g * s, hd], K^T[1, kv, hd, L])``, the context ``R.matmul(P[1, kv, g * s, L], V[1, kv, L,
    hd])``. Keys and values are never repeated, as a GQA kernel would not repeat them.

    Parameters
    ----------
    d, n_head, n_kv, head_dim : int
        Model width, query heads, key/value heads, width of one head.
    scale : float
        Multiplies the scores (with ``cap``, also divided by it: one multiply).
    fused : bool
        GPT-2's projections (see above; biased).
    qkv_bias, o_bias : bool
        Biases of the separate projections.
    qk_norm_eps : float, optional
        An RMSNorm over each query and key head before RoPE (``q_norm`` / ``k_norm``).
    window : int, optional
        The layer's attention window W (a token sees itself and the W - 1 before it).
    rolling : int, optional
        The cache keeps only the last ``rolling`` tokens (every layer has the window).
    cap : float, optional
        Soft-capping of the scaled scores, ``cap * tanh(x / cap)`` before the mask.
    """

    def __init__(self, d: int, n_head: int, n_kv: int, head_dim: int, *, scale: float,
                 fused: bool = False, qkv_bias: bool = False, o_bias: bool = False,
                 qk_norm_eps: float | None = None, window: int | None = None,
                 rolling: int | None = None, cap: float | None = None) -> None:
        self.n_head, self.n_kv, self.head_dim = n_head, n_kv, head_dim
        self.fused, self.window, self.rolling, self.cap = fused, window, rolling, cap
        self.scale = scale / (cap or 1.0)
        if fused:
            self.c_attn = nn.Linear(d, 3 * d)
            self.c_proj = nn.Linear(d, d)
        else:
            self.q_proj = nn.Linear(d, n_head * head_dim, bias=qkv_bias)
            self.k_proj = nn.Linear(d, n_kv * head_dim, bias=qkv_bias)
            self.v_proj = nn.Linear(d, n_kv * head_dim, bias=qkv_bias)
            self.o_proj = nn.Linear(n_head * head_dim, d, bias=o_bias)
        self.qk_norm = qk_norm_eps is not None
        if self.qk_norm:
            self.q_norm = nn.RMSNorm(head_dim, axes=-1, epsilon=qk_norm_eps, bias=False)
            self.k_norm = nn.RMSNorm(head_dim, axes=-1, epsilon=qk_norm_eps, bias=False)

    def forward(self, x: nn.Tensor, rope: _Pair | None, past: _Pair | None,
                batch: BatchLayout | None = None) -> _Triple:
        """Attend over the past keys/values (if any) and ``x``'s own; return output, K, V.

        ``rope`` is ``(cos, sin)``, each ``[1, s, 1, head_dim]`` for ``x``'s positions
        (``[size, length, 1, head_dim]`` with ``batch``), or None (no rotation). Without
        ``past`` (prefill) a causal mask hides later positions (and, with a window W, those
        W or more before); with it (decode, one query at the end of the sequence) every key
        is visible, the past cut to its last W - 1 tokens. The returned K and V are the
        cache to keep: with a rolling cache, its last W tokens. With ``batch`` the rows of
        ``x`` are ``batch.size`` sequences of ``batch.length`` tokens and ``batch.mask``
        (padding, causality, window) replaces the masks above.
        """
        b, s = (x.shape[0], x.shape[1]) if batch is None else (batch.size, batch.length)
        hd, g, grouped = self.head_dim, self.n_head // self.n_kv, not self.fused

        def heads(t: nn.Tensor, n: int, rotate: bool, norm: Any = None) -> nn.Tensor:
            # [b, s, n * hd] (or [1, b * s, n * hd]) -> [b, n, s, hd], normed and rotated
            t = op.reshape(t, [b, s, n, hd])
            if norm is not None:
                t = norm(t)
            if rotate and rope is not None:
                t = t * rope[0] + _rotate_half(t) * rope[1]
            return op.permute_dims(t, [0, 2, 1, 3])

        fused = op.split(self.c_attn(x), 3, axis=2) if self.fused else None

        def project(i: int) -> nn.Tensor:
            return fused[i] if fused else (self.q_proj, self.k_proj, self.v_proj)[i](x)

        q = heads(project(0), self.n_head, True, self.q_norm if self.qk_norm else None)
        k = heads(project(1), self.n_kv, True, self.k_norm if self.qk_norm else None)
        v = heads(project(2), self.n_kv, False)
        if past is not None:  # with a rolling cache, the new token sees the W - 1 before it
            keep = None if self.rolling is None else self.rolling - 1
            k = op.concat([self._last(past[0], keep), k], dim=2)
            v = op.concat([self._last(past[1], keep), v], dim=2)
        cache = k, v  # with a rolling buffer, its last W tokens (cut after the attention)
        if past is not None and self.rolling is None and self.window is not None:
            k, v = self._last(k, self.window), self._last(v, self.window)  # a view of the cache
        keys = k.shape[2]
        if grouped:
            q = op.reshape(q, [b, self.n_kv, g * s, hd])
        scores = op.matmul(q, op.permute_dims(k, [0, 1, 3, 2])) * self.scale
        if self.cap:  # soft-capping: cap * tanh(scaled score / cap), before the mask
            scores = op.tanh(scores) * self.cap
        mask = None
        if batch is not None:
            mask = batch.mask(keys)
            mask = op.reshape(mask, [b, 1, 1, s, keys]) if grouped else mask
        elif past is None:
            mask = op.triu(op.full([s, s], MASK_VALUE, dtype="float32"), diagonal=1)
            if self.window:  # and the keys W or more tokens back
                band = relax.op.tril(op.full([s, s], MASK_VALUE, dtype="float32")._expr,
                                     -self.window)
                mask = mask + op.wrap_nested(band, name="window_mask")
        if mask is not None and grouped:
            scores = op.reshape(op.reshape(scores, [b, self.n_kv, g, s, keys]) + mask,
                                [b, self.n_kv, g * s, keys])
        elif mask is not None:
            scores = scores + mask
        out = op.matmul(self._probs(scores, b, s), v)  # [b, kv, g * s, hd]
        if grouped:
            out = op.reshape(out, [b, self.n_head, s, hd])
        out = op.permute_dims(out, [0, 2, 1, 3])
        rows = [b, s, self.n_head * hd] if batch is None else [1, b * s, self.n_head * hd]
        out = op.reshape(out, rows)
        out = self.c_proj(out) if self.fused else self.o_proj(out)
        return out, self._last(cache[0], self.rolling), self._last(cache[1], self.rolling)

    def _probs(self, scores: nn.Tensor, b: Any, s: Any) -> nn.Tensor:
        # The attention weights of scores [b, kv, g * s, keys] (a sink's column in gpt-oss).
        return op.softmax(scores, axis=-1)

    @staticmethod
    def _last(t: nn.Tensor, n: int | None) -> nn.Tensor:
        # The last n tokens (axis 2) of a cache tensor; all of them when n is None.
        if n is None:
            return t
        length = t.shape[2]
        begin = tirx.max(length - n, 0)
        rows = relax.op.strided_slice(
            t._expr, axes=[2], begin=[begin], end=[length], assume_inbound=True
        )
        return op.wrap_nested(rows, name="cache_window")


class Block(nn.Module):
    """A pre-norm decoder block: ``x + attention(norm(x))``, then ``x + mlp(norm(x))``.

    A family's subclass makes its parts in checkpoint order under its checkpoints' names
    and lists those names in ``parts``: the input norm, the attention, the MLP's input norm
    and the MLP, then (Gemma's sandwich) the norms of the attention's and the MLP's
    outputs, or None.
    """

    parts: tuple[str | None, ...] = ()

    def forward(self, x: nn.Tensor, rope: _Pair | None, past: _Pair | None,
                batch: BatchLayout | None = None) -> _Triple:
        """Apply the block; return the new hidden state and this layer's K and V."""
        norm_in, attention, norm_mlp, mlp, attn_out, mlp_out = (
            None if n is None else getattr(self, n) for n in self.parts)
        attn, k, v = attention(norm_in(x), rope, past, batch)
        x = x + (attn if attn_out is None else attn_out(attn))
        y = mlp(norm_mlp(x))
        return x + (y if mlp_out is None else mlp_out(y)), k, v


class DecoderLM(nn.Module):
    """The decoder skeleton: embedding, blocks, final norm, head; prefill and decode.

    A family's subclass makes its parts in checkpoint order and names three of them in
    ``parts`` (the token embedding, the :class:`Block` list, the final norm); an untied head
    is ``lm_head``. It says how tokens enter (:meth:`_embed`: learned positions added, or
    the rotary tables each block receives). ``window`` (the rolling cache's, for batched
    prefill masks) and ``final_cap`` (soft-capped logits) are set by the subclass, and
    ``fields`` names its config's layer count, key/value heads, head width and context.
    """

    parts: tuple[str, str, str] = ("embed_tokens", "layers", "norm")
    fields = ("num_hidden_layers", "num_key_value_heads", "dim_per_head",
              "max_position_embeddings")
    window: int | None = None
    final_cap: float | None = None

    def _embed(self, ids: nn.Tensor, begin: Any, batch: BatchLayout | None
               ) -> tuple[nn.Tensor, Sequence[_Pair | None]]:
        """The hidden state of ``ids`` at positions from ``begin`` (or ``batch.positions``)
        and each block's rotary tables (None without)."""
        raise NotImplementedError

    def _run(self, ids: nn.Tensor, begin: Any, past: Sequence[nn.Tensor] | None,
             batch: BatchLayout | None = None) -> _Out:
        embed, blocks = getattr(self, self.parts[0]), getattr(self, self.parts[1])
        x, ropes = self._embed(ids, begin, batch)
        if batch is not None:  # one row axis: each linear layer is one GEMM of B * S rows
            x = op.reshape(x, [1, batch.size * batch.length, embed.weight.shape[1]])
        cache: list[nn.Tensor] = []
        for i, block in enumerate(blocks):
            layer_past = None if past is None else (past[2 * i], past[2 * i + 1])
            x, k, v = block(x, ropes[i], layer_past, batch)
            cache += [k, v]
        logits = self.head(x)
        if batch is not None:
            logits = op.reshape(logits, [batch.size, batch.length, embed.weight.shape[0]])
        return logits, tuple(cache)

    def head(self, x: nn.Tensor) -> nn.Tensor:
        """The logits of hidden states ``x``: the final norm, then the tied embedding or
        ``lm_head``, soft-capped (``cap * tanh(logits / cap)``) where ``final_cap`` says."""
        x = getattr(self, self.parts[2])(x)
        head = getattr(self, "lm_head", None)
        weight = getattr(self, self.parts[0]).weight
        logits = op.matmul(x, op.permute_dims(weight)) if head is None else head(x)
        if self.final_cap:
            logits = op.tanh(logits * (1.0 / self.final_cap)) * self.final_cap
        return logits

    def prefill(self, input_ids: nn.Tensor) -> _Out:
        """Run ``[1, seq_len]`` int32 token ids from position 0; return ``[1, seq_len,
        vocab_size]`` logits and ``2 * layers`` cache tensors ``K_0, V_0, ...``, each ``[1,
        kv_heads, seq_len, head_dim]`` (keys after RoPE)."""
        return self._run(input_ids, 0, None)

    def decode(self, input_id: nn.Tensor, past: Sequence[nn.Tensor], position: Any = None
               ) -> _Out:
        """Run one ``[1, 1]`` token at position ``past_len`` after ``past`` (``2 * layers``
        tensors ``[1, kv_heads, past_len, head_dim]``); return ``[1, 1, vocab_size]``
        logits and the cache extended by this token. With a rolling cache (it holds only
        the last tokens) the new token's ``position`` is an input (a ``R.Shape``)."""
        return self._run(input_id, past[0].shape[2] if position is None else position, past)

    def prefill_batch(self, input_ids: nn.Tensor, pad: nn.Tensor) -> _Out:
        """Run ``batch`` left-padded prompts: ``input_ids`` ``[batch, seq_len]`` int32,
        sequence ``b``'s tokens from slot ``pad[b]`` on (``pad`` ``[batch]`` int32); return
        ``[batch, seq_len, vocab_size]`` logits (rows of pad slots meaningless) and the
        cache tensors, each ``[batch, kv_heads, seq_len (or the last window), head_dim]``.

        Slot ``j`` of sequence ``b`` holds position ``j - pad[b]``; pad slots get position 0
        (their outputs are never attended to, and 0 is a valid row of every position table).
        """
        b, s = input_ids.shape
        slots = op.reshape(_arange(s, "batch_slots"), [1, s])
        pos = slots - op.reshape(pad, [b, 1])
        pos = op.wrap_nested(relax.op.maximum(pos._expr, relax.const(0, "int32")),
                             name="batch_positions")
        return self._run(input_ids, 0, None, BatchLayout(b, s, pos, pad, causal=True,
                                                         window=self.window))

    def decode_batch(self, input_id: nn.Tensor, past: Sequence[nn.Tensor], position: nn.Tensor,
                     first_key: nn.Tensor) -> _Out:
        """Run one token per sequence at slot ``past_len`` after a batch's cache.

        ``input_id`` is ``[batch, 1]``, ``past`` the cache tensors ``[batch, kv_heads,
        past_len, head_dim]`` (with a rolling cache, the last W - 1 of them are attended
        to); ``position`` ``[batch]`` int32 is each new token's position and ``first_key``
        ``[batch]`` int32 each sequence's first attended key that is not a pad slot.
        Returns ``[batch, 1, vocab_size]`` logits and the cache one slot longer (or rolled
        by one). Every key after ``first_key`` is visible (the cache holds only the past, and
        a sliding window was applied when the cache was cut).
        """
        b = input_id.shape[0]
        layout = BatchLayout(b, 1, op.reshape(position, [b, 1]), first_key, causal=False)
        return self._run(input_id, 0, past, layout)


def build_with_tvm(mod: IRModule) -> relax.VMExecutable:
    """Build with TVM's own CPU pipeline (no offload): the reference build for tests."""
    target = tvm.target.Target("llvm")
    return relax.build(mod, target=target, relax_pipeline=relax.get_default_pipeline(target))


def export_decoder(model: DecoderLM,
                   params: Mapping[str, np.ndarray | tvm.runtime.Tensor] | None = None,
                   batched: bool = False) -> IRModule:
    """Export a decoder with entry points ``prefill(input_ids)`` and ``decode(input_id, past)``.

    ``input_ids`` is ``[1, seq_len]`` int32, ``input_id`` ``[1, 1]``, ``past`` a tuple of
    ``2 * layers`` float32 tensors ``[1, kv_heads, past_len, head_dim]`` (the model's
    ``fields``), followed, with a rolling cache (``model.window``), by the new token's
    ``position`` (an ``R.Shape``); the weights follow as parameters unless ``params``
    (checked, in the model's order) binds them into every function. Every function carries
    the attribute ``num_input``, the number of arguments before the weights.

    With ``batched`` the module also has ``prefill_batch(input_ids, pad)`` and
    ``decode_batch(input_id, past, position, first_key)`` (see
    :meth:`DecoderLM.prefill_batch` and :meth:`DecoderLM.decode_batch`).
    """
    n_layer, kv_heads, head_dim = (getattr(model.config, f) for f in model.fields[:3])
    kv = nn.spec.Tensor([1, kv_heads, "past_len", head_dim], "float32")
    spec: dict[str, dict[str, Any]] = {
        "prefill": {"input_ids": nn.spec.Tensor([1, "seq_len"], "int32")},
        "decode": {"input_id": nn.spec.Tensor([1, 1], "int32"), "past": [kv] * (2 * n_layer)},
    }
    if model.window is not None:
        spec["decode"]["position"] = nn.spec.Int()
    if batched:
        kv_b = nn.spec.Tensor(["batch", kv_heads, "past_len", head_dim], "float32")
        pad = nn.spec.Tensor(["batch"], "int32")
        spec["prefill_batch"] = {"input_ids": nn.spec.Tensor(["batch", "seq_len"], "int32"),
                                 "pad": pad}
        spec["decode_batch"] = {"input_id": nn.spec.Tensor(["batch", 1], "int32"),
                                "past": [kv_b] * (2 * n_layer), "position": pad,
                                "first_key": pad}
    mod, _ = model.export_tvm(spec=spec)
    if params is not None:
        # A tvm.runtime.Tensor is bound as it is: copying it would hold the weights twice.
        values = {n: v if isinstance(v, tvm.runtime.Tensor) else tvm.runtime.tensor(v)
                  for n, v in params.items()}
        for func in spec:
            mod = relax.transform.BindParams(func, values)(mod)
    return mod
