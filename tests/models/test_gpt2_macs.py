"""The analytical GPT-2 MAC count against the R.matmul calls of the exported Relax module."""

from __future__ import annotations

import math

import pytest
import tvm
from tvm import relax
from tvm.sym import Analyzer

from tenet_byoc.models.gemms import gpt2_matmuls, total_macs
from tenet_byoc.models.gpt2 import (
    GPT2Config,
    export_gpt2,
    param_shapes,
)

_MATMUL = tvm.ir.Op.get("relax.matmul")


def _matmul_calls(func: relax.Function) -> list[relax.Call]:
    calls = []

    def visit(expr):
        if isinstance(expr, relax.Call) and expr.op.same_as(_MATMUL):
            calls.append(expr)

    relax.analysis.post_order_visit(func.body, visit)
    return calls


def _shape(expr: relax.Expr, analyzer: Analyzer) -> list[int]:
    return [int(analyzer.simplify(d)) for d in expr.ty.shape]


def ir_matmul_macs(mod: tvm.IRModule, func_name: str, sym: dict[str, int]) -> list[int]:
    """MACs of each R.matmul in a function, with symbolic dims bound to ``sym``.

    For ``A[..., m, k] x B[..., k, n] -> C[..., m, n]`` the count is
    ``prod(C.shape) * k``, read from the operand and result shapes alone.
    """
    func = mod[func_name]
    analyzer = Analyzer()
    bound: set[str] = set()
    for param in func.params:
        types = param.ty.fields if isinstance(param.ty, relax.TupleType) else [param.ty]
        for ty in types:
            for dim in ty.shape:
                if isinstance(dim, tvm.tirx.Var) and dim.name in sym and dim.name not in bound:
                    analyzer.bind(dim, sym[dim.name])
                    bound.add(dim.name)
    assert bound == set(sym), f"{func_name} has no symbolic dims {set(sym) - bound}"
    macs = []
    for call in _matmul_calls(func):
        lhs, rhs = (_shape(a, analyzer) for a in call.args)
        out = _shape(call, analyzer)
        assert lhs[-1] == rhs[-2], (lhs, rhs)
        count = lhs[-1]
        for d in out:
            count *= d
        macs.append(count)
    return macs


@pytest.fixture(scope="module", params=["tiny", "small"])
def exported(request):
    config = GPT2Config.preset(request.param)
    mod = export_gpt2(config)
    return config, mod


@pytest.mark.parametrize("seq_len", [1, 7, 32])
def test_prefill_macs_match_ir(exported, seq_len):
    config, mod = exported
    got = ir_matmul_macs(mod, "prefill", {"seq_len": seq_len})
    expected = gpt2_matmuls(config, seq_len, phase="prefill")
    assert len(got) == len(expected) == 6 * config.n_layer + 1
    assert got == [m.macs for m in expected]
    assert sum(got) == total_macs(config, "prefill", seq_len)


@pytest.mark.parametrize("past_len", [0, 5, 31])
def test_decode_macs_match_ir(exported, past_len):
    config, mod = exported
    got = ir_matmul_macs(mod, "decode", {"past_len": past_len})
    expected = gpt2_matmuls(config, past_len, phase="decode")
    assert got == [m.macs for m in expected]
    assert sum(got) == total_macs(config, "decode", past_len)


def test_closed_form_gpt2_small():
    c = GPT2Config.preset("small")
    d, v, n = 768, 50257, 12
    p = 128
    assert total_macs(c, "prefill", p) == n * (12 * p * d * d + 2 * p * p * d) + p * d * v
    assert total_macs(c, "decode", p) == n * (12 * d * d + 2 * (p + 1) * d) + d * v


def test_decode_linear_macs_equal_weight_count():
    # One token multiplies each matrix weight once (wte once more, as lm_head; wpe never).
    c = GPT2Config.preset("small")
    weights = sum(
        math.prod(shape)
        for name, shape in param_shapes(c).items()
        if len(shape) == 2 and name != "wpe.weight"
    )
    attention = c.n_layer * 2 * (9 + 1) * c.n_embd
    assert total_macs(c, "decode", 9) == weights + attention
    # GPT-2 small's well-known 124,439,808 parameters: these, wpe, and 121,344 vector ones
    # (per layer 2 LayerNorms of 2 * 768, biases 3 * 768 + 768 + 3072 + 768; ln_f 2 * 768).
    vectors = 12 * (4 * 768 + 3 * 768 + 768 + 3072 + 768) + 2 * 768
    assert vectors == 121_344
    assert weights + c.n_positions * c.n_embd + vectors == 124_439_808


def test_mac_count_rejects_bad_arguments():
    c = GPT2Config.preset("tiny")
    with pytest.raises(ValueError, match="phase='train'"):
        total_macs(c, "train", 4)
    with pytest.raises(ValueError, match="seq_len=33"):
        total_macs(c, "prefill", 33)
    with pytest.raises(ValueError, match="seq_len=32"):
        total_macs(c, "decode", 32)
    with pytest.raises(TypeError, match="seq_len=2.0"):
        total_macs(c, "prefill", 2.0)
