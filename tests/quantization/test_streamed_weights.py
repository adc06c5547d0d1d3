"""quantize(mod, scheme, weights=...): weights read one at a time, for a module whose weights
are function parameters.

The reference is the usual way in: the same weights bound as constants first, then
quantized. The two modules must be the same (structurally equal: every constant's values,
every attribute), and running one must give what the other gives.
"""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

import tenet_byoc
from relax_testing import matmul_module, run
from tenet_byoc.models.gpt2 import GPT2Config, export_gpt2, random_params
from tenet_byoc.quantization import CLASSIC_SCHEMES, quantize

TINY = GPT2Config.preset("tiny")
SCHEMES = [*CLASSIC_SCHEMES, "w4a16_group32+kv8", "mxfp4", "w=uint8/tensor,a=f32",
           "none+kv8"]


def bind_rest(mod: tvm.IRModule, params: dict) -> tvm.IRModule:
    """Bind the parameters quantize left (biases, LayerNorms, embeddings) as constants."""
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            names = {p.name for p in func.params}
            values = {n: v for n, v in params.items() if n in names}
            if values:
                mod = relax.transform.BindParams(gv.name_hint, values)(mod)
    return mod


@pytest.fixture(scope="module")
def params():
    return random_params(TINY, seed=5)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_gpt2_streamed_equals_quantizing_the_bound_module(params, scheme):
    reads: list[str] = []

    def weights(name: str) -> np.ndarray:
        reads.append(name)
        return params[name].copy()  # a fresh array, as a generator would give

    got = bind_rest(quantize(export_gpt2(TINY), scheme, weights=weights), params)
    want = quantize(export_gpt2(TINY, params), scheme)
    tvm.ir.assert_structural_equal(got, want)
    if scheme.startswith("none"):
        assert reads == []  # float weights: nothing to quantize, nothing read
    else:
        # Each linear weight read once, although prefill and decode both use it.
        linear = [n for n in params if n.startswith("h.") and params[n].ndim == 2]
        assert sorted(reads) == sorted([*linear, "wte.weight"])
        # The tied head's table is still the embedding's: that parameter stays for binding.
        assert "wte.weight" in {p.name for p in quantize(export_gpt2(TINY), scheme,
                                                         weights=weights)["prefill"].params}


def test_linear_layer_runs_as_the_bound_one(rng):
    w = rng.standard_normal((24, 64)).astype("float32")
    mod = matmul_module((4, 64), (24, 64), transposed=True, bias=False)
    streamed = quantize(mod, "w8a8_per_channel_per_token", weights=lambda name: w)
    assert [p.name for p in streamed["main"].params] == ["x"]  # the weight's parameter went
    bound = quantize(relax.transform.BindParams("main", {"w": w})(mod),
                     "w8a8_per_channel_per_token")
    x = rng.standard_normal((4, 64)).astype("float32")
    np.testing.assert_array_equal(run(tenet_byoc.build(streamed), x),
                                  run(tenet_byoc.build(bound), x))


def test_refusals_name_what_is_wrong(rng):
    mod = matmul_module((4, 64), (24, 64), transposed=True, bias=False)
    with pytest.raises(TypeError, match="weights must be a callable"):
        quantize(mod, "w8a16_per_channel", weights={"w": np.zeros((24, 64), np.float32)})
    with pytest.raises(ValueError, match="calibration runs the module"):
        quantize(mod, "w8a8_per_tensor", [rng.standard_normal((4, 64)).astype("float32")],
                 weights=lambda name: np.zeros((24, 64), np.float32))
    with pytest.raises(ValueError, match=r"weights\('w'\) gave a float32 array of shape "
                                         r"\[64, 24\]"):
        quantize(mod, "w8a16_per_channel", weights=lambda name: np.zeros((64, 24), np.float32))
    with pytest.raises(ValueError, match=r"weights\('w'\) gave a float64 array"):
        quantize(mod, "w8a16_per_channel", weights=lambda name: np.zeros((24, 64)))
    with pytest.raises(ValueError, match="is a function parameter, not a constant"):
        quantize(mod, "w8a16_per_channel")  # no weights: a parameter weight is refused


def test_reuse_takes_weights_stored_alike_and_nothing_else(params):
    reads: list[str] = []

    def weights(name: str) -> np.ndarray:
        reads.append(name)
        return params[name].copy()

    reuse: dict = {}
    quantize(export_gpt2(TINY), "w8a8_per_channel_per_token", weights=weights, reuse=reuse)
    first = len(reads)
    # w8a16 per channel stores the same int8 codes and scales: nothing read again, and the
    # module equals one quantized without reuse.
    got = quantize(export_gpt2(TINY), "w8a16_per_channel", weights=weights, reuse=reuse)
    assert first > 0 and len(reads) == first
    want = quantize(export_gpt2(TINY, params), "w8a16_per_channel")
    tvm.ir.assert_structural_equal(bind_rest(got, params), want)
    # Per tensor is stored otherwise: every weight read again.
    got = quantize(export_gpt2(TINY), "w8a8_per_tensor", weights=weights, reuse=reuse)
    assert len(reads) == 2 * first
    tvm.ir.assert_structural_equal(bind_rest(got, params),
                                   quantize(export_gpt2(TINY, params), "w8a8_per_tensor"))
