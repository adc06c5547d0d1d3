"""estimate(..., system=...): one chip as today, Megatron-LM shards by hand count, collectives by
formula, the pipeline's critical path.

References: the single-chip estimate (entry for entry); MAC counts from ``models.gemms.total_macs`` and the
models' published shapes (no sharding code); the collective formulas typed out here from the
module docstring; a pipeline schedule worked by hand.
"""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from pipeline_walk import pipeline_seconds

from tenet_byoc.estimate import estimate
from tenet_byoc.accelerators import preset
from tenet_byoc.ledger import LinkEntry, totals
from tenet_byoc.models.configs import resolve_config
from tenet_byoc.models.gemms import total_macs
from tenet_byoc.system import (
    Link,
    System,
    collective_link_bytes,
    collective_seconds,
)

ACC = preset("os16")
LINK = Link(bandwidth_gbps=50.0, latency_us=2.0, topology="ring")
# Llama-3-8B: 32 heads, 8 KV heads of 128, hidden 4096, MLP 14336, vocab 128256.
LLAMA = "llama-3-8b"
TINY_LLAMA = {"model_type": "llama", "vocab_size": 101, "hidden_size": 64,
              "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "max_position_embeddings": 32, "rms_norm_eps": 1e-5,
              "hidden_act": "silu", "rope_theta": 1000.0}
PROMPT = 16


def _per_chip(book, phase=None, unit="array"):
    out = defaultdict(int)
    for e in book:
        if e.unit == unit and (phase is None or e.phase == phase):
            out[e.chip] += e.macs
    return out


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "config.json"
    path.write_text(json.dumps(TINY_LLAMA))
    return path


@pytest.mark.parametrize("model", ["gpt2", "tiny-llama", LLAMA])
def test_one_chip_is_the_accelerator_alone(model, tiny_llama):
    # System(acc) on one chip is acc alone: every entry, the vector unit's included.
    model = tiny_llama if model == "tiny-llama" else model
    book = estimate(model, accelerator=ACC, prompt_len=PROMPT, decode_steps=2)
    one = estimate(model, prompt_len=PROMPT, decode_steps=2, system=System(ACC))
    assert len(one) == len(book)
    assert {e.unit for e in one} == {"array", "vector"}
    for a, b in zip(one, book, strict=True):
        assert a.chip == 0 and a.unit != "link"
        assert a == b
    assert one.latency_s() == pytest.approx(totals(book).latency_us / 1e6, rel=1e-12)


def test_gpt2_on_a_system_keeps_the_vector_unit():
    # The case: 64-token prompt and one decode step; 488 entries, 342 of them vector
    # (GPT-2 small by hand: 12 layers x 6 GEMMs + head = 73 GEMMs a step).
    one = estimate("gpt2", prompt_len=64, decode_steps=1, system=System("os16"))
    alone = estimate("gpt2", prompt_len=64, decode_steps=1)
    assert len(one) == len(alone)
    assert sum(e.unit == "array" for e in one) == 2 * 73
    assert one.latency_s() == pytest.approx(alone.totals().latency_us / 1e6, rel=1e-12)


def test_tensor_parallel_vector_entries_by_hand():
    # Llama-3-8B at TP = 4, a 16-token prefill: 32 query heads / 4 = 8 per chip, 8 KV heads
    # / 4 = 2, head dim 128, hidden 4096 (norms and residuals whole on every chip), MLP
    # 14336 / 4.
    tp = 4
    book = estimate(LLAMA, prompt_len=PROMPT, decode_steps=0,
                    system=System(ACC, chips=tp, tensor_parallel=tp, link=LINK))
    p, d = PROMPT, 4096
    expected = {
        "embed_tokens": p * d,
        "layers.0.input_layernorm": p * d,
        "layers.0.self_attn.q_rotary": p * 8 * 128,
        "layers.0.self_attn.k_rotary": p * 2 * 128,
        "layers.0.self_attn.k_cache": 2 * p * 128,
        "layers.0.self_attn.v_cache": 2 * p * 128,
        "layers.0.self_attn.scale": 8 * p * p,
        "layers.0.self_attn.masked": 8 * p * p,
        "layers.0.self_attn.softmax": 8 * p * p,
        "layers.0.attn_residual": p * d,
        "layers.0.post_attention_layernorm": p * d,
        "layers.0.mlp.silu": p * 14336 // 4,
        "layers.0.mlp.gate_x_up": p * 14336 // 4,
        "layers.0.mlp_residual": p * d,
        "norm": p * d,
    }
    for chip in range(tp):
        mine = {e.name: e for e in book if e.chip == chip and e.unit == "vector"}
        for name, elements in expected.items():
            assert mine[name].elements == elements, (chip, name)
        assert mine["layers.0.self_attn.softmax"].n == p  # each row: the 16 keys
        assert mine["layers.0.mlp.gate_x_up"].k == p * 14336 // 4  # its second operand
    # Every chip has the one-chip run's vector calls, no more, no fewer.
    alone = estimate(LLAMA, accelerator=ACC, prompt_len=PROMPT, decode_steps=0)
    names = [e.name for e in alone if e.unit == "vector"]
    for chip in range(tp):
        assert [e.name for e in book if e.chip == chip and e.unit == "vector"] == names


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_tensor_parallel_chips_each_do_one_tp_th(tp):
    book = estimate(LLAMA, prompt_len=PROMPT, decode_steps=1,
                    system=System(ACC, chips=tp, tensor_parallel=tp, link=LINK))
    config = resolve_config(LLAMA)
    for phase, tokens in (("prefill", PROMPT), ("decode", PROMPT)):
        whole = total_macs(config, phase, tokens)
        per = _per_chip(book, phase)
        assert sorted(per) == list(range(tp))
        assert all(macs * tp == whole for macs in per.values()), (phase, per, whole)
    # Shapes by hand: Q 4096/tp columns, K/V 1024/tp, out and down rows 4096/tp and 14336/tp,
    # the vocabulary 128256/tp.
    first = {e.name: e for e in book if e.chip == 0 and e.phase == "prefill"}
    assert first["layers.0.self_attn.q_proj"].n == 4096 // tp
    assert first["layers.0.self_attn.k_proj"].n == 1024 // tp
    assert first["layers.0.self_attn.o_proj"].k == 4096 // tp
    assert first["layers.0.mlp.down_proj"].k == 14336 // tp
    assert first["lm_head"].n == 128256 // tp


def test_kv_heads_replicated_beyond_their_count():
    # tp = 16 > 8 KV heads: each chip holds one KV head (128 columns), queries split 32/16.
    book = estimate(LLAMA, prompt_len=PROMPT, decode_steps=0,
                    system=System(ACC, chips=16, tensor_parallel=16, link=LINK))
    first = {e.name: e for e in book if e.chip == 0}
    assert first["layers.0.self_attn.k_proj"].macs == PROMPT * 128 * 4096
    assert first["layers.0.self_attn.q_proj"].macs == PROMPT * 4096 * 4096 // 16
    qk = first["layers.0.attn.qk"]
    assert qk.macs == 2 * PROMPT * PROMPT * 128  # two query heads, one KV head


def test_collectives_follow_the_formulas():
    tp = 4
    book = estimate(LLAMA, prompt_len=PROMPT, decode_steps=0,
                    system=System(ACC, chips=tp, tensor_parallel=tp, link=LINK))
    links = [e for e in book if e.unit == "link"]
    # Two all-reduces per layer (attention out, down) and the logits' all-gather, per chip.
    assert len(links) == tp * (2 * 32 + 1)
    bw, lat = 50e9, 2e-6
    reduce_bytes = PROMPT * 4096 * 4  # the [tokens, hidden] float32 result
    gather_bytes = PROMPT * 128256 * 4
    for e in links:
        if e.name.endswith("all_reduce"):
            s, secs = reduce_bytes, 2 * (tp - 1) / tp * reduce_bytes / bw + 2 * (tp - 1) * lat
            assert e.link_bytes == pytest.approx(2 * (tp - 1) / tp * s)
        else:
            assert e.name == "lm_head.all_gather"
            s, secs = gather_bytes, (tp - 1) / tp * gather_bytes / bw + (tp - 1) * lat
            assert e.link_bytes == pytest.approx((tp - 1) / tp * s)
        assert e.latency_us == pytest.approx(secs * 1e6, rel=1e-12)
        assert type(e) is LinkEntry and not hasattr(e, "macs")  # a collective does no MACs
    # The step: every chip's GEMMs and collectives in series (one stage).
    chip0 = sum(e.latency_us for e in book if e.chip == 0) / 1e6
    assert book.latency_s() == pytest.approx(chip0, rel=1e-9)


@pytest.mark.parametrize(("topology", "chips", "kind", "expected"), [
    # S = 1e6 bytes, bw = 1e9 B/s, latency 1 us: the module docstring's forms by hand.
    ("ring", 4, "all_reduce", 2 * 3 / 4 * 1e-3 + 6e-6),
    ("ring", 4, "all_gather", 3 / 4 * 1e-3 + 3e-6),
    ("switch", 8, "all_reduce", 2 * 7 / 8 * 1e-3 + 2e-6),
    ("switch", 8, "all_gather", 7 / 8 * 1e-3 + 1e-6),
    # 8 chips as a 2 x 4 torus: rows then columns.
    ("torus2d", 8, "all_reduce", 2 * 1 / 2 * 1e-3 + 2 * 3 / 4 * 1e-3 / 2 + 2 * 4 * 1e-6),
    ("torus2d", 8, "all_gather", 1 / 2 * 1e-3 / 4 + 3 / 4 * 1e-3 + 4 * 1e-6),
    # 7 chips do not form a torus: a ring.
    ("torus2d", 7, "all_reduce", 2 * 6 / 7 * 1e-3 + 12e-6),
    ("ring", 2, "p2p", 1e-3 + 1e-6),
    ("ring", 1, "all_reduce", 0.0),
])
def test_collective_seconds_by_hand(topology, chips, kind, expected):
    link = Link(1.0, 1.0, topology)
    assert collective_seconds(kind, 1e6, chips, link) == pytest.approx(expected, rel=1e-12)


def test_pipeline_schedule_by_hand():
    # Stages of 1 s and 2 s, 0.5 s hand-over, 3 micro-batches: stage 1 starts at 1.5 s and
    # then runs back to back, 3 x 2 s: 7.5 s, of which 1.5 s is bubble.
    assert pipeline_seconds([1.0, 2.0], 0.5, 3) == pytest.approx((7.5, 1.5))
    assert pipeline_seconds([2.0, 1.0], 0.5, 3) == pytest.approx((7.5, 1.5))


def test_pipeline_critical_path_is_never_below_a_chips_work():
    system = System(ACC, chips=4, tensor_parallel=2, pipeline_parallel=2, micro_batches=2,
                    link=LINK)
    book = estimate(LLAMA, prompt_len=PROMPT, decode_steps=2, batch=2, system=system)
    assert {e.chip for e in book} == {0, 1, 2, 3}
    config = resolve_config(LLAMA)
    assert sum(_per_chip(book, "prefill").values()) == 2 * total_macs(config, "prefill", PROMPT)
    for step in book.steps:
        work = defaultdict(float)
        for e in book:
            if e.phase == step.phase:
                work[e.chip] += e.latency_us / 1e6
        per_step = 1 if step.phase == "prefill" else 2  # two decode steps share the phase
        assert step.seconds >= max(work.values()) / per_step * (1 - 1e-9)
        assert step.seconds < sum(work.values()) / per_step  # overlapped, not a sum
    assert len([e for e in book if e.name.endswith(".p2p")]) == 3 * 2 * 2  # steps x mbs x tp


def test_json_round_trip():
    system = System(preset("tpu_v1"), chips=8, tensor_parallel=4, pipeline_parallel=2,
                    micro_batches=4, link=Link(25.0, 0.5, "torus2d"))
    again = System.from_json(system.to_json())
    assert again == system
    assert json.loads(system.to_json())["accelerator"]["supported_dataflows"] == ["ws"]


@pytest.mark.parametrize(("make", "words"), [
    (lambda: System(ACC, chips=4, tensor_parallel=2), ["chips=4", "tensor_parallel"]),
    (lambda: System(ACC, tensor_parallel=0, chips=0), ["System.chips", "> 0"]),
    (lambda: Link(topology="torus"), ["Link.topology", "did you mean 'torus2d'"]),
    (lambda: Link(bandwidth_gbps=-1), ["Link.bandwidth_gbps", "> 0"]),
    (lambda: System.from_json("{}"), ["System JSON", "keys"]),
    (lambda: estimate("gpt2", prompt_len=4, decode_steps=0,
                      system=System(ACC, chips=8, tensor_parallel=8)),
     ["tensor_parallel=8", "12 attention heads"]),
    (lambda: estimate(LLAMA, prompt_len=4, decode_steps=0, batch=3,
                      system=System(ACC, micro_batches=2)), ["micro_batches=2", "batch=3"]),
    (lambda: estimate("gpt2", "none", "ws16", prompt_len=4, decode_steps=0,
                      system=System(ACC)), ["'ws16'", "System(accelerator"]),
    (lambda: collective_link_bytes("broadcast", 1.0, 2), ["collective", "all_reduce"]),
])
def test_bad_systems_are_refused_by_name(make, words):
    with pytest.raises(ValueError) as err:
        make()
    for word in words:
        assert word in str(err.value)


def test_cli_flags_make_the_system(tmp_path, capsys):
    from tenet_byoc_cli import main

    argv = ["estimate", "--model", LLAMA, "--accelerator", "os16", "--prompt-len", str(PROMPT),
            "--decode-steps", "1", "--tp", "4", "--pp", "2", "--chips", "8",
            "--link-gbps", "50", "--link-latency-us", "2", "--out", str(tmp_path)]
    assert main(argv) == 0
    import csv

    rows = {r["phase"]: r for r in csv.DictReader((tmp_path / "estimate.csv").open())}
    book = estimate(LLAMA, prompt_len=PROMPT, decode_steps=1,
                    system=System(ACC, chips=8, tensor_parallel=4, pipeline_parallel=2,
                                  link=LINK))
    assert float(rows["prefill"]["latency_ms"]) == pytest.approx(
        book.latency_s("prefill") * 1e3, rel=1e-12)
    assert float(rows["decode"]["latency_ms"]) == pytest.approx(
        book.latency_s("decode") * 1e3, rel=1e-12)
    bad = ["estimate", "--model", LLAMA, "--prompt-len", "4", "--tp", "4", "--pp", "2",
           "--chips", "6"]
    try:
        code = main(bad)
    except SystemExit as exc:
        code = exc.code
    assert code != 0
    # every bad multi-chip flag named in one message (experiments/estimate_cmd.py)
    assert "--chips 6 must equal --tp 4 x --pp 2 = 8" in capsys.readouterr().err
