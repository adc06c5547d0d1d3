"""Phase tags reach the ledger unchanged, whatever characters they hold."""

from __future__ import annotations

import numpy as np
import tvm
from relax_testing import matmul_module
from tvm import relax

import tenet_byoc


def test_phase_tags_round_trip():
    vm = relax.VirtualMachine(tenet_byoc.build(matmul_module((2, 4), (4, 3))), tvm.cpu())
    args = [tvm.runtime.tensor(np.ones(s, "float32")) for s in [(2, 4), (4, 3)]]
    phases = ["prefill", 'quote " and \\ backslash', "new\nline\ttab", "decode"]
    for phase in phases:
        tenet_byoc.set_phase(vm, phase)
        vm["main"](*args)
    assert [e.phase for e in tenet_byoc.ledger(vm)] == phases
