"""The ledger stored by columns: typed entries made when read, numpy totals and groupings
against the same sums over the entries one by one, weight bytes against the published
parameter counts."""

from __future__ import annotations

import pickle

import pytest

from tenet_byoc.estimate import estimate
from tenet_byoc.accelerators import preset
from tenet_byoc.ledger import (
    GemmEntry,
    Ledger,
    LedgerEntry,
    LinkEntry,
    VectorEntry,
    totals,
)
from tenet_byoc.system import Link, System

_ATTENTION = ("attn.qk", "attn.pv")


def _same(fast, slow) -> None:
    assert (fast.calls, fast.macs, fast.cycles, fast.roofline_cycles) == (
        slow.calls, slow.macs, slow.cycles, slow.roofline_cycles)
    for name in ("latency_us", "energy_pj", "offchip_bytes", "dram_bytes", "pe_utilization",
                 "bandwidth_gbps"):
        assert getattr(fast, name) == pytest.approx(getattr(slow, name), rel=1e-12)


def _by_hand(entries, key):
    groups: dict = {}
    for e in entries:
        groups.setdefault(getattr(e, key), []).append(e)
    return groups


@pytest.mark.parametrize("key", ["layer", "name", "op", "unit", "phase", "scheme"])
def test_group_by_equals_the_sums_over_entries(key):
    # numpy over the columns against ledger.totals over each group's entries, in order.
    book = estimate("gpt2", "w8a8_per_channel_per_token", prompt_len=8, decode_steps=2)
    groups = book.group_by(key)
    entries = book.entries
    want = _by_hand(entries, key)
    assert list(groups) == list(want)  # groups in order of their first call
    for value, group in want.items():
        _same(groups[value], totals(group))
    _same(book.totals(), totals(entries))


def test_a_system_groups_by_chip_and_keeps_its_links():
    system = System(preset("os16"), chips=4, tensor_parallel=2, pipeline_parallel=2,
                    micro_batches=2, link=Link(50, 2, "ring"))
    book = estimate("gpt2", prompt_len=8, decode_steps=1, batch=2, system=system)
    entries = book.entries
    assert {type(e) for e in entries} == {GemmEntry, VectorEntry, LinkEntry}
    for value, group in _by_hand(entries, "chip").items():
        _same(book.group_by("chip")[value], totals(group))
    _same(book.totals(), totals(entries))
    # Chips of one stage run the same calls: the per-chip plan repeated, in plan order.
    chip0 = [e for e in entries if e.chip == 0]
    chip1 = [e for e in entries if e.chip == 1]
    assert [e.charge for e in chip0] == [e.charge for e in chip1]


@pytest.mark.parametrize("accelerator", ["os16", "h200"])
def test_a_fused_attention_ledger_sums_the_same_entry_by_entry(accelerator):
    # Fused attention entries carry DRAM bytes but no off-chip bytes or roofline; their
    # products run on the PEs: their MACs are MACs and their cycles hold every core's PEs
    # at the PEs' rate, as a GEMM's do. The columns and the plain reference sum all of it
    # alike, in total and per group, on one core (os16) and on 132 (h200).
    acc = preset(accelerator)
    book = estimate("qwen2.5-0.5b", prompt_len=8, decode_steps=1, accelerator=acc,
                    attention="fused")
    entries = book.entries
    kernels = [e for e in entries if e.unit == "attention"]
    gemms = [e for e in entries if e.unit == "array"]
    assert kernels and gemms
    pes = acc.hardware.num_pes * acc.cores.count  # the preset's arrays, all cores
    assert {e.num_pes for e in kernels + gemms} == {pes}
    # Float32 throughout ("none"): one rate for the kernels and the GEMMs.
    assert {e.macs_per_pe_per_cycle for e in kernels} == {e.macs_per_pe_per_cycle for e in gemms}
    assert all(e.mac_capacity == e.cycles * pes * e.macs_per_pe_per_cycle for e in kernels)
    fast, slow = book.totals(), totals(entries)
    _same(fast, slow)
    assert slow.macs == sum(e.macs for e in gemms + kernels)
    assert slow.dram_bytes > sum(e.dram_bytes for e in entries if e.unit != "attention")
    for key in ("unit", "layer"):
        groups = book.group_by(key)
        for value, group in _by_hand(entries, key).items():
            _same(groups[value], totals(group))
    assert book.group_by("unit")["attention"].macs == sum(e.macs for e in kernels)


def test_entries_are_made_when_read_one_or_all():
    book = estimate("llama-3-8b", prompt_len=4, decode_steps=1)
    n = len(book)  # from the columns: no entry made yet
    assert book._entries is None
    first, last, middle = book[0], book[-1], book[n // 2: n // 2 + 3]
    assert book._entries is None
    entries = book.entries
    assert len(entries) == n and (first, last) == (entries[0], entries[-1])
    assert middle == entries[n // 2: n // 2 + 3]
    assert [e.call_index for e in entries] == list(range(n))
    assert all(isinstance(e, LedgerEntry) for e in entries)
    with pytest.raises(IndexError):
        book[n]  # noqa: B018
    # The layer is the name's: layers.3.… is layer 3, the head none.
    assert {e.layer for e in entries if e.name.startswith("layers.31.")} == {31}
    assert {e.layer for e in entries if e.name in ("lm_head", "norm")} == {None}
    # A ledger given its entries as a list sums the same as one stored by columns.
    again = Ledger(list(entries), book.accelerator, book.dataflow, book.clock_ghz, [])
    _same(again.totals(), book.totals())
    assert pickle.loads(pickle.dumps(entries[:50])) == entries[:50]


def test_weight_bytes_are_on_gemm_entries_only_and_sum_to_the_parameters():
    # Llama-3-8B has 8,030,261,248 parameters (its model card); less the embedding table
    # (128,256 x 4,096, a lookup, not a GEMM) and the 65 RMSNorm weights of 4,096, the rest
    # are the linear layers' weights, each read once by one prefill: 4 bytes each in float32.
    book = estimate("llama-3-8b", prompt_len=4, decode_steps=0)
    linear = 8_030_261_248 - 128_256 * 4_096 - 65 * 4_096
    weights = [e for e in book if e.unit == "array" and not e.name.endswith(_ATTENTION)]
    assert sum(e.weight_bytes for e in weights) == 4 * linear
    assert all(not hasattr(e, "weight_bytes") and not hasattr(e, "macs")
               for e in book if e.unit != "array")
    # GPT-2 small by hand: 12 x (qkv 768x2304 + out 768x768 + fc 768x3072 + proj 3072x768)
    # and the tied head 768 x 50,257.
    gpt2 = estimate("gpt2", prompt_len=4, decode_steps=0)
    weights = [e for e in gpt2 if e.unit == "array" and not e.name.endswith(_ATTENTION)]
    hand = 12 * (768 * 2304 + 768 * 768 + 2 * 768 * 3072) + 768 * 50257
    assert sum(e.weight_bytes for e in weights) == 4 * hand


def test_group_by_several_keys_groups_their_values_together():
    book = estimate("gpt2", prompt_len=4, decode_steps=2)
    groups = book.group_by(("phase", "name"))
    want: dict = {}
    for e in book.entries:
        want.setdefault((e.phase, e.name), []).append(e)
    assert list(groups) == list(want)
    for value, group in want.items():
        _same(groups[value], totals(group))
    with pytest.raises(ValueError, match="cannot group a ledger by"):
        book.group_by(("phase", "colour"))
