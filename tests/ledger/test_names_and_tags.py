"""Step names and phase tags as the ledger reports them."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

import tenet_byoc
from ledger_testing import gemm_ledger
from relax_testing import matmul_module


def test_phase_tags_round_trip():
    vm = relax.VirtualMachine(tenet_byoc.build(matmul_module((2, 4), (4, 3))), tvm.cpu())
    args = [tvm.runtime.tensor(np.ones(s, "float32")) for s in [(2, 4), (4, 3)]]
    phases = ["prefill", 'quote " and \\ backslash', "new\nline\ttab", "decode"]
    for phase in phases:
        tenet_byoc.set_phase(vm, phase)
        vm["main"](*args)
    assert [e.phase for e in gemm_ledger(vm)] == phases


def test_layer_names_come_from_weight_names():
    """Weights passed by name name their layers; repeated blocks share a function, so the
    block index is dropped; attention steps keep their binding name."""
    from tenet_byoc.models import gpt2

    cfg = gpt2.GPT2Config.preset("tiny")
    runner = gpt2.GPT2Runner(cfg, gpt2.random_params(cfg), build=tenet_byoc.build)
    tenet_byoc.set_phase(runner.vm, "prefill")
    _, cache = runner.prefill([1, 2, 3])
    tenet_byoc.set_phase(runner.vm, "decode")
    runner.decode(4, cache)
    entries = gemm_ledger(runner.vm).entries
    per_block = ["attn.c_attn", "output", "output", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"]
    per_phase = per_block * cfg.n_layer + ["wte"]
    assert [e.name for e in entries] == per_phase * 2
    # Decode's attention sees the 3 cached tokens plus its own.
    assert [e.phase for e in entries] == ["prefill"] * len(per_phase) + ["decode"] * len(per_phase)
    qk = [e for e in entries if e.phase == "decode" and e.name == "output" and e.k == cfg.head_dim]
    assert {(e.batch, e.m, e.n) for e in qk} == {(cfg.n_head, 1, 4)}
