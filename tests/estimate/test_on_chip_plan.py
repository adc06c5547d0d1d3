"""The plan keeps activations on chip between calls: its flags by the rule, and the DRAM bytes
they leave, counted by hand from GPT-2 small's shapes (768 wide, MLP 3,072, 50,257 tokens,
float32) where they fit the accelerator's on-chip level and where they do not."""

from __future__ import annotations

from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import preset
from tenet_byoc.plan import Step, plan

D, FF, VOCAB = 768, 3072, 50257


def _gemms(step: Step) -> dict[str, object]:
    return {c.name: c.call for c in plan("gpt2", step).calls if c.unit == "array"}


def test_every_activation_stays_but_the_logits():
    calls = _gemms(Step.decode(9))
    assert len(calls) == 12 * 6 + 1
    assert all(c.a_on_chip for c in calls.values())
    assert [n for n, c in calls.items() if not c.c_on_chip] == ["lm_head"]


def test_the_shared_level_holds_what_fits():
    # a100's L2 is 40 MiB (41,943,040 B). 3 prompts of 1,024 tokens: attn.c_proj keeps A and
    # C (3,072 x 768 x 4 B each, 18.9 MB together) there, so only its weight crosses HBM;
    # mlp.c_fc's A and C (3,072 x (768 + 3,072) x 4 B = 47.2 MB) do not fit together and
    # cross HBM as without the flags.
    acc = preset("a100")
    calls = _gemms(Step.prefill(1024, batch=3))
    rows = 3 * 1024
    c_proj = cm.charge(calls["h.0.attn.c_proj"], acc).memory
    assert c_proj.compulsory_dram_bits == D * D * 32
    c_fc = cm.charge(calls["h.0.mlp.c_fc"], acc).memory
    assert c_fc.compulsory_dram_bits == (rows * D + D * FF + rows * FF) * 32


def test_one_core_keeps_them_in_its_buffer():
    # ws128's buffer is 24 MiB. A decode step: the head's A (one row) is never fetched and
    # its logits are written once; c_fc's A and C never leave the buffer.
    acc = preset("ws128")
    calls = _gemms(Step.decode(9))
    head = cm.charge(calls["lm_head"], acc).memory
    assert head.tensors["A"].dram_read_bits == 0
    assert head.dram_write_bits == VOCAB * 32
    c_fc = cm.charge(calls["h.0.mlp.c_fc"], acc).memory
    assert c_fc.tensors["A"].dram_read_bits == 0 and c_fc.dram_write_bits == 0
    assert c_fc.dram_read_bits == D * FF * 32


def test_a_run_keeps_what_its_graph_makes_and_uses():
    # The MLP's main(x): x comes from the host and the logits go back to it. Layer 1 reads x
    # (off chip) and its output feeds layer 2 (kept); layer 2 reads it (kept) and returns its
    # output (off chip). A second call of the same build charges the same.
    import numpy as np
    import tvm
    from ledger_testing import mlp_executable
    from tvm import relax

    import tenet_byoc

    _, ex = mlp_executable()
    vm = relax.VirtualMachine(ex, tvm.cpu())
    vm["main"](tvm.runtime.tensor(np.zeros((5, 784), "float32")))
    gemms = [e for e in tenet_byoc.ledger(vm).entries if e.unit == "array"]
    assert [(e.k, e.n, e.a_on_chip, e.c_on_chip) for e in gemms] == [
        (784, 128, False, True), (128, 10, True, False)]
