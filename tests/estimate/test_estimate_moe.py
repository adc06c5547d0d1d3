"""estimate() of mixture-of-experts models: against a real run's ledger, and by formula.

The run's reference is the runtime's own ledger of tiny Mixtral, Qwen2-MoE, Qwen3-MoE and
DeepSeek-V3 checkpoints made by transformers; the estimate is given the run's routing
(tokens per expert, per layer, per call) and must charge the same calls, entry for entry,
less the routing work a run does on the host (``plan.HOST_CALLS``), which only an estimate
charges. The formula tests check the weights a decode step reads against the closed forms
of ``models.moe`` (``param_counts``, ``touched_experts``).
"""

from __future__ import annotations

import dataclasses
import importlib.util

import numpy as np
import pytest
from moe_testing import PROMPT, make_moe
from test_estimate_vs_run import assert_same_charges

import tenet_byoc
from tenet_byoc.ledger import Ledger
from tenet_byoc.models import from_pretrained
from tenet_byoc.models.configs import resolve_config
from tenet_byoc.models.moe import param_counts, touched_experts
from tenet_byoc.plan import HOST_CALLS, Step, plan

needs_hf = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("torch", "transformers")),
    reason="torch and transformers are not installed",
)


@pytest.fixture(scope="module", params=["mixtral",
                                        pytest.param("qwen2_moe", marks=pytest.mark.slow),
                                        pytest.param("qwen3_moe", marks=pytest.mark.slow),
                                        pytest.param("deepseek_v3", marks=pytest.mark.slow)])
def moe_run(request, tmp_path_factory):
    """``(checkpoint folder, the run's ledger, its routing)``: a prefill and two decode steps."""
    folder = tmp_path_factory.mktemp(request.param)
    make_moe(request.param).save_pretrained(folder)
    runner = from_pretrained(folder, build=lambda mod: tenet_byoc.build(mod, accelerator="ws16"))
    vm = runner.vm
    tenet_byoc.set_phase(vm, "prefill")
    _, cache = runner.prefill(PROMPT[:-2])
    tenet_byoc.set_phase(vm, "decode")
    for token in PROMPT[-2:]:
        _, cache = runner.decode(token, cache)
    return folder, tenet_byoc.ledger(vm), runner.tokens_per_expert()


@needs_hf
def test_moe_estimate_with_the_runs_routing_equals_its_ledger(moe_run):
    folder, real, routing = moe_run
    est = tenet_byoc.estimate(folder, "none", "ws16", prompt_len=len(PROMPT) - 2,
                              decode_steps=2, routing=routing)
    host = [e for e in est.entries if e.name.endswith(HOST_CALLS)]
    layers = sum(len(step) for step in routing)
    assert len(host) == 4 * layers  # scores, top-k, scale, combine per mixture layer and call
    kept = [e for e in est.entries if not e.name.endswith(HOST_CALLS)]
    ran = Ledger([dataclasses.replace(e, call_index=i) for i, e in enumerate(kept)],
                 est.accelerator, est.dataflow, est.clock_ghz, [])
    assert_same_charges(real, ran)
    # The experts' rows are the run's: another routing charges other GEMMs.
    uniform = tenet_byoc.estimate(folder, "none", "ws16", prompt_len=len(PROMPT) - 2,
                                  decode_steps=2)
    assert [e.m for e in uniform.entries if e.unit == "array"] != [
        e.m for e in est.entries if e.unit == "array"]


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
