"""``cost_model.charge(entry.call, accelerator)`` is every entry of a real run, field for field.

The reference is the runtime's own ledger of a GPT-2 tiny prefill (the C++ module charging
the GEMMs it ran, with shapes read from its tensors and the recipe the quantize pass
stamped); the other side is the Python binding charging the entry's ``GemmCall`` value on
the same accelerator value, with its fields from ``Charge.ledger_fields``.
"""

from __future__ import annotations

import pytest

import tenet_byoc
from tenet_byoc import cost_model as cm
from tenet_byoc import _cost_model
from tenet_byoc.accelerators import PRESETS, Accelerator, preset
from tenet_byoc.ledger import (
    CHARGE_FIELDS,
    ENTRY_NAMES,
    GemmEntry,
    LedgerEntry,
    LinkEntry,
    TensorTraffic,
    VectorEntry,
)
from tenet_byoc.models.gpt2 import GPT2Config, GPT2Runner, export_gpt2, random_params
from tenet_byoc.quantization import quantize

# TENET's own file format: the 8 x 8 systolic array of its systolic.p (L1 256 B, L2 1 KiB,
# 64 bits/cycle, average latency 16) and its weight-stationary matmul mapping.
SYSTOLIC_P = """{PE[i,j]: 0<=i<8 and 0<=j<8}
{PE[i,j]->PE[i-1,j]; PE[i,j]->PE[i,j-1]}
256 1024 64 16
"""
WS_M = """{S[i,j,k]->PE[k%8,j%8]}
{S[i,j,k]->T[floor(k/8),floor(j/8),i+k%8+j%8]}
"""


def _tenet_file_accelerator(tmp_path) -> Accelerator:
    (tmp_path / "array.p").write_text(SYSTOLIC_P)
    (tmp_path / "ws.m").write_text(WS_M)
    return Accelerator.from_tenet_files(tmp_path / "array.p", tmp_path / "ws.m")


def _run(accelerator: Accelerator, scheme: str, quantized=None):
    """The ledger of a GPT-2 tiny prefill built for ``accelerator`` (``quantized``: the
    exported module already quantized with ``scheme``, shared by several builds)."""
    config = GPT2Config.preset("tiny")
    runner = GPT2Runner(
        config, random_params(config, seed=5), bind_params=True,
        build=lambda mod: tenet_byoc.build(quantized if quantized is not None
                                           else quantize(mod, scheme), accelerator=accelerator),
    )
    runner.prefill([3, 1, 4, 1, 5, 9, 2])
    return tenet_byoc.ledger(runner.vm)


@pytest.mark.parametrize(("accelerator", "scheme"), [
    ("os16", "none"),
    ("os16_mp", "w8a8_per_channel_per_token"),
    ("tpu_v1_auto", "none"),
    ("tenet_files", "none"),
])
def test_charge_of_entry_call_equals_every_entry(accelerator, scheme, tmp_path):
    if accelerator == "tenet_files":
        acc = _tenet_file_accelerator(tmp_path)
    elif accelerator == "tpu_v1_auto":
        acc = preset("tpu_v1", mapping="auto")
    else:
        acc = preset(accelerator)
    book = _run(acc, scheme)
    assert book.accelerator == acc.name and len(book) > 0
    if scheme != "none":
        assert {e.scheme for e in book} == {scheme, "none"}  # attention stays float
    # A fresh value equal to the built one: nothing is carried over from the run.
    again = Accelerator.from_json(acc.to_json())
    assert again == acc
    assert {e.unit for e in book} == {"array", "vector"}
    for e in book:
        if e.unit == "vector":  # the vector unit's entries: cost_model.charge_vector
            fields = cm.charge_vector(e.vector_call, again).ledger_fields()
            own = [n for n in CHARGE_FIELDS if n in e.FIELDS]  # a vector entry's own
            assert {n: fields[n] for n in own} == {n: getattr(e, n) for n in own}
            assert fields["tensors"] == {} and not hasattr(e, "tensors")
            continue
        assert e.call.scheme == e.scheme and e.call.recipe == e.recipe
        fields = cm.charge(e.call, again).ledger_fields()
        own = [n for n in CHARGE_FIELDS if n in e.FIELDS]  # a GEMM entry's own
        got = {name: fields[name] for name in own}
        want = {name: getattr(e, name) for name in own}
        assert got == want, (e.name, {f for f in own if got[f] != want[f]})
        assert {k: TensorTraffic(**t) for k, t in fields["tensors"].items()} == dict(e.tensors)


def test_entry_types_declare_the_cost_models_fields():
    # The one schema: the three entry types declare between them exactly the C++ table's
    # names (``link_bytes`` is a system's, ``fused`` the runtime's, ``recipe`` and
    # ``tensors`` the charge's values), each unit only its own: a field a unit's charge
    # never sets (the C++ table writes it as 0, "", "none" or False) is not on its entries.
    own = {cls: set(cls.FIELDS) - set(ENTRY_NAMES) for cls in (GemmEntry, VectorEntry,
                                                                 LinkEntry)}
    extra = {"recipe", "tensors", "fused", "link_bytes"}
    assert set().union(*own.values()) - extra == set(CHARGE_FIELDS)
    assert all(issubclass(cls, LedgerEntry) for cls in own)
    assert own[LinkEntry] == {"unit", "op", "cycles", "latency_us", "energy_pj", "mapping",
                              "link_bytes"}
    acc = preset("os16")
    unset = (0, 0.0, "", "none", False)
    for call in (cm.VectorCall("softmax", [4, 64]), cm.VectorCall("add", [4, 64],
                                                                 operand_elements=256)):
        fields = cm.charge_vector(call, acc).ledger_fields()
        dropped = set(CHARGE_FIELDS) - own[VectorEntry]
        # batch is always 1; dram_stall_cycles repeats the stall_cycles a vector entry has
        assert {f for f in dropped if fields[f] not in unset} <= {"batch", "dram_stall_cycles"}
        assert fields["batch"] == 1 and fields["dram_stall_cycles"] == fields["stall_cycles"]
        assert "weight_side_bits" in dropped and "macs" in dropped
    gemm = cm.charge(cm.GemmCall(m=4, n=64, k=64), acc).ledger_fields()
    assert {f for f in set(CHARGE_FIELDS) - own[GemmEntry] if gemm[f] not in unset} == {
        "elements"}  # a GEMM's output elements, which its m, n, batch say
    assert gemm["elements"] == 4 * 64
    assert _cost_model._vector_ledger_field_names() == list(CHARGE_FIELDS)
    assert list(TensorTraffic.__dataclass_fields__) == list(
        _cost_model._ledger_tensor_field_names())


#: The schemes the re-charge is checked under: float, int8 x int8 and int4 weights.
RECHARGE_SCHEMES = ("none", "w8a8_per_channel_per_token", "w4a16_group128")


#: The accelerators of cores (src/cost_model/core.h) share one charging path: h200 alone
#: (its own mapping) stands for them here, to keep this test's builds few.
_CORES_COVERED_BY_H200 = ("a100", "h100_sxm")


def _every_accelerator() -> list[Accelerator]:
    """Every preset with the mapping searched, and each one-core preset again with each
    call's default tiles."""
    names = [n for n in PRESETS if n not in _CORES_COVERED_BY_H200]
    return [preset(name, mapping=m) for name in names for m in ("auto", "default")
            if m == "auto" or preset(name).cores.count == 1]


@pytest.mark.parametrize("scheme", RECHARGE_SCHEMES)
def test_charged_on_every_preset_equals_a_run_built_for_it(scheme):
    # One run on os16, re-charged on every preset (mapping="auto" included), against a run
    # really built for each: the same entries, names, calls, charges and tensor traffic.
    config = GPT2Config.preset("tiny")
    quantized = quantize(export_gpt2(config, random_params(config, seed=5)), scheme)
    base = _run(preset("os16"), scheme, quantized)
    refused = []
    for acc in _every_accelerator():
        try:
            real = _run(acc, scheme, quantized)
        except ValueError as err:
            # A design the run refuses (no mapping in the space fits its buffers) is refused
            # by the re-charge as well, naming the accelerator.
            assert "refused" in str(err) or "fits" in str(err)
            with pytest.raises(ValueError, match=f"accelerator {acc.name!r} cannot charge"):
                base.charged_on(acc)
            refused.append((acc.name, acc.mapping))
            continue
        moved = base.charged_on(acc)
        assert (moved.accelerator, moved.dataflow, moved.clock_ghz) == (
            real.accelerator, real.dataflow, real.clock_ghz)
        assert len(moved) == len(real) > 0
        for m, r in zip(moved, real, strict=True):
            assert (m.name, m.phase, m.scheme, m.unit) == (r.name, r.phase, r.scheme, r.unit)
            assert (m.call if m.unit == "array" else m.vector_call) == (
                r.call if r.unit == "array" else r.vector_call)
            assert type(m) is type(r)
            own = [f for f in CHARGE_FIELDS if f in r.FIELDS]
            assert {f: getattr(m, f) for f in own} == {
                f: getattr(r, f) for f in own}, (acc.name, acc.mapping, r.name)
            assert getattr(m, "tensors", None) == getattr(r, "tensors", None)
    # Only TENET's 8x8 arrays (1 KiB of buffer) find no searched mapping that fits; every
    # preset's own mapping runs (theirs is the default tiles).
    assert all(name.startswith("tenet_") and mapping == "auto" for name, mapping in refused)
