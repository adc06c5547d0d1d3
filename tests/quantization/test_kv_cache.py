"""KV-cache quantization (+kv16 / +kv8 / +kv4): the stored cache against a numpy reference of
its definition, the error ordering on GPT-2's logits, the attention calls' charge counted by
hand, TVM's own build, and the Llama family."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import tenet_byoc
from relax_testing import matmuls_left_on_tvm
from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import preset
from tenet_byoc.models.gpt2 import GPT2Config, GPT2Runner, random_params
from tenet_byoc.models.runner import build_with_tvm
from tenet_byoc.quantization import attention_scheme, get_scheme, quantize

PROMPT = [5, 17, 3, 50, 90, 7, 64, 12]


@pytest.fixture(scope="module")
def tiny():
    config = GPT2Config.preset("tiny")
    return config, random_params(config, seed=0)


_BUILT: dict = {}


def _runner(config, params, scheme, offload=True):
    """GPT-2 under ``scheme`` (offloaded, or TVM's own build), built once per test run."""
    key = (config.name, scheme, offload)
    if key not in _BUILT:
        def build(mod):
            q = quantize(mod, scheme)
            return tenet_byoc.build(q, accelerator="os16") if offload else build_with_tvm(q)
        _BUILT[key] = GPT2Runner(config, params, bind_params=True, build=build)
    return _BUILT[key]


# ---------------------------------------------------------------------------------------
# The definition, in numpy (independent of the package's code).


def stored_kv(t: np.ndarray, bits: int, gran: str, group: int = 0) -> np.ndarray:
    """t[1, heads, tokens, d] as a cache of symmetric ints with fp16 scales stores it."""
    if bits == 16:
        return t.astype(np.float16).astype(np.float32)
    qmax = 127 if bits == 8 else 7
    qmin = -qmax if bits == 8 else -8
    h, n, d = t.shape[1:]
    if gran == "token":  # one scale per token over all heads and channels
        blocks = t.transpose(0, 2, 1, 3).reshape(n, h * d)
    elif gran == "head":  # one per (head, token)
        blocks = t.reshape(h * n, d)
    else:  # one per G consecutive channels of a (head, token)
        blocks = t.reshape(h * n * d // group, group)
    amax = np.abs(blocks).max(axis=1, keepdims=True)
    scale = (amax / np.float32(qmax)).astype(np.float16).astype(np.float32)
    scale = np.where(scale > 0, scale, np.float32(1))
    out = (np.clip(np.rint(blocks / scale), qmin, qmax) * scale).astype(np.float32)
    if gran == "token":
        return out.reshape(1, n, h, d).transpose(0, 2, 1, 3)
    return out.reshape(t.shape)


@pytest.mark.parametrize("mod,gran,group", [("kv8", "token", 0), ("kv4/head", "head", 0),
                                            ("kv8/group16", "group", 16), ("kv16", None, 0)])
def test_cache_is_the_definition_of_the_new_tokens(tiny, mod, gran, group):
    """Layer 0's keys and values depend only on the tokens (float weights here): the cache
    a q0f32+kvB model keeps equals the reference applied to the float model's cache, for
    the prompt's tokens after prefill, and for the new token after decode, while the
    stored past is carried over unchanged (never quantized twice)."""
    config, params = tiny
    bits = int(mod[2:].split("/")[0])
    float_run = _runner(config, params, "none")
    kv_run = _runner(config, params, f"q0f32+{mod}")
    _, f_cache = float_run.prefill(PROMPT)
    q_logits, q_cache = kv_run.prefill(PROMPT)
    for i in (0, 1):  # K_0, V_0
        want = stored_kv(f_cache.numpy()[i], bits, gran, group)
        np.testing.assert_array_equal(q_cache.numpy()[i], want)
    token = int(np.argmax(q_logits[-1]))
    _, f_next = float_run.decode(token, f_cache)
    _, q_next = kv_run.decode(token, q_cache)
    for i in (0, 1):
        got = q_next.numpy()[i]
        np.testing.assert_array_equal(got[:, :, :-1], q_cache.numpy()[i])
        want = stored_kv(f_next.numpy()[i][:, :, -1:], bits, gran, group)
        np.testing.assert_array_equal(got[:, :, -1:], want)


def _logit_errors(config, params, schemes, steps=3):
    """Relative error of prefill + decode logits against float32, per scheme."""
    def trace(runner):
        logits, cache = runner.prefill(PROMPT)
        out = [logits]
        for t in range(steps):
            token = PROMPT[t]  # the same tokens for every scheme (teacher forcing)
            step, cache = runner.decode(token, cache)
            out.append(step[None])
        return np.concatenate(out)

    exact = trace(_runner(config, params, "none"))
    return [np.linalg.norm(trace(_runner(config, params, s)) - exact) / np.linalg.norm(exact)
            for s in schemes]


def test_kv4_error_exceeds_kv8_error_on_gpt2_tiny(tiny):
    e16, e8, e4 = _logit_errors(*tiny, ["q0f32+kv16", "q0f32+kv8", "q0f32+kv4/token"])
    assert e4 > e8 > 0 and e8 > e16 > 0, (e16, e8, e4)


@pytest.mark.slow
def test_kv4_error_exceeds_kv8_error_on_gpt2_small():
    config = GPT2Config.preset("small")
    e8, e4 = _logit_errors(config, random_params(config, seed=0),
                           ["per_token+kv8", "per_token+kv4"], steps=2)
    e0, = _logit_errors(config, random_params(config, seed=0), ["per_token"], steps=2)
    assert e4 > e8 > 0 and e4 > e0, (e0, e8, e4)


# ---------------------------------------------------------------------------------------
# The charge: the K or V operand at the KV width, its scales as side data, per head.


@pytest.mark.parametrize("mod,bits,scales_per_token", [
    ("kv8", 8, lambda d: 1), ("kv4/head", 4, lambda d: 1), ("kv8/group16", 8, lambda d: d // 16),
    ("kv16", 16, lambda d: 0)])
def test_attention_calls_charged_at_kv_width_by_hand(tiny, mod, bits, scales_per_token):
    config, params = tiny
    scheme = f"q0f32+{mod}"
    runner = _runner(config, params, scheme)
    tenet_byoc.ledger(runner.vm).reset()  # the shared runner's earlier decodes are tagged too
    _, cache = runner.prefill(PROMPT)
    tenet_byoc.set_phase(runner.vm, "decode")
    runner.decode(1, cache)
    h, d, length = config.n_head, config.head_dim, len(PROMPT) + 1
    entries = [e for e in tenet_byoc.ledger(runner.vm).entries
               if e.phase == "decode" and e.unit == "array"]
    qk = [e for e in entries if (e.batch, e.m, e.n, e.k) == (h, 1, length, d)]
    pv = [e for e in entries if (e.batch, e.m, e.n, e.k) == (h, 1, d, length)]
    assert len(qk) == len(pv) == config.n_layer
    side = h * length * scales_per_token(d) * 16  # fp16 scales, per head's GEMM
    for e in qk + pv:
        assert (e.scheme, e.bits_a, e.bits_b) == (scheme, 32, bits)
        assert e.weight_side_bits == side and e.extra_read_bits == side
        # decode QK^T at context L: per head L*d elements at the KV width + the scales
        assert e.weight_bytes * 8 == h * length * d * bits + side
        assert e.dequant_place == ("none" if bits == 16 else "weight")
        assert e.dequant_ops == (0 if bits == 16 else h * length * d)
    # The Python face of the cost model charges the same calls from attention_scheme.
    att = attention_scheme(scheme)
    acc = preset("os16")
    # Q (or P) and the product stay on chip between calls (the plan's rule); K and V do not.
    for e, role in ((qk[0], "key"), (pv[0], "value")):
        c = cm.charge(cm.GemmCall(m=e.m, n=e.n, k=e.k, batch=e.batch, bits_a=att.bits()[0],
                                  bits_b=att.bits()[1], bits_c=att.bits()[2],
                                  recipe=att.recipe(role), scheme=scheme, a_on_chip=True,
                                  c_on_chip=True), acc)
        assert c.quant["weight_side_bits"] == side
        assert (c.array.cycles, c.memory.cycles) == (e.array_cycles, e.cycles)


def test_without_kv_modifier_attention_stays_float(tiny):
    att = attention_scheme("per_token")
    assert att.bits() == (32, 32, 32) and att.recipe("key").place == "none"
    config, params = tiny
    runner = _runner(config, params, "q4f16_1")
    runner.prefill(PROMPT)
    att_calls = [e for e in tenet_byoc.ledger(runner.vm).entries
                 if e.unit == "array" and e.batch == config.n_head]
    assert att_calls and all((e.scheme, e.bits_b, e.weight_side_bits) == ("none", 32, 0)
                             for e in att_calls)


# ---------------------------------------------------------------------------------------
# Offloaded whole, equal to TVM's own build of the same quantized module.


@pytest.mark.parametrize("scheme", [
    "q4f16_1+kv4/group16",
    pytest.param("per_token+kv8", marks=pytest.mark.slow),
    pytest.param("mxfp4+kv8/head", marks=pytest.mark.slow)])
def test_offloaded_whole_and_equal_to_tvm(tiny, scheme):
    # One block: TVM's own build of the whole model is the slow part of this test.
    config = dataclasses.replace(tiny[0], n_layer=1, name="tiny-1")
    params = random_params(config, seed=1)
    runner = _runner(config, params, scheme)
    assert matmuls_left_on_tvm(quantize(runner.mod, scheme)) == 0
    ref = _runner(config, params, scheme, offload=False)
    got, cache = runner.prefill(PROMPT)
    want, ref_cache = ref.prefill(PROMPT)
    # Float attention accumulates in another order than TVM's: a key a hair from a rounding
    # boundary may take the neighbouring code, so compare at a few ulps of the logits.
    tol = 2e-4 * np.abs(want).max()
    assert np.abs(got - want).max() <= tol
    got1, _ = runner.decode(3, cache)
    want1, _ = ref.decode(3, ref_cache)
    assert np.abs(got1 - want1).max() <= tol


def test_llama_family_cache_quantized_and_charged():
    """A Llama-family model (grouped-query attention, rotary keys): layer 0's keys are the
    reference applied to the float model's, and decode attention is charged at 4 bits."""
    from models.llama_testing import TINY_LLAMA
    from tenet_byoc.models.llama import LlamaConfig, LlamaRunner
    from tenet_byoc.models.llama import random_params as llama_params

    config = LlamaConfig.from_hf_dict(TINY_LLAMA)
    params = llama_params(config, seed=0)

    def runner(scheme):
        return LlamaRunner(config, params, bind_params=True,
                           build=lambda m: tenet_byoc.build(quantize(m, scheme)))

    _, f_cache = runner("none").prefill(PROMPT)
    kv = runner("q0f32+kv4/head")
    _, q_cache = kv.prefill(PROMPT)
    np.testing.assert_array_equal(q_cache.numpy()[0], stored_kv(f_cache.numpy()[0], 4, "head"))
    tenet_byoc.set_phase(kv.vm, "decode")
    kv.decode(1, q_cache)
    att = [e for e in tenet_byoc.ledger(kv.vm).entries if e.bits_b == 4 and e.phase == "decode"]
    assert len(att) == 2 * config.num_hidden_layers
    assert all(e.batch == config.num_key_value_heads for e in att)


# ---------------------------------------------------------------------------------------
# Spec strings.


def test_kv_modifiers_compose_with_any_scheme():
    s = get_scheme("q4f16_1+kv4/group32")
    assert (s.kv_bits, s.kv_granularity, s.kv_group) == (4, "group", 32)
    assert s.recipe() == get_scheme("q4f16_1").recipe()  # the linear layers are unchanged
    assert get_scheme("w=int8/channel,a=int8/token+kv8").kv_granularity == "token"
    assert "kv=int8/head" in get_scheme("per_token+kv8/head").describe()


@pytest.mark.parametrize("spec,message", [
    ("per_token+kv5", "modifier \\+kv5 is not understood"),
    ("per_token+kv8/row", "unknown KV granularity 'row'"),
    ("per_token+kv16/head", "takes no granularity"),
    ("per_token+kv8/group0", "groupG needs a positive integer"),
    ("nope+kv8", "unknown quantization scheme 'nope'"),
])
def test_bad_kv_modifiers_name_the_problem(spec, message):
    with pytest.raises(ValueError, match=message):
        get_scheme(spec)


def test_the_recipe_stamp_reads_back_what_quantize_wrote():
    # the module attribute is written and read by one pair, each recipe the cost model's
    # value: the linear layers' and, under a KV scheme, attention's per role
    from tenet_byoc.quantization import RecipeStamp

    s = get_scheme("q4f16_1+kv4/group32")
    stamp = RecipeStamp.read(RecipeStamp.of(s).text())
    assert stamp.bits == tuple(s.bits()) and stamp.recipe == s.recipe()
    att = attention_scheme(s)
    assert stamp.attention == {role: (tuple(att.bits()), att.recipe(role))
                               for role in ("key", "value")}
    assert stamp.attention["value"][1].weight == "group_n"  # V's groups run along N
    plain = RecipeStamp.read(RecipeStamp.of(get_scheme("per_token")).text())
    assert plain.attention is None and plain.recipe.activation == "channel"
