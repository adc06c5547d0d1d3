"""estimate() against the ledger of a real offloaded run, call for call.

The reference is the runtime's own ledger: the C++ module charging the GEMMs it really ran,
with shapes read from the built module's tensors (after the quantize pass padded K, the
codegen chose widths and recipes). The estimate never builds or runs anything.
"""

from __future__ import annotations

import pytest
from gpt2_testing import TINY_HF_CONFIG, make_hf_weights, write_hf_checkpoint
from llama_testing import TINY_LLAMA, TINY_MISTRAL, make_llama_weights, write_checkpoint

import tenet_byoc
from tenet_byoc.ledger import _CHARGE_FIELDS, ENTRY_NAMES, make_entry
from tenet_byoc.models import from_pretrained
from tenet_byoc.models.gpt2 import GPT2Config, GPT2Runner, random_params

# Everything charged: shape, widths, quantization work, cycles, bytes, energy, mapping,
# per-tensor traffic; not the names the partitioner gave the functions.
CHARGED = sorted(_CHARGE_FIELDS)


def real_ledger(runner, prompt: list[int], context_len: int, decode_steps: int):
    """Prefill ``prompt`` (charged, "prefill"), then ``decode_steps`` steps after a cache of
    ``context_len`` tokens (its own prefill uncharged), tagged "decode"."""
    vm = runner.vm
    tenet_byoc.set_phase(vm, "prefill")
    _, cache = runner.prefill(prompt)
    if context_len != len(prompt):
        tenet_byoc.set_charging(vm, False)
        _, cache = runner.prefill([(3 * i + 1) % 50 for i in range(context_len)])
        tenet_byoc.set_charging(vm, True)
    tenet_byoc.set_phase(vm, "decode")
    for i in range(decode_steps):
        _, cache = runner.decode(i + 2, cache)
    return tenet_byoc.ledger(vm)


def assert_same_charges(real_ledger, estimated_ledger):
    assert (estimated_ledger.accelerator, estimated_ledger.dataflow, estimated_ledger.clock_ghz) == (
        real_ledger.accelerator, real_ledger.dataflow, real_ledger.clock_ghz)
    real, estimated = real_ledger.entries, estimated_ledger.entries
    assert len(estimated) == len(real)
    assert [e.phase for e in estimated] == [r.phase for r in real]
    assert [e.scheme for e in estimated] == [r.scheme for r in real]
    for i, (r, e) in enumerate(zip(real, estimated, strict=True)):
        # Each entry's own fields (a GEMM's, a vector call's: its type's), and the same type.
        assert type(e) is type(r), (i, r.name, e.name)
        charged = [f for f in CHARGED if f in r.FIELDS]
        want = {f: getattr(r, f) for f in charged}
        got = {f: getattr(e, f) for f in charged}
        assert got == want, (i, r.name, e.name, {f for f in charged if got[f] != want[f]})
    assert [e.call_index for e in estimated] == list(range(len(estimated)))
    # The estimate makes entries from its columns (tuple.__new__, for speed): they are
    # what make_entry gives from their fields.
    assert all(make_entry(e._asdict(), **{n: getattr(e, n) for n in ENTRY_NAMES}) == e
               for e in estimated)


def gpt2_small_runner(scheme: str) -> GPT2Runner:
    config = GPT2Config.preset("small")
    return GPT2Runner(
        config, random_params(config, seed=0), bind_params=True,
        build=lambda mod: tenet_byoc.build(tenet_byoc.quantize(mod, scheme), accelerator="os16"),
    )


@pytest.mark.parametrize("scheme", [
    "none",
    pytest.param("w8a8_per_channel_per_token", marks=pytest.mark.slow),
    pytest.param("w4a16_group128", marks=pytest.mark.slow),
    pytest.param("q4f16_1+kv8/group32", marks=pytest.mark.slow),
])
def test_gpt2_small_by_name_equals_its_run(scheme):
    real = real_ledger(gpt2_small_runner(scheme), [50256, 464, 2068, 7586, 21831], 5, 2)
    est = tenet_byoc.estimate("gpt2", scheme, "os16", prompt_len=5, decode_steps=2)
    assert_same_charges(real, est)


# An int KV cache: its writes at the stored width, the new keys and values quantized one row
# per scale (a token's over all heads, a head's, a group's), as the plan charges them.
@pytest.mark.parametrize("scheme", ["none+kv8", "w8a8_per_channel_per_token+kv4/group8",
                                    pytest.param("w4a16_group128+kv4/head",
                                                 marks=pytest.mark.slow),
                                    pytest.param("none+kv16", marks=pytest.mark.slow)])
def test_tiny_gpt2_checkpoint_with_a_quantized_cache_equals_its_run(tmp_path, scheme):
    folder = write_hf_checkpoint(tmp_path, TINY_HF_CONFIG, make_hf_weights(TINY_HF_CONFIG))
    runner = from_pretrained(
        folder, bind_params=True,
        build=lambda mod: tenet_byoc.build(tenet_byoc.quantize(mod, scheme), accelerator="os16"),
    )
    real = real_ledger(runner, [5, 17, 0, 88, 42, 42], 9, 2)
    est = tenet_byoc.estimate(folder, scheme, "os16", prompt_len=6, context_len=9,
                              decode_steps=2)
    assert_same_charges(real, est)
    kv = int(scheme.split("+kv")[1][:2].rstrip("/"))
    writes = [e for e in real.entries if e.op == "kv_write"]
    assert writes and {e.bits_c for e in writes} == {kv}
    quantized = [e for e in real.entries if e.op == "quantize" and e.bits_c == kv]
    assert len(quantized) == (len(writes) if kv < 16 else 0)  # a key or value each


LLAMAS = {"llama": TINY_LLAMA, "mistral": TINY_MISTRAL}


@pytest.fixture(scope="module", params=[
    "llama", pytest.param("mistral", marks=pytest.mark.slow)])
def checkpoint(request, tmp_path_factory):
    cfg = LLAMAS[request.param]
    return cfg, write_checkpoint(tmp_path_factory.mktemp(request.param), cfg,
                                 make_llama_weights(cfg))


# Each case builds the model (~5 s on 2 busy cores): the default set stays within ~30 s.
@pytest.mark.parametrize("scheme", ["none", "w8a8_per_channel_per_token", "w4a16_group128",
                                    "per_token+kv4/head", "mxfp4", "none+kv8",
                                    pytest.param("q4f16_1", marks=pytest.mark.slow),
                                    pytest.param("w4a16_group128+kv8/group8",
                                                 marks=pytest.mark.slow)])
def test_tiny_llama_checkpoint_equals_its_run(checkpoint, scheme):
    cfg, folder = checkpoint
    runner = from_pretrained(
        folder, bind_params=True,
        build=lambda mod: tenet_byoc.build(tenet_byoc.quantize(mod, scheme), accelerator="ws16"),
    )
    # Mistral's window is 16 tokens: a cache of 20 makes the decode steps attend to 16 keys.
    context = 20 if cfg.get("sliding_window") else 11
    real = real_ledger(runner, [5, 17, 0, 88, 42, 42, 8], context, 3)
    est = tenet_byoc.estimate(folder, scheme, "ws16", prompt_len=7, context_len=context,
                              decode_steps=3)
    assert_same_charges(real, est)
    if scheme == "w4a16_group128":  # the hidden sizes (64 / 48, 96 / 64) were padded
        assert {e.k for e in est.entries if e.scheme != "none" and e.unit == "array"} == {128}
    if "+kv" in scheme:  # attention read its cache at the KV width
        kv = int(scheme.split("+kv")[1][0])
        attention = [e for e in est.entries if e.name.endswith(("attn.qk", "attn.pv"))]
        assert attention and {e.bits_b for e in attention} == {kv}


@pytest.mark.slow
def test_a_prompt_longer_than_the_window_quantizes_every_key_and_keeps_the_window(tmp_path):
    # Tiny Mistral (window 16, 2 KV heads of 24): a 24-token prompt's keys and values are
    # all quantized (attention reads them as stored), one row per head and token, and the
    # cache keeps the last 16 tokens.
    folder = write_checkpoint(tmp_path, TINY_MISTRAL, make_llama_weights(TINY_MISTRAL))
    scheme = "per_token+kv4/head"
    runner = from_pretrained(
        folder, bind_params=True,
        build=lambda mod: tenet_byoc.build(tenet_byoc.quantize(mod, scheme), accelerator="ws16"),
    )
    real = real_ledger(runner, [(7 * i + 5) % 90 for i in range(24)], 24, 2)
    est = tenet_byoc.estimate(folder, scheme, "ws16", prompt_len=24, context_len=24,
                              decode_steps=2)
    assert_same_charges(real, est)
    prefill = [e for e in real.entries if e.phase == "prefill"]
    assert {e.m for e in prefill if e.op == "quantize" and e.bits_c == 4} == {24 * 2}
    assert {(e.m, e.bits_c) for e in prefill if e.op == "kv_write"} == {(16 * 2, 4)}


def test_searched_mappings_equal_the_runs(checkpoint):
    # mapping="auto": the runtime's search (one per accelerator, first call) and the
    # estimate's own search pick the same mapping, so every charge agrees.
    _, folder = checkpoint
    scheme = "w8a8_per_channel_per_token"
    runner = from_pretrained(
        folder, bind_params=True,
        build=lambda mod: tenet_byoc.build(
            tenet_byoc.quantize(mod, scheme),
            accelerator=tenet_byoc.accelerators.preset("os16", mapping="auto")),
    )
    real = real_ledger(runner, [5, 17, 0, 88, 42], 9, 2)
    est = tenet_byoc.estimate(folder, scheme, "os16", prompt_len=5, context_len=9,
                              decode_steps=2, mapping="auto")
    assert_same_charges(real, est)
    distinct = {(e.batch, e.m, e.n, e.k, e.scheme) for e in real.entries if e.unit == "array"}
    assert real.mapping_searches == len(distinct)  # really searched, once per distinct call


def test_gpt2_small_batch_rows_cost_as_the_same_rows_of_one_prompt():
    # A batch of 4 decoding sequences multiplies each weight by 4 rows: the same call as a
    # 4-token prompt's; attention stays per sequence: 4 x 12 heads of one row.
    batched = tenet_byoc.estimate("gpt2", "w4a16_group128", "os16", prompt_len=0,
                                  context_len=3, decode_steps=1, batch=4).entries
    prompt = tenet_byoc.estimate("gpt2", "w4a16_group128", "os16", prompt_len=4,
                                 decode_steps=0).entries
    batched, prompt = ([e for e in book if e.unit == "array"] for book in (batched, prompt))
    for b, p in zip(batched, prompt, strict=True):
        if b.scheme == "none":  # attention
            assert (b.batch, b.m, b.n) == (4 * 12, 1, 4) or (b.batch, b.m, b.k) == (48, 1, 4)
        else:
            assert b.charge == p.charge  # every charge field
