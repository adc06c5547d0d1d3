"""A batch of sequences run at once gives each sequence's own logits, and estimate's ledger.

References: the same runner run on one sequence at a time (its own tests compare it with
numpy and transformers), an independent numpy forward per sequence, and
``tenet_byoc.estimate(batch=B)``, which charges from shapes alone what the batched run's
runtime charged call by call.
"""

from __future__ import annotations

import numpy as np
import pytest
from gpt2_testing import TINY_HF_CONFIG, numpy_gpt2_logits
from llama_testing import (
    TINY_LLAMA,
    TINY_MISTRAL,
    make_llama_weights,
    numpy_llama_logits,
    write_checkpoint,
)

import tenet_byoc
from tenet_byoc.ledger import _CHARGE_FIELDS
from tenet_byoc.models import from_pretrained
from tenet_byoc.models.runner import BatchKVCache

TOKENS = [5, 17, 0, 42, 8, 3, 9, 11, 2, 4, 6, 1, 7, 3, 2, 5, 8, 9, 10, 12]
EQUAL = [TOKENS[i:i + 6] for i in (0, 3, 6, 9)]
UNEQUAL = [TOKENS[:3], TOKENS[2:9], TOKENS[5:10], TOKENS[11:12]]  # 3, 7, 5 and 1 tokens
CHARGED = sorted(_CHARGE_FIELDS)


def _build(scheme: str, accelerator: str = "os16"):
    return lambda mod: tenet_byoc.build(tenet_byoc.quantize(mod, scheme), accelerator=accelerator)


@pytest.fixture(scope="module")
def llama_checkpoint(tmp_path_factory):
    weights = make_llama_weights(TINY_LLAMA)
    return weights, write_checkpoint(tmp_path_factory.mktemp("llama"), TINY_LLAMA, weights)


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def model(request, llama_checkpoint):
    """(family, HF weights, folder, batched runner with every matmul offloaded to os16)."""
    if request.param == "gpt2":
        folder = request.getfixturevalue("tiny_checkpoint")
        weights = request.getfixturevalue("tiny_hf_weights")
    else:
        weights, folder = llama_checkpoint
    runner = from_pretrained(folder, bind_params=True, batched=True, build=_build("none"))
    return request.param, weights, folder, runner


def run_batch(runner, prompts, steps):
    """Prefill ``prompts`` together and decode ``steps`` tokens; each sequence's logits."""
    logits, cache = runner.prefill_batch(prompts)
    per_seq = [[row] for row in (logits[b, cache.pad[b]:] for b in range(len(prompts)))]
    for step in range(steps):
        tokens = [(7 * step + 3 * b + 1) % 50 for b in range(len(prompts))]
        out, cache = runner.decode_batch(tokens, cache)
        for b in range(len(prompts)):
            per_seq[b].append(out[b])
    return per_seq, cache


def run_alone(runner, prompt, b, steps):
    logits, cache = runner.prefill(prompt)
    out = [logits]
    for step in range(steps):
        step_logits, cache = runner.decode((7 * step + 3 * b + 1) % 50, cache)
        out.append(step_logits)
    return out


@pytest.mark.parametrize("prompts", [EQUAL, UNEQUAL], ids=["equal", "unequal"])
def test_batch_of_four_equals_the_four_run_alone(model, prompts):
    family, weights, _, runner = model
    batched, cache = run_batch(runner, prompts, steps=3)
    longest = max(map(len, prompts))
    assert cache.pad == tuple(longest - len(p) for p in prompts) and cache.length == longest + 3
    for b, prompt in enumerate(prompts):
        alone = run_alone(runner, prompt, b, steps=3)
        assert len(alone) == len(batched[b]) == 4
        for got, want in zip(batched[b], alone, strict=True):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
        # And against the independent numpy forward of the sequence alone.
        reference = numpy_gpt2_logits if family == "gpt2" else numpy_llama_logits
        cfg = TINY_HF_CONFIG if family == "gpt2" else TINY_LLAMA
        np.testing.assert_allclose(batched[b][0], reference(weights, cfg, prompt), rtol=0,
                                   atol=1e-4)


def test_generate_batch_greedy_tokens_equal_generate_alone(model):
    _, _, _, runner = model
    together = runner.generate_batch(UNEQUAL, 4)
    assert together == [runner.generate(p, 4) for p in UNEQUAL]
    assert runner.generate_batch(UNEQUAL, 0) == [[]] * 4


def assert_same_charges(real, estimated):
    # Every entry, in order: the GEMMs (unit "array") and the vector work, the batched
    # functions' own included (positions per sequence, the per-sequence mask).
    assert len(estimated.entries) == len(real.entries), (
        [(e.name, e.op) for e in real.entries if e.unit == "vector"],
        [(e.name, e.op) for e in estimated.entries if e.unit == "vector"])
    for i, (r, e) in enumerate(zip(real.entries, estimated.entries, strict=True)):
        assert type(e) is type(r), (i, r.name, e.name)  # each unit's own fields
        charged = [f for f in CHARGED if f in r.FIELDS]
        want = {f: getattr(r, f) for f in charged}
        got = {f: getattr(e, f) for f in charged}
        assert e.phase == r.phase
        assert got == want, (i, r.name, e.name, {f: (got[f], want[f]) for f in charged
                                                  if got[f] != want[f]})


def ledger_of_batch(runner, prompts, steps):
    ledger = tenet_byoc.ledger(runner.vm)
    ledger.reset()
    run_batch(runner, prompts, steps)
    return tenet_byoc.ledger(runner.vm)


@pytest.mark.parametrize("prompts", [EQUAL, UNEQUAL], ids=["equal", "unequal"])
def test_batch_of_four_ledger_equals_estimate_batch_4(model, prompts):
    # Unequal prompts run left-padded to the longest: the run charges the padded shapes,
    # and estimate(prompt_len=longest, batch=4) charges the same.
    _, _, folder, runner = model
    real = ledger_of_batch(runner, prompts, steps=2)
    longest = max(map(len, prompts))
    est = tenet_byoc.estimate(folder, "none", "os16", prompt_len=longest, decode_steps=2,
                              batch=4)
    assert_same_charges(real, est)
    # Each linear layer is one GEMM of all 4 x longest rows; attention per sequence and head.
    first = real.entries[0]
    assert (first.batch, first.m) == (1, 4 * longest)
    heads = runner.config.n_head if hasattr(runner.config, "n_head") else (
        runner.config.num_key_value_heads)
    qk = next(e for e in est.entries if e.name.endswith("attn.qk"))
    assert qk.batch == 4 * heads
    if prompts is UNEQUAL:  # not what the real tokens alone would cost
        tokens = tenet_byoc.estimate(folder, "none", "os16", prompt_len=sum(map(len, prompts)),
                                     decode_steps=0)
        assert tokens.entries[0].m == sum(map(len, prompts)) < first.m


@pytest.mark.parametrize("scheme", ["w8a8_per_channel_per_token",
                                    pytest.param("per_token+kv4/head", marks=pytest.mark.slow),
                                    pytest.param("w4a16_group128", marks=pytest.mark.slow)])
def test_quantized_batch_ledger_equals_estimate(llama_checkpoint, scheme):
    # The quantize pass and codegen see the batched functions' shapes: per-token rows of all
    # sequences, per-head KV quantization with a batch axis, K padded to the group.
    _, folder = llama_checkpoint
    runner = from_pretrained(folder, bind_params=True, batched=True, build=_build(scheme, "ws16"))
    real = ledger_of_batch(runner, UNEQUAL, steps=2)
    est = tenet_byoc.estimate(folder, scheme, "ws16", prompt_len=7, decode_steps=2, batch=4)
    assert_same_charges(real, est)


@pytest.mark.slow
def test_sliding_window_batch_equals_alone(tmp_path):
    # Mistral's window (16) rolls the cache: prompts up to 14 tokens, then 6 steps, so the
    # longest sequence's keys fall out of the window while the shortest's pad slots do too.
    weights = make_llama_weights(TINY_MISTRAL)
    folder = write_checkpoint(tmp_path, TINY_MISTRAL, weights)
    runner = from_pretrained(folder, bind_params=True, batched=True, build=_build("none"))
    prompts = [TOKENS[:14], TOKENS[3:6], TOKENS[:9], TOKENS[7:8]]
    batched, _ = run_batch(runner, prompts, steps=6)
    for b, prompt in enumerate(prompts):
        for got, want in zip(batched[b], run_alone(runner, prompt, b, steps=6), strict=True):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    real = ledger_of_batch(runner, prompts, steps=6)
    est = tenet_byoc.estimate(folder, "none", "os16", prompt_len=14, decode_steps=6, batch=4)
    assert_same_charges(real, est)


# -- refusals -----------------------------------------------------------------------------


def test_a_runner_built_without_batches_says_how_to_get_them(tiny_runner):
    with pytest.raises(ValueError, match="batched=True"):
        tiny_runner.prefill_batch(EQUAL)


def test_bad_batches_are_refused_by_name(model):
    _, _, _, runner = model
    vocab = runner.config.vocab_size
    with pytest.raises(ValueError, match="empty"):
        runner.prefill_batch([])
    with pytest.raises(ValueError, match=r"prompts\[2\].*out of range"):
        runner.prefill_batch([[1], [2], [vocab], [3]])
    with pytest.raises(ValueError, match=r"prompts\[0\] must be a 1-D"):
        runner.prefill_batch([1, 2, 3])  # one prompt, not a list of them
    with pytest.raises(ValueError, match=r"prompts\[1\].*empty"):
        runner.prefill_batch([[1], []])
    _, cache = runner.prefill_batch(UNEQUAL)
    with pytest.raises(ValueError, match="one id per sequence"):
        runner.decode_batch([1, 2, 3], cache)
    with pytest.raises(ValueError, match=r"token_ids\[3\].*out of range"):
        runner.decode_batch([1, 2, 3, -1], cache)
    with pytest.raises(TypeError, match="BatchKVCache"):
        runner.decode_batch([1, 2, 3, 4], runner.prefill([1, 2])[1])
    with pytest.raises(ValueError, match="pad"):
        runner.decode_batch([1, 2, 3, 4], BatchKVCache(cache.tensors, cache.length, (0, 9, 0, 0)))
    with pytest.raises(ValueError, match="tensor 0"):
        runner.decode_batch([1, 2, 3, 4], BatchKVCache(cache.tensors, cache.length + 1, cache.pad))


@pytest.mark.slow
def test_gpt2_small_batch_of_four_ledger_equals_estimate():
    # The real widths (d = 768, 12 layers, 50257 tokens): about 100 s on 2 busy cores.
    from tenet_byoc.models.gpt2 import GPT2Config, GPT2Runner, random_params

    config = GPT2Config.preset("small")
    runner = GPT2Runner(config, random_params(config), bind_params=True, batched=True,
                        build=_build("w8a8_per_channel_per_token"))
    prompts = [[50256, 464, 2068], [7586, 21831, 11, 318, 257], [40], [1000, 2000]]
    batched, _ = run_batch(runner, prompts, steps=2)
    for b, prompt in enumerate(prompts):
        for got, want in zip(batched[b], run_alone(runner, prompt, b, steps=2), strict=True):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    real = ledger_of_batch(runner, prompts, steps=2)
    est = tenet_byoc.estimate("gpt2", "w8a8_per_channel_per_token", "os16", prompt_len=5,
                              decode_steps=2, batch=4)
    assert_same_charges(real, est)
