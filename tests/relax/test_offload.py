"""Offloaded builds against TVM's own build of the same module, pattern by pattern."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import tvm

import tenet_byoc
from relax_testing import assert_rel_close, matmul_module, offloaded_symbols, run
from tenet_byoc.patterns import pattern_name

ACTS = [None, "relu", "gelu", "gelu_tanh"]
ACT_OPS = {None: None, "relu": "relax.nn.relu", "gelu": "relax.nn.gelu",
           "gelu_tanh": "relax.nn.gelu_tanh"}


def _compare(mod, arrays):
    got = run(tenet_byoc.build(mod), *arrays)
    want = run(tenet_byoc.build(mod, offload=False), *arrays)
    assert_rel_close(got, want)
    return got


@pytest.mark.parametrize("m", [1, 6])  # the runtime's few-rows (sgemm) and matmul paths
@pytest.mark.parametrize(
    "transposed,bias,act", list(itertools.product([False, True], [False, True], ACTS))
)
def test_every_pattern_matches_tvm(transposed, bias, act, m, rng):
    k, n = 24, 37  # prime N
    rhs_shape = (n, k) if transposed else (k, n)
    mod = matmul_module((m, k), rhs_shape, transposed=transposed, bias=bias, activation=act)
    assert offloaded_symbols(mod) == [pattern_name(transposed, bias, ACT_OPS[act])]
    arrays = [rng.standard_normal((m, k)), rng.standard_normal(rhs_shape)]
    if bias:
        arrays.append(rng.standard_normal(n))
    _compare(mod, [a.astype("float32") for a in arrays])


@pytest.mark.parametrize(
    "lhs_shape,rhs_shape,transposed",
    [
        ((1, 768), (2304, 768), True),  # M = 1, GPT-2 decode c_attn
        ((5, 1), (1, 13), False),  # K = 1
        ((3, 17), (17, 31), False),  # prime N
        ((2, 3, 5, 8), (3, 8, 7), False),  # batch broadcast of rhs over lhs's leading dim
        ((5, 8), (2, 3, 8, 7), False),  # lhs broadcast over rhs batches
        ((4, 1, 5, 8), (1, 3, 8, 7), False),  # both broadcast
        ((2, 9, 16), (11, 16), True),  # linear layer on a 3-D activation
        ((1, 4, 6, 16), (1, 4, 6, 16), True),  # attention scores Q @ K^T
        ((1, 4, 6, 6), (1, 4, 6, 16), False),  # attention context P @ V
    ],
)
def test_shapes_match_tvm(lhs_shape, rhs_shape, transposed, rng):
    mod = matmul_module(lhs_shape, rhs_shape, transposed=transposed)
    assert len(offloaded_symbols(mod)) == 1
    arrays = [rng.standard_normal(s).astype("float32") for s in (lhs_shape, rhs_shape)]
    got = _compare(mod, arrays)
    rhs = np.swapaxes(arrays[1], -1, -2) if transposed else arrays[1]
    assert_rel_close(got, np.matmul(arrays[0].astype("float64"), rhs))


def test_symbolic_sequence_length_three_values(rng):
    seq = tvm.tirx.Var("seq_len", "int64")
    mod = matmul_module((1, seq, 32), (48, 32), transposed=True, bias=True, activation="gelu_tanh")
    ex = tenet_byoc.build(mod)
    ref = tenet_byoc.build(mod, offload=False)
    w = rng.standard_normal((48, 32)).astype("float32")
    b = rng.standard_normal(48).astype("float32")
    for s in (1, 7, 64):
        x = rng.standard_normal((1, s, 32)).astype("float32")
        got = run(ex, x, w, b)
        assert got.shape == (1, s, 48)
        assert_rel_close(got, run(ref, x, w, b))


def test_merged_region_runs_both_layers(rng):
    """An MLP whose two linear layers MergeCompositeFunctions puts in one tenet function."""
    from tvm import relax

    x = relax.Var("x", relax.TensorType((4, 20), "float32"))
    w0 = relax.Var("w0", relax.TensorType((16, 20), "float32"))
    b0 = relax.Var("b0", relax.TensorType((16,), "float32"))
    w1 = relax.Var("w1", relax.TensorType((3, 16), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, w0, b0, w1]):
        with bb.dataflow():
            h = bb.emit(relax.op.matmul(x, bb.emit(relax.op.permute_dims(w0))))
            h = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(h, b0))))
            y = bb.emit_output(relax.op.matmul(h, bb.emit(relax.op.permute_dims(w1))))
        bb.emit_func_output(y)
    mod = bb.get()
    part = tenet_byoc.partition_for_tenet(mod)
    outer = [f for f in part.functions.values() if f.attrs and "Codegen" in f.attrs]
    assert len(outer) == 1
    assert offloaded_symbols(mod) == ["tenet.matmul_transposed_bias_relu", "tenet.matmul_transposed"]
    arrays = [rng.standard_normal(s).astype("float32") for s in [(4, 20), (16, 20), (16,), (3, 16)]]
    got = _compare(mod, arrays)
    h = np.maximum(arrays[0] @ arrays[1].T + arrays[2], 0)
    assert_rel_close(got, h @ arrays[3].T)


@pytest.mark.parametrize("dtype", ["float16", "int64"])
def test_unsupported_dtype_stays_on_tvm(dtype, rng):
    mod = matmul_module((5, 8), (8, 3), dtype=dtype)
    assert offloaded_symbols(mod) == []
    a = (rng.standard_normal((5, 8)) * 4).astype(dtype)
    b = (rng.standard_normal((8, 3)) * 4).astype(dtype)
    got = run(tenet_byoc.build(mod), a, b)
    want = np.matmul(a.astype("float64"), b.astype("float64"))
    if dtype == "int64":
        np.testing.assert_array_equal(got, want.astype("int64"))
    else:
        assert_rel_close(got, want, rtol=2e-3)


def test_permute_that_is_not_a_transpose_is_not_fused(rng):
    """permute_dims(k, [0, 2, 1, 3]) is not K^T: the matmul is offloaded, the permute is not."""
    from tvm import relax

    q = relax.Var("q", relax.TensorType((1, 4, 6, 8), "float32"))
    k = relax.Var("k", relax.TensorType((1, 6, 4, 8), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [q, k]):
        with bb.dataflow():
            kt = bb.emit(relax.op.permute_dims(k, [0, 2, 3, 1]))
            y = bb.emit_output(relax.op.matmul(q, kt))
        bb.emit_func_output(y)
    mod = bb.get()
    assert offloaded_symbols(mod) == ["tenet.matmul"]
    arrays = [rng.standard_normal((1, 4, 6, 8)).astype("float32"),
              rng.standard_normal((1, 6, 4, 8)).astype("float32")]
    got = _compare(mod, arrays)
    assert_rel_close(got, arrays[0] @ arrays[1].transpose(0, 2, 3, 1))


def test_main_calling_another_relax_function(rng):
    """MergeCompositeFunctions cannot handle main calling a Relax function; partition copes."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((3, 8), "float32"))
    w = relax.Var("w", relax.TensorType((5, 8), "float32"))
    with bb.function("layer", [x, w], private=True):
        with bb.dataflow():
            y = bb.emit_output(relax.op.matmul(x, bb.emit(relax.op.permute_dims(w))))
        bb.emit_func_output(y)
    layer = bb.get().get_global_var("layer")
    x2 = relax.Var("x", relax.TensorType((3, 8), "float32"))
    w2 = relax.Var("w", relax.TensorType((5, 8), "float32"))
    with bb.function("main", [x2, w2]):
        out = bb.emit(relax.Call(layer, [x2, w2]))
        bb.emit_func_output(relax.op.nn.relu(out))
    mod = bb.get()
    arrays = [rng.standard_normal((3, 8)).astype("float32"),
              rng.standard_normal((5, 8)).astype("float32")]
    got = _compare(mod, arrays)
    assert_rel_close(got, np.maximum(arrays[0] @ arrays[1].T, 0))
    assert offloaded_symbols(mod) == ["tenet.matmul_transposed"]
