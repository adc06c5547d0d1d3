"""The ``relax.ext.tenet`` codegen: partitioned functions -> kernel descriptors -> a runtime module.

Each function handed to the codegen is an outer function (attr ``Codegen="tenet"``) whose body
calls one or more composite functions (attr ``Composite="tenet.*"``). Which composite
parameter is the matmul's lhs, rhs or bias is read from the composite body, never assumed
from the parameter order (MergeCompositeFunctions often puts a weight first).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import tvm_ffi
from tvm import relax

from .patterns import EPILOGUES

#: Bumped with the runtime's ``kDescriptorVersion`` on any incompatible change.
DESCRIPTOR_VERSION = 1


class TenetCodegenError(ValueError):
    """A partitioned function that the tenet codegen cannot turn into a kernel descriptor."""


@dataclass(frozen=True)
class _Composite:
    """The roles of a composite function's parameters, read from its body."""

    pattern: str
    kind: str  # "float", "dequant_channel", "dequant_group" or "int8"
    lhs: int
    rhs: int
    bias: int | None
    rhs_transposed: bool
    epilogue: str
    scale_a: int | None = None
    scale_b: int | None = None
    zero_point: int | None = None


def _tensor_spec(ty, what: str) -> dict:
    if isinstance(ty, relax.ShapeType):
        # FuseOpsByPattern passes symbolic dims that no tensor parameter defines as a shape
        # argument; the runtime reads every dim from the tensors and ignores it.
        return {"kind": "shape"}
    if not isinstance(ty, relax.TensorType) or ty.ndim < 0:
        raise TenetCodegenError(f"{what} is not a tensor of known rank (type {ty})")
    return {"dtype": str(ty.dtype), "ndim": int(ty.ndim)}


def _bindings(func: relax.Function):
    body = func.body
    if not isinstance(body, relax.SeqExpr):
        raise TenetCodegenError(f"function body is {type(body).__name__}, not a SeqExpr")
    for block in body.blocks:
        yield from block.bindings


_CHAIN_OPS = {
    "relax.matmul", "relax.permute_dims", "relax.add", "relax.dequantize", "relax.reshape",
    "relax.astype", "relax.multiply", "relax.subtract", "relax.stack", "relax.bitwise_and",
    "relax.right_shift", *EPILOGUES,
}


def analyze_composite(func: relax.Function) -> _Composite:
    """Find which parameter of a composite function plays which role.

    Parameters
    ----------
    func : relax.Function
        A function with attr ``Composite`` naming a tenet pattern.

    Returns
    -------
    _Composite
        The kind of GEMM and the parameter indices of lhs, rhs (the stored weight for the
        quantized kinds), bias and scales, whether rhs is transposed, the epilogue.
    """
    pattern = str(func.attrs["Composite"])
    param_index = {p: i for i, p in enumerate(func.params)}
    producer: dict[relax.Var, relax.Call] = {}
    calls: dict[str, list[relax.Call]] = {}
    for binding in _bindings(func):
        value = binding.value
        if not isinstance(value, relax.Call) or value.op.name not in _CHAIN_OPS:
            raise TenetCodegenError(f"{pattern}: unexpected binding {value} in a composite")
        producer[binding.var] = value
        calls.setdefault(value.op.name, []).append(value)

    def param_of(expr: relax.Expr, role: str) -> int:
        if expr in param_index:
            return param_index[expr]
        raise TenetCodegenError(f"{pattern}: the {role} is not a parameter of the composite")

    def made_by(expr: relax.Expr, op: str) -> relax.Call | None:
        call = producer.get(expr)
        return call if call is not None and call.op.name == op else None

    (matmul,) = calls.get("relax.matmul", [None])
    if matmul is None:
        raise TenetCodegenError(f"{pattern}: composite has no matmul")
    lhs = param_of(matmul.args[0], "lhs")
    rhs_expr = matmul.args[1]
    transpose = made_by(rhs_expr, "relax.permute_dims")
    if transpose is not None:
        rhs_expr = transpose.args[0]
    kind, scale_a, scale_b, zero_point = "float", None, None, None
    chain_end = matmul
    if (deq := made_by(rhs_expr, "relax.dequantize")) is not None:
        kind = "dequant_channel"
        rhs_expr, scale_b = deq.args[0], param_of(deq.args[1], "scale")
    elif (reshape := made_by(rhs_expr, "relax.reshape")) is not None:
        kind = "dequant_group"
        # reshape((astype(reshape(stack((wp & 15, wp >> 4)))) - zp) * scale)
        mul = made_by(reshape.args[0], "relax.multiply")
        sub = made_by(mul.args[0], "relax.subtract") if mul is not None else None
        cast = made_by(sub.args[0], "relax.astype") if sub is not None else None
        groups = made_by(cast.args[0], "relax.reshape") if cast is not None else None
        stack = made_by(groups.args[0], "relax.stack") if groups is not None else None
        low = made_by(stack.args[0].fields[0], "relax.bitwise_and") if stack is not None else None
        if low is None:
            raise TenetCodegenError(f"{pattern}: group dequantization is not the packed int4 form")
        rhs_expr = low.args[0]
        scale_b, zero_point = param_of(mul.args[1], "scale"), param_of(sub.args[1], "zero point")
    elif "relax.multiply" in calls:
        kind = "int8"
        outer = calls["relax.multiply"][-1]
        inner = made_by(outer.args[0], "relax.multiply")
        if inner is None:
            raise TenetCodegenError(f"{pattern}: int8 dequantization is not acc * sa * sb")
        scale_a, scale_b = param_of(inner.args[1], "scale_a"), param_of(outer.args[1], "scale_b")
        chain_end = outer
    rhs = param_of(rhs_expr, "rhs")
    bias = None
    if "relax.add" in calls:
        (add,) = calls["relax.add"]
        chain_var = next(v for v, c in producer.items() if c.same_as(chain_end))
        a, b = add.args
        bias = param_of(b if a.same_as(chain_var) else a, "bias")
    acts = [c for name in EPILOGUES for c in calls.get(name, [])]
    epilogue = EPILOGUES[acts[0].op.name] if acts else "none"
    return _Composite(
        pattern, kind, lhs, rhs, bias, transpose is not None, epilogue, scale_a, scale_b,
        zero_point,
    )


#: Element widths charged per kind: (A, B, C). The dequantize forms are the weight-only
#: schemes, whose activations are float16 on the accelerator (the quantize pass rounds them
#: to float16); the group form is packed int4.
_KIND_BITS = {
    "float": (32, 32, 32),
    "dequant_channel": (16, 8, 16),
    "dequant_group": (16, 4, 16),
    "int8": (8, 8, 16),
}


def _scheme_of(comp: _Composite, args_ty) -> str:
    if comp.kind == "float":
        return "none"
    if comp.kind == "dequant_channel":
        return "w8a16_per_channel"
    if comp.kind == "dequant_group":
        k = 2 * int(args_ty[comp.rhs].shape.values[-1])
        groups = int(args_ty[comp.scale_b].shape.values[1])
        return f"w4a16_group{k // groups}"
    per_token = args_ty[comp.scale_a].ndim > 0
    per_channel = args_ty[comp.scale_b].ndim > 0
    if per_token and per_channel:
        return "w8a8_per_channel_per_token"
    if not per_token and not per_channel:
        return "w8a8_per_tensor"
    return f"w8a8_{'per_channel' if per_channel else 'per_tensor'}" + (
        "_per_token" if per_token else ""
    )


def _step_name(result: relax.Var, rhs: relax.Expr) -> str:
    """A readable name: the kind of layer a named weight belongs to, else the result's name.

    A weight passed as a parameter keeps its model name through partitioning, but
    FuseOpsByPattern gives every repeated block (same shapes) one shared function, named
    after the first block's weights; so the block index is dropped:
    ``h.0.attn.c_attn.weight`` -> ``attn.c_attn``. Bound constants have no name.
    """
    name = str(rhs.name) if isinstance(rhs, relax.Var) else ""
    if not name.endswith(".weight"):
        return str(result.name)
    parts = name[: -len(".weight")].split(".")
    numbered = [i for i, part in enumerate(parts) if part.isdigit()]
    return ".".join(parts[numbered[-1] + 1 :] if numbered else parts)


def describe_function(func: relax.Function) -> dict:
    """Turn one outer tenet function into its kernel descriptor (a JSON-ready dict).

    Parameters
    ----------
    func : relax.Function
        A function with attrs ``Codegen="tenet"`` and ``global_symbol``.

    Returns
    -------
    dict
        ``symbol``, ``inputs`` (dtype, ndim), ``steps`` and ``outputs``; values are referred
        to as input index (>= 0) or ``-(step + 1)``.
    """
    symbol = str(func.attrs["global_symbol"])
    refs: dict[relax.Var, int] = {p: i for i, p in enumerate(func.params)}
    inputs = [_tensor_spec(p.ty, f"{symbol}: input {i}") for i, p in enumerate(func.params)]
    composites: dict[relax.Var, _Composite] = {}
    steps: list[dict] = []
    for binding in _bindings(func):
        value = binding.value
        if isinstance(value, relax.Function):
            composites[binding.var] = analyze_composite(value)
            continue
        if isinstance(value, relax.Var) and value in refs:
            refs[binding.var] = refs[value]  # an alias, e.g. a dataflow output
            continue
        if not isinstance(value, relax.Call):
            raise TenetCodegenError(f"{symbol}: unexpected binding {type(value).__name__}")
        op = value.op
        if isinstance(op, relax.Function):
            comp = analyze_composite(op)
        elif op in composites:
            comp = composites[op]
        else:
            raise TenetCodegenError(f"{symbol}: a call to {op} is not a tenet composite")
        args = list(value.args)

        def ref(index: int | None, role: str, args=args, comp=comp) -> int | None:
            if index is None:
                return None
            arg = args[index]
            if arg not in refs or (refs[arg] >= 0 and "kind" in inputs[refs[arg]]):
                raise TenetCodegenError(f"{symbol}: the {role} of {comp.pattern} is not a tensor")
            return refs[arg]

        out = _tensor_spec(binding.var.ty, f"{symbol}: output of {comp.pattern}")
        bits_a, bits_b, bits_c = _KIND_BITS[comp.kind]
        steps.append(
            {
                "pattern": comp.pattern,
                "name": _step_name(binding.var, args[comp.rhs]),
                "kind": comp.kind,
                "scheme": _scheme_of(comp, [a.ty for a in args]),
                "lhs": ref(comp.lhs, "lhs"),
                "rhs": ref(comp.rhs, "rhs"),
                "bias": ref(comp.bias, "bias"),
                "scale_a": ref(comp.scale_a, "activation scale"),
                "scale_b": ref(comp.scale_b, "weight scale"),
                "zero_point": ref(comp.zero_point, "zero point"),
                "rhs_transposed": comp.rhs_transposed,
                "epilogue": comp.epilogue,
                "out_ndim": out["ndim"],
                "bits": [bits_a, bits_b, bits_c],
            }
        )
        refs[binding.var] = -len(steps)
    result = func.body.body
    results = list(result.fields) if isinstance(result, relax.Tuple) else [result]
    outputs = []
    for r in results:
        if r not in refs or refs[r] >= 0:
            raise TenetCodegenError(f"{symbol}: an output is not computed by a tenet step")
        outputs.append({**_tensor_spec(r.ty, f"{symbol}: output"), "source": refs[r]})
    return {"symbol": symbol, "inputs": inputs, "steps": steps, "outputs": outputs}


def _cost_config(functions) -> dict:
    from .hardware import resolve
    from .partition import COST_CONFIG_ATTR

    configs = {str(f.attrs[COST_CONFIG_ATTR]) for f in functions if COST_CONFIG_ATTR in f.attrs}
    if len(configs) > 1:
        raise TenetCodegenError(
            "the tenet functions of one module carry different accelerator configs; "
            "partition the module once, with one hardware"
        )
    # Functions partitioned without partition_for_tenet are charged to the default preset.
    return json.loads(configs.pop()) if configs else resolve(None).descriptor_fields()


def _check_enumeration_limit(described: list[dict], functions, config: dict) -> None:
    """Refuse at build time a static GEMM the accelerator could only cost by enumerating
    more instances than the cost model allows (it would fail at the first VM call)."""
    from .cost_model import parse_config
    from .hardware import check_gemm_size

    hw, df = parse_config(config["cost_config"])
    for desc, func in zip(described, functions):
        params = list(func.params)
        for step in desc["steps"]:
            if step["lhs"] < 0 or step["rhs"] < 0:
                continue
            a, b = params[step["lhs"]].ty, params[step["rhs"]].ty
            try:
                m, k = (int(d) for d in a.shape.values[-2:])
                n = int(b.shape.values[-2 if step["rhs_transposed"] else -1])
            except (TypeError, AttributeError):
                continue  # a symbolic size: only the call can tell
            check_gemm_size(hw, df, m, n, k, f"{desc['symbol']} step {step['name']!r}")


def make_descriptor(functions) -> str:
    """The JSON descriptor of a list of outer tenet functions, with their accelerator config."""
    described = [describe_function(f) for f in functions]
    config = _cost_config(functions)
    _check_enumeration_limit(described, functions, config)
    return json.dumps({"version": DESCRIPTOR_VERSION, "functions": described, **config})


@tvm_ffi.register_global_func("relax.ext.tenet")
def tenet_codegen(functions, options, constant_names):
    """Codegen entry called by ``relax.transform.RunCodegen`` for the ``tenet`` target."""
    del options, constant_names  # constants stay outside composites (bind_constants=False)
    create = tvm_ffi.get_global_func("tenet_byoc.runtime.create_module")
    return [create(make_descriptor(list(functions)))]
