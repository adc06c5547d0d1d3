"""Test helpers: Relax modules built from shapes, running them, and offload inspection."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

import tenet_byoc

ACTIVATIONS = {
    None: None,
    "relu": relax.op.nn.relu,
    "gelu": relax.op.nn.gelu,
    "gelu_tanh": relax.op.nn.gelu_tanh,
}


def matmul_module(
    lhs_shape,
    rhs_shape,
    *,
    transposed: bool = False,
    bias: bool = False,
    activation: str | None = None,
    dtype: str = "float32",
) -> tvm.IRModule:
    """``main(x, w[, b]) = act(x @ (w or w^T) [+ b])`` as a Relax module.

    With ``transposed``, ``rhs_shape`` is the stored shape [..., N, K] and the module applies
    ``R.permute_dims`` swapping the last two axes (the linear-layer form).
    """
    x = relax.Var("x", relax.TensorType(lhs_shape, dtype))
    w = relax.Var("w", relax.TensorType(rhs_shape, dtype))
    params = [x, w]
    n = rhs_shape[-2] if transposed else rhs_shape[-1]
    if bias:
        b = relax.Var("b", relax.TensorType((n,), dtype))
        params.append(b)
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            rhs = w
            if transposed:
                rank = len(rhs_shape)
                axes = None if rank == 2 else list(range(rank - 2)) + [rank - 1, rank - 2]
                rhs = bb.emit(relax.op.permute_dims(w, axes))
            y = bb.emit(relax.op.matmul(x, rhs))
            if bias:
                y = bb.emit(relax.op.add(y, b))
            if activation is not None:
                y = bb.emit(ACTIVATIONS[activation](y))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def run(ex, *arrays, func: str = "main"):
    """Run ``func`` of an executable on numpy arrays and return numpy output(s)."""
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm[func](*[tvm.runtime.tensor(a) for a in arrays])
    if isinstance(out, tvm.runtime.Tensor):
        return out.numpy()
    return [o.numpy() for o in out]


def offloaded_symbols(mod: tvm.IRModule) -> list[str]:
    """Composite pattern names that partition_for_tenet puts on the tenet backend."""
    part = tenet_byoc.partition_for_tenet(mod)
    names = []
    for func in part.functions.values():
        if isinstance(func, relax.Function) and func.attrs and "Codegen" in func.attrs:
            for b in func.body.blocks:
                for binding in b.bindings:
                    v = binding.value
                    if isinstance(v, relax.Function) and "Composite" in v.attrs:
                        names.append(str(v.attrs["Composite"]))
    return names


def assert_rel_close(actual, expected, rtol=1e-5):
    """Max abs error within rtol of the largest magnitude of the reference."""
    scale = max(float(np.abs(expected).max()), 1.0)
    np.testing.assert_allclose(actual, expected, rtol=0, atol=rtol * scale)
