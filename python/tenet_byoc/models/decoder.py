"""What every decoder family (GPT-2, Llama) is built from: phases, matmul shapes, the mask.

The lowest layer of the models package (it imports no other module of it): the families,
the runner and the GEMM list all build on these pieces, so none of them imports another
family for a shared part.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op

__all__ = [
    "BATCH_FUNCTIONS",
    "MASK_VALUE",
    "PHASES",
    "LAYER_TYPES",
    "BatchLayout",
    "MatmulShape",
    "build_with_tvm",
    "call_rows_and_keys",
    "decode_layout",
    "export_decoder",
    "prefill_layout",
    "read_layer_types",
    "take_rows",
]

#: The entry points of an exported decoder, one per phase of generation.
PHASES = ("prefill", "decode")

#: The batched entry points (:func:`export_decoder` with ``batched=True``), by phase.
BATCH_FUNCTIONS = {"prefill": "prefill_batch", "decode": "decode_batch"}

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
    :meth:`mask` to its scores. Make one with :func:`prefill_layout` or
    :func:`decode_layout`.

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


def prefill_layout(ids: nn.Tensor, pad: nn.Tensor, window: int | None = None) -> BatchLayout:
    """The layout of ``prefill_batch``: ``ids [B, S]``, sequence b from slot ``pad[b]`` on.

    Slot ``j`` of sequence ``b`` holds position ``j - pad[b]``; pad slots get position 0
    (their outputs are never attended to, and 0 is a valid row of every position table).
    """
    b, s = ids.shape
    slots = op.reshape(_arange(s, "batch_slots"), [1, s])
    pos = slots - op.reshape(pad, [b, 1])
    pos = op.wrap_nested(relax.op.maximum(pos._expr, relax.const(0, "int32")),
                         name="batch_positions")
    return BatchLayout(b, s, pos, pad, causal=True, window=window)


def decode_layout(ids: nn.Tensor, position: nn.Tensor, first_key: nn.Tensor) -> BatchLayout:
    """The layout of ``decode_batch``: one token per sequence, ``ids [B, 1]``.

    ``position[b]`` is sequence b's new token's position, ``first_key[b]`` its first key
    that is not a pad slot; every later key is visible (the cache holds only the past, and
    a sliding window was applied when the cache was cut).
    """
    b = ids.shape[0]
    return BatchLayout(b, 1, op.reshape(position, [b, 1]), first_key, causal=False)


def export_decoder(
    model: nn.Module,
    n_layer: int,
    kv_heads: int,
    head_dim: int,
    params: Mapping[str, np.ndarray | tvm.runtime.Tensor] | None = None,
    position: bool = False,
    batched: bool = False,
) -> IRModule:
    """Export a decoder with entry points ``prefill(input_ids)`` and ``decode(input_id, past)``.

    ``input_ids`` is ``[1, seq_len]`` int32, ``input_id`` ``[1, 1]``, ``past`` a tuple of
    ``2 * n_layer`` float32 tensors ``[1, kv_heads, past_len, head_dim]``, followed by the
    new token's ``position`` (an ``R.Shape``) if asked; the weights follow as parameters
    unless ``params`` (checked, in the model's order) binds them into every function.

    With ``batched`` the module also has ``prefill_batch(input_ids [batch, seq_len], pad
    [batch])`` and ``decode_batch(input_id [batch, 1], past, position [batch], first_key
    [batch])``: ``batch`` left-padded sequences (``pad``: the slots before each one's first
    token; ``position``: each new token's position; ``first_key``: each sequence's first
    cached key that is not a pad slot; all int32), each cache tensor ``[batch, kv_heads,
    past_len, head_dim]``.
    """
    kv = nn.spec.Tensor([1, kv_heads, "past_len", head_dim], "float32")
    spec: dict[str, dict[str, Any]] = {
        "prefill": {"input_ids": nn.spec.Tensor([1, "seq_len"], "int32")},
        "decode": {"input_id": nn.spec.Tensor([1, 1], "int32"), "past": [kv] * (2 * n_layer)},
    }
    if position:
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


def build_with_tvm(mod: IRModule) -> relax.VMExecutable:
    """Build with TVM's own CPU pipeline (no offload): the reference build for tests."""
    target = tvm.target.Target("llvm")
    return relax.build(mod, target=target, relax_pipeline=relax.get_default_pipeline(target))
