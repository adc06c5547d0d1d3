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
    lhs: int
    rhs: int
    bias: int | None
    rhs_transposed: bool
    epilogue: str


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


def analyze_composite(func: relax.Function) -> _Composite:
    """Find which parameter of a composite function plays which role.

    Parameters
    ----------
    func : relax.Function
        A function with attr ``Composite`` naming a tenet pattern.

    Returns
    -------
    _Composite
        Parameter indices of lhs, rhs and bias, whether rhs is transposed, the epilogue.
    """
    pattern = str(func.attrs["Composite"])
    param_index = {p: i for i, p in enumerate(func.params)}
    producer: dict[relax.Var, relax.Call] = {}
    matmul = add = act = None
    for binding in _bindings(func):
        value = binding.value
        if not isinstance(value, relax.Call):
            raise TenetCodegenError(f"{pattern}: unexpected binding {value}")
        producer[binding.var] = value
        op = value.op.name
        if op == "relax.matmul":
            matmul = value
        elif op == "relax.add":
            add = value
        elif op in EPILOGUES:
            act = value
        elif op != "relax.permute_dims":
            raise TenetCodegenError(f"{pattern}: unexpected op {op} in a composite")
    if matmul is None:
        raise TenetCodegenError(f"{pattern}: composite has no matmul")

    def param_of(expr: relax.Expr, role: str) -> int:
        if expr in param_index:
            return param_index[expr]
        raise TenetCodegenError(f"{pattern}: the {role} is not a parameter of the composite")

    lhs = param_of(matmul.args[0], "lhs")
    rhs_expr = matmul.args[1]
    transposed = rhs_expr in producer and producer[rhs_expr].op.name == "relax.permute_dims"
    rhs = param_of(producer[rhs_expr].args[0] if transposed else rhs_expr, "rhs")
    bias = None
    if add is not None:
        a, b = add.args
        matmul_out = [v for v, c in producer.items() if c.same_as(matmul)][0]
        other = b if a.same_as(matmul_out) else a
        bias = param_of(other, "bias")
    epilogue = EPILOGUES[act.op.name] if act is not None else "none"
    return _Composite(pattern, lhs, rhs, bias, transposed, epilogue)


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

        def ref(index: int | None, role: str) -> int | None:
            if index is None:
                return None
            arg = args[index]
            if arg not in refs or (refs[arg] >= 0 and "kind" in inputs[refs[arg]]):
                raise TenetCodegenError(f"{symbol}: the {role} of {comp.pattern} is not a tensor")
            return refs[arg]

        out = _tensor_spec(binding.var.ty, f"{symbol}: output of {comp.pattern}")
        steps.append(
            {
                "pattern": comp.pattern,
                "name": str(binding.var.name),
                "lhs": ref(comp.lhs, "lhs"),
                "rhs": ref(comp.rhs, "rhs"),
                "bias": ref(comp.bias, "bias"),
                "rhs_transposed": comp.rhs_transposed,
                "epilogue": comp.epilogue,
                "out_ndim": out["ndim"],
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


def _cost_config(functions) -> str:
    from .hardware import resolve
    from .partition import COST_CONFIG_ATTR

    configs = {str(f.attrs[COST_CONFIG_ATTR]) for f in functions if COST_CONFIG_ATTR in f.attrs}
    if len(configs) > 1:
        raise TenetCodegenError(
            "the tenet functions of one module carry different accelerator configs; "
            "partition the module once, with one hardware"
        )
    # Functions partitioned without partition_for_tenet are charged to the default preset.
    return configs.pop() if configs else resolve(None).config_text


def make_descriptor(functions) -> str:
    """The JSON descriptor of a list of outer tenet functions, with their accelerator config."""
    return json.dumps(
        {
            "version": DESCRIPTOR_VERSION,
            "functions": [describe_function(f) for f in functions],
            "cost_config": _cost_config(functions),
        }
    )


@tvm_ffi.register_global_func("relax.ext.tenet")
def tenet_codegen(functions, options, constant_names):
    """Codegen entry called by ``relax.transform.RunCodegen`` for the ``tenet`` target."""
    del options, constant_names  # constants stay outside composites (bind_constants=False)
    create = tvm_ffi.get_global_func("tenet_byoc.runtime.create_module")
    return [create(make_descriptor(list(functions)))]
