"""Every preset: offloaded whole, equal to TVM's build and to a numpy reference of its
definition; side data counted by hand per granularity; granularity semantics in numbers."""

from __future__ import annotations

import dataclasses
import math

import ml_dtypes
import numpy as np
import pytest
import tvm
from tvm import relax

import tenet_byoc
from relax_testing import matmul_module, matmuls_left_on_tvm, offloaded_symbols, run
from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import preset
from tenet_byoc.quantization import SCHEMES, QuantScheme, get_scheme, parse_spec, quantize

FORM = {
    "int8": "tenet.int8_matmul_dequantize",
    "dequant_channel": "tenet.dequantize_matmul_channel",
    "dequant_group": "tenet.dequantize_matmul_group",
    "emulated": "tenet.dequantize_matmul_float",
}
PRESETS = [name for name, s in SCHEMES.items() if s.kernel != "float"]


def linear(x_shape, n, rng, *, bias=True, w=None):
    k = x_shape[-1]
    mod = matmul_module(x_shape, (n, k), transposed=True, bias=bias)
    params = {"w": rng.standard_normal((n, k)).astype("float32") if w is None else w}
    if bias:
        params["b"] = rng.standard_normal(n).astype("float32")
    return relax.transform.BindParams("main", params)(mod), params


# ---------------------------------------------------------------------------------------
# An independent numpy reference of each format's definition (not the package's code).

E8M0_EMAX = {"e4m3": 8, "e5m2": 15, "e2m1": 2, "int": 0}
ML = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2,
      "e2m1": ml_dtypes.float4_e2m1fn}


def _blocks(v, gran, group):
    """v viewed so that each scale covers the last axis of the view."""
    if gran == "group":
        return v.reshape(*v.shape[:-1], v.shape[-1] // group, group)
    return v


def _amax(v, gran):
    if gran == "tensor":
        return np.abs(v).max()
    if gran == "embedding":
        return np.abs(v.reshape(-1, v.shape[-1])).max(axis=0)
    return np.abs(v).max(axis=-1, keepdims=True)  # channel / token / group rows


def _scale_dtype(scale, dtype):
    if dtype == "fp16":
        scale = scale.astype(np.float16).astype(np.float32)
    return np.where(scale > 0, scale, np.float32(1)).astype(np.float32)


def fake_quant(v, bits, fmt, gran, group, scale_dtype, stored):
    """v rounded to the format per the definition, back in float32."""
    if fmt == "float":
        return v.astype(np.float16).astype(np.float32) if bits == 16 else v
    shape = v.shape
    b = _blocks(v, gran, group)
    amax = _amax(b, gran).astype(np.float32)
    if scale_dtype == "e8m0":  # MX: 2^(floor(log2 amax) - emax_elem), by frexp
        _, e = np.frexp(np.where(amax > 0, amax, 1).astype(np.float64))
        scale = np.ldexp(1.0, e - 1 - E8M0_EMAX.get(fmt, 0)).astype(np.float32)
        if fmt == "int":
            scale = scale / np.float32(2 ** (bits - 2))
    else:
        top = {"e4m3": 448.0, "e5m2": 57344.0, "e2m1": 6.0}.get(fmt, 2 ** (bits - 1) - 1)
        if stored:
            scale = _scale_dtype(amax / np.float32(top), scale_dtype)
        else:
            scale = np.maximum(amax, np.float32(1e-12)) / np.float32(top)
    if fmt in ML:
        top = float(ml_dtypes.finfo(ML[fmt]).max)
        q = np.clip(b / scale, -top, top).astype(ML[fmt]).astype(np.float32)
    else:
        hi = 2 ** (bits - 1) - 1
        q = np.clip(np.rint(b / scale), -hi if bits == 8 else -hi - 1, hi)
    return (q * scale).astype(np.float32).reshape(shape)


def fake_quant_uint(w, bits, gran, group, scale_dtype):
    b = _blocks(w, gran, group)
    if gran == "tensor":
        lo, hi = b.min(), b.max()
    else:
        lo, hi = b.min(axis=-1, keepdims=True), b.max(axis=-1, keepdims=True)
    top = 2**bits - 1
    scale = _scale_dtype((hi - lo) / np.float32(top), scale_dtype)
    zp = np.clip(np.rint(-lo / scale), 0, top)
    q = np.clip(np.rint(b / scale) + zp, 0, top)
    return ((q - zp) * scale).astype(np.float32).reshape(w.shape)


def reference(x, w, s: QuantScheme):
    """The scheme's output by definition (K padded as the pass pads it), float64 GEMM."""
    k = w.shape[1]
    groups = [g for g in (s.group_size, s.activation_group) if g]
    if s.kernel == "dequant_group" and s.weight_granularity == "channel":
        groups.append(2)
    pad = (-k) % (math.lcm(*groups) if groups else 1)
    x = np.concatenate([x, np.zeros((*x.shape[:-1], pad), "float32")], axis=-1)
    w = np.concatenate([w, np.zeros((w.shape[0], pad), "float32")], axis=1)
    if s.activation_granularity == "embedding" or s.smoothing:
        # Uncalibrated, per-embedding and smoothquant use each call's per-channel scales.
        xq = fake_quant(x, s.activation_bits, "int", "embedding", 0, s.scale_dtype, False)
    else:
        xq = fake_quant(x, s.activation_bits, s.activation_format, s.activation_granularity,
                        s.activation_group, s.scale_dtype, False)
    if s.weight_format == "uint":
        wq = fake_quant_uint(w, s.weight_bits, s.weight_granularity, s.group_size, s.scale_dtype)
    else:
        wg = "channel" if s.weight_granularity == "channel" else s.weight_granularity
        wq = fake_quant(w, s.weight_bits, s.weight_format, wg, s.group_size, s.scale_dtype,
                        True)
    return xq.astype("float64") @ wq.T.astype("float64"), xq, wq


@pytest.mark.parametrize("name", PRESETS)
@pytest.mark.parametrize("x_shape,n", [((5, 96), 24), ((2, 3, 100), 17)])
def test_preset_offloaded_and_equal_to_tvm_and_reference(name, x_shape, n, rng):
    s = get_scheme(name)
    if s.activation_static:  # no calibration data: the scales come from each call
        s = dataclasses.replace(s, activation_static=False)
    mod, params = linear(x_shape, n, rng, bias=False)
    qmod = quantize(mod, name)
    names = offloaded_symbols(qmod)
    assert len(names) == 1 and names[0].startswith(FORM[s.kernel]), names  # no matmul on TVM
    x = rng.standard_normal(x_shape).astype("float32")
    got = run(tenet_byoc.build(qmod), x)
    want = run(tenet_byoc.build(qmod, offload=False), x)
    ref, xq, wq = reference(x, params["w"], s)
    bound = 1e-5 * (np.abs(xq.reshape(-1, xq.shape[-1])).astype("float64")
                    @ np.abs(wq).T.astype("float64")).reshape(got.shape) + 1e-30
    if s.kernel == "int8":
        np.testing.assert_array_equal(got, want)  # integer GEMM, same float tail: bit-exact
    else:
        assert np.all(np.abs(got - want) <= bound), np.abs(got - want).max()
    assert np.all(np.abs(got - ref.reshape(got.shape)) <= bound + 1e-6 * np.abs(ref).max())


@pytest.mark.parametrize("name", ["per_embedding", "smoothquant"])
def test_calibrated_static_schemes(name, rng):
    """With calibration the scales are static: smoothquant's smoothing is folded into the
    weights at compile time and runs on the int8 kernel; per_embedding's per-channel
    activation scales multiply the dequantized weights (emulated). Static scales are side
    data; the output is the definition's (calibration = the input itself)."""
    s = SCHEMES[name]
    m, k, n = 6, 64, 20
    mod, params = linear((m, k), n, rng, bias=False)
    x = rng.standard_normal((m, k)).astype("float32")
    x[:, 3] *= 30.0  # an outlier hidden channel
    qmod = quantize(mod, name, calibration=[x])
    form = "int8_matmul_dequantize" if s.smoothing else "dequantize_matmul_float"
    assert offloaded_symbols(qmod) == ["tenet." + form]
    vm = relax.VirtualMachine(tenet_byoc.build(qmod), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x)).numpy()
    want = run(tenet_byoc.build(qmod, offload=False), x)
    if s.smoothing:
        np.testing.assert_array_equal(got, want)
    else:
        assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
    w = params["w"]
    amax = np.abs(x).max(axis=0)
    if s.smoothing:
        f = (np.power(np.maximum(amax, 1e-5), 0.5)
             / np.power(np.maximum(np.abs(w).max(axis=0), 1e-5), 0.5)).astype("float32")
        xs, ws = x / f, w * f[None, :]
        sa = np.float32(np.abs(xs).max() / 127)
        xq = np.clip(np.rint(xs / sa), -127, 127) * sa
    else:
        sx = (np.maximum(amax, 1e-12) / 127).astype("float32")
        xq, ws = np.clip(np.rint(x / sx), -127, 127) * sx, w
    wq = fake_quant(ws, 8, "int", "channel", 0, "fp16", True)
    ref = xq.astype("float64") @ wq.T.astype("float64")
    assert np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max(), np.abs(got - ref).max()
    (e,) = [x for x in tenet_byoc.ledger(vm).entries if x.unit == "array"]
    assert e.dequant_place == ("output" if s.smoothing else "weight")
    assert e.quantize_ops == m * k  # static scales: one op per activation element
    assert e.activation_side_bits == (k * 16 if name == "per_embedding" else 16)


# ---------------------------------------------------------------------------------------
# Side data and dequantization work, counted by hand.

HAND = {  # scheme -> (weight side bits, activation side bits, place, dequant ops) on [M,K]x[N,K]
    "per_tensor": lambda m, n, k: (16, 0, "output", m * n),
    "per_token": lambda m, n, k: (16 * n, 0, "output", m * n),
    "group32": lambda m, n, k: (16 * n * k // 32, 0, "k_group", m * n * k // 32),
    "group128": lambda m, n, k: (16 * n * k // 128, 0, "k_group", m * n * k // 128),
    "q4f16_1": lambda m, n, k: (16 * n * k // 32, 0, "weight", n * k),
    "q4f16_ft": lambda m, n, k: (16 * n, 0, "weight", n * k),
    "q4f16_awq": lambda m, n, k: ((16 + 4) * n * k // 128, 0, "weight", n * k),
    "e4m3_e4m3_f16": lambda m, n, k: (32, 0, "output", m * n),
    "w4a8": lambda m, n, k: (16 * n, 0, "output", m * n),
    "mxint8": lambda m, n, k: (8 * n * k // 32, 0, "k_group", m * n * k // 32),
    "mxfp8": lambda m, n, k: (8 * n * k // 32, 0, "k_group", m * n * k // 32),
    "mxfp4": lambda m, n, k: (8 * n * k // 32, 0, "k_group", m * n * k // 32),
    "q0f16": lambda m, n, k: (0, 0, "none", 0),
}
BITS = {"per_tensor": (8, 8), "per_token": (8, 8), "group32": (8, 8), "group128": (8, 8),
        "q4f16_1": (16, 4), "q4f16_ft": (16, 4), "q4f16_awq": (16, 4),
        "e4m3_e4m3_f16": (8, 8), "w4a8": (8, 4), "mxint8": (8, 8), "mxfp8": (8, 8),
        "mxfp4": (4, 4), "q0f16": (16, 16)}


@pytest.mark.parametrize("name", list(HAND))
def test_side_data_and_dequantization_counted_by_hand(name, rng):
    m, k, n = 4, 256, 48
    mod, _ = linear((m, k), n, rng, bias=False)
    vm = relax.VirtualMachine(tenet_byoc.build(quantize(mod, name), accelerator="os16"),
                              tvm.cpu())
    vm["main"](tvm.runtime.tensor(rng.standard_normal((m, k)).astype("float32")))
    (e,) = [x for x in tenet_byoc.ledger(vm).entries if x.unit == "array"]
    wside, aside, place, deq = HAND[name](m, n, k)
    assert (e.weight_side_bits, e.activation_side_bits, e.dequant_place, e.dequant_ops) == (
        wside, aside, place, deq)
    assert (e.bits_a, e.bits_b) == BITS[name]
    s = SCHEMES[name]
    quantize_ops = 2 * m * k if s.quantizes_activations else 0  # dynamic: max-abs + quantize
    assert e.quantize_ops == quantize_ops
    assert e.extra_ops == quantize_ops + deq and e.extra_read_bits == wside + aside
    # Partial sums rescaled per K-group are read and written once per group at 32 bits.
    assert e.accumulator_traffic_bits == (2 * deq * 32 if place == "k_group" else 0)
    # The weight crosses the chip once at its width, plus its side data.
    assert e.weight_bytes * 8 == n * k * BITS[name][1] + wside
    # A is the activation as the function quantized (or cast) it: made on chip, kept; C is
    # the function's result: it leaves.
    assert (e.a_on_chip, e.c_on_chip) == (True, False)
    # The cost model's Python face charges the same call from the recipe alone.
    acc = preset("os16")
    charge = cm.charge(cm.GemmCall(m=m, n=n, k=k, bits_a=e.bits_a, bits_b=e.bits_b,
                                   bits_c=e.bits_c, recipe=s, scheme=name, a_on_chip=True),
                       acc)
    assert charge.quant["weight_side_bits"] == wside
    assert (charge.array.cycles, charge.memory.cycles) == (e.array_cycles, e.cycles)


def test_mxfp4_side_data_on_a_weight():
    """The issue's example: mxfp4 on [N, K]: N*K*4 bits of elements + N*K/32*8 of scales."""
    n, k = 64, 512
    acc = preset("os16")
    c = cm.charge(
        cm.GemmCall(m=1, n=n, k=k, bits_a=4, bits_b=4, bits_c=16, recipe=SCHEMES["mxfp4"]),
        cm.Accelerator("analysis", acc.hardware, acc.dataflow),
    )
    assert c.quant["weight_side_bits"] == n * k // 32 * 8
    assert c.array.tensors["B"].offchip_bits + c.quant["weight_side_bits"] == n * k * 4 + n * k // 32 * 8


# ---------------------------------------------------------------------------------------
# Semantics visible in numbers.


def _rel_error(name, x, w, calibration=None):
    mod, _ = linear(x.shape, w.shape[0], None, bias=False, w=w)
    got = run(tenet_byoc.build(quantize(mod, name, calibration=calibration)), x)
    exact = x.astype("float64") @ w.T.astype("float64")
    return np.linalg.norm(got - exact) / np.linalg.norm(exact)


def test_outlier_channels_favour_per_embedding(rng):
    x = rng.standard_normal((32, 128)).astype("float32")
    x[:, [5, 77]] *= 60.0  # a few outlier hidden channels, as in LLM activations
    w = rng.standard_normal((64, 128)).astype("float32")
    emb = _rel_error("per_embedding", x, w, [x])  # calibrated on the inputs themselves
    tok = _rel_error("per_token", x, w)
    ten = _rel_error("per_tensor", x, w)
    assert emb < tok and emb < ten, (emb, tok, ten)


def test_outlier_tokens_favour_per_token(rng):
    x = rng.standard_normal((32, 128)).astype("float32")
    x[[3, 20]] *= 80.0  # a few outlier tokens
    w = rng.standard_normal((64, 128)).astype("float32")
    assert _rel_error("per_token", x, w) < _rel_error("per_tensor", x, w)


def test_group_error_falls_as_groups_shrink(rng):
    x = rng.standard_normal((16, 256)).astype("float32") * rng.lognormal(0, 1.5, 256).astype("float32")
    w = rng.standard_normal((32, 256)).astype("float32") * rng.lognormal(0, 1.5, 256).astype("float32")
    errors = [_rel_error(f"group{g}", x, w) for g in (128, 64, 32)]
    assert errors[0] > errors[1] > errors[2] > 0, errors


# ---------------------------------------------------------------------------------------
# Definitions, spec strings and bad input.


def test_spec_strings_compose_the_presets():
    for name, spec in [("q4f16_awq", "w=uint4/group128,a=f16"),
                       ("mxfp4", "w=e2m1/group32,a=e2m1/group32,scale=e8m0"),
                       ("per_token", "w=int8/channel,a=int8/token"),
                       ("e4m3_e4m3_f16", "w=e4m3/tensor,a=e4m3/tensor,scale=fp32")]:
        p, s = SCHEMES[name], parse_spec(spec)
        assert s.name == spec
        assert (s.recipe(), s.bits(), s.kernel) == (p.recipe(), p.bits(), p.kernel)


def test_classic_names_keep_their_definitions():
    assert SCHEMES["w8a8_per_tensor"].recipe() == SCHEMES["per_tensor"].recipe()
    assert SCHEMES["w4a16_group32"].recipe() == SCHEMES["q4f16_1"].recipe()
    assert [SCHEMES[n].kernel for n in ("w8a8_per_channel_per_token", "w8a16_per_channel",
                                        "w4a16_group128")] == ["int8", "dequant_channel",
                                                               "dequant_group"]


@pytest.mark.parametrize("spec,message", [
    ("w=int5/channel", "weight_bits=5; expected one of"),
    ("w=int8/row", "weight_granularity='row'; expected one of"),
    ("w=fp8", "unknown format 'fp8'"),
    ("w=int8/channel,a=int8/token,static", "static scales are per tensor or embedding"),
    ("w=int8/channel,a=e4m3/group32,scale=e8m0", "needs symmetric, group-wise"),
    ("w=int4/group0", "groupG needs a positive integer"),
    ("w=int8/channel,scale=bf16", "scale_dtype='bf16'; expected one of"),
    ("bits=4", "is not understood"),
    ("w9a9", "unknown quantization scheme 'w9a9'.*available.*spec"),
])
def test_bad_specs_name_the_field(spec, message):
    with pytest.raises(ValueError, match=message):
        get_scheme(spec)


def test_recipe_validated_by_the_charge_unit():
    acc = preset("os16")
    bad = {**SCHEMES["group32"].recipe().as_dict(), "k_group": 0}
    with pytest.raises(ValueError, match="k_group"):
        cm.charge(
            cm.GemmCall(m=4, n=4, k=64, recipe=bad),
            cm.Accelerator("analysis", acc.hardware, acc.dataflow),
        )
    with pytest.raises(ValueError, match="either a quantization recipe or extra_read_bits"):
        cm.charge(
            cm.GemmCall(m=4, n=4, k=64, recipe=SCHEMES["group32"], extra_ops=3),
            cm.Accelerator("analysis", acc.hardware, acc.dataflow),
        )


# ---------------------------------------------------------------------------------------
# A whole model: symbolic sequence lengths, every linear layer offloaded.


@pytest.mark.parametrize("name", ["group32", "mxfp4", "per_embedding", "e4m3_e4m3_f16"])
def test_emulated_presets_run_gpt2_whole(name):
    """GPT-2's prefill and decode (a symbolic sequence length) under emulated schemes: no
    matmul is left on TVM's path, and the logits move away from float32 but not far."""
    from tenet_byoc.experiments.cases import gpt2_case
    from tenet_byoc.experiments.sweep import sweep

    case = gpt2_case("tiny", prompt_len=8, context_len=12)
    assert matmuls_left_on_tvm(quantize(case.module(), name)) == 0
    rows = sweep([case], [name], ["os16"], progress=False).rows
    assert {r.phase for r in rows} == {"prefill", "decode"}
    for r in rows:
        assert 0 < r.rel_error < (0.3 if name == "mxfp4" else 0.05), (r.phase, r.rel_error)


@pytest.mark.parametrize("spec", ["w=uint8/tensor,a=f32", "w=uint3/channel,a=int8/token",
                                  "w=int3/channel,a=int4/token", "w=int2/group16,a=f16",
                                  "w=e5m2/channel,a=e5m2/token,scale=fp32",
                                  "w=int4/group32,a=int4/group32,scale=e8m0"])
def test_composed_specs_equal_tvm_and_reference(spec, rng):
    """Combinations beyond the presets: asymmetric per tensor, 3- and 2-bit, fp8 e5m2,
    MX int4; each against TVM's build and the numpy definition."""
    s = get_scheme(spec)
    mod, params = linear((6, 64), 20, rng, bias=False)
    qmod = quantize(mod, spec)
    assert len(offloaded_symbols(qmod)) == 1
    x = rng.standard_normal((6, 64)).astype("float32")
    got = run(tenet_byoc.build(qmod), x)
    want = run(tenet_byoc.build(qmod, offload=False), x)
    ref, xq, wq = reference(x, params["w"], s)
    bound = 1e-5 * (np.abs(xq).astype("float64") @ np.abs(wq).T.astype("float64")) + 1e-30
    assert np.all(np.abs(got - want) <= bound)
    assert np.all(np.abs(got - ref) <= bound + 1e-6 * np.abs(ref).max())
