"""The pattern table of the tenet backend: which Relax subgraphs it offloads, and why not others.

Every pattern is registered under the prefix ``tenet`` in TVM's pattern registry. Each has a
check function; a refused match is not an error, the subgraph simply stays on TVM's own path,
so the only effect of a check is which code computes the result, never the result itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tvm import relax, tirx
from tvm.ir.expr import GenericConst
from tvm.relax.backend.pattern_registry import get_patterns_with_prefix, register_patterns
from tvm.relax.backend.utils import has_leaking_intermediate_variables
from tvm.relax.dpl import DFPattern, is_op, is_tuple, wildcard
from tvm.relax.transform import PatternCheckContext

#: Element types the runtime's float GEMM kernels compute.
FLOAT_DTYPES = ("float32",)

#: Relax activation op -> epilogue name understood by the runtime.
EPILOGUES = {
    "relax.nn.relu": "relu",
    "relax.nn.gelu": "gelu",
    "relax.nn.gelu_tanh": "gelu_tanh",
}


@dataclass(frozen=True)
class PatternInfo:
    """What the runtime needs to know of a pattern, recorded where the pattern is registered.

    Attributes
    ----------
    kind : str
        The runtime's step kind: ``"float"``, ``"dequant_channel"``, ``"dequant_group"``,
        ``"int8"`` or ``"dequant_float"`` (emulated formats).
    rhs_transposed : bool
        Whether the matmul reads its rhs through ``permute_dims`` (``x @ W^T``).
    epilogue : str
        ``"none"`` or an activation name of :data:`EPILOGUES`.
    roles : Mapping[str, str]
        Descriptor role (``lhs``, ``rhs``, ``bias``, ``scale_a``, ``scale_b``,
        ``zero_point``) -> the pattern's annotation whose match is that operand. The codegen
        finds each role's parameter from these named sub-patterns.
    """

    kind: str
    rhs_transposed: bool
    epilogue: str
    roles: Mapping[str, str]


#: Every registered pattern's :class:`PatternInfo`, by registered name.
PATTERN_INFO: dict[str, PatternInfo] = {}

#: Element widths charged per kind when a module carries no recipe of
#: :func:`tenet_byoc.quantize` (A, B, C): the dequantize forms as the classic weight-only
#: schemes (float16 activations, int8 or packed int4 weights).
KIND_BITS = {
    "float": (32, 32, 32),
    "dequant_channel": (16, 8, 16),
    "dequant_group": (16, 4, 16),
    "int8": (8, 8, 16),
    "dequant_float": (32, 32, 16),
}


def make_matmul_pattern(
    transposed_rhs: bool, with_bias: bool, activation: str | None
) -> tuple[DFPattern, Mapping[str, DFPattern]]:
    """Build ``act(matmul(lhs, [permute_dims](rhs)) [+ bias])`` (``activation`` a Relax op
    name or None) and its sub-patterns by role: ``lhs``, ``rhs``, ``root`` (the matmul), and
    when present ``transpose``, ``bias``, ``bias_add``, ``activation``."""
    lhs = wildcard()
    rhs = wildcard()
    annotations: dict[str, DFPattern] = {"lhs": lhs, "rhs": rhs}
    rhs_operand: DFPattern = rhs
    if transposed_rhs:
        rhs_operand = annotations["transpose"] = is_op("relax.permute_dims")(rhs)
    out = annotations["root"] = is_op("relax.matmul")(lhs, rhs_operand)
    return _with_epilogue(out, annotations, with_bias, activation)


def _with_epilogue(out: DFPattern, annotations: dict[str, DFPattern], with_bias: bool,
                   activation: str | None) -> tuple[DFPattern, Mapping[str, DFPattern]]:
    """Append the optional bias add and activation that every pattern may end with."""
    if with_bias:
        annotations["bias"] = bias = wildcard()
        out = annotations["bias_add"] = is_op("relax.add")(out, bias)
    if activation is not None:
        out = annotations["activation"] = is_op(activation)(out)
    return out, annotations


def _epilogue_suffix(with_bias: bool, activation: str | None) -> str:
    return ("_bias" if with_bias else "") + ("_" + EPILOGUES[activation] if activation else "")


def pattern_name(transposed_rhs: bool, with_bias: bool, activation: str | None) -> str:
    """The registered name of one pattern, e.g. ``tenet.matmul_transposed_bias_gelu_tanh``."""
    name = "tenet.matmul" + ("_transposed" if transposed_rhs else "")
    return name + _epilogue_suffix(with_bias, activation)


def _static_int(value) -> int | None:
    return int(value) if isinstance(value, int | tirx.IntImm) else None


def refusal_reason(context: PatternCheckContext) -> str | None:
    """Why the runtime cannot run the match FuseOpsByPattern proposes (a sentence naming
    the first unsupported property), or None when it can."""
    if has_leaking_intermediate_variables(context):
        return "an intermediate value is used outside the pattern"
    ann = context.annotated_expr
    lhs, rhs, root = ann["lhs"], ann["rhs"], ann["root"]
    for role, expr in (("lhs", lhs), ("rhs", rhs), ("output", root)):
        ty = expr.ty
        if not isinstance(ty, relax.TensorType) or ty.ndim < 0 or ty.shape is None:
            return f"{role} has no known rank and shape"
        if ty.dtype not in FLOAT_DTYPES:
            return f"{role} dtype {ty.dtype} is not one of {FLOAT_DTYPES}"
        if ty.ndim < 2:
            return f"{role} has rank {ty.ndim}; the runtime needs matrices (rank >= 2)"
    if "transpose" in ann:
        axes = ann["transpose"].attrs.axes
        rank = rhs.ty.ndim
        swap_last = list(range(rank - 2)) + [rank - 1, rank - 2]
        if axes is None:
            if rank != 2:
                return "permute_dims without axes reverses a rank > 2 tensor"
        elif [int(a) for a in axes] != swap_last:
            return f"permute_dims axes {[int(a) for a in axes]} do not swap the last two axes"
    if "bias" in ann:
        bty = ann["bias"].ty
        if not isinstance(bty, relax.TensorType) or bty.shape is None:
            return "bias has no known shape"
        if bty.dtype not in FLOAT_DTYPES:
            return f"bias dtype {bty.dtype} is not one of {FLOAT_DTYPES}"
        dims = list(bty.shape.values)
        n = root.ty.shape.values[-1]
        if len(dims) == 0 or len(dims) > root.ty.ndim:
            return "bias must be a vector over the output columns"
        if any(_static_int(d) != 1 for d in dims[:-1]):
            return "bias varies over more than the output columns"
        last = _static_int(dims[-1])
        if last is None or last != _static_int(n):
            return "bias length does not equal the static number of output columns"
    return None


# Quantized forms. Each is a matmul whose weight (B) is stored as integers, offloaded whole
# with its dequantization; the quantize pass (tenet_byoc.quantization) writes these forms.
# The emulated form comes first: registered first, it has the lowest priority, so the int4
# group form (which ends in the same multiply-and-reshape) is matched as itself.
QUANT_FORMS = ("dequantize_matmul_float", "dequantize_matmul_channel", "dequantize_matmul_group",
               "int8_matmul_dequantize")


def make_quant_pattern(
    form: str, with_bias: bool, activation: str | None
) -> tuple[DFPattern, Mapping[str, DFPattern]]:
    """Build one quantized pattern and its annotations.

    Forms (``W^T`` is ``R.permute_dims``; a bias add and an activation may follow):

    - ``dequantize_matmul_channel``: ``x @ dequantize(wq[N,K], scale[N], zp, axis=0)^T``
    - ``dequantize_matmul_group``: packed int4, two nibbles a byte, ``wp[N, K/2]`` uint8:
      ``q = reshape(stack([wp & 15, wp >> 4], -1), [N, K/G, G])``,
      ``x @ reshape((astype(q) - zp) * scale[N,K/G,1], [N,K])^T``, ``zp`` a scalar or per group
    - ``int8_matmul_dequantize``: ``astype(xq @ wq^T -> int32, float32) * scale_a * scale_b``
    - ``dequantize_matmul_float``: codes held exactly in float32 (fp8, fp4, MX, asymmetric
      or float16 values), ``x @ reshape(codes[N,K/G,G] * scale[N,K/G,1], [N,K])^T``
    """
    lhs, wq, scale = wildcard(), wildcard(), wildcard()
    ann: dict[str, DFPattern] = {"lhs": lhs, "wq": wq, "scale_b": scale}
    if form == "dequantize_matmul_channel":
        ann["zp"] = zp = wildcard()
        ann["dequantize"] = w = is_op("relax.dequantize")(wq, scale, zp)
        out = ann["root"] = is_op("relax.matmul")(lhs, is_op("relax.permute_dims")(w))
    elif form == "dequantize_matmul_group":
        ann["mask"], ann["shift"], ann["zp"] = mask, shift, zp = wildcard(), wildcard(), wildcard()
        ann["stack"] = nibbles = is_op("relax.stack")(
            is_tuple([is_op("relax.bitwise_and")(wq, mask), is_op("relax.right_shift")(wq, shift)])
        )
        ann["groups"] = groups = is_op("relax.reshape")(nibbles, wildcard())
        centred = is_op("relax.subtract")(is_op("relax.astype")(groups), zp)
        scaled = is_op("relax.multiply")(centred, scale)
        ann["reshape"] = w = is_op("relax.reshape")(scaled, wildcard())
        out = ann["root"] = is_op("relax.matmul")(lhs, is_op("relax.permute_dims")(w))
    elif form == "dequantize_matmul_float":
        ann["codes_scaled"] = scaled = is_op("relax.multiply")(wq, scale)
        ann["reshape"] = w = is_op("relax.reshape")(scaled, wildcard())
        out = ann["root"] = is_op("relax.matmul")(lhs, is_op("relax.permute_dims")(w))
    elif form == "int8_matmul_dequantize":
        ann["scale_a"] = scale_a = wildcard()
        ann["root"] = acc = is_op("relax.matmul")(lhs, is_op("relax.permute_dims")(wq))
        ann["to_float"] = as_float = is_op("relax.astype")(acc)
        out = is_op("relax.multiply")(is_op("relax.multiply")(as_float, scale_a), scale)
    else:
        raise ValueError(f"unknown quantized form {form!r}; expected one of {QUANT_FORMS}")
    ann["dequantized"] = out
    return _with_epilogue(out, ann, with_bias, activation)


def quant_pattern_name(form: str, with_bias: bool, activation: str | None) -> str:
    """The registered name of a quantized pattern, e.g. ``tenet.dequantize_matmul_group_bias``."""
    return "tenet." + form + _epilogue_suffix(with_bias, activation)


def _shape(expr) -> list[int | None] | None:
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return None
    return [_static_int(d) for d in ty.shape.values]


def _const_value(expr) -> int | None:
    if isinstance(expr, GenericConst) and expr.value.numpy().size == 1:
        return int(expr.value.numpy().reshape(()))
    return None


def _dtype(expr) -> str | None:
    ty = expr.ty
    return str(ty.dtype) if isinstance(ty, relax.TensorType) else None


def quant_refusal_reason(context: PatternCheckContext) -> str | None:
    """Why the runtime cannot run a quantized match, or None when it can."""
    if has_leaking_intermediate_variables(context):
        return "an intermediate value is used outside the pattern"
    ann = context.annotated_expr
    lhs, wq, scale, root = ann["lhs"], ann["wq"], ann["scale_b"], ann["root"]
    wshape = _shape(wq)
    packed = "groups" in ann
    if "codes_scaled" in ann:
        return _emulated_refusal_reason(ann, wshape) or _bias_refusal(ann, wshape)
    if _dtype(wq) != ("uint8" if packed else "int8") or wshape is None or None in wshape:
        return "the quantized weight must be a static-shape int8 (packed int4: uint8) tensor"
    lshape = _shape(lhs)
    if lshape is None or len(lshape) < 2:
        return "the activation must have rank >= 2"
    n = wshape[0]
    if "dequantize" in ann:
        attrs = ann["dequantize"].attrs
        if len(wshape) != 2 or int(attrs.axis) not in (0, -2) or attrs.out_dtype != "float32":
            return "dequantize must be per output channel (axis 0 of a [N, K] weight) to float32"
        zp = ann["zp"]
        if not isinstance(zp, GenericConst) or zp.value.numpy().any():
            return "only a constant zero point of 0 (symmetric quantization) is supported"
        if _shape(scale) != [n] or _dtype(scale) != "float32":
            return f"the scale must be float32 [{n}]"
    elif packed:
        gshape = _shape(ann["groups"])
        if len(wshape) != 2 or gshape is None or len(gshape) != 3:
            return "packed int4 weights must be [N, K/2] unpacked to [N, K/G, G]"
        k = 2 * wshape[1]
        axis = ann["stack"].attrs.axis
        if axis is None or int(axis) not in (-1, 2) or gshape[0] != n or gshape[1] * gshape[2] != k:
            return "the two nibbles of a byte must be consecutive elements of a row"
        if _const_value(ann["mask"]) != 15 or _const_value(ann["shift"]) != 4:
            return "nibbles must be unpacked as (wp & 15, wp >> 4)"
        if _shape(scale) != [n, gshape[1], 1] or _dtype(scale) != "float32":
            return f"the group scale must be float32 [{n}, {gshape[1]}, 1]"
        if _dtype(ann["zp"]) != "float32" or _shape(ann["zp"]) not in ([], [n, gshape[1], 1]):
            return f"the zero point must be float32, a scalar or [{n}, {gshape[1]}, 1]"
        if _shape(ann["reshape"]) != [n, k]:
            return "the dequantized groups must be reshaped to [N, K]"
    else:
        if len(wshape) != 2 or _dtype(lhs) != "int8" or _dtype(root) != "int32":
            return "an int8 GEMM needs int8 [.., M, K] x int8 [N, K]^T accumulating in int32"
        if _dtype(ann["to_float"]) != "float32":
            return "the int32 accumulator must be converted to float32"
        sa, sb = _shape(ann["scale_a"]), _shape(scale)
        if _dtype(ann["scale_a"]) != "float32" or sa not in ([], lshape[:-1] + [1]):
            return "the activation scale must be float32, per tensor [] or per token [.., M, 1]"
        if _dtype(scale) != "float32" or sb not in ([], [n]):
            return f"the weight scale must be float32, per tensor [] or per channel [{n}]"
    if "to_float" not in ann and _dtype(lhs) != "float32":  # the dequantizing forms
        return "the activation must be float32"
    return _bias_refusal(ann, wshape)


def _bias_refusal(ann, wshape) -> str | None:
    n = wshape[0]
    if "bias" in ann and (_shape(ann["bias"]) != [n] or _dtype(ann["bias"]) != "float32"):
        return f"the bias must be float32 [{n}]"
    return None


def _emulated_refusal_reason(ann, wshape) -> str | None:
    """Why the emulated form (float codes times scales) cannot run, or None."""
    wq, scale = ann["wq"], ann["scale_b"]
    if not isinstance(wq, GenericConst | relax.Var) or isinstance(wq, relax.DataflowVar):
        return "the weight codes must be a constant or a parameter"
    if _dtype(wq) != "float32" or wshape is None or None in wshape or len(wshape) != 3:
        return "the weight codes must be a static-shape float32 [N, K/G, G] tensor"
    n, groups, g = wshape
    if _shape(scale) != [n, groups, 1] or _dtype(scale) != "float32":
        return f"the scale must be float32 [{n}, {groups}, 1]"
    if _shape(ann["reshape"]) != [n, groups * g]:
        return "the dequantized codes must be reshaped to [N, K]"
    lshape = _shape(ann["lhs"])
    if _dtype(ann["lhs"]) != "float32" or lshape is None or len(lshape) < 2:
        return "the activation must be float32 of rank >= 2"
    return None


#: The kind of step each quantized form runs, and its operands' annotations.
_QUANT_KINDS = {
    "dequantize_matmul_float": ("dequant_float", {}),
    "dequantize_matmul_channel": ("dequant_channel", {}),
    "dequantize_matmul_group": ("dequant_group", {"zero_point": "zp"}),
    "int8_matmul_dequantize": ("int8", {"scale_a": "scale_a"}),
}
#: The operands' annotations every quantized form has.
_QUANT_ROLES = {"lhs": "lhs", "rhs": "wq", "scale_b": "scale_b"}


def _pattern_table():
    table: list = []
    # The registry hands patterns back newest first, and FuseOpsByPattern gives earlier
    # entries priority, so the shortest pattern is registered first, and the quantized
    # forms (which contain a float matmul form) after all float ones. Each form: its kind,
    # whether its rhs is transposed, its operands' annotations.
    float_forms = {t: ("float", t, {"lhs": "lhs", "rhs": "rhs"}) for t in (False, True)}
    quant_forms = {form: (_QUANT_KINDS[form][0], True, {**_QUANT_ROLES, **_QUANT_KINDS[form][1]})
                   for form in QUANT_FORMS}  # in QUANT_FORMS' order: its first is matched last
    for forms, make, named, refusal in (
            (float_forms, make_matmul_pattern, pattern_name, refusal_reason),
            (quant_forms, make_quant_pattern, quant_pattern_name, quant_refusal_reason)):
        for activation in (None, *EPILOGUES):
            for with_bias in (False, True):
                for form, (kind, transposed, roles) in forms.items():
                    pattern, annotations = make(form, with_bias, activation)
                    name = named(form, with_bias, activation)
                    PATTERN_INFO[name] = PatternInfo(
                        kind, transposed, EPILOGUES.get(activation, "none"),
                        {**roles, "bias": "bias"} if with_bias else roles)
                    # accepted where the refusal (the form's reason function) gives None
                    table.append((name, pattern, annotations,
                                  lambda context, refusal=refusal: refusal(context) is None))
    return table


register_patterns(_pattern_table())


def tenet_patterns():
    """The registered tenet patterns, in priority order."""
    return get_patterns_with_prefix("tenet")
