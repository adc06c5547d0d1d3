"""plan(): a mixed step (a prompt beside decoding sequences) and a prompt cut in chunks by hand
count, tallies, pickling.

References: Llama-3-8B's published shapes (32 layers, 32 query and 8 key/value heads of 128,
hidden 4096, MLP 14336, vocabulary 128256) counted by hand; the plan of a plain prefill of
the same rows (a linear layer's call does not depend on which sequences its rows came from).
"""

from __future__ import annotations

import pickle
from collections import Counter

import pytest
from pipeline_walk import pipeline_seconds

from tenet_byoc.compose import compose
from tenet_byoc.estimate import Charges, estimate, estimate_step
from tenet_byoc.accelerators import preset
from tenet_byoc.plan import Step, StepSequence, plan

LLAMA = "llama-3-8b"
CONTEXTS = (100, 250, 500, 1000, 2000, 3000, 4000)
D, FF, HD, KV, G, VOCAB, LAYERS = 4096, 14336, 128, 8, 4, 128256, 32


@pytest.fixture(scope="module")
def mixed():
    return Step([StepSequence(512, 0)] + [StepSequence(1, c) for c in CONTEXTS])


def test_a_mixed_step_by_hand(mixed):
    assert (mixed.tokens, mixed.sequences, mixed.phase) == (519, 8, "mixed")
    p = plan(LLAMA, mixed, "none")
    gemms = [c for c in p.calls if c.unit == "array"]
    by_name = Counter(c.name for c in gemms)
    # The linear layers: once each per layer, over all 519 new tokens.
    linear = {"self_attn.q_proj": (D, D), "self_attn.k_proj": (KV * HD, D),
              "self_attn.v_proj": (KV * HD, D), "self_attn.o_proj": (D, D),
              "mlp.gate_proj": (FF, D), "mlp.up_proj": (FF, D), "mlp.down_proj": (D, FF)}
    for i in range(LAYERS):
        for name, (n, k) in linear.items():
            (call,) = [c.call for c in gemms if c.name == f"layers.{i}.{name}"]
            assert (call.batch, call.m, call.n, call.k) == (1, 519, n, k)
    (head,) = [c.call for c in gemms if c.name == "lm_head"]
    assert (head.m, head.n, head.k) == (519, VOCAB, D)
    # Attention: one product per sequence, at its own keys (KV heads x query rows).
    assert by_name["layers.0.attn.qk"] == by_name["layers.0.attn.pv"] == 8
    qk = [c.call for c in gemms if c.name == "layers.0.attn.qk"]
    pv = [c.call for c in gemms if c.name == "layers.0.attn.pv"]
    keys = [512] + [c + 1 for c in CONTEXTS]
    rows = [G * 512] + [G] * 7
    assert [(c.batch, c.m, c.n, c.k) for c in qk] == [(KV, r, n, HD) for r, n in
                                                       zip(rows, keys, strict=True)]
    assert [(c.batch, c.m, c.n, c.k) for c in pv] == [(KV, r, HD, n) for r, n in
                                                       zip(rows, keys, strict=True)]
    assert len(gemms) == LAYERS * (7 + 16) + 1
    macs = sum(c.call.batch * c.call.m * c.call.n * c.call.k for c in gemms)
    per_token = LAYERS * sum(n * k for n, k in linear.values()) + VOCAB * D
    attention = LAYERS * 2 * sum(KV * r * HD * n for r, n in zip(rows, keys, strict=True))
    assert macs == 519 * per_token + attention
    # The vector unit: token-wise calls over the 519 rows once, softmax per sequence.
    vectors = [c for c in p.calls if c.unit == "vector"]
    (norm,) = [c.call for c in vectors if c.name == "layers.0.input_layernorm"]
    assert tuple(norm.shape) == (1, 519, D)
    soft = [tuple(c.call.shape) for c in vectors if c.name == "layers.0.self_attn.softmax"]
    assert soft == [(1, KV, r, n) for r, n in zip(rows, keys, strict=True)]
    writes = [tuple(c.call.shape) for c in vectors if c.name == "layers.0.self_attn.k_cache"]
    assert sorted(writes) == sorted([(1, KV, 512, HD)] + [(1, KV, 1, HD)] * 7)


def test_a_mixed_steps_linear_layers_cost_as_a_prefill_of_its_rows(mixed):
    cost, book = estimate_step(LLAMA, mixed)
    assert cost.seconds > 0 and len(book) == len(plan(LLAMA, mixed).calls)
    rows = {e.name: e for e in estimate("llama-3-8b", prompt_len=519, decode_steps=0)
            if e.unit == "array"}
    for e in book:
        if e.unit == "array" and e.name.endswith(("proj", "lm_head")):
            assert e.cycles == rows[e.name].cycles and e.energy_pj == rows[e.name].energy_pj
    assert cost.energy_pj == pytest.approx(book.totals().energy_pj, rel=1e-12)
    assert cost.stage_cycles == (book.totals().cycles,)


def _macs(p):
    return sum(c.call.batch * c.call.m * c.call.n * c.call.k for c in p.calls
               if c.unit == "array")


@pytest.mark.parametrize("model", ["gpt2", LLAMA])
def test_a_whole_prompt_as_one_chunk_is_the_prefill_entry_for_entry(model):
    # estimate's prefill is checked against real runs' ledgers (test_estimate_vs_run).
    _, book = estimate_step(model, Step([StepSequence(512, 0, logits=True)]))
    whole = estimate(model, prompt_len=512, decode_steps=0)
    assert len(book) == len(whole)
    for a, b in zip(book, whole.entries, strict=True):
        assert a == b


def test_a_prompt_cut_in_two_chunks_by_hand():
    first = plan(LLAMA, Step([StepSequence(256, 0, logits=False)]))
    second = plan(LLAMA, Step([StepSequence(256, 256)]))
    whole = plan(LLAMA, Step.prefill(512))
    # The first chunk is a 256-token prefill without the head (nor its input's quantize).
    assert [c.name for c in first.calls] == [c.name for c in plan(
        LLAMA, Step.prefill(256)).calls if c.name != "lm_head"]
    gemms = {c.name: c.call for c in second.calls if c.unit == "array"}
    # The second: linear layers over its 256 rows, attention over the 256 cached keys and
    # its own 256 (the full 256 x 512 block, as a prefill charges its full P x P block).
    assert (gemms["layers.5.self_attn.q_proj"].m, gemms["lm_head"].m) == (256, 256)
    qk, pv = gemms["layers.5.attn.qk"], gemms["layers.5.attn.pv"]
    assert (qk.batch, qk.m, qk.n, qk.k) == (KV, G * 256, 512, HD)
    assert (pv.batch, pv.m, pv.n, pv.k) == (KV, G * 256, HD, 512)
    vectors = {c.name: c.call for c in second.calls if c.unit == "vector"}
    p = "layers.5.self_attn."
    assert tuple(vectors[p + "softmax"].shape) == (1, KV, G * 256, 512)
    assert tuple(vectors[p + "scale"].shape) == (1, KV, G * 256, 512)
    assert tuple(vectors[p + "mask"].shape) == (256, 512)
    assert tuple(vectors[p + "masked"].shape) == (1, KV, G, 256, 512)
    assert vectors[p + "masked"].operand_elements == 256 * 512
    assert tuple(vectors[p + "k_cache"].shape) == tuple(vectors[p + "v_cache"].shape) == (
        1, KV, 256, HD)
    assert tuple(vectors["norm"].shape) == (1, 256, D)
    linear = D * D + 2 * KV * HD * D + D * D + 3 * FF * D  # q, k, v, o, gate, up, down
    attention = 2 * KV * G * HD  # Q x K^T and P x V per query row and key
    assert _macs(first) + _macs(second) == (
        LAYERS * (512 * linear + attention * (256 * 256 + 256 * 512)) + 256 * VOCAB * D)
    # Against the whole prompt: the head over 256 rows fewer, and the block 512 x 512 less
    # the two chunks' 256 x 256 and 256 x 512 (the masked corner the whole prompt computes).
    assert _macs(whole) - _macs(first) - _macs(second) == (
        256 * VOCAB * D + LAYERS * attention * (512 * 512 - 256 * 256 - 256 * 512))


def test_a_chunk_beside_decodes_and_its_refusals():
    step = Step([StepSequence(100, 300, logits=False), StepSequence(1, 40), StepSequence(1, 7)])
    p = plan("gpt2", step)
    qk = [(c.call.batch, c.call.m, c.call.n) for c in p.calls if c.name == "h.3.attn.qk"]
    assert qk == [(12, 100, 400), (12, 1, 41), (12, 1, 8)]
    (fc,) = [c.call for c in p.calls if c.name == "h.3.mlp.c_fc"]
    (head,) = [c.call for c in p.calls if c.name == "lm_head"]
    assert (fc.m, head.m) == (102, 2)  # the chunk computes no logits
    mask = [tuple(c.call.shape) for c in p.calls if c.name == "h.0.attn.batch_mask"]
    assert mask == [(1, 1, 100, 400), (1, 1, 1, 41), (1, 1, 1, 8)]
    with pytest.raises(ValueError, match="1025 tokens exceed gpt2's context n_positions=1024"):
        plan("gpt2", Step([StepSequence(25, 1000)]))
    with pytest.raises(TypeError, match="logits"):
        StepSequence(8, 8, logits=1)
    # A step that computes no logits has no head at all.
    assert "lm_head" not in {c.name for c in plan("gpt2", Step(
        [StepSequence(16, 16, logits=False)])).calls}


def test_a_chunk_under_a_sliding_window_attends_to_what_the_cache_holds():
    # Mistral-7B's window is 4,096 tokens (a token and the 4,095 before it): a chunk of 64
    # after 5,000 reads the last 4,095 cached keys (its first row's) and its own 64.
    p = plan("mistral-7b", Step([StepSequence(64, 5000)]))
    (qk,) = {(c.call.m, c.call.n) for c in p.calls if c.name.endswith("attn.qk")}
    assert qk == (4 * 64, 4095 + 64)


def test_a_tally_composes_to_the_sum_and_a_plan_pickles():
    steps = [plan("gpt2", Step.decode(c)) for c in range(10, 14)]
    tally = steps[0].tally(steps[1:])
    assert sum(c.count for c in tally.calls if c.unit == "array") == sum(
        1 for s in steps for c in s.calls if c.unit == "array")
    assert len(tally.calls) < sum(len(s.calls) for s in steps)
    charges = Charges(preset("os16"))
    one = [compose(s, charges.cost) for s in steps]
    both = compose(tally, charges.cost)
    assert both.stage_cycles[0] == sum(c.stage_cycles[0] for c in one)
    assert both.energy_pj == pytest.approx(sum(c.energy_pj for c in one), rel=1e-12)
    assert pickle.loads(pickle.dumps(steps[0])) == steps[0]


@pytest.mark.parametrize(("model", "kwargs"), [
    ("gpt2", {"scheme": "none", "prompt_len": 32, "decode_steps": 3}),
    ("llama-3-8b", {"scheme": "per_token", "prompt_len": 16, "decode_steps": 2, "batch": 2}),
])
def test_totals_before_the_entries_are_made_equal_their_sums(model, kwargs):
    # estimate's ledger sums its plans' distinct calls until the entries are read; the sums
    # over the entries themselves (ledger.totals, step_cycles) are the reference.
    from tenet_byoc.ledger import totals

    book = estimate(model, **kwargs)
    fast, phases = book.totals(), book.group_by("phase")
    assert len(book) == len(book.entries)  # the count given before, the entries made now
    slow = totals(book.entries)
    assert (fast.calls, fast.macs, fast.cycles, fast.roofline_cycles) == (
        slow.calls, slow.macs, slow.cycles, slow.roofline_cycles)
    for name in ("latency_us", "energy_pj", "offchip_bytes", "dram_bytes", "pe_utilization"):
        assert getattr(fast, name) == pytest.approx(getattr(slow, name), rel=1e-12)
    for phase, t in book.group_by("phase").items():
        assert (phases[phase].calls, phases[phase].cycles) == (t.calls, t.cycles)
        assert phases[phase].energy_pj == pytest.approx(t.energy_pj, rel=1e-12)


def test_micro_batches_through_stages_by_hand():
    # Three stages of 1 s, 3 s and 2 s (one GEMM each at 1 GHz), 0.5 s hand-overs, four
    # micro-batches: the first passes everything, 6 + 2 x 0.5 s; each other follows 3 s
    # (the slowest stage) later: 7 + 3 x 3 = 16 s, of which 16 - 4 x 3 = 4 s is bubble.
    from tenet_byoc.plan import LinkCall, Plan, PlannedCall

    seconds = {"a": 1.0, "b": 3.0, "c": 2.0, "stage0.p2p": 0.5, "stage1.p2p": 0.5}
    gemm = plan("gpt2", Step.decode(4)).calls[0].call
    calls = [PlannedCall(gemm, n, "array", None, s, key=(n,)) for s, n in enumerate("abc")]
    calls += [PlannedCall(LinkCall("p2p", 8.0, 2), f"stage{s}.p2p", "link", None, s,
                          key=("p2p",)) for s in range(2)]
    p = Plan(Step.decode(4, batch=8), "decode", tuple(calls), tensor_parallel=2,
             pipeline_parallel=3, micro_batches=4)

    def cost(pc):
        t = seconds[pc.name]
        return (t if pc.unit == "link" else t * 1e9), 10.0

    c = compose(p, cost, clock_ghz=1.0)
    assert c.seconds == pytest.approx(16.0) and c.bubble_seconds == pytest.approx(4.0)
    # pipeline_seconds walks the same schedule micro-batch by micro-batch.
    assert (c.seconds, c.bubble_seconds) == pytest.approx(pipeline_seconds([1, 3, 2], 0.5, 4))
    assert c.stage_seconds == pytest.approx((1.0, 3.0, 2.0))
    assert c.energy_pj == pytest.approx(5 * 10.0 * 2 * 4)  # every call, chip, micro-batch
    # A tally of micro-batched steps: each step's stages summed, the same rule.
    both = p.tally([p])
    assert compose(both, cost).seconds == pytest.approx(2 * 7 + 3 * 6)


def test_a_tally_of_micro_batched_steps_is_the_sum_of_the_steps():
    # GPT-2 on 2 stages x 2 chips, 2 micro-batches of a batch of 4 decoding: the last stage
    # (with the head) is the slowest in every step, so the tally composes to the steps' sum,
    # which is what estimate gives step by step.
    from tenet_byoc.system import Link, System

    system = System(preset("os16"), chips=4, tensor_parallel=2, pipeline_parallel=2,
                    micro_batches=2, link=Link(50.0, 2.0))
    steps = [plan("gpt2", Step.decode(c, batch=4), "none", system) for c in (20, 21, 22)]
    charges = Charges(preset("os16"), system.link)
    alone = [compose(s, charges.cost) for s in steps]
    assert all(max(a.stage_seconds) == a.stage_seconds[-1] for a in alone)
    tally = compose(steps[0].tally(steps[1:]), charges.cost)
    assert tally.seconds == pytest.approx(sum(a.seconds for a in alone), rel=1e-12)
    assert tally.energy_pj == pytest.approx(sum(a.energy_pj for a in alone), rel=1e-12)
    book = estimate("gpt2", prompt_len=0, context_len=20, decode_steps=3, batch=4,
                    system=system)
    assert book.latency_s() == pytest.approx(tally.seconds, rel=1e-12)


def test_fused_attention_replaces_the_products_and_score_work_by_hand(mixed):
    # plan(attention="fused"): per layer one AttentionCall of Llama-3-8B's 32 query / 8 KV
    # heads of 128 for the prompt (512 x 512 keys) and one for the 7 decodes together, at
    # their mean keys rounded up (ceil(10,857 / 7) = 1,551: the K and V they read), in place
    # of Q x K^T, P x V and the scores' scale, masks and softmax; every other call as in the
    # unfused plan. estimate on h200 (a preset that runs it fused) charges each
    # kernel what the cost model charges that call, and its step is the sum of the rest plus
    # the kernels (no fused epilogue behind them).
    import tenet_byoc.cost_model as cm

    unfused, fused = (plan(LLAMA, mixed, "none", attention=a) for a in ("unfused", "fused"))
    kernels = [c for c in fused.calls if c.unit == "attention"]
    assert len(kernels) == LAYERS * 2
    layer0 = [c.call for c in kernels if c.layer == 0]
    assert sum(c + 1 for c in CONTEXTS) == 10_857
    assert [(k.batch, k.heads, k.kv_heads, k.queries, k.keys, k.head_dim, k.causal)
            for k in layer0] == [(1, 32, KV, 512, 512, HD, True),
                                 (7, 32, KV, 1, 1_551, HD, True)]
    score = ("attn.qk", "attn.pv", "attn.scale", "attn.mask", "attn.batch_mask",
             "attn.masked", "attn.softmax")
    rest = [(c.name, c.key) for c in unfused.calls if not c.name.endswith(score)]
    assert [(c.name, c.key) for c in fused.calls if c.unit != "attention"] == rest
    with pytest.raises(ValueError, match="attention='flash'"):
        plan(LLAMA, mixed, "none", attention="flash")
    acc = preset("h200")
    assert (acc.attention, preset("os16").attention) == ("fused", "unfused")
    cost, book = estimate_step(LLAMA, mixed, "none", acc)
    entries = [e for e in book.entries if e.unit == "attention"]
    assert [e.cycles for e in entries] == [cm.charge_attention(c.call, acc).cycles
                                           for c in kernels]
    plain, _ = estimate_step(LLAMA, mixed, "none", acc, attention="unfused", entries=False)
    charges = Charges(acc)
    others = compose(type(fused)(fused.step, fused.phase, tuple(
        c for c in fused.calls if c.unit != "attention")), charges.cost, charges.schedule,
        acc.hardware.clock_ghz)
    hz = acc.hardware.clock_ghz * 1e9
    assert cost.seconds == pytest.approx(others.seconds + sum(e.cycles for e in entries) / hz)
    assert cost.seconds != plain.seconds


def test_logits_on_the_last_token_by_hand():
    # logits="last" (a serving engine's sampling): the head over one row per sequence, its
    # input quantization likewise; True (the runners, estimate's default) over every new
    # token; everything else alike. Three prompts of 512 and two decodes, w8a8.
    scheme = "w8a8_per_channel_per_token"
    seqs = [(StepSequence(512, 0), 3), (StepSequence(1, 40), 2)]
    last = plan(LLAMA, Step([(StepSequence(s.new_tokens, s.context, logits="last"), n)
                             for s, n in seqs]), scheme)
    every = plan(LLAMA, Step(seqs), scheme)
    (head,) = [c.call for c in last.calls if c.name == "lm_head"]
    (full,) = [c.call for c in every.calls if c.name == "lm_head"]
    assert (head.m, head.n, head.k, full.m) == (5, VOCAB, D, 3 * 512 + 2)
    (q,) = [tuple(c.call.shape) for c in last.calls if c.name == "lm_head.quantize"]
    assert q == (1, 5, D)
    rest = [(c.name, c.key) for c in every.calls if not c.name.startswith("lm_head")]
    assert [(c.name, c.key) for c in last.calls if not c.name.startswith("lm_head")] == rest
    with pytest.raises(TypeError, match="logits"):
        StepSequence(4, 0, logits="first")


@pytest.mark.parametrize("kv, row", [("kv8", 32), ("kv4/head", 16), ("kv8/group8", 8),
                                     ("kv16", None)])
def test_a_quantized_caches_writes_and_quantization_by_hand(kv, row):
    # Tiny Llama: 2 layers, 2 key/value heads of 16 (64 wide over 4 query heads). Each layer
    # quantizes its new keys and its new values, one row per scale (a token's 2 x 16, a
    # head's 16, a group's 8), and writes them at the cache's width (a float16 cache: its
    # writes only); on 2 chips each quantizes and writes its one head.
    from llama_testing import TINY_LLAMA

    from tenet_byoc import cost_model as cm
    from tenet_byoc.models.llama import LlamaConfig
    from tenet_byoc.plan import Sharding

    config, acc = LlamaConfig.from_hf_dict(TINY_LLAMA), preset("os16")
    bits = int(kv[2:].split("/")[0])
    for step, tokens in ((Step.prefill(7), 7), (Step.decode(5), 1), (Step.decode(5, 3), 3)):
        for chips, heads in ((1, 2), (2, 1)):
            p = plan(config, step, f"none+{kv}", Sharding(chips))
            quantize = [c for c in p.calls if c.name.endswith("_cache.quantize")]
            writes = [c for c in p.calls if c.name.endswith("_cache")]
            assert len(writes) == 4
            assert [c.name.rsplit(".", 2)[1] for c in quantize] == [
                "k_cache", "v_cache"] * (2 if row else 0)
            for c in quantize:  # charged under the scheme's name, as a run charges it
                charge = cm.charge_vector(c.call, acc)
                assert charge.elements == tokens * heads * 16
                assert charge.rows == tokens * heads * 16 // min(row, heads * 16)
                assert (c.call.bits_in, c.call.bits_out, c.scheme) == (32, bits, f"none+{kv}")
            for c in writes:  # 8 bits: a byte a value; 4 bits: half of one
                assert cm.charge_vector(c.call, acc).dram_write_bytes == \
                    tokens * heads * 16 * bits / 8
