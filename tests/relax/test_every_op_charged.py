"""Nothing free by accident: every operator of GPT-2, a Llama checkpoint and the MLP is charged.

The reference is the model's own structure: each built module's remaining bindings are
walked one by one, and each must be offloaded (a tenet GEMM), charged to the vector unit by
the function's charge call, or in the one table of free operators (``vector_plan.FREE``)
with its reason; the counts of charged kinds are those the architecture has (two norms per
layer and a final one, a softmax per layer, ...). A run's ledger then holds exactly one
vector entry per charged operator and per fused epilogue.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
from llama_testing import TINY_LLAMA
from tvm import relax

import tenet_byoc
from tenet_byoc.ledger import step_cycles
from tenet_byoc.models.gpt2 import GPT2Config, GPT2Runner, export_gpt2, random_params
from tenet_byoc.models.llama import LlamaConfig, export_llama
from tenet_byoc.models.llama import random_params as llama_params
from tenet_byoc.models.mlp import mlp_module, random_mlp_params
from tenet_byoc.vector_plan import FREE, PLAN_ATTR, SYMBOL_PREFIX, vector_plan

GPT2 = GPT2Config.preset("tiny")
LLAMA = LlamaConfig.from_hf_dict(TINY_LLAMA)


def modules():
    # batched=True: also prefill_batch / decode_batch (per-sequence positions and mask)
    yield "gpt2", export_gpt2(GPT2, random_params(GPT2), batched=True)
    yield "llama", export_llama(LLAMA, llama_params(LLAMA), batched=True)
    yield "mlp", mlp_module(random_mlp_params())


def walk(mod):
    """Each caller function's bindings, classified by the plan (or failing the test)."""
    plans = vector_plan(mod)
    tenet = {gv for gv, f in mod.functions.items()
             if isinstance(f, relax.Function) and f.attrs and "Codegen" in f.attrs}
    found = {}
    for name, plan in plans.items():
        assert plan.unknown == [], (name, plan.unknown)
        charged = {o.name for o in plan.ops}
        assert not charged & set(plan.free)
        for block in mod[name].body.blocks:
            for b in block.bindings:
                v = b.value
                if isinstance(v, relax.Call) and (
                        v.op in tenet or isinstance(v.op, relax.ExternFunc)):
                    if isinstance(v.op, relax.ExternFunc):
                        assert str(v.op.global_symbol) == SYMBOL_PREFIX + name
                    continue
                label = str(b.var.name)
                assert label in charged or plan.free.get(label) in FREE, (name, label, v)
        found[name] = plan
    return found


@pytest.mark.parametrize("scheme", ["none", "w8a8_per_channel_per_token", "w4a16_group128",
                                    "w8a8_per_channel_per_token+kv4/group8"])
def test_every_operator_is_offloaded_charged_or_free_for_a_reason(scheme):
    for model, mod in modules():
        part = tenet_byoc.partition_for_tenet(tenet_byoc.quantize(mod, scheme), "os16")
        plans = walk(part)
        for fn, plan in plans.items():
            kinds = collections.Counter(o.kind for o in plan.ops)
            batched = fn.endswith("_batch")
            # A batch's prefill computes positions (slot - pad, clamped at 0: an add and a
            # relu); its one per-sequence mask, built at the first layer, is added to every
            # layer's scores, decode included.
            positions = int(fn == "prefill_batch")
            assert kinds["relu"] == positions
            if model == "gpt2":
                n = GPT2.n_layer
                assert kinds["layer_norm"] == 2 * n + 1
                assert kinds["softmax"] == kinds["kv_write"] // 2 == n
                assert kinds["take"] == (2 if batched else 1)  # a batch gathers position rows
                assert kinds["mask"] == (1 if batched else n if fn == "prefill" else 0)
                # embedding + position, two residuals a layer, the masked scores
                assert kinds["add"] == 1 + 2 * n + (n if fn != "decode" else 0) + positions
                assert kinds["multiply"] == n  # the attention scale
            elif model == "llama":
                n = LLAMA.num_hidden_layers
                assert kinds["rms_norm"] == 2 * n + 1
                assert kinds["rotary"] == 2 * n and kinds["silu"] == n
                assert kinds["multiply"] == 2 * n  # the attention scale and SwiGLU's product
                assert kinds["kv_write"] == 2 * n
                if batched:
                    assert kinds["mask"] == 1 and kinds["take"] == 1
                    assert kinds["add"] == 3 * n + positions  # residuals, masked scores
            linears = {"gpt2": 4 * GPT2.n_layer + 1, "llama": 7 * LLAMA.num_hidden_layers + 1,
                       "mlp": 2}[model]
            # an int cache: each layer's new keys and values quantized (at 4 bits), once each
            caches = kinds["kv_write"] if "+kv" in scheme else 0
            assert kinds["quantize"] == (0 if scheme == "none" else linears + caches)
            if scheme != "none":
                assert {o.bits_out for o in plan.ops if o.kind == "quantize"} == {
                    8 if scheme.startswith("w8a8") else 16} | ({4} if caches else set())


def test_a_run_charges_one_vector_entry_per_planned_operator_and_epilogue():
    scheme = "w8a8_per_channel_per_token"
    part = tenet_byoc.partition_for_tenet(tenet_byoc.quantize(
        export_gpt2(GPT2, random_params(GPT2)), scheme), "os16")
    plans = vector_plan(part)
    runner = GPT2Runner(GPT2, random_params(GPT2), bind_params=True, build=lambda m: tenet_byoc.build(
        tenet_byoc.quantize(m, scheme), accelerator="os16"))
    tenet_byoc.set_phase(runner.vm, "prefill")
    _, cache = runner.prefill([3, 1, 4, 1, 5])
    tenet_byoc.set_phase(runner.vm, "decode")
    runner.decode(9, cache)
    book = tenet_byoc.ledger(runner.vm)
    for phase in ("prefill", "decode"):
        entries = [e for e in book.entries if e.phase == phase]
        vector = [e for e in entries if e.unit == "vector"]  # fused: a vector entry's own
        planned = [e for e in vector if not e.fused]
        assert [e.op for e in planned] == [o.kind for o in plans[phase].ops]
        assert {e.scheme for e in planned if e.op == "quantize"} == {scheme}
        # every linear layer but the head has a bias; c_fc also its GELU
        fused = collections.Counter(e.op for e in vector if e.fused)
        assert fused == {"add": 4 * GPT2.n_layer, "gelu_tanh": GPT2.n_layer}
    # The prefill's scores: [1, heads, 5, 5] softmax, charged by the formula's shape.
    softmax = next(e for e in book.entries if e.op == "softmax" and e.phase == "prefill")
    assert (softmax.m, softmax.n, softmax.elements) == (GPT2.n_head * 5, 5, GPT2.n_head * 25)
    assert book.group_by("unit").keys() == {"array", "vector"}


def test_the_descriptor_carries_the_plan_and_outputs_stay_tvms():
    mod = mlp_module(random_mlp_params())
    part = tenet_byoc.partition_for_tenet(tenet_byoc.quantize(mod, "w4a16_group128"), "os16")
    tenet = [f for f in part.functions.values() if isinstance(f, relax.Function)
             and f.attrs and "Codegen" in f.attrs]
    assert all(PLAN_ATTR in f.attrs for f in tenet)
    x = np.random.default_rng(0).standard_normal((3, 784)).astype(np.float32)
    import tvm

    outs = []
    for offload in (True, False):
        ex = tenet_byoc.build(tenet_byoc.quantize(mod, "w4a16_group128"), accelerator="os16",
                              offload=offload)
        outs.append(relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy())
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=1e-5)


def test_step_cycles_hides_fused_epilogues_only_under_pipelined():
    book = tenet_byoc.estimate("gpt2", "none", "os16", prompt_len=4, decode_steps=0)
    e = book.entries
    gemm, bias, gelu, ln = (next(x for x in e if x.unit == "array"),
                            next(x for x in e if x.unit == "vector" and x.fused and x.op == "add"),
                            next(x for x in e if x.op == "gelu_tanh"),
                            next(x for x in e if x.op == "layer_norm"))
    g = gemm._replace(cycles=100)
    b = bias._replace(cycles=30, schedule="pipelined")
    a = gelu._replace(cycles=90, schedule="pipelined")
    n = ln._replace(cycles=7, schedule="pipelined")
    # pipelined: max(100, 30 + 90) for the GEMM and its epilogues, the norm adds
    assert step_cycles([g, b, a, n]) == 120 + 7
    assert step_cycles([g, b, n]) == 100 + 7
    serial = [x._replace(schedule="serial") for x in (b, a, n)]
    assert step_cycles([g, *serial]) == 100 + 30 + 90 + 7
