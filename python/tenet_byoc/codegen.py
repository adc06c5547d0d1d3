"""The ``relax.ext.tenet`` codegen: partitioned functions -> kernel descriptors -> a runtime module.

Each function handed to the codegen is an outer function (attr ``Codegen="tenet"``) whose body
calls one or more composite functions (attr ``Composite="tenet.*"``). Which composite
parameter is the matmul's lhs, rhs, bias or scale is found by matching the pattern's named
sub-patterns against the composite body, as TVM's cuBLAS and CUTLASS backends do
(MergeCompositeFunctions often puts a weight first); the pattern's kind, transpose and
epilogue come from where it was registered (:data:`tenet_byoc.patterns.PATTERN_INFO`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

import tvm_ffi
from tvm import relax
from tvm.relax.backend.pattern_registry import get_pattern

from .cost_model import QuantRecipe
from .patterns import KIND_BITS, PATTERN_INFO, PatternInfo
from .quantization import (
    RECIPE_ATTR,
    SCHEME_ATTR,
    QuantScheme,
    RecipeStamp,
    attention_scheme,
    is_attention_gemm,
)

#: The descriptor version the runtime reads (``src/runtime/program.h``'s
#: ``kDescriptorVersion``, the one place it is written; the package loads the runtime first).
DESCRIPTOR_VERSION: int = tvm_ffi.get_global_func("tenet_byoc.runtime.descriptor_version")()

#: The keys of each object of the descriptor ("descriptor", the top level; "function";
#: "step"; "vector_function"; "vector_step"), in the runtime's order, each mapped to whether
#: it is required (``program.cc``'s ``DescriptorObjects``, the one place they are written; the
#: runtime refuses any other key).
DESCRIPTOR_FIELDS: dict[str, dict[str, bool]] = {
    name: dict(fields) for name, fields in
    json.loads(tvm_ffi.get_global_func("tenet_byoc.runtime.descriptor_fields")()).items()
}

#: The scheme of a quantized call in a module :func:`tenet_byoc.quantize` did not stamp.
UNNAMED_SCHEME = "unnamed"


class TenetCodegenError(ValueError):
    """A partitioned function that the tenet codegen cannot turn into a kernel descriptor."""


@dataclass(frozen=True)
class _Composite:
    """A composite function's pattern and the parameter index of each operand role."""

    pattern: str
    info: PatternInfo
    params: dict[str, int]  # role -> parameter index


def _tensor_spec(ty, what: str) -> dict:
    if isinstance(ty, relax.ShapeType):
        # FuseOpsByPattern passes symbolic dims that no tensor parameter defines as a shape
        # argument; the runtime reads every dim from the tensors and ignores it.
        return {"kind": "shape"}
    if not isinstance(ty, relax.TensorType) or ty.ndim < 0:
        raise TenetCodegenError(f"{what} is not a tensor of known rank (type {ty})")
    return {"dtype": str(ty.dtype), "ndim": int(ty.ndim)}


def analyze_composite(func: relax.Function) -> _Composite:
    """The recorded facts of the tenet pattern a composite function (attr ``Composite``)
    names, and which of its parameters plays each of the pattern's roles."""
    pattern = str(func.attrs["Composite"])
    entry = get_pattern(pattern)
    info = PATTERN_INFO.get(pattern)
    if entry is None or info is None:
        raise TenetCodegenError(f"{pattern} is not a registered tenet pattern")
    matched = entry.pattern.extract_matched_expr(
        func.body.body, relax.analysis.get_var2val(func)
    )
    if matched is None:
        raise TenetCodegenError(f"{pattern}: the composite body does not match its pattern")
    index = {p: i for i, p in enumerate(func.params)}
    found = {}
    for role, annotation in info.roles.items():
        expr = matched.get(entry.annotation_patterns[annotation])
        if expr not in index:
            raise TenetCodegenError(f"{pattern}: the {role} is not a parameter of the composite")
        found[role] = index[expr]
    return _Composite(pattern, info, found)


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


#: The recipe of a float call: nothing quantized.
FLOAT_RECIPE = QuantRecipe()


@dataclass(frozen=True)
class GemmCharging:
    """What a GEMM is charged with: the scheme the ledger records, the A/B/C widths, the
    quantization recipe, and the multiple K is padded to."""

    scheme: str
    bits: tuple[int, int, int]
    recipe: QuantRecipe
    k_multiple: int


#: A float composite: float32 operands, nothing quantized, recorded as scheme "none".
FLOAT_CHARGING = GemmCharging("none", tuple(KIND_BITS["float"]), FLOAT_RECIPE, 1)


def gemm_charging(scheme: QuantScheme, gemm: str) -> GemmCharging:
    """What this codegen charges a GEMM of a module ``quantize(mod, scheme)`` made.

    ``gemm`` is "weight" (a linear layer), "key" (attention's ``Q K^T``) or "value" (``P V``).
    A linear layer under a float scheme is a float composite; under a quantized one it
    carries the scheme's widths and recipe (the quantize pass stamps them; its static
    scales are dynamic without calibration data, as here) and K padded to the scheme's
    multiple. Attention stays float unless the scheme quantizes the KV cache: then B is
    the cache at the KV width with its scales (``quantization.attention_scheme``), under
    the scheme's name, never padded. :func:`tenet_byoc.estimate` charges by this rule;
    :func:`describe_function` reads the same widths and recipes from the quantize pass's
    stamp.
    """
    if gemm not in ("weight", "key", "value"):
        raise ValueError(f"gemm must be 'weight', 'key' or 'value', got {gemm!r}")
    if gemm != "weight":
        if not scheme.quantizes_kv:
            return FLOAT_CHARGING
        att = attention_scheme(scheme)
        return GemmCharging(scheme.name, tuple(att.bits()), att.recipe(gemm), 1)
    if scheme.kernel == "float":
        return FLOAT_CHARGING
    if scheme.activation_static:
        # quantize() without calibration data computes the scales per call, charged dynamic.
        scheme = replace(scheme, activation_static=False)
    return GemmCharging(scheme.name, tuple(scheme.bits()), scheme.recipe(), scheme.k_multiple())


def _shape_of(ty) -> list[int] | None:
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return None
    try:
        return [int(d) for d in ty.shape.values]
    except TypeError:
        return None


def unstamped_recipe(kind: str, scale_a_ty, scale_b_ty, rhs_ty) -> QuantRecipe:
    """The recipe of a quantized call in a module :func:`tenet_byoc.quantize` did not stamp
    (a hand-written form): read from its operands' shapes, as the classic schemes charge."""
    if kind == "float":
        return FLOAT_RECIPE
    sb = _shape_of(scale_b_ty) or []
    recipe = FLOAT_RECIPE.replace(place="weight")
    if kind == "dequant_channel":
        return recipe.replace(weight="channel")
    if kind == "dequant_group":  # packed [N, K/2], scales [N, K/G, 1]
        k = (_shape_of(rhs_ty) or [0, 0])[1] * 2
        groups = sb[1] if len(sb) == 3 else 1
    elif kind == "dequant_float":  # codes [N, K/G, G]
        _, groups, g = _shape_of(rhs_ty) or [0, 1, 1]
        k = groups * g
    if kind in ("dequant_group", "dequant_float"):
        return recipe.replace(weight="group", weight_group=max(k // max(groups, 1), 1))
    sa = _shape_of(scale_a_ty) or []
    return recipe.replace(place="output", weight="channel" if sb else "tensor",
                activation="channel" if sa else "tensor")


#: The operand roles of a step, in descriptor order.
_ROLES = ("lhs", "rhs", "bias", "scale_a", "scale_b", "zero_point")


def _fields(kind: str, where: str, values: dict) -> dict:
    """An object's values as the runtime reads them: its keys checked against, and ordered
    as, :data:`DESCRIPTOR_FIELDS` ``[kind]``."""
    fields = DESCRIPTOR_FIELDS[kind]
    unknown = sorted(values.keys() - fields.keys())
    missing = sorted(k for k, required in fields.items() if required and k not in values)
    if unknown or missing:
        raise TenetCodegenError(
            f"{where}: a {kind} has fields the runtime does not read ({unknown}) or lacks "
            f"fields it requires ({missing})"
        )
    return {key: values[key] for key in fields if key in values}


def describe_function(func: relax.Function) -> dict:
    """The kernel descriptor (a JSON-ready dict) of one outer tenet function (attrs
    ``Codegen="tenet"`` and ``global_symbol``): ``symbol``, ``inputs`` (dtype, ndim),
    ``steps`` and ``outputs``; values are referred to as input index (>= 0) or
    ``-(step + 1)``."""
    symbol = str(func.attrs["global_symbol"])
    scheme = str(func.attrs[SCHEME_ATTR]) if SCHEME_ATTR in func.attrs else UNNAMED_SCHEME
    stamped = (RecipeStamp.read(str(func.attrs[RECIPE_ATTR])) if RECIPE_ATTR in func.attrs
               else None)
    from .partition import HOST_IO_ATTR, operands_on_chip

    # A function no caller was seen for keeps neither operand on chip.
    host_io = json.loads(str(func.attrs[HOST_IO_ATTR])) if HOST_IO_ATTR in func.attrs else None
    refs: dict[relax.Var, int] = {p: i for i, p in enumerate(func.params)}
    inputs = [_tensor_spec(p.ty, f"{symbol}: input {i}") for i, p in enumerate(func.params)]
    composites: dict[relax.Var, _Composite] = {}
    steps: list[dict] = []
    if not isinstance(func.body, relax.SeqExpr):
        raise TenetCodegenError(f"function body is {type(func.body).__name__}, not a SeqExpr")
    for binding in (b for block in func.body.blocks for b in block.bindings):
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
        kind = comp.info.kind
        step_scheme = "none" if kind == "float" else scheme
        # The recipe is the one the quantize pass stamped: the codegen never guesses it.
        attention = stamped.attention if stamped is not None else None
        types = {role: args[index].ty for role, index in comp.params.items()}
        if kind == "float" and attention and is_attention_gemm(types["lhs"], types["rhs"]):
            # Attention under a KV scheme: B is the K (transposed) or V cache, stored at
            # the KV width (quantization.attention_scheme).
            bits, quant = attention["key" if comp.info.rhs_transposed else "value"]
            step_scheme = scheme
        elif kind == "float":
            bits, quant = FLOAT_CHARGING.bits, FLOAT_CHARGING.recipe
        elif stamped is not None:
            bits, quant = stamped.bits, stamped.recipe
        else:
            bits = list(KIND_BITS[kind])
            quant = unstamped_recipe(kind, types.get("scale_a"), types.get("scale_b"),
                                     types["rhs"])
        steps.append(
            _fields("step", symbol, {
                "pattern": comp.pattern,
                "name": _step_name(binding.var, args[comp.params["rhs"]]),
                "kind": kind,
                "scheme": step_scheme,
                **{role: ref(comp.params.get(role), role) for role in _ROLES},
                "rhs_transposed": comp.info.rhs_transposed,
                "epilogue": comp.info.epilogue,
                "out_ndim": out["ndim"],
                "bits": list(bits),
                "quant": quant.as_dict(),
            })
        )
        refs[binding.var] = -len(steps)
    result = func.body.body
    results = list(result.fields) if isinstance(result, relax.Tuple) else [result]
    outputs = []
    for r in results:
        if r not in refs or refs[r] >= 0:
            raise TenetCodegenError(f"{symbol}: an output is not computed by a tenet step")
        outputs.append({**_tensor_spec(r.ty, f"{symbol}: output"), "source": refs[r]})
    returned = {outputs[o]["source"] for o in range(len(outputs)) if host_io is not None
                and (-1 in host_io["outputs"] or o in host_io["outputs"])}
    for s, step in enumerate(steps):  # the descriptor's last two keys
        step.update(operands_on_chip(host_io is None or step["lhs"] in host_io["inputs"],
                                     host_io is None or -(s + 1) in returned))
    return _fields("function", symbol,
                   {"symbol": symbol, "inputs": inputs, "steps": steps, "outputs": outputs})


def _accelerator(functions) -> dict:
    from .accelerators import resolve
    from .partition import ACCELERATOR_ATTR

    text = _one_attr(functions, ACCELERATOR_ATTR, "accelerators; partition the module once, "
                     "with one accelerator")
    # Functions partitioned without partition_for_tenet are charged to the default preset.
    # The accelerator's JSON form is embedded as an object; the runtime's cost model parses it.
    return json.loads(text if text is not None else resolve(None).to_json())


def _one_attr(functions, attr: str, what: str) -> str | None:
    """The value of ``attr`` the functions carry (None: none does); refused when they differ
    (``what``: what differs, and what to do)."""
    texts = {str(f.attrs[attr]) for f in functions if attr in f.attrs}
    if len(texts) > 1:
        raise TenetCodegenError(f"the tenet functions of one module carry different {what}")
    return texts.pop() if texts else None


def _check_enumeration_limit(described: list[dict], functions, accelerator: dict) -> None:
    """Refuse at build time a static GEMM the accelerator could only cost by enumerating
    more instances than the cost model allows (it would fail at the first VM call)."""
    from .accelerators import Accelerator

    acc = Accelerator.from_json(json.dumps(accelerator))
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
            acc.check_gemm(m, n, k, f"{desc['symbol']} step {step['name']!r}")


def make_descriptor(functions) -> str:
    """The JSON descriptor of a list of outer tenet functions, with their accelerator."""
    described = [describe_function(f) for f in functions]
    accelerator = _accelerator(functions)
    _check_enumeration_limit(described, functions, accelerator)
    return json.dumps(_fields("descriptor", "the module", {
        "version": DESCRIPTOR_VERSION, "accelerator": accelerator, "functions": described,
        "vector_functions": _vector_functions(functions)}))


def _vector_functions(functions) -> list[dict]:
    """The charge calls' steps partition_for_tenet stamped (attr ``tenet.vector_plan``)."""
    from .vector_plan import PLAN_ATTR

    text = _one_attr(functions, PLAN_ATTR, "vector plans; partition the module once")
    return [_fields("vector_function", f["symbol"], {
        **f, "steps": [_fields("vector_step", f["symbol"], step) for step in f["steps"]]})
        for f in (json.loads(text) if text is not None else [])]


@tvm_ffi.register_global_func("relax.ext.tenet")
def tenet_codegen(functions, options, constant_names):
    """Codegen entry called by ``relax.transform.RunCodegen`` for the ``tenet`` target."""
    del options, constant_names  # constants stay outside composites (bind_constants=False)
    create = tvm_ffi.get_global_func("tenet_byoc.runtime.create_module")
    return [create(make_descriptor(list(functions)))]
