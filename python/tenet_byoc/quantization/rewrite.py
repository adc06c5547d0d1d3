"""The Relax pass: each linear layer rewritten to the scheme's stored form, the KV cache rounded.

:class:`_LinearQuantizer` rewrites every linear layer of a module
(``R.matmul(x, R.permute_dims(W))`` with ``W`` a constant) into one of the forms the
``tenet.*`` quantized patterns offload whole; under a KV modifier it rounds the keys and
values of new tokens where they are written to the cache. Common schemes run on real integer
kernels (int8 x int8 with int32 accumulation, int8 or packed int4 weight-only); the others
by exact emulation (:mod:`.numerics`). In probe mode (calibration) it leaves the layers as
they are and makes the function also return each layer's input range.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import numpy as np
import tvm
from tvm import relax
from tvm.ir.expr import GenericConst

from .numerics import (
    FLOAT_FORMATS,
    INT4_ZERO_POINT,
    _const,
    _f32,
    _fake_quant_activation,
    _fake_quant_kv,
    _row_blocks,
    int_range,
    pack_int4,
    quantize_weight,
    smoothing_factors,
    weight_codes,
)
from .scheme import QuantScheme

_MATMUL = tvm.ir.Op.get("relax.matmul")
_PERMUTE = tvm.ir.Op.get("relax.permute_dims")
_CONCAT = tvm.ir.Op.get("relax.concat")
_SLICE = tvm.ir.Op.get("relax.strided_slice")


def is_attention_gemm(lhs_ty, rhs_ty) -> bool:
    """Whether a matmul of operands of these types is one of attention's GEMMs, as the
    models write them: activation x activation on 4-D ``[batch, heads, rows, cols]``
    operands (a linear layer's weight is 2-D). The quantize pass quantizes the cache operand
    of exactly these, and the codegen charges exactly these with the KV recipe."""
    return all(isinstance(t, relax.TensorType) and t.ndim == 4 for t in (lhs_ty, rhs_ty))


def _kv_writes(func: relax.Function) -> set:
    """The bindings whose values enter the KV cache: the keys and values of the new tokens.

    Each 4-D attention matmul's cache operand (the input of ``permute_dims`` for Q K^T, the
    rhs for P V) is either the new tokens' tensor or ``concat([past, new], axis=2)`` (or a
    window's slice of it: Gemma's sliding layers beside full ones); the
    new one is quantized once, where it is bound, so that the cache returned and the
    attention that reads it see the same stored values and a past already stored is
    never quantized again.
    """
    values = relax.analysis.get_var2val(func)

    def bound(expr):
        while isinstance(expr, relax.Var) and expr in values:
            if not isinstance(values[expr], relax.Var):
                return expr, values[expr]
            expr = values[expr]
        return expr, None

    writes = set()
    for value in values.values():
        if not (isinstance(value, relax.Call) and value.op.same_as(_MATMUL)):
            continue
        lhs, rhs = value.args
        if not is_attention_gemm(lhs.ty, rhs.ty):
            continue
        cache, cache_value = bound(rhs)
        if (isinstance(cache_value, relax.Call) and cache_value.op.same_as(_PERMUTE)
                and [int(a) for a in cache_value.attrs.axes or []] == [0, 1, 3, 2]):
            cache, cache_value = bound(cache_value.args[0])  # K^T: the keys are its input
        if isinstance(cache_value, relax.Call) and cache_value.op.same_as(_SLICE):
            sliced = bound(cache_value.args[0])  # a window's view of the cache
            if isinstance(sliced[1], relax.Call) and sliced[1].op.same_as(_CONCAT):
                cache, cache_value = sliced
        if isinstance(cache_value, relax.Call) and cache_value.op.same_as(_CONCAT):
            parts = cache_value.args[0]
            if isinstance(parts, relax.Var):
                parts = bound(parts)[1]
            if isinstance(parts, relax.Tuple):
                cache, cache_value = bound(parts.fields[-1])
        if cache_value is not None and not isinstance(cache_value, GenericConst):
            writes.add(cache)
    return writes


# ----------------------------------------------------------------------------------------
# The pass.


@relax.expr_functor.mutator
class _LinearQuantizer(relax.PyExprMutator):
    """Rewrites ``matmul(x, permute_dims(W))`` with a constant float32 ``W[N, K]``.

    With ``probe`` set, it instead leaves each linear layer as it is and makes its function
    return ``(result, (amax_0, amax_1, ...))``: the per-hidden-channel max-abs of each linear
    layer's input (calibration); :attr:`probed` then says which layers each function returns.
    """

    def __init__(self, mod: tvm.IRModule, scheme: QuantScheme,
                 ranges: Mapping[int, np.ndarray] | None = None, probe: bool = False,
                 weights: Callable[[str], np.ndarray] | None = None,
                 reuse: Mapping | None = None):
        super().__init__(mod)
        self.scheme = scheme
        #: stored forms of streamed weights made by an earlier pass over the same weights,
        #: by (weight, kind, how the scheme stores weights): looked up before making one
        self.reuse = reuse or {}
        # What decides a weight's stored form besides its kind (_once's ``what``): two
        # schemes that differ only in their activations (w8a8 and w8a16 per channel: int8
        # GEMM and dequantizing kernels) store weights alike.
        s = scheme
        self._storage = (s.weight_format, s.weight_bits, s.weight_granularity, s.group_size,
                         s.scale_dtype, s.k_multiple())
        #: reads the float32 weight of a linear layer whose weight is a function parameter,
        #: by the parameter's name (see quantize's ``weights``)
        self.weights = weights
        #: the names of the parameters whose weights were read through ``weights``: a second
        #: function using one (GPT-2's decode after prefill) finds its stored forms made
        self.streamed: set[str] = set()
        self.rewritten = 0
        self.params: set[relax.Var] = set()
        #: layer index -> calibrated per-hidden-channel max-abs of its input (static schemes)
        self.ranges = ranges
        self.probe = probe
        #: function name -> (layer index, its description) of each input range it returns
        self.probed: dict[str, list[tuple[int, str]]] = {}
        self._probes: list[tuple[int, str, relax.Var]] = []
        self.global_name = ""  # the function being visited, as the module names it
        self.func_name = "a function"
        self.where = "weight"  # the layer being rewritten, for error messages
        self.kv_writes: set = set()  # bindings of new keys / values (KV schemes)
        # The functions of a module (GPT-2's prefill and decode) share their weight tensors:
        # each weight's stored form is computed once and its constants shared (see _once).
        self._weight_key: int | tuple[str, str] | None = None
        self._stored: dict[tuple[int, str], object] = {}

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
        self.kv_writes = _kv_writes(func) if self.scheme.quantizes_kv else set()
        self._probes = []
        out = super().visit_function_(func)
        if not (self.probe and self._probes):
            return out
        self.probed[self.global_name] = [(layer, where) for layer, where, _ in self._probes]
        ranges = relax.Tuple([var for _, _, var in self._probes])
        ret = self.builder_.normalize(relax.Tuple([out.body.body, ranges]))
        return relax.Function(out.params, relax.SeqExpr(out.body.blocks, ret), ret.ty,
                              out.is_pure, out.attrs)

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        super().visit_var_binding_(binding)
        if binding.var in self.kv_writes:
            emitted = self.get_var_remap(binding.var) or binding.var  # None: kept as it was
            stored = _fake_quant_kv(self.builder_, emitted, self.scheme,
                                    output=not isinstance(binding.var, relax.DataflowVar))
            self.set_var_remap(binding.var, stored)

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
        if self.scheme.kernel == "float" and not self.probe:
            return call  # float weights (a scheme that only quantizes the KV cache)
        streamed = (not isinstance(bound, GenericConst) and self.weights is not None
                    and not self.probe)
        if not isinstance(bound, GenericConst) and not streamed:
            raise ValueError(
                f"quantize({self.scheme.name}): the weight {weight.name} of a linear layer is "
                "a function parameter, not a constant; bind the weights first (e.g. "
                "export_gpt2(config, params), mlp_module(params), or relax.transform.BindParams)"
            )
        layer = self.rewritten
        self.rewritten += 1
        shape = [int(d) for d in ty.shape]
        self.where = f"the weight {shape} of linear layer {self.rewritten} of {self.func_name}"
        if isinstance(weight, relax.Var):
            self.where += f" ({weight.name})"
        if self.probe:
            self._probe(x, layer)
            return call
        if streamed:
            return self._rewrite(x, self._streamed_weight(weight, shape), layer)
        self._weight_key = bound.value.__chandle__()
        # A read-only view of the constant, not a copy (GPT-2's tied head alone is 154 MB):
        # nothing below writes to the weight, and the copy would sit on the pass's peak.
        w = np.from_dlpack(bound.value)
        w.flags.writeable = False
        return self._rewrite(x, w, layer)

    def _streamed_weight(self, weight: relax.Var, shape: list[int]) -> np.ndarray:
        """The float32 weight of parameter ``weight``, read through ``weights`` once.

        Read again it would only be read to be dropped: its stored forms are made (a layer
        that uses it again finds them in ``_stored``). So a second use gets a read-only
        stand-in of the right shape that holds no memory (a broadcast zero), unless this
        layer's calibration changes the weight (SmoothQuant), which reads it whole.
        """
        name = weight.name
        self._weight_key = ("param", name)  # a streamed weight's key: see _once
        made = name in self.streamed
        self.streamed.add(name)
        smoothing = self.scheme.smoothing and self.ranges is not None
        if not smoothing and (made or any(k[0] == self._weight_key and k[2] == self._storage
                                          for k in self.reuse)):
            # Its stored forms are made (by this pass, or by the earlier one in reuse).
            return np.broadcast_to(np.float32(0.0), shape)
        w = np.asarray(self.weights(name))
        if w.dtype != np.float32 or list(w.shape) != shape:
            raise ValueError(
                f"quantize({self.scheme.name}): weights({name!r}) gave a {w.dtype} array of "
                f"shape {list(w.shape)}; {self.where} takes float32 of shape {shape}"
            )
        return w

    def stored_streamed(self) -> dict:
        """The stored forms of the weights read through ``weights`` (for ``reuse``)."""
        return {k: v for k, v in self._stored.items() if isinstance(k[0], tuple)}

    def _once(self, what: str, make):
        """``make()`` for the weight being rewritten, made once per weight tensor."""
        if self._weight_key is None:
            return make()
        key = (self._weight_key, what, self._storage)
        if key not in self._stored:
            # Only a streamed weight's (keyed ("param", its parameter's name)) is reused: a
            # constant's key is its tensor's address, which a later tensor may reuse.
            streamed = isinstance(self._weight_key, tuple)
            self._stored[key] = (self.reuse[key] if streamed and key in self.reuse
                                 else make())
        return self._stored[key]

    def _probe(self, x: relax.Expr, layer: int) -> None:
        """Emit the per-hidden-channel max-abs of ``x`` as a value the function returns."""
        bb, op = self.builder_, relax.op
        rank = x.ty.ndim
        if rank < 1:
            raise ValueError(f"calibrate: the input of {self.where} has unknown rank; "
                             "calibration needs a tensor of known rank")
        amax = (op.abs(x) if rank == 1
                else op.max(bb.emit(op.abs(x)), axis=list(range(rank - 1))))
        # A dataflow block's value must be made an output to leave the block.
        emit = bb.emit_output if bb.current_block_is_dataflow() else bb.emit
        self._probes.append((layer, self.where, emit(amax)))

    def _pad(self, x, w):
        s, bb = self.scheme, self.builder_
        n, k = w.shape
        pad = (-k) % s.k_multiple()
        if pad:
            # Zero input channels contribute nothing: x @ W^T is unchanged, and the
            # accelerator is charged for the padded K it would really run.
            w = np.concatenate([w, np.zeros((n, pad), w.dtype)], axis=1)
            rank = x.ty.ndim
            x = bb.emit(relax.op.nn.pad(x, [0, 0] * (rank - 1) + [0, pad]))
        return x, w

    def _rewrite(self, x: relax.Expr, w: np.ndarray, layer: int) -> relax.Expr:
        s, bb, op = self.scheme, self.builder_, relax.op
        amax_x = None
        if self.ranges is not None:
            if layer not in self.ranges:
                raise ValueError(
                    f"quantize({s.name}): {self.where} is not reached by the calibration "
                    "inputs; static scales need calibration of every function with linear "
                    "layers (calibrate the function that holds them, or pass no calibration "
                    "for per-call scales)"
                )
            amax_x = self.ranges[layer]
        x, w = self._pad(x, w)
        n, k = w.shape
        if amax_x is not None and amax_x.shape[0] != k:
            amax_x = np.concatenate([amax_x, np.zeros(k - amax_x.shape[0], np.float32)])
        if s.smoothing and amax_x is not None:
            # SmoothQuant: the division of x is folded into the previous layer in a
            # deployment; here it stays an elementwise op on TVM's path.
            f = smoothing_factors(amax_x, w, s.smoothing)
            self._weight_key = None  # this layer's calibration changes its weight
            w = w * f[None, :]
            x = bb.emit(op.divide(x, _f32(f)))
            amax_x = amax_x / f
        kernel = s.kernel
        if s.quantizes_activations and s.activation_static and amax_x is None:
            raise ValueError(f"quantize({s.name}): static activation scales need calibration")
        if s.activation_bits == 16:
            # float16 activations on the accelerator: round them, compute in float32.
            x = bb.emit(op.astype(bb.emit(op.astype(x, "float16")), "float32"))
        if kernel == "emulated":
            return self._emulated(x, w, amax_x)
        if kernel == "int8":
            return self._int8(x, w, amax_x)
        if kernel == "dequant_channel":
            q, scale = self._int8_weight(w)
            deq = op.dequantize(q, scale, _const(0, "int8"), axis=0, out_dtype="float32")
            return op.matmul(x, bb.emit(op.permute_dims(bb.emit(deq))))
        # Packed int4: unpack the nibbles, remove the zero point, scale per group.
        def packed_int4():
            uint = s.weight_format == "uint"

            def packed_block(block):
                codes, scale, zp = weight_codes(block, s, self.where)
                nibbles = (codes - INT4_ZERO_POINT if uint else codes).astype(np.int8)
                return pack_int4(nibbles), scale, zp, codes.shape[1:]

            packed, scale, zp, inner = _by_row_blocks(w, s, packed_block)
            zero = _const(zp if uint else INT4_ZERO_POINT, "float32")
            return ((w.shape[0], *inner), _const(packed, "uint8"), zero,
                    _const(scale, "float32"))

        shape, packed, zero, scale = self._once("int4", packed_int4)
        low = bb.emit(op.bitwise_and(packed, _const(15, "uint8")))
        high = bb.emit(op.right_shift(packed, _const(4, "uint8")))
        nibbles = bb.emit(op.reshape(bb.emit(op.stack([low, high], axis=-1)), shape))
        centred = bb.emit(op.subtract(bb.emit(op.astype(nibbles, "float32")), zero))
        scaled = op.multiply(centred, scale)
        deq = op.reshape(bb.emit(scaled), (n, k))
        return op.matmul(x, bb.emit(op.permute_dims(bb.emit(deq))))

    def _emulated(self, x, w, amax_x):
        s, bb, op = self.scheme, self.builder_, relax.op
        n, k = w.shape
        if s.quantizes_activations:
            static = None
            if s.activation_granularity == "embedding" or (s.smoothing and amax_x is None):
                # Per hidden channel: each channel's own scale (calibrated, or this call's).
                if amax_x is not None:
                    static = np.maximum(amax_x, 1e-12) / int_range(s.activation_bits)[1]
                    static = static.astype(np.float32)
                x = _fake_quant_activation(
                    bb, x, dataclasses.replace(s, activation_granularity="embedding",
                                               activation_static=False, smoothing=0.0),
                    static)
            else:
                if s.activation_static:
                    top = (FLOAT_FORMATS[s.activation_format].max_value
                           if s.activation_format in FLOAT_FORMATS
                           else int_range(s.activation_bits)[1])
                    static = np.float32(max(float(amax_x.max()), 1e-12) / top)
                x = _fake_quant_activation(bb, x, s, static)
        def emulated():
            codes, scale, zp = weight_codes(w, s, self.where)
            stored = codes - zp if s.weight_format == "uint" else codes
            return _const(stored, "float32"), _const(scale, "float32")

        deq = bb.emit(op.multiply(*self._once("emulated", emulated)))
        wt = bb.emit(op.permute_dims(bb.emit(op.reshape(deq, (n, k)))))
        return op.matmul(x, wt)

    def _int8(self, x, w, amax_x):
        s, bb, op = self.scheme, self.builder_, relax.op
        qmin, qmax = int_range(s.activation_bits)
        per_token = s.activation_granularity == "token"
        if s.activation_static:
            sa = _f32(max(float(amax_x.max()), 1e-12) / qmax)
        else:
            absmax = bb.emit(op.max(bb.emit(op.abs(x)), axis=-1 if per_token else None,
                                    keepdims=per_token))
            # max() drops NaN, and a NaN cast to int8 is undefined: a non-finite activation
            # would vanish (or differ between builds). `poison` is 0 for a finite row (or
            # tensor) and NaN otherwise; added to the scale it makes that row's (or the
            # whole per-tensor call's) output NaN, as float32 would, in tenet and TVM's
            # build alike. (sum(x * 0) would not do: TVM folds x * 0 to 0.)
            finite = bb.emit(op.min(bb.emit(op.astype(bb.emit(op.isfinite(x)), "float32")),
                                    axis=-1 if per_token else None, keepdims=per_token))
            poison = bb.emit(op.where(bb.emit(op.greater(finite, _f32(0.5))), _f32(0.0),
                                      _f32(np.nan)))
            floor = bb.emit(op.maximum(absmax, _f32(1e-12)))
            sa = bb.emit(op.divide(bb.emit(op.add(floor, poison)), _f32(qmax)))
        rounded = bb.emit(op.round(bb.emit(op.divide(x, sa))))
        xq = bb.emit(op.astype(bb.emit(op.clip(rounded, qmin, qmax)), "int8"))
        q, scale = self._int8_weight(w)
        acc = bb.emit(op.matmul(xq, bb.emit(op.permute_dims(q)), out_dtype="int32"))
        scaled = bb.emit(op.multiply(bb.emit(op.astype(acc, "float32")), sa))
        return op.multiply(scaled, scale)

    def _int8_weight(self, w: np.ndarray) -> tuple[GenericConst, GenericConst]:
        """The weight's int8 codes and scales as constants, made once per weight."""
        def make():
            q, scale = _by_row_blocks(
                w, self.scheme, lambda block: quantize_weight(block, self.scheme, self.where))
            return _const(q, "int8"), _const(scale, "float32")

        return self._once("int8", make)


def _by_row_blocks(w: np.ndarray, scheme: QuantScheme, quantize_rows):
    """``quantize_rows(w)``, computed a block of rows at a time where rows are independent.

    ``quantize_rows`` returns a tuple whose arrays have one entry per row of its argument
    (they are concatenated) and whose other items are the same for every block (taken from
    the first). Under a per-tensor scale every row depends on all of ``w``, so it runs once
    on the whole weight; a weight a block refuses is run whole too, so that the refusal
    names indices in ``w``, not in the block. The float32 codes stay one block in size
    (GPT-2's tied head: 16 MB rather than 154 MB).
    """
    blocks = list(_row_blocks(w))
    if scheme.weight_granularity == "tensor" or len(blocks) < 2:
        return quantize_rows(w)
    try:
        parts = [quantize_rows(b) for b in blocks]
    except ValueError:
        quantize_rows(w)
        raise
    return tuple(np.concatenate([p[i] for p in parts]) if isinstance(item, np.ndarray) else item
                 for i, item in enumerate(parts[0]))


def _run_pass(mod: tvm.IRModule, quantizer: _LinearQuantizer) -> tvm.IRModule:
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            quantizer.global_name = gv.name_hint
            quantizer.builder_.update_func(gv, quantizer.visit_expr(func))
    out = relax.transform.DeadCodeElimination()(quantizer.builder_.get())
    return _drop_streamed_params(out, quantizer.streamed) if quantizer.streamed else out


def _drop_streamed_params(mod: tvm.IRModule, streamed: set[str]) -> tvm.IRModule:
    """``mod`` without the parameters whose weights were read and are no longer used.

    Such a weight lives on in its stored form (a constant); its parameter, left, would ask
    every caller for a float weight the function never reads. A parameter still used
    elsewhere (GPT-2's tied ``wte``, also the embedding table) stays.
    """
    out = mod
    for gv, func in mod.functions.items():
        if not isinstance(func, relax.Function):
            continue
        used = set(relax.analysis.free_vars(func.body))
        params = [p for p in func.params if p in used or p.name not in streamed]
        if len(params) != len(func.params):
            out[gv] = relax.Function(params, func.body, func.ret_ty, func.is_pure,
                                     func.attrs)
    return out



