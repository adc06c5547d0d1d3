"""Each quantization scheme: offloaded build vs TVM's own build, hand-counted bytes, errors."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

import tenet_byoc
from relax_testing import matmul_module, offloaded_symbols, packed_int4_group_module, run
from tenet_byoc.quantization import (
    CLASSIC_SCHEMES,
    SCHEMES,
    QuantScheme,
    pack_int4,
    quantize,
    quantize_weight,
)

QUANTIZED = [name for name in CLASSIC_SCHEMES if name != "none"]
FORM = {
    "w8a8_per_tensor": "tenet.int8_matmul_dequantize",
    "w8a8_per_channel_per_token": "tenet.int8_matmul_dequantize",
    "w8a16_per_channel": "tenet.dequantize_matmul_channel",
    "w4a16_group32": "tenet.dequantize_matmul_group",
    "w4a16_group64": "tenet.dequantize_matmul_group",
    "w4a16_group128": "tenet.dequantize_matmul_group",
}


def linear(x_shape, n, rng, *, bias=True, activation=None):
    """A linear layer with its weight (and bias) bound as constants: main(x)."""
    k = x_shape[-1]
    mod = matmul_module(x_shape, (n, k), transposed=True, bias=bias, activation=activation)
    params = {"w": rng.standard_normal((n, k)).astype("float32")}
    if bias:
        params["b"] = rng.standard_normal(n).astype("float32")
    return relax.transform.BindParams("main", params)(mod), params


def gemm_error_bound(x, w, rtol=1e-5):
    """rtol times |x| @ |w|^T: the scale of a GEMM's rounding error, cancellation or not."""
    return rtol * (np.abs(x).astype("float64") @ np.abs(w).T.astype("float64")) + 1e-30


@pytest.mark.parametrize("scheme", QUANTIZED)
@pytest.mark.parametrize(
    "x_shape,n,activation",
    [((1, 96), 40, None), ((7, 160), 33, "relu"), ((2, 5, 200), 64, "gelu_tanh"),
     ((3, 100), 17, None)],  # K = 100 and 200: not a multiple of 32/64/128, padded
)
def test_scheme_matches_tvm(scheme, x_shape, n, activation, rng):
    mod, params = linear(x_shape, n, rng, activation=activation)
    qmod = quantize(mod, scheme)
    names = offloaded_symbols(qmod)
    assert len(names) == 1 and names[0].startswith(FORM[scheme]), names
    x = rng.standard_normal(x_shape).astype("float32")
    got = run(tenet_byoc.build(qmod), x)
    want = run(tenet_byoc.build(qmod, offload=False), x)
    if scheme.startswith("w8a8") and activation is None:
        # Integer GEMM, then the same float multiplications in the same order: bit-exact.
        np.testing.assert_array_equal(got, want)
    else:
        bound = gemm_error_bound(x.reshape(-1, x_shape[-1]), params["w"]).reshape(got.shape)
        assert np.all(np.abs(got - want) <= bound + 1e-5 * np.abs(want))
    # The scheme approximates the float layer: a loose sanity bound on the quantization error.
    float_out = run(tenet_byoc.build(mod, offload=False), x)
    rel = np.abs(got - float_out).max() / np.abs(float_out).max()
    assert rel < (0.25 if "w4" in scheme else 0.08), rel


@pytest.mark.parametrize("m", [2, 9])  # the few-rows BLAS path and the matmul primitive
def test_int8_accumulators_are_exact(m, rng):
    """With unit scales the output is the int32 accumulator itself: compare with numpy."""
    k, n = 300, 70
    xq = relax.Var("xq", relax.TensorType((m, k), "int8"))
    wq = rng.integers(-127, 128, (n, k)).astype("int8")
    one = relax.const(np.float32(1.0))
    bb = relax.BlockBuilder()
    with bb.function("main", [xq]):
        with bb.dataflow():
            acc = bb.emit(relax.op.matmul(xq, bb.emit(relax.op.permute_dims(relax.const(wq))),
                                          out_dtype="int32"))
            y = bb.emit(relax.op.multiply(bb.emit(relax.op.astype(acc, "float32")), one))
            out = bb.emit_output(relax.op.multiply(y, one))
        bb.emit_func_output(out)
    mod = bb.get()
    assert offloaded_symbols(mod) == ["tenet.int8_matmul_dequantize"]
    x = rng.integers(-127, 128, (m, k)).astype("int8")
    got = run(tenet_byoc.build(mod), x)
    np.testing.assert_array_equal(got, (x.astype("int64") @ wq.T.astype("int64")).astype("float32"))


HAND_COUNT = {  # bytes of a [N, K] weight and its float16 scales, by scheme
    "none": lambda n, k: n * k * 4,
    "w8a8_per_tensor": lambda n, k: n * k + 2,
    "w8a8_per_channel_per_token": lambda n, k: n * k + 2 * n,
    "w8a16_per_channel": lambda n, k: n * k + 2 * n,
    "w4a16_group32": lambda n, k: n * k // 2 + 2 * n * k // 32,
    "w4a16_group64": lambda n, k: n * k // 2 + 2 * n * k // 64,
    "w4a16_group128": lambda n, k: n * k // 2 + 2 * n * k // 128,
}


@pytest.mark.parametrize("scheme", list(CLASSIC_SCHEMES))
def test_weight_bytes_equal_hand_count(scheme, rng):
    """A 768x3072 layer (GPT-2's c_fc) at one token: its weight is read exactly once."""
    k, n = 768, 3072
    mod, _ = linear((1, k), n, rng, bias=False)
    vm = relax.VirtualMachine(tenet_byoc.build(quantize(mod, scheme)), tvm.cpu())
    vm["main"](tvm.runtime.tensor(rng.standard_normal((1, k)).astype("float32")))
    (entry,) = [x for x in tenet_byoc.ledger(vm).entries if x.unit == "array"]
    assert entry.scheme == scheme
    assert entry.weight_bytes == HAND_COUNT[scheme](n, k)
    # With one row of A, the cost model moves each weight element on chip exactly once.
    assert entry.tensors["B"].offchip_bytes + entry.extra_read_bits / 8 == HAND_COUNT[scheme](n, k)
    assert entry.extra_read_bits == entry.weight_side_bits  # dynamic activation scales stay on chip


def test_quantize_weight_reconstructs(rng):
    w = rng.standard_normal((12, 64)).astype("float32")
    for name, bound in [("w8a16_per_channel", 1 / 254), ("w4a16_group32", 1 / 14)]:
        q, scale = quantize_weight(w, SCHEMES[name])
        recon = (q * scale).reshape(w.shape) if q.ndim == 3 else q * scale[:, None]
        # Symmetric rounding: error at most half a step, a step being max|w| / qmax per scale.
        step_max = np.abs(w).max() * 2 * bound
        assert np.abs(recon - w).max() <= step_max / 2 + 1e-6


def test_unknown_scheme():
    with pytest.raises(ValueError, match="unknown quantization scheme 'w3a5'.*available"):
        quantize(tvm.IRModule(), "w3a5")


def test_group_size_must_divide_k_for_quantize_weight():
    with pytest.raises(ValueError, match="group size 128 does not divide K=100"):
        quantize_weight(np.ones((4, 100), "float32"), SCHEMES["w4a16_group128"])


def test_parameter_weight_is_refused(rng):
    mod = matmul_module((2, 16), (8, 16), transposed=True)
    with pytest.raises(ValueError, match="weight w of a linear layer is a function parameter"):
        quantize(mod, "w8a16_per_channel")


def test_unsupported_scheme_definition():
    with pytest.raises(ValueError, match="weight_format='e4m3' has 8 bits, not weight_bits=4"):
        QuantScheme("x", 4, "group", 8, "tensor", 32, weight_format="e4m3")
    with pytest.raises(ValueError, match="group_size=0 must be > 0"):
        QuantScheme("g", 4, "group", 16, "none", 0)
    with pytest.raises(ValueError, match="group_size=33 must be even"):
        QuantScheme("g", 4, "group", 16, "none", 33)


def test_pack_int4_layout():
    """Values -8, 7, 0, 1 are nibbles 0, 15, 8, 9: bytes 0 | 15 << 4 = 240, 8 | 9 << 4 = 152."""
    np.testing.assert_array_equal(pack_int4(np.array([[-8, 7, 0, 1]], "int8")), [[240, 152]])
    with pytest.raises(ValueError, match="even number of values in"):
        pack_int4(np.array([[9, 0]], "int8"))


def test_packed_int4_with_per_group_zero_point(rng):
    """Asymmetric groups (AWQ-style zero points) unpack exactly as numpy unpacks them."""
    n, k, g, m = 24, 64, 16, 5
    wp = rng.integers(0, 256, (n, k // 2)).astype("uint8")
    zp = rng.integers(0, 16, (n, k // g, 1)).astype("float32")
    scale = rng.random((n, k // g, 1)).astype("float32")
    mod = packed_int4_group_module(wp, zp, scale, m)
    assert offloaded_symbols(mod) == ["tenet.dequantize_matmul_group"]
    x = rng.standard_normal((m, k)).astype("float32")
    got = run(tenet_byoc.build(mod), x)
    nibbles = np.empty((n, k), "float32")
    nibbles[:, 0::2], nibbles[:, 1::2] = wp & 15, wp >> 4
    w = ((nibbles.reshape(n, k // g, g) - zp) * scale).reshape(n, k)
    bound = gemm_error_bound(x, w)
    assert np.all(np.abs(got - x.astype("float64") @ w.T.astype("float64")) <= bound)
    want = run(tenet_byoc.build(mod, offload=False), x)
    assert np.all(np.abs(got - want) <= 2 * bound)


def test_nibbles_not_interleaved_stay_on_tvm(rng):
    """stack on axis 0 puts all low nibbles before the high ones: not the packed layout, so
    the pattern is refused and TVM computes it (correctly)."""
    n, k, g = 8, 32, 16
    wp = rng.integers(0, 256, (n, k // 2)).astype("uint8")
    zp = np.float32(8.0)
    scale = rng.random((n, k // g, 1)).astype("float32")
    mod = packed_int4_group_module(wp, zp, scale, 3, stack_axis=0)
    assert "tenet.dequantize_matmul_group" not in offloaded_symbols(mod)
    x = rng.standard_normal((3, k)).astype("float32")
    nib = np.stack([wp & 15, wp >> 4], axis=0).reshape(n, k // g, g).astype("float32")
    w = ((nib - zp) * scale).reshape(n, k)
    got = run(tenet_byoc.build(mod), x)
    assert np.all(np.abs(got - x.astype("float64") @ w.T.astype("float64")) <= gemm_error_bound(x, w))


def test_macs_per_cycle_follow_the_operand_bits(rng):
    """os16_mp does 4 int8 MACs per PE per cycle: a 16x16x64 int8 GEMM is one fold of
    ceil(64 / 4) = 16 packed steps, 16 + 16 + 16 - 2 = 46 cycles (64 + 30 = 94 at 1 MAC),
    plus the scheme's extra ops, 16 * (2 * 64 + 16) = 2304, over 256 PEs: 9 cycles."""
    from tenet_byoc import cost_model as cm
    from tenet_byoc.accelerators import preset

    mod, _ = linear((16, 64), 16, rng, bias=False)
    qmod = quantize(mod, "w8a8_per_tensor")
    x = rng.standard_normal((16, 64)).astype("float32")
    entries = {}
    for name in ("os16", "os16_mp"):
        vm = relax.VirtualMachine(tenet_byoc.build(qmod, accelerator=name), tvm.cpu())
        vm["main"](tvm.runtime.tensor(x))
        (entries[name],) = [x for x in tenet_byoc.ledger(vm).entries if x.unit == "array"]
    assert entries["os16"].extra_ops == 2304
    assert entries["os16"].compute_cycles == 94 + 9
    mp = entries["os16_mp"]
    assert mp.compute_cycles == 46 + 9
    acc = preset("os16_mp")
    packed = cm.analyze_array(
        cm.GemmCall(
            m=16,
            n=16,
            k=16,
            bits_a=32,
            bits_b=32,
            bits_c=16,
            extra_read_bits=mp.extra_read_bits,
            extra_ops=mp.extra_ops,
        ),
        acc,
    )
    assert mp.array_cycles == packed.cycles and mp.compute_cycles == packed.compute_cycles
    assert mp.macs == 16 * 16 * 64
    assert mp.pe_utilization == pytest.approx(mp.macs / (mp.cycles * 256 * 4))
    assert mp.tensors["B"].offchip_bytes == packed.tensors["B"].offchip_bits / 8 == 16 * 64


def test_quantize_refuses_what_is_not_a_module():
    with pytest.raises(TypeError, match="quantize takes a tvm.IRModule, got NoneType"):
        quantize(None, "w8a8_per_tensor")


@pytest.mark.parametrize("scheme", QUANTIZED)
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_weights_are_refused_naming_the_layer(scheme, bad, rng):
    mod, params = linear((2, 64), 8, rng)
    w = params["w"].copy()
    w[3, 5] = bad
    mod = relax.transform.BindParams("main", {"w": w})(
        matmul_module((2, 64), (8, 64), transposed=True, bias=True))
    with pytest.raises(ValueError, match=rf"quantize\({scheme}\): the weight \[8, 64\] of linear "
                                         rf"layer 1 of function 'main' has 1 non-finite value\(s\), "
                                         rf"the first {bad} at \[3, 5\]"):
        quantize(mod, scheme)


def test_float_scheme_propagates_a_nan_weight_in_both_builds(rng):
    mod, params = linear((2, 16), 4, rng)
    w = params["w"].copy()
    w[1, 0] = np.nan
    mod = relax.transform.BindParams("main", {"w": w, "b": params["b"]})(
        matmul_module((2, 16), (4, 16), transposed=True, bias=True))
    x = rng.standard_normal((2, 16)).astype("float32")
    for out in (run(tenet_byoc.build(mod), x), run(tenet_byoc.build(mod, offload=False), x)):
        np.testing.assert_array_equal(np.isnan(out), [[False, True, False, False]] * 2)


@pytest.mark.parametrize("scheme", QUANTIZED)
def test_a_nan_activation_gives_nan_where_float_would_in_both_builds(scheme, rng):
    # Policy: a non-finite activation makes NaN outputs, as float32 does. Per token (and for
    # the weight-only schemes) only its row; per tensor the whole call, whose one scale it
    # poisons. Rows without NaN are those of the same input without it.
    mod, _ = linear((4, 64), 8, rng)
    qmod = quantize(mod, scheme)
    x = rng.standard_normal((4, 64)).astype("float32")
    x_nan = x.copy()
    x_nan[2, 7] = np.nan
    clean = run(tenet_byoc.build(qmod), x)
    expected = np.zeros((4, 8), bool)
    if scheme == "w8a8_per_tensor":
        expected[:] = True
    else:
        expected[2] = True
    for build in (tenet_byoc.build(qmod), tenet_byoc.build(qmod, offload=False)):
        got = run(build, x_nan)
        np.testing.assert_array_equal(np.isnan(got), expected)
    got = run(tenet_byoc.build(qmod), x_nan)
    np.testing.assert_array_equal(got[~expected], clean[~expected])
