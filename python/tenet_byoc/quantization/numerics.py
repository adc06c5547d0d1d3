"""The numerics of each format: integer and float element codes, scales and their rounding.

Weights are quantized at compile time with numpy (``ml_dtypes`` for the small float
formats); activations and the KV cache are rounded in the graph with Relax ops, the same
arithmetic, so that the offloaded build and TVM's own build compute the same values. A
scale that its dtype cannot hold (an fp16 scale above 65504, one that rounds to 0) is
refused here rather than turning a layer's outputs into inf, NaN or zeros.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import ml_dtypes
import numpy as np
from tvm import relax
from tvm.ir.expr import GenericConst

from .scheme import QuantScheme


@dataclass(frozen=True)
class FloatFormat:
    """A small float element format: its ml_dtypes type, largest value, mantissa bits,
    smallest normal exponent and largest exponent (the MX spec's emax_elem)."""

    dtype: type
    max_value: float
    mantissa_bits: int
    min_exponent: int
    max_exponent: int


FLOAT_FORMATS = {
    "e4m3": FloatFormat(ml_dtypes.float8_e4m3fn, 448.0, 3, -6, 8),
    "e5m2": FloatFormat(ml_dtypes.float8_e5m2, 57344.0, 2, -14, 15),
    "e2m1": FloatFormat(ml_dtypes.float4_e2m1fn, 6.0, 1, 0, 2),
}


def int_range(bits: int, symmetric: bool = True) -> tuple[int, int]:
    """The codes of a ``bits``-bit integer format: symmetric int8 uses [-127, 127] (so
    -128 never meets the int8 kernels), narrower symmetric ints the two's-complement range
    (int4: [-8, 7], as MLC-LLM's q4 formats); asymmetric ones [0, 2^bits - 1]."""
    if not symmetric:
        return 0, 2**bits - 1
    qmax = 2 ** (bits - 1) - 1
    return (-qmax if bits == 8 else -qmax - 1), qmax


# ----------------------------------------------------------------------------------------
# Weights, at compile time (numpy).


#: The finite, nonzero values each scale dtype holds (fp16 down to its subnormals; e8m0 is
#: 2^-127 to 2^127).
SCALE_RANGES = {"fp16": (2.0**-24, 65504.0), "fp32": (2.0**-149, 3.4028234663852886e38),
                "e8m0": (2.0**-127, 2.0**127)}


def _refuse_scale(bad: np.ndarray, wanted: np.ndarray, dtype: str, scheme: QuantScheme,
                  name: str) -> None:
    """Raise naming the layer and the scale dtype where ``bad`` marks a scale that dtype
    cannot hold (``wanted``: the scales before rounding, ``[N, K/G, 1]``)."""
    if not bad.any():
        return
    where = tuple(int(v) for v in np.argwhere(bad)[0])
    value = float(np.asarray(wanted, np.float64)[where])
    lo, hi = SCALE_RANGES[dtype]
    what = "overflows" if not math.isfinite(value) or value > hi else "underflows to 0 in"
    at = ("" if scheme.weight_granularity == "tensor" else
          f" (output channel {where[0]}" + (f", group {where[1]})"
                                            if scheme.weight_granularity == "group" else ")"))
    raise ValueError(
        f"quantize({scheme.name}): {name}: {int(bad.sum())} scale(s) not representable in "
        f"{dtype}: the first{at} would be {value:.6g}, which {what} {dtype} (it holds "
        f"{lo:.3g} to {hi:.6g}); the weights are too {'large' if what == 'overflows' else 'small'}"
        f" for this scheme's {dtype} scales: rescale them or use fp32 scales"
    )


def _round_scale(spread: np.ndarray, top: float, scheme: QuantScheme,
                 name: str) -> np.ndarray:
    """Scales as stored, ``spread / top`` (float32) rounded to the scale dtype (fp16 to
    nearest; e8m0 is the MX path). One its dtype cannot hold is refused; an all-zero block
    keeps scale 1."""
    dtype = scheme.scale_dtype
    with np.errstate(over="ignore", under="ignore"):
        scale = spread / np.float32(top)
        if dtype == "fp16":
            scale = scale.astype(np.float16).astype(np.float32)
    wanted = np.asarray(spread, np.float64) / top
    _refuse_scale(~np.isfinite(scale) | ((spread > 0) & (scale == 0)), wanted, dtype, scheme,
                  name)
    return np.where(scale > 0, scale, np.float32(1.0)).astype(np.float32)


def _pow2_floor_log2(amax: np.ndarray, emax: int, scheme: QuantScheme, name: str,
                     shift: int = 0) -> np.ndarray:
    """MX's shared scale 2^(floor(log2(amax)) - emax_elem), 1 for an all-zero block; one
    outside e8m0's exponents (-127 to 127) is refused. ``shift`` divides the result by
    2^shift after the check (an MX int element's fixed point, not part of the stored scale)."""
    safe = np.where(amax > 0, amax, np.float32(1.0))
    exponent = np.floor(np.log2(safe.astype(np.float64))) - emax
    _refuse_scale((amax > 0) & ((exponent < -127) | (exponent > 127)), np.exp2(exponent),
                  "e8m0", scheme, name)
    scale = np.where(amax > 0, np.exp2(exponent), 1.0).astype(np.float32)
    return scale / np.float32(2**shift) if shift else scale


#: Elements per block where a weight is reduced a block of rows at a time (16 MB of float32).
_BLOCK_ELEMENTS = 1 << 22


def _row_blocks(a: np.ndarray):
    """Views of consecutive blocks of the rows of ``a`` (its first axis), about
    :data:`_BLOCK_ELEMENTS` elements each."""
    rows = max(1, _BLOCK_ELEMENTS // max(1, a[:1].size))
    for start in range(0, max(len(a), 1), rows):
        yield a[start:start + rows]


def weight_codes(w: np.ndarray, scheme: QuantScheme,
                 name: str = "weight") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The stored form of a float weight ``w[N, K]`` under ``scheme``.

    A weight with NaN or infinite values is refused (``ValueError`` naming ``name``): its
    scale would be NaN or be replaced by 1.0, and the layer would silently compute zeros
    or garbage where float32 would propagate the NaN.

    Returns
    -------
    codes : numpy.ndarray
        float32 ``[N, K/G, G]`` (G = K per tensor or channel): integer codes (``uint``:
        before the zero point is removed) or the format's values, exact in float32.
    scale : numpy.ndarray
        float32 ``[N, K/G, 1]``, rounded to the scale dtype (1 for float16 weights).
    zero_point : numpy.ndarray
        float32 ``[N, K/G, 1]`` (0 unless the format is ``uint``); the weight is
        ``(codes - zero_point) * scale``.
    """
    n, k = w.shape
    s = scheme
    if not all(np.isfinite(block).all() for block in _row_blocks(w)):
        # argwhere over every weight costs more than the check itself: only on failure
        bad = np.argwhere(~np.isfinite(w))
        i, j = (int(v) for v in bad[0])
        raise ValueError(
            f"quantize({s.name}): {name} has {len(bad)} non-finite value(s), the first "
            f"{w[i, j]} at [{i}, {j}]; quantized schemes need finite weights"
        )
    w = np.asarray(w, dtype=np.float32)  # no copy of a float32 weight (GPT-2's head: 154 MB)
    g = s.group_size if s.weight_granularity == "group" else k
    if k % g:
        raise ValueError(
            f"scheme {s.name}: group size {g} does not divide K={k} (the input channels of "
            "a [N, K] weight); pad K to a multiple of the group size"
        )
    grouped = w.reshape(n, k // g, g)
    zeros = np.zeros((n, k // g, 1), np.float32)
    if s.weight_format == "float":  # float16 storage: no scale
        with np.errstate(over="ignore"):
            stored = grouped.astype(np.float16)
        big = np.isinf(stored)
        if big.any():
            i, j, e = (int(v) for v in np.argwhere(big)[0])
            raise ValueError(
                f"quantize({s.name}): {name} has {int(big.sum())} value(s) beyond float16's "
                f"largest, 65504, the first {grouped[i, j, e]:.6g} at [{i}, {j * g + e}]; they "
                "would be stored as inf"
            )
        return stored.astype(np.float32), np.ones_like(zeros), zeros
    # max |w| a block of rows at a time: one block-sized temporary, not a weight-sized one
    if s.weight_granularity == "tensor":
        top = max((float(np.abs(b).max()) for b in _row_blocks(w) if b.size), default=0.0)
        amax = np.full(zeros.shape, top, np.float32)
    else:
        amax = np.concatenate([np.abs(b).max(axis=2, keepdims=True)
                               for b in _row_blocks(grouped)])
    fmt = FLOAT_FORMATS.get(s.weight_format)
    if s.scale_dtype == "e8m0":  # MX int elements are fixed point 1.(b-2), emax_elem 0
        scale = (_pow2_floor_log2(amax, fmt.max_exponent, s, name) if fmt is not None
                 else _pow2_floor_log2(amax, 0, s, name, shift=s.weight_bits - 2))
    elif fmt is not None:
        scale = _round_scale(amax, fmt.max_value, s, name)
    elif s.weight_format == "uint":
        per_tensor = s.weight_granularity == "tensor"
        lo = np.broadcast_to(w.min(), zeros.shape) if per_tensor else grouped.min(2, keepdims=True)
        hi = np.broadcast_to(w.max(), zeros.shape) if per_tensor else grouped.max(2, keepdims=True)
        qmin, qmax = int_range(s.weight_bits, symmetric=False)
        with np.errstate(over="ignore"):  # a range beyond float32 is refused as a scale
            spread = hi - lo
        scale = _round_scale(spread, qmax, s, name)
        zp = np.clip(np.rint(-lo / scale), qmin, qmax).astype(np.float32)
        q = np.clip(np.rint(grouped / scale) + zp, qmin, qmax).astype(np.float32)
        return q, scale, zp
    else:
        _, qmax = int_range(s.weight_bits)
        scale = _round_scale(amax, qmax, s, name)
    if fmt is not None:
        v = np.clip(grouped / scale, -fmt.max_value, fmt.max_value)
        return v.astype(fmt.dtype).astype(np.float32), scale, zeros
    qmin, qmax = int_range(s.weight_bits)
    # In place: one weight-sized temporary rather than three.
    codes = grouped / scale
    np.rint(codes, out=codes)
    np.clip(codes, qmin, qmax, out=codes)
    return codes.astype(np.float32, copy=False), scale, zeros


def quantize_weight(
    w: np.ndarray, scheme: QuantScheme, name: str = "weight"
) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric integer quantization of a float weight ``w[N, K]`` (output channels first).

    Non-finite weights are refused as :func:`weight_codes` refuses them.

    Returns
    -------
    q : numpy.ndarray
        int8 values: ``[N, K]`` per tensor or channel, ``[N, K/G, G]`` per group.
    scale : numpy.ndarray
        float32: ``[]`` per tensor, ``[N]`` per channel, ``[N, K/G, 1]`` per group, such
        that ``q * scale`` approximates ``w``.
    """
    if scheme.weight_format != "int":
        raise ValueError(f"quantize_weight: scheme {scheme.name} has {scheme.weight_format} "
                         "weights; use weight_codes")
    codes, scale, _ = weight_codes(w, scheme, name)
    q = codes.astype(np.int8)
    if scheme.weight_granularity == "group":
        return q, scale
    n, k = w.shape
    q = q.reshape(n, k)
    if scheme.weight_granularity == "channel":
        return q, scale.reshape(n)
    return q, np.asarray(scale.reshape(-1)[0], np.float32)


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


def smoothing_factors(x_amax: np.ndarray, w: np.ndarray, alpha: float) -> np.ndarray:
    """SmoothQuant's per-hidden-channel factors ``amax_x^alpha / amax_w^(1 - alpha)``."""
    w_amax = np.abs(w).max(axis=0)
    s = np.power(np.maximum(x_amax, 1e-5), alpha) / np.power(np.maximum(w_amax, 1e-5),
                                                             1 - alpha)
    return np.where(np.isfinite(s) & (s > 0), s, 1.0).astype(np.float32)


# ----------------------------------------------------------------------------------------
# Activations, in the graph (Relax ops, so that TVM's own build computes the same values).


def _const(value, dtype: str) -> GenericConst:
    return relax.const(np.asarray(value, dtype=dtype), dtype)


def _f32(value: float) -> GenericConst:
    return _const(value, "float32")


def _floor_log2(bb: relax.BlockBuilder, a):
    """floor(log2(a)) for a > 0, exact: log's estimate corrected by exact powers of 2."""
    op = relax.op
    e = bb.emit(op.floor(bb.emit(op.divide(bb.emit(op.log(a)), _f32(math.log(2.0))))))
    up = bb.emit(op.astype(op.less_equal(bb.emit(op.power(_f32(2.0), op.add(e, _f32(1.0)))),
                                         a), "float32"))
    e = bb.emit(op.add(e, up))
    down = bb.emit(op.astype(op.greater(bb.emit(op.power(_f32(2.0), e)), a), "float32"))
    return bb.emit(op.subtract(e, down))


def _round_to_format(bb: relax.BlockBuilder, v, fmt: FloatFormat):
    """v (already within +-max) rounded to nearest-even in the format, subnormals too."""
    op = relax.op
    a = bb.emit(op.maximum(bb.emit(op.abs(v)), _f32(2.0 ** -126)))
    e = bb.emit(op.maximum(_floor_log2(bb, a), _f32(fmt.min_exponent)))
    ulp = bb.emit(op.power(_f32(2.0), op.subtract(e, _f32(fmt.mantissa_bits))))
    r = bb.emit(op.multiply(bb.emit(op.round(bb.emit(op.divide(v, ulp)))), ulp))
    return bb.emit(op.clip(r, -fmt.max_value, fmt.max_value))


def _fake_quant_activation(bb: relax.BlockBuilder, x, s: QuantScheme, static_scale):
    """x rounded as the scheme stores activations, back in float32 (exact emulation)."""
    op = relax.op
    gran = s.activation_granularity
    shape = list(x.ty.shape.values)  # leading dims may be symbolic (a sequence length)
    k = int(shape[-1])
    xs = x
    if gran == "group":
        xs = bb.emit(op.reshape(x, [*shape[:-1], k // s.activation_group, s.activation_group]))
    fmt = FLOAT_FORMATS.get(s.activation_format)
    if static_scale is not None:
        scale = _f32(static_scale)
    else:
        axis = {"tensor": None, "token": -1, "group": -1,
                "embedding": list(range(len(shape) - 1))}[gran]
        amax = bb.emit(op.max(bb.emit(op.abs(xs)), axis=axis, keepdims=gran != "tensor"))
        if s.scale_dtype == "e8m0":
            emax = fmt.max_exponent if fmt else 0
            safe = bb.emit(op.maximum(amax, _f32(2.0 ** -126)))
            exp = bb.emit(op.subtract(_floor_log2(bb, safe), _f32(emax)))
            scale = bb.emit(op.power(_f32(2.0), exp))
            if fmt is None:
                scale = bb.emit(op.divide(scale, _f32(2.0 ** (s.activation_bits - 2))))
        else:
            top = fmt.max_value if fmt else int_range(s.activation_bits)[1]
            scale = bb.emit(op.divide(bb.emit(op.maximum(amax, _f32(1e-12))), _f32(top)))
    if fmt is not None:
        v = bb.emit(op.clip(bb.emit(op.divide(xs, scale)), -fmt.max_value, fmt.max_value))
        q = _round_to_format(bb, v, fmt)
    else:
        qmin, qmax = int_range(s.activation_bits)
        q = bb.emit(op.clip(bb.emit(op.round(bb.emit(op.divide(xs, scale)))), qmin, qmax))
    out = bb.emit(op.multiply(q, scale))
    return bb.emit(op.reshape(out, shape)) if gran == "group" else out


def _fake_quant_kv(bb: relax.BlockBuilder, t, s: QuantScheme, output: bool):
    """A cache tensor ``t[..., heads, tokens, head_dim]`` as the cache stores it, in float32.

    int8 / int4: symmetric codes of ``round(t / scale)`` times the scale, the scale the
    max-abs of the token's values (over all heads, one head, or a group of G channels of a
    head) over the largest code, rounded to float16 (1 where it is 0). float16: a cast
    there and back. ``output`` emits the last value as a dataflow block's output.
    """
    op = relax.op
    last = bb.emit_output if output and bb.current_block_is_dataflow() else bb.emit
    if s.kv_bits == 16:
        return last(op.astype(bb.emit(op.astype(t, "float16")), "float32"))
    shape = list(t.ty.shape.values)
    rank, d = len(shape), int(shape[-1])
    xs, axis = t, [-1]
    if s.kv_granularity == "group":
        if d % s.kv_group:
            raise ValueError(f"quantize({s.name}): KV group size {s.kv_group} does not divide "
                             f"the head dimension {d}")
        xs = bb.emit(op.reshape(t, [*shape[:-1], d // s.kv_group, s.kv_group]))
    elif s.kv_granularity == "token":
        axis = [rank - 3, rank - 1]  # the heads and channels of each token
    qmin, qmax = int_range(s.kv_bits)
    amax = bb.emit(op.max(bb.emit(op.abs(xs)), axis=axis, keepdims=True))
    scale = bb.emit(op.astype(bb.emit(op.astype(bb.emit(op.divide(amax, _f32(qmax))),
                                                 "float16")), "float32"))
    scale = bb.emit(op.where(bb.emit(op.greater(scale, _f32(0.0))), scale, _f32(1.0)))
    q = bb.emit(op.clip(bb.emit(op.round(bb.emit(op.divide(xs, scale)))), qmin, qmax))
    if s.kv_granularity == "group":
        return last(op.reshape(bb.emit(op.multiply(q, scale)), shape))
    return last(op.multiply(q, scale))


