"""What quantize, get_scheme and QuantScheme refuse, each message checked (issue 24: items
13, 19, 20, 21, 23), and the package's public names and stateless calibration (issue 19)."""

from __future__ import annotations

import numpy as np
import pytest
from tvm import relax

import tenet_byoc
import tenet_byoc.quantization as q
from relax_testing import matmul_module
from tenet_byoc.quantization import (
    MAX_GROUP,
    SCHEMES,
    QuantScheme,
    calibrate,
    get_scheme,
    quantize,
    weight_codes,
)


def linear(w: np.ndarray):
    """main(x[4, K]) = x @ w^T with ``w`` bound as a constant."""
    n, k = w.shape
    mod = matmul_module((4, k), (n, k), transposed=True, bias=False)
    return relax.transform.BindParams("main", {"w": w.astype("float32")})(mod)


@pytest.fixture
def w(rng):
    return rng.standard_normal((8, 64)).astype("float32")


# ---------------------------------------------------------------------------------------
# Issue 19 item 6: one package, the names other modules import, no state between calls.


def test_names_other_modules_import_stay_importable():
    # Every name imported from tenet_byoc.quantization in python/, tests/, benchmarks/ and
    # examples/ when the module was split.
    for name in ("CLASSIC_SCHEMES", "KV_HELP", "RECIPE_ATTR", "SCHEMES", "SCHEME_ATTR",
                 "SPEC_HELP", "QuantScheme", "attention_scheme", "calibrate", "get_scheme",
                 "is_attention_gemm", "pack_int4", "parse_spec", "quantize", "quantize_weight",
                 "weight_codes"):
        assert name in q.__all__ and getattr(q, name) is not None, name
    assert (q.SCHEME_ATTR, q.RECIPE_ATTR) == ("tenet.quant_scheme", "tenet.quant_recipe")
    assert tenet_byoc.quantize is q.quantize


def test_calibrations_are_independent(rng, w):
    """Each calibration's ranges are its own value: numpy's per-channel max-abs of its inputs,
    whatever ran before."""
    mod = linear(w)
    x1, x2 = (rng.standard_normal((4, 64)).astype("float32") for _ in range(2))
    first = calibrate(mod, [x1, x2])
    second = calibrate(mod, [3 * x1])
    np.testing.assert_array_equal(first[0], np.maximum(np.abs(x1).max(0), np.abs(x2).max(0)))
    np.testing.assert_array_equal(second[0], np.abs(3 * x1).max(0))
    assert list(first) == [0]


# ---------------------------------------------------------------------------------------
# Item 19: scales outside their dtype.


@pytest.mark.parametrize("name", ["w8a8_per_tensor", "w4a16_group32", "w8a16_per_channel",
                                  "q4f16_awq"])
def test_fp16_scale_overflow_is_refused(name, w):
    with pytest.raises(ValueError, match=r"linear layer 1 of function 'main'.*not "
                                         r"representable in fp16.*overflows fp16"):
        quantize(linear(w * 1e37), name)


def test_fp16_scale_underflow_is_refused(w):
    with pytest.raises(ValueError, match=r"w8a8_per_tensor.*linear layer 1.*underflows to 0 "
                                         r"in fp16"):
        quantize(linear(w * 1e-30), "w8a8_per_tensor")


def test_e8m0_exponent_outside_its_range_is_refused(w):
    # floor(log2(1e-38)) - emax_elem(e2m1) = -127 - 2 = -129 < -127.
    with pytest.raises(ValueError, match=r"mxfp4.*not representable in e8m0"):
        quantize(linear(w * 1e-38), "mxfp4")


def test_float16_weights_beyond_its_range_are_refused(w):
    with pytest.raises(ValueError, match=r"linear layer 1.*beyond float16's largest, 65504"):
        quantize(linear(w * 1e37), "q0f16")


def test_scales_at_the_edges_of_their_dtype_are_kept(w):
    """Hand-derived edges: an int8 per-tensor scale of exactly 65504 (fp16's largest) is
    stored as is; fp32 scales hold 1e37 weights; an all-zero weight keeps scale 1."""
    edge = np.zeros((2, 4), np.float32)
    edge[0, 0] = 65504.0 * 127
    codes, scale, _ = weight_codes(edge, SCHEMES["w8a8_per_tensor"])
    assert np.all(scale == 65504.0) and codes[0, 0, 0] == 127
    big = w * np.float32(1e37)
    _, scale, _ = weight_codes(big, SCHEMES["e4m3_e4m3_f16"])
    assert np.all(scale == np.abs(big).max() / np.float32(448.0))
    _, scale, _ = weight_codes(np.zeros((2, 4), np.float32), SCHEMES["w8a8_per_tensor"])
    assert np.all(scale == 1.0)


# ---------------------------------------------------------------------------------------
# Item 20: a quantized module quantized again.


@pytest.mark.parametrize("first,second", [("w4a16_group32", "none+kv8"),
                                          ("mxfp4", "w8a8_per_channel_per_token"),
                                          ("per_token", "none")])
def test_quantizing_twice_is_refused(first, second, w):
    once = quantize(linear(w), first)
    with pytest.raises(ValueError, match=f"already quantized with '{first}'"):
        quantize(once, second)


# ---------------------------------------------------------------------------------------
# Item 21: silent acceptance; one rule (QuantScheme) for quantize and estimate.


@pytest.mark.parametrize("spec,message", [
    ("w=int4/group1000000000,a=f16", "group_size=1000000000 is above the largest group, 4096"),
    ("w=int8/group8,a=int8/group8192", "activation_group=8192 is above the largest group"),
    ("per_token+kv4/group7", "kv_group=7; KV groups are powers of two"),
    ("per_token+kv8/group512", "kv_group=512 is above the largest group, 256"),
    ("w=int8,w=int4/group32", "'w=int4/group32' repeats 'w=int8'"),
    ("w=int8/channel,a=f16,scale=fp32,scale=fp16", "'scale=fp16' repeats 'scale=fp32'"),
    ("per_token+kv8+kv4", "more than one KV modifier"),
    ("w=int8/", "nothing after '/'"),
    ("w=int8/channel,a=int8/", "nothing after '/'"),
])
def test_scheme_refusals_name_the_part(spec, message):
    with pytest.raises(ValueError, match=message):
        get_scheme(spec)


@pytest.mark.parametrize("spec", ["w=int4/group1000000000,a=f16", "per_token+kv4/group7"])
def test_estimate_refuses_what_quantize_refuses(spec, w):
    with pytest.raises(ValueError) as by_scheme:
        get_scheme(spec)
    with pytest.raises(ValueError) as by_estimate:
        tenet_byoc.estimate("gpt2", spec, prompt_len=8)
    with pytest.raises(ValueError) as by_quantize:
        quantize(linear(w), spec)
    assert str(by_scheme.value) == str(by_estimate.value) == str(by_quantize.value)


def test_largest_group_is_accepted_and_pads_k():
    s = get_scheme(f"w=int4/group{MAX_GROUP},a=f16")
    assert s.k_multiple() == MAX_GROUP
    assert get_scheme("per_token+kv8/group256").kv_group == 256


@pytest.mark.parametrize("scale", [np.nan, np.inf])
def test_non_finite_calibration_is_refused(scale, rng, w):
    x = rng.standard_normal((4, 64)).astype("float32")
    x[1, 3] = scale
    with pytest.raises(ValueError, match=rf"calibration\[1\] has 1 non-finite value\(s\), the "
                                         rf"first {scale} at \[1, 3\]"):
        quantize(linear(w), "per_embedding", calibration=[np.ones_like(x), x])


def test_all_zero_calibration_is_refused(w):
    with pytest.raises(ValueError, match=r"input of the weight \[8, 64\] of linear layer 1 of "
                                         r"function 'main' is all zeros"):
        quantize(linear(w), "smoothquant", calibration=[np.zeros((4, 64), np.float32)])


# ---------------------------------------------------------------------------------------
# Items 13 and 23: unclear messages.


def test_format_typo_names_the_part():
    with pytest.raises(ValueError, match=r"spec w='intint8': unknown format 'intint8'; a spec "
                                         r"is .*int8"):
        get_scheme("w=intint8")


@pytest.mark.parametrize("fields,message", [
    ({"weight_bits": 8.0}, r"QuantScheme.weight_bits=8.0 \(float\); expected an int"),
    ({"group_size": "32"}, r"QuantScheme.group_size='32' \(str\); expected an int"),
    ({"activation_static": 1}, r"QuantScheme.activation_static=1 \(int\); expected True or"),
    ({"kv_bits": True}, r"QuantScheme.kv_bits=True \(bool\); expected an int"),
    ({"scale_dtype": None}, r"QuantScheme.scale_dtype=None \(NoneType\); expected a str"),
])
def test_quant_scheme_field_types(fields, message):
    with pytest.raises(TypeError, match=message):
        QuantScheme("x", **fields)


def test_numpy_integers_are_plain_ints():
    s = QuantScheme("x", np.int64(8), "channel", np.int32(16), "none")
    assert type(s.weight_bits) is int and type(s.activation_bits) is int
    assert s.recipe() == SCHEMES["w8a16_per_channel"].recipe()


@pytest.mark.parametrize("scheme", [None, 8, ["per_token"]])
def test_scheme_of_the_wrong_type(scheme, w):
    with pytest.raises(TypeError, match=r"scheme=.*expected a preset name .*spec string.*"
                                        r"QuantScheme"):
        quantize(linear(w), scheme)


@pytest.mark.parametrize("calibration,error,message", [
    ("abc", TypeError, r"calibration='abc' \(str\); expected a list of sample inputs"),
    (np.zeros((4, 64), np.float32), TypeError, r"\(ndarray\); expected a list of sample"),
    (["abc"], TypeError, r"calibration\[0\] has dtype <U3"),
    ([], ValueError, "calibration is an empty list"),
])
def test_calibration_of_the_wrong_form(calibration, error, message, w):
    with pytest.raises(error, match=message):
        quantize(linear(w), "per_embedding", calibration=calibration)


def test_unknown_entry_is_named(rng, w):
    x = rng.standard_normal((4, 64)).astype("float32")
    with pytest.raises(ValueError, match="entry='prefill' is not a function of the module; it "
                                         "has main"):
        quantize(linear(w), "per_embedding", calibration=[x], entry="prefill")


def test_unknown_scheme_suggests_near_names_instead_of_listing_all():
    with pytest.raises(ValueError, match=r"unknown quantization scheme 'q4f16_l' \(did you "
                                         r"mean 'q4f16_1'") as err:
        get_scheme("q4f16_l")
    assert "mxfp4" not in str(err.value)  # no dump of every preset
    with pytest.raises(ValueError) as err:
        get_scheme("w9a9")
    assert "did you mean" not in str(err.value) and "25 presets" in str(err.value)
