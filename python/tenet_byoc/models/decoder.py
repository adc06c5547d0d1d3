"""What every decoder family (GPT-2, Llama) is built from: phases, matmul shapes, the mask.

The lowest layer of the models package (it imports no other module of it): the families,
the runner and the GEMM list all build on these pieces, so none of them imports another
family for a shared part.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np
import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op

__all__ = [
    "MASK_VALUE",
    "PHASES",
    "MatmulShape",
    "build_with_tvm",
    "call_rows_and_keys",
    "export_decoder",
    "take_rows",
]

#: The entry points of an exported decoder, one per phase of generation.
PHASES = ("prefill", "decode")

#: Added to attention scores a query must not see; exp() of it underflows to exactly 0 in
#: float32, so a masked key gets no weight at all.
MASK_VALUE = -1.0e9


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


def export_decoder(
    model: nn.Module,
    n_layer: int,
    kv_heads: int,
    head_dim: int,
    params: Mapping[str, np.ndarray] | None = None,
    position: bool = False,
) -> IRModule:
    """Export a decoder with entry points ``prefill(input_ids)`` and ``decode(input_id, past)``.

    ``input_ids`` is ``[1, seq_len]`` int32, ``input_id`` ``[1, 1]``, ``past`` a tuple of
    ``2 * n_layer`` float32 tensors ``[1, kv_heads, past_len, head_dim]``, followed by the
    new token's ``position`` (an ``R.Shape``) if asked; the weights follow as parameters
    unless ``params`` (checked, in the model's order) binds them into both functions.
    """
    kv = nn.spec.Tensor([1, kv_heads, "past_len", head_dim], "float32")
    spec = {
        "prefill": {"input_ids": nn.spec.Tensor([1, "seq_len"], "int32")},
        "decode": {"input_id": nn.spec.Tensor([1, 1], "int32"), "past": [kv] * (2 * n_layer)},
    }
    if position:
        spec["decode"]["position"] = nn.spec.Int()
    mod, _ = model.export_tvm(spec=spec)
    if params is not None:
        values = {n: tvm.runtime.tensor(v) for n, v in params.items()}
        for func in ("prefill", "decode"):
            mod = relax.transform.BindParams(func, values)(mod)
    return mod


def build_with_tvm(mod: IRModule) -> relax.VMExecutable:
    """Build with TVM's own CPU pipeline (no offload): the reference build for tests."""
    target = tvm.target.Target("llvm")
    return relax.build(mod, target=target, relax_pipeline=relax.get_default_pipeline(target))
