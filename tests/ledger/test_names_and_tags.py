"""Step names and phase tags as the ledger reports them."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

import tenet_byoc
from relax_testing import matmul_module


def test_phase_tags_round_trip():
    vm = relax.VirtualMachine(tenet_byoc.build(matmul_module((2, 4), (4, 3))), tvm.cpu())
    args = [tvm.runtime.tensor(np.ones(s, "float32")) for s in [(2, 4), (4, 3)]]
    phases = ["prefill", 'quote " and \\ backslash', "new\nline\ttab", "decode"]
    for phase in phases:
        tenet_byoc.set_phase(vm, phase)
        vm["main"](*args)
    assert [e.phase for e in tenet_byoc.ledger(vm)] == phases


def test_layer_names_come_from_weight_names():
    """Weights passed by name name their layers; repeated blocks share a function, so the
    block index is dropped; attention steps keep their binding name."""
    from tenet_byoc.models import gpt2

    cfg = gpt2.GPT2Config.preset("tiny")
    runner = gpt2.GPT2Runner(cfg, gpt2.random_params(cfg), build=tenet_byoc.build)
    runner.prefill([1, 2, 3])
    names = [e.name for e in tenet_byoc.ledger(runner.vm)]
    per_block = ["attn.c_attn", "output", "output", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"]
    assert names == per_block * cfg.n_layer + ["wte"]
