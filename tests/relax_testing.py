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


def packed_int4_group_module(wp, zp, scale, m, *, stack_axis=-1, bias=None, activation=None):
    """``main(x[m, K]) = act(x @ W^T [+ bias])`` with W the Relax unpacking of packed int4.

    ``W[n, g*G + j] = (nibble - zp) * scale[n, g]``: ``wp`` is [N, K/2] uint8 (element 2i in
    the low nibble of byte i with the default ``stack_axis``), ``zp`` one value or [N, K/G, 1],
    ``scale`` [N, K/G, 1].
    """
    n, half = wp.shape
    k, groups = 2 * half, scale.shape[1]
    x = relax.Var("x", relax.TensorType((m, k), "float32"))
    bb, op = relax.BlockBuilder(), relax.op
    with bb.function("main", [x]):
        with bb.dataflow():
            packed = relax.const(wp)  # one tensor feeds both nibbles
            low = bb.emit(op.bitwise_and(packed, relax.const(np.uint8(15))))
            high = bb.emit(op.right_shift(packed, relax.const(np.uint8(4))))
            stacked = bb.emit(op.stack([low, high], axis=stack_axis))
            nib = bb.emit(op.reshape(stacked, (n, groups, k // groups)))
            cen = bb.emit(op.subtract(bb.emit(op.astype(nib, "float32")), relax.const(zp)))
            w = bb.emit(op.reshape(bb.emit(op.multiply(cen, relax.const(scale))), (n, k)))
            y = bb.emit(op.matmul(x, bb.emit(op.permute_dims(w))))
            if bias is not None:
                y = bb.emit(op.add(y, relax.const(bias)))
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


def matmuls_left_on_tvm(mod: tvm.IRModule) -> int:
    """Matmuls partition_for_tenet leaves on TVM's path (outside tenet functions)."""
    part = tenet_byoc.partition_for_tenet(mod)
    left = 0
    for func in part.functions.values():
        if not isinstance(func, relax.Function) or (func.attrs and (
                "Codegen" in func.attrs or "Composite" in func.attrs)):
            continue
        for block in func.body.blocks:
            for binding in block.bindings:
                v = binding.value
                left += isinstance(v, relax.Call) and v.op.same_as(tvm.ir.Op.get("relax.matmul"))
    return left
