"""Serving on several chips: tensor and pipeline parallel iterations and per-chip KV caches."""

from __future__ import annotations

import pytest

from tenet_byoc.estimate import estimate_step
from tenet_byoc.accelerators import resolve
from tenet_byoc.plan import Step, StepSequence
from tenet_byoc.serving import SchedulerConfig, TraceRequest, simulate
from tenet_byoc.serving.cost import model_step_cost
from tenet_byoc.models.footprint import kv_bytes_per_token
from tenet_byoc.serving.kv_cache import cache_sizing, weight_bytes
from tenet_byoc.system import Link, System

# GPT-2 small: 12 layers of width 768, 12 heads of 64, 50257-token vocabulary.
LAYERS, HIDDEN, VOCAB = 12, 768, 50257


@pytest.fixture(scope="module")
def acc():
    return resolve("os16")


def test_one_chip_system_is_the_one_chip_run(acc):
    trace = [TraceRequest(0.01 * i, 20 + 3 * i, 4 + i % 3) for i in range(12)]
    runs = [simulate(trace, cost, scheduler=SchedulerConfig(token_budget=64), kv_blocks=200,
                     block_size=16)
            for cost in (model_step_cost("gpt2", "none", acc),
                         model_step_cost("gpt2", "none", acc, system=System(acc)))]
    assert list(runs[0].finish_s) == list(runs[1].finish_s)
    assert list(runs[0].first_token_s) == list(runs[1].first_token_s)
    sizes = [cache_sizing(resolve_config(), "none", 1e9, system=s) for s in (None, System(acc))]
    assert sizes[0] == sizes[1]


def resolve_config():
    from tenet_byoc.plan import model_config

    return model_config("gpt2")


def test_tp2_links_by_hand(acc):
    # TP = 2 on a ring: per layer two all-reduces (attention and MLP output projections) of
    # the step's float32 activations S = T x 768 x 4 bytes, each 2 (T-1)/T S / bw + 2 a with
    # T = 2 chips (the dense part); the head's logits of S sequences' last tokens
    # all-gathered, (T-1)/T x S x 50257 x 4 / bw + a (the head part). Halving the bandwidth
    # adds the bandwidth terms once more.
    tokens = 16
    fast, slow = (model_step_cost("gpt2", "none", acc,
                                  system=System(acc, 2, 2, 1, 1, Link(gbps, 1.0)))
                  for gbps in (100.0, 50.0))
    activations = tokens * HIDDEN * 4
    logits = tokens * VOCAB * 4
    per_byte = 1 / 50e9 - 1 / 100e9
    assert slow.dense(tokens) - fast.dense(tokens) == pytest.approx(
        LAYERS * 2 * activations * per_byte, rel=1e-9)
    assert slow.head(tokens) - fast.head(tokens) == pytest.approx(logits / 2 * per_byte,
                                                                  rel=1e-9)
    assert slow.attention(tokens, 0) == fast.attention(tokens, 0)


@pytest.mark.parametrize("step", [
    Step.prefill(32),
    Step([StepSequence(1, 40)] * 4 + [StepSequence(16, 0)]),
], ids=["prefill", "decodes+prefill"])
def test_tp2_split_cost_matches_the_whole_step(acc, step):
    # Against estimate_step's plan of the whole step on the same system (every layer, the
    # collectives charged as link entries, the critical path over chips; the logits of each
    # sequence's last token); <= 1% as on one chip (the split's per-sequence vector calls
    # differ a little).
    step = Step([(StepSequence(s.new_tokens, s.context, logits="last"), n)
                 for s, n in step.groups])
    system = System(acc, 2, 2, 1, 1, Link(100.0, 1.0))
    cost = model_step_cost("gpt2", "none", acc, context_granularity=1, token_granularity=1,
                           system=system)
    whole = estimate_step("gpt2", step, "none", acc, entries=False, system=system)[0].seconds
    assert cost(step) == pytest.approx(whole, rel=0.01)
    one = model_step_cost("gpt2", "none", acc, context_granularity=1, token_granularity=1)
    assert cost(step) < one(step)  # half of each GEMM per chip outweighs the links here


def test_pp2_adds_the_handover(acc):
    # Two stages, one step's critical path: the layers' calls once each, as on one chip, plus
    # one hand-over of T x 768 float32 activations, S / bw + a.
    tokens = 32
    one = model_step_cost("gpt2", "none", acc)
    two = model_step_cost("gpt2", "none", acc, system=System(acc, 2, 1, 2, 1, Link(100.0, 1.0)))
    handover = tokens * HIDDEN * 4 / 100e9 + 1e-6
    assert two.dense(tokens) - one.dense(tokens) == pytest.approx(handover, rel=1e-9)
    assert two.attention(1, 300) == one.attention(1, 300)


@pytest.mark.parametrize("tp, pp, most", [(2, 1, 12), (1, 2, 6), (2, 5, 3), (3, 4, 3)])
def test_cache_per_chip_by_hand(acc, tp, pp, most):
    # The fullest chip: the largest stage's layers (12 over 5 stages: 3,3,2,2,2) of the
    # layers' weights and KV, split over tp; GPT-2's tied embedding table (50257 x 768,
    # float32 under "none": the head reads it, so one copy wherever a stage holds either)
    # split over tp on it too.
    config = resolve_config()
    outside = VOCAB * HIDDEN * 4
    layer_weights = weight_bytes(config, "none") - outside
    assert layer_weights == LAYERS * 4 * (768 * 2304 + 768 * 768 + 2 * 768 * 3072)
    weights = (layer_weights * most / LAYERS + outside) / tp
    per_token = 2 * most * HIDDEN * kv_bits("none") / 8 / tp  # keys and values, 12 x 64
    assert kv_bytes_per_token(config, "none") == 2 * LAYERS * HIDDEN * kv_bits("none") / 8
    memory = 2e9
    sizing = cache_sizing(config, "none", memory, 16, 0.9,
                          System(acc, tp * pp, tp, pp, 1, Link()))
    assert sizing.weight_bytes == pytest.approx(weights)
    assert sizing.blocks == int((memory * 0.9 - weights) // (16 * per_token))
    assert sizing.blocks > cache_sizing(config, "none", memory, 16, 0.9).blocks


def kv_bits(scheme):
    from tenet_byoc.quantization import get_scheme

    return get_scheme(scheme).kv_bits


@pytest.mark.parametrize("extra, message", [
    (["--tp", "5"], "--tp 5"),
    (["--tp", "2", "--chips", "3"], "--chips 3 must equal --tp 2 x --pp 1 = 2"),
    (["--pp", "13"], "--pp 13"),
    (["--disaggregate", "1:5"], "the decode pool's 5 chips"),
    (["--disaggregate", "2"], "expected P:D"),
    (["--disaggregate", "1:1", "--tp", "2"], "exclude each other"),
])
def test_serve_command_refuses_bad_chips(tmp_path, capsys, extra, message):
    from tenet_byoc_cli import main

    with pytest.raises(SystemExit) as exc:
        main(["serve", "--model", "gpt2", "--memory-gb", "1", "--rate", "1", "--requests",
              "2", "--prompt-len", "4", "--output-len", "2", "--out", str(tmp_path / "o"),
              "--no-progress", *extra])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_serve_command_disaggregated(tmp_path):
    # Wiring: each request's first token comes from the prefill pool alone (a one-token
    # run of the same arrivals on one chip), its finish no earlier than the transfer of
    # its 24-token prompt (24 x 36,864 bytes over 100 GB/s, 1 us) and one decode step.
    import csv
    import json

    from tenet_byoc_cli import main
    from tenet_byoc.serving import poisson_trace
    from tenet_byoc.serving.requests import FixedLengths

    out = tmp_path / "o"
    assert main(["serve", "--model", "gpt2", "--accelerator", "os16", "--rate", "20",
                 "--requests", "30", "--prompt-len", "24", "--output-len", "4",
                 "--memory-gb", "1", "--disaggregate", "1:1", "--out", str(out),
                 "--no-progress"]) == 0
    rows = list(csv.DictReader(open(out / "requests.csv", newline="")))
    trace = [TraceRequest(r.arrival_s, 24, 1)
             for r in poisson_trace(20.0, 30, FixedLengths(24, 4), 0)]
    alone = simulate(trace, model_step_cost("gpt2", "none", "os16"))
    first = [float(r["first_token_s"]) for r in rows]
    assert first == pytest.approx(list(alone.finish_s), rel=1e-8)  # 9 digits in the CSV
    transfer = 24 * 36864 / 100e9 + 1e-6
    assert all(float(r["finish_s"]) > float(r["first_token_s"]) + transfer for r in rows)
    assert json.loads((out / "summary.json").read_text())["chips"]["disaggregate"] == "1:1"


def test_preset_memory_defaults_are_the_data_sheets():
    from tenet_byoc.serving.study import memory_bytes_of

    assert memory_bytes_of(resolve("h100_sxm")) == 80e9  # NVIDIA H100 SXM: 80 GB
    assert memory_bytes_of(resolve("h200")) == 141e9  # NVIDIA H200: 141 GB
    # the A100 of the preset's 2,039 GB/s is the SXM4 80 GB part (the 40 GB one has 1,555),
    # by its name too (serving and the accelerator read one table)
    assert memory_bytes_of(resolve("a100")) == memory_bytes_of("a100") == 80e9
    assert memory_bytes_of(resolve("os16")) is None  # an abstract design states none
