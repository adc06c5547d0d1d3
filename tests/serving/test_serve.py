"""The serve command and API: the cost model's steps summed, files consistent with their rows, and input refused with a clear message."""

from __future__ import annotations

import csv
import dataclasses
import json

import numpy as np
import pytest

from tenet_byoc.estimate import estimate_step
from tenet_byoc.plan import Step, StepSequence
from tenet_byoc.serving import SchedulerConfig, TraceRequest, serving_metrics, simulate
from tenet_byoc.serving.cost import SplitStepCost, model_step_cost


def test_unbatched_run_is_estimates_summed():
    # One sequence at a time, all waiting at 0: the run lasts each request's prefill and
    # decode steps as estimate_step composes each whole step (every layer planned), summed;
    # the head over each step's last token (an engine samples from it: logits="last").
    lengths = [(12, 5), (30, 1), (7, 9)]
    trace = [TraceRequest(0.0, p, o) for p, o in lengths]
    cost = model_step_cost("gpt2", "w8a8_per_tensor", "os16", context_granularity=1,
                           token_granularity=1)
    run = simulate(trace, cost, scheduler=SchedulerConfig("orca", max_seqs=1))

    def seconds(step):
        return estimate_step("gpt2", step, "w8a8_per_tensor", "os16", entries=False)[0].seconds

    per_request = [seconds(Step([StepSequence(p, 0, logits="last")])) + sum(seconds(Step.decode(p + i))
                                                  for i in range(o - 1))
                   for p, o in lengths]
    assert run.finish_s == pytest.approx(np.cumsum(per_request), rel=1e-9)
    m = serving_metrics(run)
    assert m.tokens_per_s == pytest.approx(sum(o for _, o in lengths) / sum(per_request))


@pytest.mark.parametrize("step", [
    Step.decode(100, batch=8),
    Step([StepSequence(1, 40)] * 5 + [StepSequence(30, 0)]),
    Step([StepSequence(1, c) for c in range(10, 30)]),
    Step([StepSequence(20, 0), StepSequence(7, 0)]),
    Step([StepSequence(1, 40)] * 3 + [StepSequence(24, 200)]),
    Step([StepSequence(48, 300)]),
], ids=["decode-batch", "decodes+prefill", "decodes-apart", "two-prefills",
        "decodes+chunk", "chunk"])
def test_split_cost_matches_the_whole_step(step):
    # The split cost (a T-token prefill's dense calls + each sequence's attention) against
    # the plan of the whole mixed step, each sequence's logits on its last token: the
    # per-sequence vector calls (mask, positions) and the epilogues of a batched step differ
    # a little; measured <= 0.5%.
    cost = model_step_cost("gpt2", "none", "os16", context_granularity=1, token_granularity=1)
    step = Step([(dataclasses.replace(s, logits="last"), n) for s, n in step.groups])
    whole = estimate_step("gpt2", step, "none", "os16", entries=False)[0].seconds
    assert cost(step) == pytest.approx(whole, rel=0.01)


@pytest.mark.parametrize("kv, row", [("kv8", 768), ("kv4/head", 64), ("kv8/group32", 32)])
def test_kv_quantization_is_charged(kv, row):
    # GPT-2 small: 12 layers, 12 heads of 64. Per layer and new token, the cache's keys and
    # values are written at the cache's width (not float32) and quantized on
    # the vector unit, one row per scale.
    from tenet_byoc import cost_model as cm
    from tenet_byoc.accelerators import resolve

    acc = resolve("os16")
    plain = model_step_cost("gpt2", "w8a8_per_tensor", acc, token_granularity=1)
    quant = model_step_cost("gpt2", f"w8a8_per_tensor+{kv}", acc, token_granularity=1)
    bits = int(kv[2])
    tokens = 24

    def us(call):
        return cm.charge_vector(call, acc).latency_us

    float_write = us(cm.VectorCall("kv_write", [1, 12, tokens, 64], bits_in=32, bits_out=32))
    write = us(cm.VectorCall("kv_write", [1, 12, tokens, 64], bits_in=32, bits_out=bits))
    quantize = us(cm.VectorCall("quantize", [tokens * 768 // row, row], bits_in=32,
                                bits_out=bits))
    # The quantization works token by token (the dense term); each sequence writes its own
    # cache (its attention term).
    assert quant.dense(tokens) - plain.dense(tokens) == pytest.approx(12 * 2 * quantize * 1e-6,
                                                                      rel=1e-9)
    assert quantize > 0 and write < float_write
    # The writes are the attention term's (at the cache's width), the quantization is not.
    from tenet_byoc.plan import Step, plan
    from tenet_byoc.serving.cost import ATTENTION_PARTS

    written = {c.name: c for c in plan("gpt2", Step.prefill(tokens), f"w8a8_per_tensor+{kv}")
               .written if c.unit == "vector" and c.layer == 0}
    for name in ("h.0.attn.k_cache", "h.0.attn.v_cache"):
        assert name.endswith(ATTENTION_PARTS) and written[name].call.bits_out == bits
        assert not (name + ".quantize").endswith(ATTENTION_PARTS)


@pytest.mark.parametrize("kv", ["none", "w8a8_per_tensor+kv8"])
def test_a_windowed_models_dense_term_is_its_unwindowed_twins(kv):
    # A step's dense term is per-token work (weight GEMMs, norms, the KV quantization); a
    # window (W = 8 in every layer of the tiny Llama) changes only each sequence's attention
    # and what its cache keeps (a one-prompt plan of 20 tokens writes its last 8 to the
    # rolling cache; a step's 20 tokens come from many sequences), so the dense term equals
    # the same model's without the window at every step size, also beyond W.
    import dataclasses

    from tenet_byoc.accelerators import resolve
    from tenet_byoc.models.llama import LlamaConfig

    windowed = LlamaConfig.from_hf_dict({
        "model_type": "mistral", "vocab_size": 101, "hidden_size": 64, "intermediate_size": 96,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 32, "rms_norm_eps": 1e-5, "hidden_act": "silu",
        "rope_theta": 1000.0, "sliding_window": 8})
    assert windowed.window == 8
    full = dataclasses.replace(windowed, sliding_window=None)
    acc = resolve("os16")
    w, f = (model_step_cost(c, kv, acc, token_granularity=1) for c in (windowed, full))
    for tokens in (1, 5, 8, 9, 20):
        assert w.dense(tokens) == pytest.approx(f.dense(tokens), rel=1e-12), tokens


def _read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_serve_command_files(tmp_path):
    from tenet_byoc_cli import main

    out = tmp_path / "out"
    code = main(["serve", "--model", "gpt2", "--accelerator", "os16", "--schemes",
                 "none,w8a8_per_tensor+kv8", "--rate", "20", "--requests", "40",
                 "--prompt-len", "24", "--output-len", "6", "--memory-gb", "1",
                 "--ttft-ms", "400", "--tpot-ms", "60", "--out", str(out), "--no-progress"])
    assert code == 0
    rows = _read(out / "requests.csv")
    summary = json.loads((out / "summary.json").read_text())
    assert {r["scheme"] for r in rows} == {"none", "w8a8_per_tensor+kv8"}
    for scheme, entry in summary["schemes"].items():
        mine = [r for r in rows if r["scheme"] == scheme]
        assert len(mine) == 40
        arrival, first, finish = (np.array([float(r[c]) for r in mine])
                                  for c in ("arrival_s", "first_token_s", "finish_s"))
        out_tokens = np.array([int(r["output_tokens"]) for r in mine])
        ttft = 1e3 * (first - arrival)
        tpot = 1e3 * (finish - first) / (out_tokens - 1)
        assert entry["ttft_ms_p90"] == pytest.approx(np.percentile(ttft, 90), rel=1e-6)
        assert entry["tpot_ms_p99"] == pytest.approx(np.percentile(tpot, 99), rel=1e-6)
        span = finish.max() - arrival.min()
        assert entry["tokens_per_s"] == pytest.approx(out_tokens.sum() / span, rel=1e-6)
        good = (ttft <= 400) & (tpot <= 60)
        assert entry["goodput_rps"] == pytest.approx(good.sum() / span, rel=1e-6)
        met = [t for t in entry["rates_tried"] if t["met"]]
        if entry["max_rate"] is not None:
            assert entry["max_rate"] == max(t["rate"] for t in met)
            assert all(t["ttft_ms_p90"] <= 400 and t["tpot_ms_p90"] <= 60 for t in met)
            # Every rate tried above it missed a target.
            assert all(not t["met"] for t in entry["rates_tried"] if t["rate"] > entry["max_rate"])
    assert (out / "serve_latency.png").stat().st_size > 0
    assert (out / "serve_timeline.png").stat().st_size > 0


@pytest.mark.parametrize("extra, message", [
    (["--rate", "1", "--trace", "t.csv"], "--rate and --trace exclude each other"),
    (["--rate", "1", "--prompt-len", "4"], "--prompt-len and --output-len go together"),
    ([], "give --rate R"),
    (["--trace", "{bad}"], "line 3, field output_tokens"),
])
def test_serve_command_refuses(tmp_path, capsys, extra, message):
    from tenet_byoc_cli import main

    bad = tmp_path / "bad.csv"
    bad.write_text("arrival_s,prompt_tokens,output_tokens\n0,4,2\n0.5,4,two\n")
    extra = [str(bad) if a == "{bad}" else a for a in extra]
    with pytest.raises(SystemExit) as exc:
        main(["serve", "--model", "gpt2", "--memory-gb", "1", "--out", str(tmp_path / "o"),
              "--no-progress", *extra])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err



def test_the_head_term_per_step_by_hand():
    # dense(tokens) + head(sequences) + each sequence's attention; the head's rows (one a
    # sequence) padded to the token granularity as a step's tokens are: 3 decodes and a
    # 20-token prompt are 4 rows, charged as 16; 17 sequences as 32.
    cost = SplitStepCost(lambda t: 1000.0 * t, lambda n, c: 0.0, token_granularity=16,
                         head=lambda s: 0.5 * s)
    assert cost.seconds_of([(1, 9)] * 3 + [(20, 0)]) == 1000.0 * 32 + 8.0
    assert cost.seconds_of([(1, 9)] * 17) == 1000.0 * 32 + 16.0
    assert cost.misses == 1 + 2 + 2  # dense 32; head 16, 32; attention (1, 9), (20, 0)
