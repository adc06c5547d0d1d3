"""Weight-only quantized GEMMs of a few rows (the fused kernels) against numpy and TVM,
including the emulated formats' float codes times their scales."""

from __future__ import annotations

import numpy as np
import pytest

import tenet_byoc
from quantization.test_presets import reference
from quantization.test_schemes import gemm_error_bound, linear
from relax_testing import offloaded_symbols, packed_int4_group_module, run
from tenet_byoc.quantization import get_scheme, quantize


def unpack(wp, zp, scale, g):
    n, half = wp.shape
    nibbles = np.empty((n, 2 * half), "float32")
    nibbles[:, 0::2], nibbles[:, 1::2] = wp & 15, wp >> 4
    return ((nibbles.reshape(n, -1, g) - zp) * scale).reshape(n, 2 * half)


def activate(y, activation):
    if activation == "relu":
        return np.maximum(y, 0)
    return y


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5])  # 5: past the fused kernel, the same answer
@pytest.mark.parametrize(
    "n,k,g,zp_per_group,with_bias,activation",
    [(24, 64, 16, None, False, None),     # 8 packed bytes per group: the vector loop
     (33, 96, 32, True, True, "relu"),    # per-group zero points, bias, epilogue
     (17, 36, 6, True, False, None),      # 3 bytes per group: the scalar loop
     (520, 1024, 128, False, True, None)],  # a weight large enough to split over threads
)
def test_packed_int4_rows(m, n, k, g, zp_per_group, with_bias, activation, rng):
    wp = rng.integers(0, 256, (n, k // 2)).astype("uint8")
    zp = (rng.integers(0, 16, (n, k // g, 1)).astype("float32") if zp_per_group
          else np.float32(8.0))
    scale = rng.random((n, k // g, 1)).astype("float32")
    bias = rng.standard_normal(n).astype("float32") if with_bias else None
    mod = packed_int4_group_module(wp, zp, scale, m, bias=bias, activation=activation)
    assert offloaded_symbols(mod)[0].startswith("tenet.dequantize_matmul_group")
    x = rng.standard_normal((m, k)).astype("float32")
    w = unpack(wp, zp, scale, g)
    exact = x.astype("float64") @ w.T.astype("float64") + (0 if bias is None else bias)
    bound = gemm_error_bound(x, w) + 1e-6 * np.abs(exact)
    got = run(tenet_byoc.build(mod), x)
    assert np.all(np.abs(got - activate(exact, activation)) <= bound)
    want = run(tenet_byoc.build(mod, offload=False), x)
    assert np.all(np.abs(got - want) <= 2 * bound)


@pytest.mark.parametrize("x_shape", [(1, 100), (2, 100), (3, 257), (4, 64), (1, 1, 1024)])
@pytest.mark.parametrize("activation", [None, "gelu_tanh"])
def test_int8_channel_rows(x_shape, activation, rng):
    """w8a16 per channel: K with tails of every length the vector loop leaves."""
    n = 300 if x_shape[-1] == 1024 else 45
    mod, params = linear(x_shape, n, rng, activation=activation)
    qmod = quantize(mod, "w8a16_per_channel")
    x = rng.standard_normal(x_shape).astype("float32")
    got = run(tenet_byoc.build(qmod), x)
    want = run(tenet_byoc.build(qmod, offload=False), x)
    bound = gemm_error_bound(x.reshape(-1, x_shape[-1]), params["w"]).reshape(got.shape)
    assert np.all(np.abs(got - want) <= bound + 1e-5 * np.abs(want))



@pytest.mark.parametrize("x_shape", [(1, 100), (3, 96), (4, 64), (5, 64), (1, 1, 1024)])
@pytest.mark.parametrize("spec", ["w=e4m3/channel,a=f32", "w=e5m2/group16,a=f32",
                                  "w=uint3/channel,a=f32", "mxfp4"])
def test_emulated_codes_rows(x_shape, spec, rng):
    """Emulated formats (codes [N, K/G, G] x scales): a decode step's few rows form each
    weight in a register (groups of 16 and 32, one group of K = 100 with a scalar tail,
    a weight split over threads); 5 rows dequantize the weight first. Against TVM's build
    and the numpy definition of the format."""
    s = get_scheme(spec)
    n = 300 if x_shape[-1] == 1024 else 45
    mod, params = linear(x_shape, n, rng, bias=False)
    qmod = quantize(mod, spec)
    assert offloaded_symbols(qmod)[0].startswith("tenet.dequantize_matmul_float")
    x = rng.standard_normal(x_shape).astype("float32")
    got = run(tenet_byoc.build(qmod), x)
    want = run(tenet_byoc.build(qmod, offload=False), x)
    ref, xq, wq = reference(x, params["w"], s)
    bound = gemm_error_bound(xq.reshape(-1, xq.shape[-1]), wq).reshape(got.shape)
    assert np.all(np.abs(got - want) <= 2 * bound)
    assert np.all(np.abs(got - ref.reshape(got.shape)) <= bound + 1e-6 * np.abs(ref).max())
