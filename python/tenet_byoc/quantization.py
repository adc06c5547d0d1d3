"""Quantization schemes as a Relax pass: linear layers rewritten to int8 / int4 forms.

Each scheme is a named :class:`QuantScheme`. :func:`quantize` rewrites every linear layer
of a module (``R.matmul(x, R.permute_dims(W))`` with ``W`` a constant) into the scheme's
Relax form, which the ``tenet.*dequantize*`` patterns offload whole; the module stays a
normal Relax module that TVM's own build also runs (the tests' reference). Weights are
quantized symmetrically (zero point 0) at compile time; activations of the int8 schemes
are quantized dynamically, per call, in the graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax
from tvm.ir.expr import GenericConst

#: The module attribute naming the scheme :func:`quantize` applied; the partition step
#: carries it to the codegen, which records it on every quantized call.
SCHEME_ATTR = "tenet.quant_scheme"

_MATMUL = tvm.ir.Op.get("relax.matmul")
_PERMUTE = tvm.ir.Op.get("relax.permute_dims")


@dataclass(frozen=True)
class QuantScheme:
    """How weights (B) and activations (A) of a linear layer are stored and computed.

    Attributes
    ----------
    name : str
        The scheme's name, shown in ledgers and reports.
    weight_bits : int
        32 (float), 8 or 4.
    weight_granularity : str
        ``"none"``, ``"tensor"`` (one scale), ``"channel"`` (one per output channel) or
        ``"group"`` (one per ``group_size`` input channels of each output channel).
    activation_bits : int
        32 (float), 16 (float16 on the accelerator) or 8 (int8).
    activation_granularity : str
        ``"none"``, ``"tensor"`` (one dynamic scale per call) or ``"token"`` (one per row).
    group_size : int
        G for group-wise schemes. When G does not divide K, :func:`quantize` pads K with
        zeros to the next multiple of G (the activation in the graph, the weight at compile
        time); :func:`quantize_weight` alone refuses such a weight.
    """

    name: str
    weight_bits: int
    weight_granularity: str
    activation_bits: int
    activation_granularity: str
    group_size: int = 0

    def __post_init__(self) -> None:
        allowed = {
            "weight_bits": (32, 8, 4),
            "weight_granularity": ("none", "tensor", "channel", "group"),
            "activation_bits": (32, 16, 8),
            "activation_granularity": ("none", "tensor", "token"),
        }
        for field, values in allowed.items():
            if getattr(self, field) not in values:
                raise ValueError(
                    f"QuantScheme.{field}={getattr(self, field)!r}; expected one of {values}"
                )
        if (self.weight_granularity == "group") != (self.group_size > 0):
            raise ValueError(
                f"QuantScheme.group_size={self.group_size} must be > 0 exactly for group-wise "
                "weights"
            )
        if self.group_size % 2:
            raise ValueError(
                f"QuantScheme.group_size={self.group_size} must be even: int4 values are "
                "packed two to a byte"
            )
        form = (self.weight_bits, self.weight_granularity, self.activation_bits)
        supported = {
            (32, "none", 32),
            (8, "channel", 16),
            (4, "group", 16),
            (8, "tensor", 8),
            (8, "channel", 8),
        }
        if form not in supported:
            raise ValueError(
                f"QuantScheme {self.name!r}: weights {self.weight_bits}-bit per "
                f"{self.weight_granularity} with {self.activation_bits}-bit activations has no "
                "runtime kernel; supported: w32a32, w8a16 per channel, w4a16 per group, w8a8"
            )


SCHEMES: dict[str, QuantScheme] = {
    s.name: s
    for s in [
        QuantScheme("none", 32, "none", 32, "none"),
        QuantScheme("w8a8_per_tensor", 8, "tensor", 8, "tensor"),
        QuantScheme("w8a8_per_channel_per_token", 8, "channel", 8, "token"),
        QuantScheme("w8a16_per_channel", 8, "channel", 16, "none"),
        QuantScheme("w4a16_group32", 4, "group", 16, "none", 32),
        QuantScheme("w4a16_group64", 4, "group", 16, "none", 64),
        QuantScheme("w4a16_group128", 4, "group", 16, "none", 128),
    ]
}


def get_scheme(scheme: str | QuantScheme) -> QuantScheme:
    """A scheme by name (see :data:`SCHEMES`), or the scheme itself."""
    if isinstance(scheme, QuantScheme):
        return scheme
    if scheme not in SCHEMES:
        raise ValueError(f"unknown quantization scheme {scheme!r}; available: {', '.join(SCHEMES)}")
    return SCHEMES[scheme]


def quantize_weight(
    w: np.ndarray, scheme: QuantScheme, name: str = "weight"
) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric quantization of a float weight ``w[N, K]`` (output channels first).

    A weight with NaN or infinite values is refused (``ValueError`` naming ``name``): its
    scale would be NaN or be replaced by 1.0, and the layer would silently compute zeros
    or garbage where float32 would propagate the NaN.

    Returns
    -------
    q : numpy.ndarray
        int8 values: ``[N, K]``, or ``[N, K/G, G]`` holding int4 values in [-8, 7].
    scale : numpy.ndarray
        float32: ``[]`` per tensor, ``[N]`` per channel, ``[N, K/G, 1]`` per group, such
        that ``q * scale`` approximates ``w``.
    """
    n, k = w.shape
    bad = np.argwhere(~np.isfinite(w))
    if bad.size:
        i, j = (int(v) for v in bad[0])
        raise ValueError(
            f"quantize({scheme.name}): {name} has {len(bad)} non-finite value(s), the first "
            f"{w[i, j]} at [{i}, {j}]; quantized schemes need finite weights"
        )
    if scheme.weight_granularity == "group":
        g = scheme.group_size
        if k % g:
            raise ValueError(
                f"scheme {scheme.name}: group size {g} does not divide K={k} (the input "
                "channels of a [N, K] weight); pad K to a multiple of the group size"
            )
        grouped = w.reshape(n, k // g, g)
        scale = np.abs(grouped).max(axis=2, keepdims=True) / 7.0
        qmax, qmin = 7, -8
    elif scheme.weight_granularity == "channel":
        grouped = w
        scale = np.abs(w).max(axis=1) / 127.0
        qmax, qmin = 127, -127
    else:
        grouped = w
        scale = np.array(np.abs(w).max() / 127.0)
        qmax, qmin = 127, -127
    scale = np.where(scale > 0, scale, 1.0).astype("float32")
    denom = scale if scale.ndim != 1 else scale[:, None]
    q = np.clip(np.rint(grouped / denom), qmin, qmax).astype("int8")
    return q, scale


#: The zero point of packed int4 weights: a nibble u in [0, 15] holds the value u - 8.
INT4_ZERO_POINT = 8


def pack_int4(q: np.ndarray) -> np.ndarray:
    """Pack int4 values ``q[N, ...]`` in [-8, 7] two to a byte: ``uint8[N, K/2]``.

    Element ``2j`` of a row is the low nibble of byte ``j``, element ``2j + 1`` the high
    one; a nibble holds ``value + 8`` (the layout and offset MLC-LLM's q4 formats use).
    """
    n = q.shape[0]
    u = q.reshape(n, -1).astype(np.int16) + INT4_ZERO_POINT
    if u.shape[1] % 2 or u.min(initial=0) < 0 or u.max(initial=0) > 15:
        raise ValueError("pack_int4 needs an even number of values in [-8, 7] per row")
    u = u.astype(np.uint8)
    return (u[:, 0::2] | (u[:, 1::2] << 4)).astype(np.uint8)


def _const(value, dtype: str) -> GenericConst:
    return relax.const(np.asarray(value, dtype=dtype), dtype)


@relax.expr_functor.mutator
class _LinearQuantizer(relax.PyExprMutator):
    """Rewrites ``matmul(x, permute_dims(W))`` with a constant float32 ``W[N, K]``."""

    def __init__(self, mod: tvm.IRModule, scheme: QuantScheme):
        super().__init__(mod)
        self.scheme = scheme
        self.rewritten = 0
        self.params: set[relax.Var] = set()
        self.func_name = "a function"

    def _binding_of(self, expr: relax.Expr) -> relax.Expr:
        while isinstance(expr, relax.Var):
            bound = self.lookup_binding(expr)
            if bound is None:
                break
            expr = bound
        return expr

    def visit_function_(self, func: relax.Function) -> relax.Expr:
        self.params = set(func.params)
        name = func.attrs.get("global_symbol") if func.attrs is not None else None
        self.func_name = f"function {str(name)!r}" if name is not None else "a function"
        return super().visit_function_(func)

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not call.op.same_as(_MATMUL):
            return call
        x, rhs = call.args
        transpose = self._binding_of(rhs)
        if not (isinstance(transpose, relax.Call) and transpose.op.same_as(_PERMUTE)):
            return call
        weight = transpose.args[0]
        bound = self._binding_of(weight)
        is_linear = isinstance(bound, GenericConst) or weight in self.params
        ty = weight.ty
        if not (is_linear and isinstance(ty, relax.TensorType) and ty.ndim == 2):
            return call  # an activation x activation matmul (attention): left as it is
        if ty.dtype != "float32" or x.ty.dtype != "float32":
            return call
        if not isinstance(bound, GenericConst):
            raise ValueError(  # noqa: TRY004 (a constant is what is wrong, not a type)
                f"quantize({self.scheme.name}): the weight {weight.name} of a linear layer is "
                "a function parameter, not a constant; bind the weights first (e.g. "
                "export_gpt2(config, params), mlp_module(params), or relax.transform.BindParams)"
            )
        self.rewritten += 1
        shape = [int(d) for d in ty.shape]
        where = f"the weight {shape} of linear layer {self.rewritten} of {self.func_name}"
        if isinstance(weight, relax.Var):
            where += f" ({weight.name_hint})"
        return self._rewrite(x, bound.value.numpy(), where)

    def _rewrite(self, x: relax.Expr, w: np.ndarray, name: str) -> relax.Expr:
        s, bb, op = self.scheme, self.builder_, relax.op
        n, k = w.shape
        pad = (-k) % s.group_size if s.group_size else 0
        if pad:
            # Zero input channels contribute nothing: x @ W^T is unchanged, and the
            # accelerator is charged for the padded K it would really run.
            w = np.concatenate([w, np.zeros((n, pad), w.dtype)], axis=1)
            rank = x.ty.ndim
            x = bb.emit(op.nn.pad(x, [0, 0] * (rank - 1) + [0, pad]))
            k += pad
        q, scale = quantize_weight(w, s, name)
        if s.activation_bits == 16:
            # float16 activations on the accelerator: round them, compute in float32.
            x = bb.emit(op.astype(bb.emit(op.astype(x, "float16")), "float32"))
            if s.weight_granularity == "channel":
                deq = op.dequantize(_const(q, "int8"), _const(scale, "float32"),
                                    _const(0, "int8"), axis=0, out_dtype="float32")
            else:
                # Packed int4: unpack the nibbles, remove the zero point, scale per group.
                packed = _const(pack_int4(q), "uint8")
                low = bb.emit(op.bitwise_and(packed, _const(15, "uint8")))
                high = bb.emit(op.right_shift(packed, _const(4, "uint8")))
                nibbles = bb.emit(op.reshape(bb.emit(op.stack([low, high], axis=-1)), q.shape))
                centred = bb.emit(op.subtract(bb.emit(op.astype(nibbles, "float32")),
                                              _const(INT4_ZERO_POINT, "float32")))
                scaled = op.multiply(centred, _const(scale, "float32"))
                deq = op.reshape(bb.emit(scaled), (n, k))
            return op.matmul(x, bb.emit(op.permute_dims(bb.emit(deq))))
        per_token = s.activation_granularity == "token"
        absmax = bb.emit(op.max(bb.emit(op.abs(x)), axis=-1 if per_token else None,
                                keepdims=per_token))
        # max() drops NaN, and a NaN cast to int8 is undefined: a non-finite activation
        # would vanish (or differ between builds). `poison` is 0 for a finite row (or
        # tensor) and NaN otherwise; added to the scale it makes that row's (or the whole
        # per-tensor call's) output NaN, as float32 would, in tenet and TVM's build alike.
        # (sum(x * 0) would not do: TVM folds x * 0 to 0.)
        finite = bb.emit(op.min(bb.emit(op.astype(bb.emit(op.isfinite(x)), "float32")),
                                axis=-1 if per_token else None, keepdims=per_token))
        poison = bb.emit(op.where(bb.emit(op.greater(finite, _const(0.5, "float32"))),
                                  _const(0.0, "float32"), _const(np.nan, "float32")))
        floor = bb.emit(op.maximum(absmax, _const(1e-12, "float32")))
        sa = bb.emit(op.divide(bb.emit(op.add(floor, poison)), _const(127.0, "float32")))
        rounded = bb.emit(op.round(bb.emit(op.divide(x, sa))))
        clipped = bb.emit(op.clip(rounded, -127.0, 127.0))
        xq = bb.emit(op.astype(clipped, "int8"))
        acc = bb.emit(op.matmul(xq, bb.emit(op.permute_dims(_const(q, "int8"))),
                                out_dtype="int32"))
        scaled = bb.emit(op.multiply(bb.emit(op.astype(acc, "float32")), sa))
        return op.multiply(scaled, _const(scale, "float32"))


def quantize(mod: tvm.IRModule, scheme: str | QuantScheme) -> tvm.IRModule:
    """Rewrite the linear layers of ``mod`` to ``scheme``.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module whose linear layers are ``R.matmul(x, R.permute_dims(W))`` with
        ``W[N, K]`` a bound float32 constant. Other matmuls (attention) are left alone.
    scheme : str or QuantScheme
        A name from :data:`SCHEMES` or a scheme.

    Returns
    -------
    tvm.IRModule
        The rewritten module (unchanged for ``"none"``), with the scheme's name in the
        module attribute ``tenet.quant_scheme``.

    Raises
    ------
    TypeError
        If ``mod`` is not an IRModule.
    ValueError
        For an unknown scheme, a linear layer whose weight is a function parameter
        rather than a constant, or a weight with NaN or infinite values (named).
    """
    if not isinstance(mod, tvm.IRModule):
        raise TypeError(f"quantize takes a tvm.IRModule, got {type(mod).__name__}")
    s = get_scheme(scheme)
    if s.name == "none":
        return mod
    quantizer = _LinearQuantizer(mod, s)
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            quantizer.builder_.update_func(gv, quantizer.visit_expr(func))
    out = relax.transform.DeadCodeElimination()(quantizer.builder_.get())
    return out.with_attr(SCHEME_ATTR, s.name)


__all__ = ["SCHEMES", "SCHEME_ATTR", "QuantScheme", "get_scheme", "pack_int4", "quantize", "quantize_weight"]
