"""estimate() of mixture-of-experts models by formula: the weights a decode step reads.

The weights the plan's GEMMs read are checked against the closed forms of ``models.moe``
(``param_counts``, ``touched_experts``); the estimate against a real run's ledger, entry
for entry, is ``tests/models/test_moe_hf.py`` (tiny checkpoints made by transformers).
"""

from __future__ import annotations


import numpy as np
import pytest

import tenet_byoc
from tenet_byoc.models.configs import resolve_config
from tenet_byoc.models.moe import param_counts, touched_experts
from tenet_byoc.plan import Step, StepSequence, plan

def _weights_read(model: str, batch: int) -> float:
    # Elements of the weights a decode step's GEMMs read (N x K per product: the linear
    # layers, and MLA's per-head slices of kv_b_proj, absorbed), not attention over the
    # cache; the embedding's rows aside (a lookup, not a GEMM).
    p = plan(model, Step.decode(100, batch))
    return sum(c.call.batch * c.call.n * c.call.k for c in p.calls
               if c.unit == "array" and not c.name.endswith(
                   ("attn.qk", "attn.pv", "qk_latent", "qk_rope", "pv_latent")))


@pytest.mark.parametrize("model", ["mixtral-8x7b", "deepseek-v3", "qwen3-30b-a3b"])
def test_decode_reads_the_active_experts_at_batch_1_and_nearly_all_at_64(model):
    config = resolve_config(model)
    a, e, d = config.attention, config.experts, config.hidden_size
    total, active = param_counts(config)
    embedding = a.vocab_size * d
    layers, moe = config.num_hidden_layers, len(e.moe_layers)
    # Norm weights are read by the vector unit, not by a GEMM: two per layer and the final
    # one (and MLA's two latent norms, Qwen3's QK norms).
    norm = d * (2 * layers + 1)
    if config.latent is not None:
        norm += layers * (config.latent.kv_lora_rank + (config.latent.q_lora_rank or 0))
    if a.qk_norm:  # Qwen3's per-head query and key norms
        norm += layers * 2 * a.dim_per_head
    bias = moe * e.num_experts * e.router_bias
    expert = 3 * d * e.intermediate_size
    one = _weights_read(model, 1)
    assert one == active - embedding - norm - bias
    # Batch 64: E (1 - (1 - k/E)^64) distinct experts per layer (rounded), each read once.
    many = _weights_read(model, 64)
    touched = round(touched_experts(e.num_experts, e.experts_per_token, 64))
    assert many == one + moe * (touched - e.experts_per_token) * expert
    if e.num_experts <= 8:
        assert many == total - embedding - norm - bias  # Mixtral: every expert
    assert many / (total - embedding) > 0.85 * (one / (active - embedding))


def test_expected_routing_spreads_rows_over_the_expected_experts():
    from tenet_byoc.models.moe import expected_routing

    assert expected_routing(8, 2, 1) == [1, 1, 0, 0, 0, 0, 0, 0]
    # 3 tokens x 2: 8 (1 - (3/4)^3) = 4.625 -> 5 experts, 6 rows
    assert expected_routing(8, 2, 3) == [2, 1, 1, 1, 1, 0, 0, 0]
    counts = expected_routing(256, 8, 64)
    assert sum(counts) == 64 * 8 and sum(c > 0 for c in counts) == round(
        256 * (1 - (1 - 8 / 256) ** 64))
    assert np.ptp([c for c in counts if c]) <= 1


def test_moe_routing_errors_name_the_problem():
    with pytest.raises(ValueError, match="tokens_per_expert must give 32 layers of 8"):
        plan("mixtral-8x7b", Step.decode(10), routing=[[1, 1] + [0] * 6])
    with pytest.raises(ValueError, match="routing gives 1 steps"):
        tenet_byoc.estimate("mixtral-8x7b", prompt_len=4, decode_steps=1,
                            routing=[[[1] * 8] * 32])
    with pytest.raises(ValueError, match="has no experts"):
        plan("llama-3-8b", Step.decode(10), routing=[[1]])
    with pytest.raises(ValueError, match="several kinds of sequence"):
        from tenet_byoc.plan import StepSequence
        plan("mixtral-8x7b", Step([StepSequence(4), StepSequence(1, 9)]))


def _tiny_mixtral():
    from moe_testing import TINY

    from tenet_byoc.models.moe import MoEConfig

    return MoEConfig.from_hf_dict({**TINY, "model_type": "mixtral"}, name="tiny-mixtral")


def test_expert_parallel_by_hand():
    from tenet_byoc.compose import compose
    from tenet_byoc.estimate import Charges
    from tenet_byoc.accelerators import resolve
    from tenet_byoc.plan import LinkCall, expert_parallel
    from tenet_byoc.system import Link, collective_seconds

    config = _tiny_mixtral()  # d = 32, 2 layers, 4 experts of width 40, k = 2
    # Decode, 4 sequences on 2 chips; a skewed routing per layer: experts 0 and 2 live on
    # chip 0 (4 + 1 and 3 + 0 rows: chip 0 takes 5, chip 1 takes 3 in layer 0).
    routing = [[4, 3, 1, 0], [1, 2, 2, 3]]
    p = expert_parallel(config, Step.decode(10, 4), 2, routing=routing)
    assert p.tensor_parallel == 2
    experts = [(c.name, c.call.m) for c in p.calls
               if c.unit == "array" and ".experts." in c.name and c.name.endswith("gate_proj")]
    # Chip 0: 5 + 3 = 8 rows over both layers; chip 1: 3 + 5 = 8: a tie goes to chip 0.
    assert experts == [("layers.0.experts.0.gate_proj", 4), ("layers.0.experts.2.gate_proj", 1),
                       ("layers.1.experts.0.gate_proj", 1), ("layers.1.experts.2.gate_proj", 2)]
    # The rest of the layer is each chip's 2 sequences: q_proj of 2 rows, 2 x 2 kv heads.
    q = [c.call for c in p.calls if c.name.endswith("q_proj")]
    assert [(g.m, g.n, g.k) for g in q] == [(2, 32, 32)] * 2
    links = [(c.name, c.call) for c in p.calls if c.unit == "link"]
    # Each chip sends its 2 tokens x 2 experts x 32 values of 4 bytes, and gets them back.
    size = 2 * 2 * 32 * 4
    assert links == [(f"layers.{i}.experts.{w}", LinkCall("all_to_all", size, 2))
                     for i in range(2) for w in ("dispatch", "gather")]
    # Placed between the router's top-k and the combine.
    names = [c.name for c in p.calls]
    assert names.index("layers.0.router.top_k") + 1 == names.index("layers.0.experts.dispatch")
    assert names.index("layers.0.experts.gather") + 1 == names.index("layers.0.experts.scale")
    # Charged on a switch: the all-to-all's time is (t - 1) / t x bytes / bandwidth + latency.
    link = Link(bandwidth_gbps=50.0, latency_us=2.0, topology="switch")
    assert collective_seconds("all_to_all", size, 2, link) == pytest.approx(
        size / 2 / 50e9 + 2e-6)
    acc = resolve("os16")
    charges = Charges(acc, link)
    cost = compose(p, charges.cost, charges.schedule, acc.hardware.clock_ghz)
    alone = compose(expert_parallel(config, Step.decode(10, 4), 1, routing=routing),
                    charges.cost, charges.schedule, acc.hardware.clock_ghz)
    assert cost.seconds > 4 * (size / 2 / 50e9 + 2e-6)  # the four all-to-alls at least
    assert cost.seconds - 4 * (size / 2 / 50e9 + 2e-6) < alone.seconds  # the rest is less


def test_expert_parallel_as_a_system_option():
    # System(acc, chips=2, expert_parallel=2): estimate charges the plan of the hand count
    # above (tenet_byoc.plan.expert_parallel), and its step's time composes that plan.
    from tenet_byoc.compose import compose
    from tenet_byoc.estimate import Charges
    from tenet_byoc.accelerators import resolve
    from tenet_byoc.plan import expert_parallel
    from tenet_byoc.system import Link, System

    config, routing = _tiny_mixtral(), [[4, 3, 1, 0], [1, 2, 2, 3]]
    acc, link = resolve("os16"), Link(bandwidth_gbps=50.0, latency_us=2.0, topology="switch")
    system = System(acc, chips=2, link=link, expert_parallel=2)
    est = tenet_byoc.estimate(config, "none", acc, prompt_len=0, context_len=10,
                              decode_steps=1, batch=4, system=system, routing=[routing])
    # Each chip holds 2 tokens x 2 experts x 32 values of 4 bytes and sends the half bound
    # for the other chip's experts: 256 bytes over the link, both ways, per layer.
    # every chip is charged as the busiest: two copies of chip 0's entries
    assert sorted(e.chip for e in est.entries) == [0] * (len(est.entries) // 2) + [1] * (
        len(est.entries) // 2)
    entries = [e for e in est.entries if e.chip == 0]
    links = [(e.name, e.op, e.link_bytes) for e in entries if e.unit == "link"]
    assert links == [(f"layers.{i}.experts.{w}", "all_to_all", 2 * 2 * 32 * 4 / 2)
                     for i in range(2) for w in ("dispatch", "gather")]
    # chip 0 holds experts 0 and 2: their rows, 4 + 1 in layer 0 and 1 + 2 in layer 1
    rows = [e.m for e in entries if e.name.endswith(("experts.0.gate_proj",
                                                     "experts.2.gate_proj"))]
    assert rows == [4, 1, 1, 2]
    assert not [e for e in entries if ".experts.1." in e.name or ".experts.3." in e.name]
    charges = Charges(acc, link)
    want = compose(expert_parallel(config, Step.decode(10, 4), 2, routing=routing),
                   charges.cost, charges.schedule, acc.hardware.clock_ghz)
    assert est.latency_s("decode") == pytest.approx(want.seconds)
    assert System.from_json(system.to_json()) == system


def test_expert_parallel_refusals():
    from tenet_byoc.plan import expert_parallel

    with pytest.raises(ValueError, match="chips=3 must divide tiny-mixtral's 4 routed experts"):
        expert_parallel(_tiny_mixtral(), Step.decode(10, 6), 3)
    with pytest.raises(ValueError, match="has no experts"):
        expert_parallel("llama-3-8b", Step.decode(10, 2), 2)
    from tenet_byoc.system import System

    with pytest.raises(ValueError, match="expert_parallel=2 is not combined with "
                                         "tensor_parallel=2"):
        System("os16", chips=4, tensor_parallel=2, expert_parallel=2)
    with pytest.raises(ValueError, match="must equal tensor_parallel x pipeline_parallel x "
                                         "expert_parallel = 1 x 1 x 2 = 2"):
        System("os16", chips=4, expert_parallel=2)
    with pytest.raises(ValueError, match="has no experts to spread"):
        tenet_byoc.estimate("llama-3-8b", system=System("os16", chips=2, expert_parallel=2),
                            prompt_len=4, batch=2)


@pytest.mark.slow  # a build (~15 s)
def test_qk_norm_of_a_dense_llama_is_charged_as_its_run_charges_it():
    # Qwen3's per-head query and key RMSNorm in the dense decoder (the runner's own
    # LlamaAttention): the estimate's calls equal the run's ledger, entry for entry.
    import dataclasses as dc

    from llama_testing import TINY_LLAMA
    from test_estimate_vs_run import assert_same_charges, real_ledger

    import tenet_byoc
    from tenet_byoc.models.llama import LlamaConfig, LlamaRunner, random_params

    config = dc.replace(LlamaConfig.from_hf_dict(TINY_LLAMA, name="tiny-qk-norm"),
                        qk_norm=True)
    runner = LlamaRunner(config, random_params(config, seed=0), bind_params=True,
                         build=lambda mod: tenet_byoc.build(mod, accelerator="os16"))
    real = real_ledger(runner, [5, 17, 0, 88], 4, 1)
    est = tenet_byoc.estimate(config, "none", "os16", prompt_len=4, decode_steps=1)
    assert_same_charges(real, est)
    norms = [e for e in est.entries if e.name.endswith(("q_norm", "k_norm"))]
    assert len(norms) == 2 * 2 * config.num_hidden_layers  # both phases


def test_pipeline_stages_split_a_mixture_of_experts_by_layer():
    from tenet_byoc.plan import LinkCall, Sharding

    config = resolve_config("mixtral-8x7b")  # 32 layers: 16 a stage
    p = plan(config, Step.decode(10, 2), "none", Sharding(1, 2, 1))
    stages = {c.layer: c.stage for c in p.calls if c.layer is not None}
    assert [stages[i] for i in (0, 15, 16, 31)] == [0, 0, 1, 1]
    assert {c.stage for c in p.calls if c.name.endswith("experts.0.gate_proj")} == {0, 1}
    assert [c.stage for c in p.calls if c.name in ("embed_tokens", "lm_head")] == [0, 1]
    # One hand-over: 2 tokens x d = 4096 at float32.
    assert [c.call for c in p.calls if c.unit == "link"] == [LinkCall("p2p", 2 * 4096 * 4, 2)]


def test_cli_ep_flag(tmp_path, capsys):
    import csv
    import json

    from tenet_byoc_cli import main
    from tenet_byoc.system import System

    config = tmp_path / "config.json"
    from moe_testing import TINY

    config.write_text(json.dumps({**TINY, "model_type": "mixtral"}))
    out = tmp_path / "out"
    assert main(["estimate", "--model", str(config), "--prompt-len", "4", "--batch", "2",
                 "--decode-steps", "1", "--ep", "2", "--out", str(out)]) == 0
    assert "2 chips (EP 2" in capsys.readouterr().out
    rows = {r["phase"]: r for r in csv.DictReader((out / "estimate.csv").open())}
    book = tenet_byoc.estimate(str(config), prompt_len=4, decode_steps=1, batch=2,
                               system=System("os16", chips=2, expert_parallel=2))
    assert float(rows["decode"]["latency_ms"]) == pytest.approx(
        book.latency_s("decode") * 1e3, rel=1e-12)
    try:
        code = main(["estimate", "--model", "mixtral-8x7b", "--ep", "3", "--tp", "2",
                     "--chips", "4", "--batch", "4"])
    except SystemExit as exc:
        code = exc.code
    assert code != 0
    err = capsys.readouterr().err
    for problem in ("--chips 4 must equal --tp 2 x --pp 1 x --ep 3 = 6",
                    "--ep 3 is not combined with --tp", "--ep 3 must divide mixtral-8x7b's 8",
                    "--ep 3 must divide --batch 4", "--tp 2: mixtral-8x7b's experts are not"):
        assert problem in err, problem


def test_a_unary_epilogue_is_charged_as_the_dense_plan_charges_it(monkeypatch):
    # No built-in mixture model fuses an activation behind a GEMM (only bias adds), so one is
    # given: the plan must charge a GELU behind the router as the runtime's EpilogueCall
    # does (no second operand; before, a width's worth, which the cost model refuses), and a
    # bias add with one value per column, as the dense plan charges GPT-2's.
    import tenet_byoc.models.moe as moe

    real = moe.moe_call_groups

    def with_gelu(*args, **kwargs):
        groups = real(*args, **kwargs)
        for g in groups:
            for name in g.epilogues:
                if name.endswith("router"):
                    g.epilogues[name] = ["add", "gelu_tanh"]
        return groups

    monkeypatch.setattr(moe, "moe_call_groups", with_gelu)
    p = plan("gpt-oss-20b", Step.decode(10, 2))
    router = next(c for c in p.calls if c.name.endswith("router"))
    add, gelu = (c.call for c in p.calls if c.fused_with == router.name)
    rows, width = 2, router.call.n  # a decode step of two sequences: two rows
    assert (gelu.op, list(gelu.shape), gelu.operand_elements) == ("gelu_tanh", [rows, width], 0)
    assert (add.op, list(add.shape), add.operand_elements) == ("add", [rows, width], width)
    dense = plan("gpt2", Step.decode(10, 2))
    fc = next(c.call for c in dense.calls if c.name == "h.0.mlp.c_fc.gelu_tanh")
    assert fc.operand_elements == gelu.operand_elements


def _tiny(family: str):
    from moe_testing import FAMILIES

    from tenet_byoc.models.moe import MoEConfig

    values = {**FAMILIES[family][1], "model_type": family}
    return MoEConfig.from_hf_dict(values, name=f"tiny-{family}")


#: The calls of a chunk that widen to its cached keys (the rest stay over its new rows).
_OVER_KEYS = ("attn.qk", "attn.pv", "self_attn.scale", "self_attn.mask",
              "self_attn.window_mask", "self_attn.masked", "self_attn.softmax", "kv_b_proj")


def _by_name(p, layer: int) -> dict:
    return {c.name.removeprefix(f"layers.{layer}."): c.call for c in p.calls
            if c.name.startswith(f"layers.{layer}.") and c.name.endswith(_OVER_KEYS)}


def _gemm(c) -> tuple[int, int, int, int]:
    return c.batch, c.m, c.n, c.k


@pytest.mark.parametrize("family", ["mixtral", "deepseek_v3", "gpt_oss"])
def test_a_moe_chunk_attends_to_its_cached_keys_by_hand(family):
    # 6 new rows after 20 cached tokens (moe_testing's tiny models: 4 query heads; Mixtral and
    # gpt-oss 2 KV heads of 8, gpt-oss's layers 0 and 2 with a window of 4 (a row sees the 3
    # keys before it), each head a sink column; DeepSeek's latent attention 4 heads of 8 + 4
    # (q, k) and 5 (v) over a rank-12 latent, expanded by kv_b_proj for every key in a prefill).
    config = _tiny(family)
    chunk = plan(config, Step([StepSequence(6, 20)]))
    for layer in range(config.num_hidden_layers):
        calls = _by_name(chunk, layer)
        if family == "deepseek_v3":
            keys = 20 + 6
            assert _gemm(calls["self_attn.kv_b_proj"]) == (1, keys, 4 * (8 + 5), 12)
            assert _gemm(calls["attn.qk"]) == (4, 6, keys, 8 + 4)
            assert _gemm(calls["attn.pv"]) == (4, 6, 5, keys)
            scores = (1, 4, 6, keys)
        else:
            keys = (min(20, 4 - 1) if family == "gpt_oss" and layer != 1 else 20) + 6
            assert _gemm(calls["attn.qk"]) == (2, 2 * 6, keys, 8)
            assert _gemm(calls["attn.pv"]) == (2, 2 * 6, 8, keys)
            scores = (1, 2, 2 * 6, keys)
            assert tuple(calls["self_attn.masked"].shape) == (1, 2, 2, 6, keys)
        assert tuple(calls["self_attn.scale"].shape) == scores
        sinks = 1 if family == "gpt_oss" else 0
        assert tuple(calls["self_attn.softmax"].shape) == (*scores[:-1], keys + sinks)
        assert tuple(calls["self_attn.mask"].shape) == (6, keys)
        assert calls["self_attn.masked"].operand_elements == 6 * keys
        assert ("self_attn.window_mask" in calls) == (keys == 3 + 6)
    # Everything else is the 6-token prefill's, call for call.
    prefill = plan(config, Step.prefill(6))
    assert [c.key for c in chunk.calls if not c.name.endswith(_OVER_KEYS)] == [
        c.key for c in prefill.calls if not c.name.endswith(_OVER_KEYS)]


@pytest.mark.parametrize("window", [None, 8])
def test_a_moe_chunks_attention_is_a_dense_chunks(window):
    # The tiny Mixtral's attention (a LlamaConfig of the same heads, head width and window)
    # planned as a dense model: the same chunk charges the same attention calls.
    import dataclasses

    config = _tiny("mixtral")
    config = dataclasses.replace(config, attention=dataclasses.replace(
        config.attention, sliding_window=window))
    step = Step([StepSequence(6, 20)])
    moe, dense = plan(config, step), plan(config.attention, step)
    for layer in range(2):
        calls = _by_name(moe, layer)
        assert calls == _by_name(dense, layer)
        assert calls["attn.qk"].n == (min(20, window - 1 if window else 20) + 6)


def test_a_moe_chunks_head_runs_over_the_rows_it_samples():
    # Two 6-token chunks: the head over all 12 rows, the last of each (2) or none.
    config = _tiny("mixtral")
    for logits, rows in ((True, 12), ("last", 2), (False, None)):
        p = plan(config, Step([(StepSequence(6, 20, logits=logits), 2)]))
        head = [(c.call.m, c.call.n, c.call.k) for c in p.calls if c.name.startswith("lm_head")]
        assert head == ([] if rows is None else [(rows, 61, 32)])


def test_a_bad_chunk_context_is_refused_by_name():
    from tenet_byoc.models.moe import moe_call_groups

    config = _tiny("mixtral")  # 64 positions
    for phase, context in (("prefill", -1), ("prefill", 61), ("decode", 5), ("prefill", 2.0)):
        with pytest.raises(ValueError, match=f"context={context!r} must be an integer"):
            moe_call_groups(config, 4, phase, context=context)
    assert moe_call_groups(config, 4, "prefill", context=60)  # 64 tokens: the model's all
    with pytest.raises(ValueError, match="logit_rows=5 must be an integer in"):
        moe_call_groups(config, 4, "prefill", logit_rows=5)
