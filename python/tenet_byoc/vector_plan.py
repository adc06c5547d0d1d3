"""Which operators left on TVM's path the vector unit is charged for, and the call that charges them.

After partitioning, every Relax function still runs its non-GEMM operators (norms, softmax,
residual adds, the embedding lookup, masks, activation quantization, KV-cache writes) on
TVM's own kernels: outputs stay those of TVM, and TVM's fused kernels keep their speed. This
module classifies each remaining binding of a function as a charged vector operator
(:class:`VectorOp`), as free (one table, :data:`FREE`, with the reason each is free), or as
unknown; :func:`insert_charge_calls` then appends one
``R.call_packed("tenet_vector.<function>", R.shape([...]))`` at the end of the function,
whose numbers are each charged operator's output dims (and its second operand's elements),
evaluated by the VM from the function's symbolic sizes; the tenet runtime module serves that
symbol and charges each operator with the cost model's ``ChargeVectorCall``.

A GEMM's fused epilogue (bias, GELU, ReLU) is not here: the runtime charges it with the GEMM
that computes it (``src/runtime/ledger.cc``, ``EpilogueCall``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import tvm
import tvm_ffi
from tvm import relax

from .quantization.scheme import RECIPE_ATTR, RecipeStamp

__all__ = ["FREE", "VectorOp", "VectorPlan", "insert_charge_calls", "plan_function", "vector_plan"]

#: The attribute of the tenet functions that carries the plan's JSON to the codegen.
PLAN_ATTR = "tenet.vector_plan"
#: The symbol a function's charge call names; the runtime module serves it.
SYMBOL_PREFIX = "tenet_vector."

#: Operators that are free, with the reason. Anything not charged, fused into a GEMM or
#: listed here is "unknown" (``VectorPlan.unknown``): nothing is free by accident.
FREE = {
    "relax.reshape": "a view: the same elements in another shape",
    "relax.permute_dims": "a layout change the consumer's addressing absorbs (a view)",
    "relax.split": "views of the parts of one tensor",
    "relax.strided_slice": "a view of some rows (position rows, a cache window)",
    "TupleGetItem": "names one field of a tuple (no data moves)",
    "Tuple": "groups values (no data moves)",
    "Var": "another name for a value",
    "Constant": "a constant (a parameter read by the operator that uses it)",
    "ShapeExpr": "a shape (no data)",
    "positions": "computed from positions and constants alone (rotary cos/sin tables, mask "
                 "fills, position rows): a table the accelerator holds; the entry that reads "
                 "it charges the read (rotary's tables, the mask, the add's operand)",
    "rotary": "part of a rotary embedding, charged whole as one rotary entry",
    "rotary_table": "a batched call's cos/sin rows of each sequence's positions (positions to "
                    "float, angles, cos, sin): rows of the rotary table the accelerator holds, "
                    "as in the one-sequence functions; the rotary entries charge their reads "
                    "(their operand counts every sequence's rows)",
    "mask": "part of a batched call's per-sequence mask (key before the sequence's first "
            "key, key after its query, outside the window): the mask is built from the "
            "pads, real work, charged whole as one mask entry of its [B, 1, S, keys] shape",
    "quantize": "part of an activation quantization, charged whole as one quantize entry",
    "kv_write": "a KV-cache write, charged as kv_write of the new tokens at the cache's width "
                "(a float16 cache's casts are that write's)",
    "kv_quantize": "part of an int KV cache's quantization (schemes +kv8, +kv4), charged whole "
                   "as one quantize entry of the new keys (or values), one row per scale",
}

# One Relax op -> the vector kind it is charged as.
_KINDS = {
    "relax.nn.layer_norm": "layer_norm",
    "relax.nn.rms_norm": "rms_norm",
    "relax.nn.softmax": "softmax",
    "relax.nn.gelu_tanh": "gelu_tanh",
    "relax.nn.gelu": "gelu_erf",
    "relax.nn.silu": "silu",
    "relax.nn.relu": "relu",
    "relax.tanh": "tanh",
    "relax.add": "add",
    "relax.subtract": "add",
    "relax.multiply": "multiply",
    "relax.divide": "divide",
    "relax.take": "take",
    "relax.triu": "mask",
    "relax.tril": "mask",
}
_BINARY = ("add", "multiply", "divide")
# Operators of a batched call's per-sequence mask condition (decoder.BatchLayout.mask).
_MASK_OPS = {"relax.less", "relax.greater", "relax.less_equal", "relax.greater_equal",
             "relax.logical_or", "relax.logical_and", "relax.equal", "relax.not_equal"}
# Operators of a batched call's rotary table rows (after the positions' cast to float).
_TABLE_OPS = {"relax.astype", "relax.multiply", "relax.concat", "relax.cos", "relax.sin",
              "relax.reshape", "relax.permute_dims", "relax.expand_dims"}
# The operators an activation quantization (tenet_byoc.quantize) is made of; a region of
# them feeding a tenet call is one quantize entry when it rounds, clips or casts.
_QUANT_OPS = {
    "relax.abs", "relax.max", "relax.min", "relax.isfinite", "relax.astype", "relax.greater",
    "relax.where", "relax.maximum", "relax.minimum", "relax.add", "relax.subtract",
    "relax.divide", "relax.multiply", "relax.round", "relax.clip", "relax.nn.pad",
    "relax.power", "relax.floor", "relax.ceil", "relax.log", "relax.log2", "relax.exp",
    "relax.reshape", "relax.sign", "relax.less", "relax.less_equal", "relax.greater_equal",
    "relax.equal", "relax.not_equal", "relax.negative", "relax.logical_and", "relax.logical_or",
}
_QUANT_MARKS = {"relax.round", "relax.clip", "relax.astype"}
_CHAIN_OWN = {"relax.reshape", "relax.nn.pad", "relax.clip", "relax.round", "relax.astype"}


@dataclass(frozen=True)
class VectorOp:
    """One charged operator: its kind, a name, its output dims and second operand's elements
    (PrimExprs, symbolic where the function's sizes are), and its widths."""

    kind: str
    name: str
    shape: tuple
    operand: object | None  #: PrimExpr, or None for kinds without a second operand
    bits_in: int = 32
    bits_out: int = 32
    scheme: str = "none"


@dataclass
class VectorPlan:
    """A function's charged operators (in binding order), its free bindings (name -> reason)
    and what could not be classified (op names)."""

    function: str
    ops: list[VectorOp] = field(default_factory=list)
    free: dict[str, str] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)

    def descriptor(self) -> dict:
        """The JSON form the runtime reads (``src/runtime/program.h`` VectorProgram)."""
        return {"symbol": SYMBOL_PREFIX + self.function, "steps": [
            {"name": o.name, "scheme": o.scheme, "op": o.kind, "rank": len(o.shape),
             "operand": o.operand is not None, "bits_in": o.bits_in, "bits_out": o.bits_out}
            for o in self.ops]}


def _op_name(value) -> str:
    if isinstance(value, relax.Call):
        op = value.op
        if isinstance(op, tvm.ir.Op):
            return str(op.name)
        if isinstance(op, relax.ExternFunc):
            return "extern"
        return "call"
    return type(value).__name__


def _shape(expr) -> list | None:
    ty = expr.ty if hasattr(expr, "ty") else None
    if isinstance(ty, relax.TensorType) and ty.shape is not None and hasattr(ty.shape, "values"):
        return list(ty.shape.values)
    return None


def _numel(dims) -> object:
    n = tvm.tirx.IntImm("int64", 1)
    for d in dims:
        n = n * d
    return n


def _bits(expr) -> int:
    ty = expr.ty
    if isinstance(ty, relax.TensorType):
        return tvm.runtime.DataType(ty.dtype).bits
    return 32


def _same_shape(a, b) -> bool:
    return a is not None and b is not None and len(a) == len(b) and all(
        tvm_ffi.structural_equal(x, y) for x, y in zip(a, b))


def plan_function(func: relax.Function, name: str, is_tenet, scheme: str = "none",
                  activation_bits: int | None = None, kv_bits: int = 32) -> VectorPlan:
    """Classify every binding of ``func`` (see the module docstring).

    ``is_tenet(call)`` says whether a call runs on the tenet backend (a GEMM);
    ``activation_bits`` is the width a quantize entry writes (the quantize pass's stamp),
    else the narrowest type of its chain; ``kv_bits`` the width the KV cache stores: its
    writes are charged at it and an int cache's quantization
    (``quantization.numerics._fake_quant_kv``) as one ``quantize`` entry per key or value,
    ``[rows, row]`` with one row per scale (the max-abs's reduced elements), under the
    scheme's name, as ``plan.plan`` charges them.
    """
    plan = VectorPlan(name)
    bindings = [b for block in func.body.blocks for b in block.bindings]
    value_of = {b.var: b.value for b in bindings}
    users: dict[relax.Var, set] = {}
    for b in bindings:
        for arg in _args(b.value):
            users.setdefault(arg, set()).add(b.var)
    tenet_calls = {b.var for b in bindings if isinstance(b.value, relax.Call) and is_tenet(b.value)}
    covered: dict[relax.Var, str] = {}  # var -> the FREE reason key

    # Position-only values: no tensor parameter reaches them.
    positional: set = set()
    params = set(func.params)
    for b in bindings:
        # (tir size variables are Vars too: only bound values and parameters count)
        if b.var not in tenet_calls and all(
                d in positional or not (d in value_of or d in params) for d in _args(b.value)):
            positional.add(b.var)

    order = {b.var: i for i, b in enumerate(bindings)}

    def region_of(seeds: list, sink) -> set:
        """The quantize chain that computes ``seeds`` (read by ``sink``): QUANT_OPS bindings
        read only inside it, cut after the activation it quantizes."""
        region = set(seeds)
        changed = True
        while changed:
            changed = False
            for v in list(region):
                for a in _args(value_of[v]):
                    if (a in value_of and a not in region and a not in positional
                            and a not in covered and _op_name(value_of[a]) in _QUANT_OPS
                            and users.get(a, set()) <= region | sink):
                        region.add(a)
                        changed = True
        # The activation being quantized is what the chain's max-abs, K padding or float16
        # cast first reads (not one of the chain's own reshapes, pads, clips or casts): it and
        # what it is computed from stay out (a SwiGLU product feeding a quantize stays a
        # multiply of its own).
        acts = [v for v in region if _is_activation_of(v, users, value_of)
                and _op_name(value_of[v]) not in _CHAIN_OWN]
        if acts:
            first = min(order[v] for v in acts)
            region = {v for v in region if order[v] > first}
        if not any(_op_name(value_of[v]) in _QUANT_MARKS for v in region):
            return set()
        return region

    # KV-cache writes: the tensors a decoder returns as its cache ((logits, (K0, V0, ...))),
    # or a layer called on its own (a mixture of experts') its K and V (rank 4) beside its
    # outputs ((h, ..., K, V)).
    kv: dict[relax.Var, object] = {}

    def bound(x):  # a var's bound value, else ``x`` itself
        return value_of.get(x, x) if isinstance(x, relax.Var) else x

    result = bound(func.body.body)
    caches = []
    if isinstance(result, relax.Tuple):
        nested = bound(result.fields[1]) if len(result.fields) == 2 else None
        caches = list(nested.fields) if isinstance(nested, relax.Tuple) else [
            f for f in result.fields if len(_shape(f) or ()) == 4]
    for v in caches:
        while v in value_of and _op_name(value_of[v]) in ("relax.strided_slice",):
            nxt = value_of[v].args[0]
            if nxt not in value_of or _op_name(value_of[nxt]) != "relax.concat":
                break
            covered[v] = "kv_write"
            v = nxt
        if v in value_of and _op_name(value_of[v]) == "relax.concat":
            kv[v] = bound(value_of[v].args[0]).fields[-1]
        elif v in value_of:
            kv[v] = v
    # A KV cache's own quantization (schemes "+kvN"): the new tokens' keys (or values) as
    # stored, charged at the chain's last binding (a float16 cache's casts: its write's).
    kv_quantized: dict[relax.Var, tuple] = {}  # the chain's last binding -> [rows, row]
    for new in kv.values():
        while new in value_of and _op_name(value_of[new]) == "relax.strided_slice":
            new = value_of[new].args[0]  # a sliding window's cache: the slice of what is kept
        if new in value_of and _op_name(value_of[new]) in _QUANT_OPS:
            sink = set(users.get(new, ())) | set(kv)
            region = region_of([new], sink)
            scaled = [value_of[v] for v in region if _op_name(value_of[v]) == "relax.max"]
            for v in region:
                covered.setdefault(v, "kv_quantize" if scaled else "kv_write")
            if scaled:
                kv_quantized[max(region, key=lambda v: order[v])] = _scale_rows(scaled[0])

    # Activation quantization regions feeding tenet calls.
    regions: dict[relax.Var, tuple] = {}  # the region's last binding -> (seed, bits)
    for call_var in tenet_calls:
        seeds = [a for a in _args(value_of[call_var])
                 if a in value_of and _op_name(value_of[a]) in _QUANT_OPS
                 and a not in positional and a not in covered]
        region = region_of(seeds, {call_var})  # empty without seeds
        if not region:
            continue
        seed = min(seeds, key=_bits)
        bits = [_bits(v) for v in region if _bits(v) > 1]
        last = max(region, key=lambda v: order[v])
        regions[last] = (seed, activation_bits or (min(bits) if bits else 32))
        for v in region:
            covered[v] = "quantize"

    # Rotary embeddings: x * cos + rotate_half(x) * sin, rotate_half = concat(-x2, x1).
    rotary: dict[relax.Var, object] = {}
    for b in bindings:
        if _op_name(b.value) != "relax.add":
            continue
        a, c = b.value.args
        if not (a in value_of and c in value_of and _op_name(value_of[a]) == "relax.multiply"
                and _op_name(value_of[c]) == "relax.multiply"):
            continue
        half = value_of[c].args[0]
        if half in value_of and _op_name(value_of[half]) == "relax.concat":
            parts = bound(value_of[half].args[0])
            neg = parts.fields[0] if isinstance(parts, relax.Tuple) else None
            if neg in value_of and _op_name(value_of[neg]) == "relax.negative":
                tables = _numel(_shape(value_of[a].args[1])) + _numel(_shape(value_of[c].args[1]))
                rotary[b.var] = tables
                for v in (a, c, half, neg):
                    covered[v] = "rotary"
                for t in (value_of[a].args[1], value_of[c].args[1]):
                    _cover_table(t, value_of, positional, covered)

    # A batched call's per-sequence mask: where(condition, MASK_VALUE, 0) of a condition
    # computed from the pads (decoder.BatchLayout.mask).
    masks = set()
    for b in bindings:
        if (_op_name(b.value) == "relax.where" and b.var not in covered
                and b.var not in positional
                and all(isinstance(x, tvm.ir.expr.Constant) for x in b.value.args[1:])):
            masks.add(b.var)
            stack = [b.value.args[0]]
            while stack:
                v = stack.pop()
                if (v in value_of and v not in positional and v not in covered
                        and _op_name(value_of[v]) in _MASK_OPS):
                    covered[v] = "mask"
                    stack += _args(value_of[v])

    for b in bindings:
        v, value = b.var, b.value
        op = _op_name(value)
        label = str(v.name)
        if v in tenet_calls or op == "extern":
            continue
        if v in regions:
            seed, bits = regions[v]
            plan.ops.append(VectorOp("quantize", label, tuple(_shape(seed)), None, 32, bits,
                                     scheme))
            continue
        if v in kv_quantized:
            plan.ops.append(VectorOp("quantize", label, kv_quantized[v], None, 32, kv_bits,
                                     scheme))
        if v in kv:
            plan.ops.append(VectorOp("kv_write", label, tuple(_shape(kv[v])), None, 32,
                                     min(kv_bits, 32)))
            continue
        if v in kv_quantized:
            continue
        if v in rotary:
            plan.ops.append(VectorOp("rotary", label, tuple(_shape(v)), rotary[v]))
            continue
        if v in covered:
            plan.free[label] = covered[v]
            continue
        kind = _KINDS.get(op)
        if v in masks:
            kind = "mask"
        if op == "relax.maximum" and _is_zero(value.args[1]):
            kind = "relu"  # a batched call's positions: pad slots' (negative) ones clamped to 0
        if kind == "mask":
            plan.ops.append(VectorOp("mask", label, tuple(_shape(v)), None))
            continue
        if v in positional:
            plan.free[label] = "positions"
            continue
        if op == "relax.nn.pad" and users.get(v) and all(
                covered.get(u) == "quantize" for u in users[v]):
            plan.free[label] = "quantize"  # K padding shared by several quantize chains
            continue
        if kind is None:
            if op in FREE:
                plan.free[label] = op
            else:
                plan.unknown.append(f"{label} = {op}")
            continue
        out = _shape(v)
        if out is None:
            plan.unknown.append(f"{label} = {op} (no static rank)")
            continue
        operand = None
        if kind in _BINARY:
            shapes = [_shape(a) for a in value.args[:2]]
            rest = [s for s in shapes if not _same_shape(s, out)]
            operand = _numel(rest[0]) if rest and rest[0] is not None else _numel(out)
        plan.ops.append(VectorOp(kind, label, tuple(out), operand))
    return plan


def _scale_rows(max_abs) -> tuple:
    """``(rows, row)`` of a KV quantization from its max-abs: a row is what one scale
    covers (the reduced dims), one row per scale."""
    dims = _shape(max_abs.args[0])
    axes = {int(a) % len(dims) for a in max_abs.attrs.axis}
    return (_numel([d for i, d in enumerate(dims) if i not in axes]),
            _numel([d for i, d in enumerate(dims) if i in axes]))


def _is_zero(expr) -> bool:
    if not isinstance(expr, tvm.ir.expr.Constant):
        return False
    data = expr.value.numpy()
    return data.size == 1 and float(data.reshape(-1)[0]) == 0.0


def _cover_table(var, value_of, positional, covered) -> None:
    """Mark a rotary table's float computation from the positions (a batched call's cos/sin
    rows) as ``rotary_table``; the integer positions it is cast from stay as they are."""
    stack = [var]
    while stack:
        v = stack.pop()
        if v not in value_of or v in positional or v in covered:
            continue
        value = value_of[v]
        if _op_name(value) not in _TABLE_OPS:
            continue
        covered[v] = "rotary_table"
        if _op_name(value) != "relax.astype":  # the cast from the positions ends the table
            stack += _args(value)


def _reads_activation(value) -> bool:
    """A quantize chain's first reads of its activation: max-abs, K padding, float16 cast."""
    op = _op_name(value)
    if op in ("relax.abs", "relax.nn.pad"):
        return True
    if op != "relax.astype" or str(value.attrs.dtype) not in ("float16", "bfloat16"):
        return False
    shape = _shape(value)  # a float16 scale ([..., 1]) is not an activation
    return shape is not None and not (shape and isinstance(shape[-1], tvm.tirx.IntImm)
                                      and int(shape[-1]) == 1)


def _is_activation_of(var, users, value_of) -> bool:
    """Whether a quantize chain's first read (through a group reshape) is of ``var``."""
    for u in users.get(var, ()):
        if u not in value_of:
            continue
        if _reads_activation(value_of[u]):
            return True
        if _op_name(value_of[u]) == "relax.reshape" and any(
                _reads_activation(value_of[w]) for w in users.get(u, ()) if w in value_of):
            return True
    return False


def _args(value) -> list:
    """The Relax values a binding reads (tuple fields flattened)."""
    if isinstance(value, relax.Call):
        out = []
        for a in value.args:
            out += list(a.fields) if isinstance(a, relax.Tuple) else [a]
        return out
    if isinstance(value, relax.Tuple):
        return list(value.fields)
    if isinstance(value, relax.TupleGetItem):
        return [value.tuple_value]
    if isinstance(value, relax.Var):
        return [value]
    return []


def _is_tenet_call(mod: tvm.IRModule):
    tenet = {gv for gv, f in mod.functions.items()
             if isinstance(f, relax.Function) and f.attrs and "Codegen" in f.attrs}

    def check(call: relax.Call) -> bool:
        op = call.op
        if isinstance(op, relax.GlobalVar):
            return op in tenet or any(op.same_as(g) for g in tenet)
        if isinstance(op, relax.ExternFunc):
            return True
        return str(getattr(op, "name", "")) == "relax.call_dps_packed"

    return check


def _callers(mod: tvm.IRModule) -> list[tuple[relax.GlobalVar, relax.Function]]:
    return [(gv, f) for gv, f in mod.functions.items()
            if isinstance(f, relax.Function) and not (f.attrs and (
                "Codegen" in f.attrs or "Composite" in f.attrs))]


def vector_plan(mod: tvm.IRModule, scheme: str = "none", activation_bits: int | None = None,
                kv_bits: int | None = None) -> dict[str, VectorPlan]:
    """The plan of every Relax function of a partitioned module (the charge call it may
    already make is skipped); ``kv_bits`` by default the KV width the quantize pass
    stamped on the module (32 without one)."""
    if kv_bits is None:
        stamp = mod.attrs.get(RECIPE_ATTR) if mod.attrs is not None else None
        attention = stamp is not None and RecipeStamp.read(str(stamp)).attention
        kv_bits = attention["key"][0][1] if attention else 32
    check = _is_tenet_call(mod)
    return {gv.name_hint: plan_function(f, gv.name_hint, check, scheme, activation_bits,
                                        kv_bits) for gv, f in _callers(mod)}


def insert_charge_calls(mod: tvm.IRModule, scheme: str = "none",
                        activation_bits: int | None = None) -> tuple[tvm.IRModule, str]:
    """Append each function's charge call; return the module and the plans' JSON (the
    descriptor's ``vector_functions``) for the codegen."""
    plans = vector_plan(mod, scheme, activation_bits)
    described = []
    for gv, func in _callers(mod):
        plan = plans[gv.name_hint]
        if not plan.ops:
            continue
        dims = []
        for o in plan.ops:
            dims += list(o.shape) + ([o.operand] if o.operand is not None else [])
        dims = [d if str(d.ty) == "int64" else tvm.tirx.Cast("int64", d) for d in
                (tvm.tirx.IntImm("int64", int(d)) if isinstance(d, int) else d for d in dims)]
        call = relax.Call(relax.ExternFunc(SYMBOL_PREFIX + gv.name_hint),
                          [relax.ShapeExpr(dims)], ty_args=[relax.ObjectType()])
        block = relax.BindingBlock([relax.VarBinding(relax.Var("_tenet_vector",
                                                                relax.ObjectType()), call)])
        body = func.body
        new = relax.Function(func.params, relax.SeqExpr([*body.blocks, block], body.body),
                             func.ret_ty, is_pure=False, attrs=func.attrs)
        mod[gv] = new
        described.append(plan.descriptor())
    return mod, json.dumps(described)
