"""The pattern table of the tenet backend: which Relax subgraphs it offloads, and why not others.

Every pattern is registered under the prefix ``tenet`` in TVM's pattern registry. Each has a
check function; a refused match is not an error, the subgraph simply stays on TVM's own path,
so the only effect of a check is which code computes the result, never the result itself.
"""

from __future__ import annotations

from collections.abc import Mapping

from tvm import relax, tirx
from tvm.relax.backend.pattern_registry import get_patterns_with_prefix, register_patterns
from tvm.relax.backend.utils import has_leaking_intermediate_variables
from tvm.relax.dpl import DFPattern, is_op, wildcard
from tvm.relax.transform import PatternCheckContext

#: Element types the runtime's float GEMM kernels compute.
FLOAT_DTYPES = ("float32",)

#: Relax activation op -> epilogue name understood by the runtime.
EPILOGUES = {
    "relax.nn.relu": "relu",
    "relax.nn.gelu": "gelu",
    "relax.nn.gelu_tanh": "gelu_tanh",
}


def make_matmul_pattern(
    transposed_rhs: bool, with_bias: bool, activation: str | None
) -> tuple[DFPattern, Mapping[str, DFPattern]]:
    """Build ``act(matmul(lhs, [permute_dims](rhs)) [+ bias])`` and its annotations.

    Parameters
    ----------
    transposed_rhs : bool
        Whether the rhs reaches the matmul through ``R.permute_dims`` (``x @ W^T``).
    with_bias : bool
        Whether an ``R.add`` of a bias follows the matmul.
    activation : str or None
        The Relax op name of the epilogue activation, or None.

    Returns
    -------
    pattern : DFPattern
        The pattern rooted at the last op.
    annotations : Mapping[str, DFPattern]
        Sub-patterns by role: ``lhs``, ``rhs``, ``root`` (the matmul), and when present
        ``transpose``, ``bias``, ``bias_add``, ``activation``.
    """
    lhs = wildcard()
    rhs = wildcard()
    annotations: dict[str, DFPattern] = {"lhs": lhs, "rhs": rhs}
    rhs_operand: DFPattern = rhs
    if transposed_rhs:
        rhs_operand = annotations["transpose"] = is_op("relax.permute_dims")(rhs)
    out = annotations["root"] = is_op("relax.matmul")(lhs, rhs_operand)
    if with_bias:
        annotations["bias"] = bias = wildcard()
        out = annotations["bias_add"] = is_op("relax.add")(out, bias)
    if activation is not None:
        out = annotations["activation"] = is_op(activation)(out)
    return out, annotations


def pattern_name(transposed_rhs: bool, with_bias: bool, activation: str | None) -> str:
    """The registered name of one pattern, e.g. ``tenet.matmul_transposed_bias_gelu_tanh``."""
    name = "tenet.matmul"
    if transposed_rhs:
        name += "_transposed"
    if with_bias:
        name += "_bias"
    if activation is not None:
        name += "_" + EPILOGUES[activation]
    return name


def _static_int(value) -> int | None:
    return int(value) if isinstance(value, int | tirx.IntImm) else None


def refusal_reason(context: PatternCheckContext) -> str | None:
    """Why the runtime cannot run a match, or None when it can.

    Parameters
    ----------
    context : PatternCheckContext
        The match that FuseOpsByPattern proposes.

    Returns
    -------
    str or None
        A sentence naming the first unsupported property, or None to accept the match.
    """
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
        bias = ann["bias"]
        bty = bias.ty
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


def _check(context: PatternCheckContext) -> bool:
    return refusal_reason(context) is None


def _pattern_table():
    table = []
    # The registry hands patterns back newest first, and FuseOpsByPattern gives earlier
    # entries priority, so the shortest pattern is registered first.
    for activation in (None, *EPILOGUES):
        for with_bias in (False, True):
            for transposed in (False, True):
                pattern, annotations = make_matmul_pattern(transposed, with_bias, activation)
                table.append(
                    (pattern_name(transposed, with_bias, activation), pattern, annotations, _check)
                )
    return table


register_patterns(_pattern_table())


def tenet_patterns():
    """The registered tenet patterns, in priority order."""
    return get_patterns_with_prefix("tenet")
