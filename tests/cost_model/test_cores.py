"""An accelerator of cores (src/cost_model/core.h) against hand-derived charges.

Each expected figure is built from the one-core charge of the unit a core runs (the existing
model, checked elsewhere against SCALE-Sim, ZigZag and isl) and the spreading rule written
out by hand: units, waves, the shared level's bandwidth per active core, launch cost,
compulsory DRAM bound, split-K reduction.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import Accelerator, preset


def _acc(cores: cm.Cores | None, *, dram_bits: float = 1 << 20) -> Accelerator:
    mem = cm.MemoryHierarchy(dram_bandwidth_bits=dram_bits, buffer_bytes=1 << 20,
                             buffer_bandwidth_bits=1 << 20)
    return Accelerator.systolic("os", 4, 4, name="c4", memory=mem, cores=cores)


def _one_core(acc: Accelerator, shared_bits: float, m: int, n: int, k: int,
              batch: int = 1) -> int:
    # The unit a core runs, on one core whose DRAM side is its share of the shared level,
    # its output tile kept in the buffer while K streams (it fits here whole).
    mem = acc.memory
    core_mem = cm.MemoryHierarchy(
        dram_bandwidth_bits=shared_bits, buffer_bytes=mem.buffer_bytes,
        buffer_bandwidth_bits=mem.buffer_bandwidth_bits)
    core = acc.replace(cores=cm.Cores(), memory=core_mem, mapping=cm.TileMapping(m, n, k))
    call = cm.GemmCall(m=m, n=n, k=k, batch=batch)
    return cm.charge(call, core).memory.cycles


def test_one_core_is_charged_as_without_cores():
    plain, one = _acc(None), _acc(cm.Cores())
    assert plain == one and "cores" not in json.loads(plain.to_json())
    for m, n, k in ((7, 9, 33), (64, 64, 64)):
        call = cm.GemmCall(m=m, n=n, k=k)
        assert cm.charge(call, one).ledger_fields() == cm.charge(call, plain).ledger_fields()


def test_output_tiles_spread_over_cores_with_the_shared_bandwidth_shared():
    # M = 8, N = 4 on two 4 x 4 cores: the best split is two 4 x 4 x 16 units, one per core,
    # each fed at half the shared level's 512 bits per cycle; plus the launch.
    cores = cm.Cores(count=2, shared_bandwidth_bits=512, launch_cycles=100)
    acc = _acc(cores)
    got = cm.charge(cm.GemmCall(m=8, n=4, k=16), acc).memory
    assert got.cycles == 100 + _one_core(acc, 256, 4, 4, 16)
    assert got.mapping.startswith("cores 2/2 x tiles 4x4 split-k 1 waves 1")
    assert got.macs == 8 * 4 * 16
    # The ledger's figures are the call's: its own MACs (one core ran half of them) over the
    # capacity of both cores' 16 PEs in its cycles.
    fields = cm.charge(cm.GemmCall(m=8, n=4, k=16), acc).ledger_fields()
    assert (fields["macs"], fields["num_pes"], fields["macs_per_pe_per_cycle"]) == (
        8 * 4 * 16, 2 * 4 * 4, 1)
    assert fields["pe_utilization"] == pytest.approx(8 * 4 * 16 / (got.cycles * 2 * 4 * 4))


def test_units_beyond_the_cores_run_in_waves():
    # 4 units of 4 x 4 on 3 cores: 3 active, 2 waves; a core runs two units one after another.
    cores = cm.Cores(count=3, shared_bandwidth_bits=600)
    acc = _acc(cores)
    got = cm.charge(cm.GemmCall(m=16, n=4, k=8), acc).memory
    tiles = got.mapping.split(" | ")[0]
    tm = int(tiles.split("tiles ")[1].split("x")[0])
    units = math.ceil(16 / tm)
    waves, active = math.ceil(units / 3), min(units, 3)
    assert got.cycles == _one_core(acc, 600 / active, tm, 4, 8, batch=waves)


def test_compulsory_dram_traffic_bounds_the_call():
    # A narrow DRAM: 8 x 8 x 8 float32 operands (768 elements x 32 bits) over 8 bits/cycle.
    acc = _acc(cm.Cores(count=4, shared_bandwidth_bits=1 << 16, launch_cycles=7), dram_bits=8)
    got = cm.charge(cm.GemmCall(m=8, n=8, k=8), acc).memory
    assert got.cycles == 7 + math.ceil(3 * 64 * 32 / 8)


def test_split_k_pays_for_a_long_k_on_many_cores():
    # 4 x 4 x 4096 on 8 cores: one output tile, so without split-K one core does all the MACs.
    cores = cm.Cores(count=8, shared_bandwidth_bits=1 << 16, launch_cycles=10, max_split_k=8)
    acc = _acc(cores)
    got = cm.charge(cm.GemmCall(m=4, n=4, k=4096), acc).memory
    assert "split-k 8 waves 1" in got.mapping
    # 8 units of 4 x 4 x 512 on 8 cores, then the reduction: 8 partial C's of 16 elements at
    # 32 bits written and read back over the shared level, and a second launch.
    reduction = 10 + math.ceil(16 * 8 * 2 * 32 / (1 << 16))
    assert got.cycles == 10 + _one_core(acc, (1 << 16) / 8, 4, 4, 512) + reduction
    no_split = _acc(cm.Cores(count=8, shared_bandwidth_bits=1 << 16, launch_cycles=10))
    assert got.cycles < cm.charge(cm.GemmCall(m=4, n=4, k=4096), no_split).memory.cycles


@pytest.mark.parametrize(("fields", "message"), [
    ({"count": 0}, "cores.count = 0"),
    ({"count": 2}, "cores.shared_bandwidth_bits"),
    ({"launch_cycles": -1}, "cores.launch_cycles"),
    ({"max_split_k": 3}, "cores.max_split_k = 3"),
])
def test_bad_cores_are_refused_naming_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        cm.Cores(**fields)


def test_cores_travel_in_the_json_form():
    acc = preset("h200")
    data = json.loads(acc.to_json())
    assert data["cores"]["count"] == 132
    assert Accelerator.from_json(acc.to_json()) == acc
    data["cores"]["count"] = -3
    with pytest.raises(ValueError, match="accelerator.cores"):
        Accelerator.from_json(json.dumps(data))
    data["cores"] = {"count": 2}
    with pytest.raises(ValueError, match="accelerator.cores"):
        Accelerator.from_json(json.dumps(data))


def test_h200_decode_streams_its_weights_at_the_hbm_bandwidth():
    # One token through Llama-3-8B's [128256, 4096] bf16 lm_head: the weights dominate the
    # compulsory bytes, and 132 SMs of 2,048 MACs per clock finish their work long before.
    m, n, k = 1, 128256, 4096
    c = cm.charge(cm.GemmCall(m=m, n=n, k=k, bits_a=16, bits_b=16, bits_c=16), preset("h200"))
    seconds = (m * k + k * n + m * n) * 2 / 4.8e12
    assert c.memory.latency_us * 1e-6 == pytest.approx(seconds, rel=0.01)


@pytest.mark.parametrize(("m", "n", "k"), [(1, 64, 256), (24, 40, 96), (64, 64, 512)])
def test_auto_is_never_slower_than_the_default_on_cores(m, n, k):
    cores = cm.Cores(count=3, shared_bandwidth_bits=96, launch_cycles=5, max_split_k=4)
    acc = _acc(cores, dram_bits=64)
    call = cm.GemmCall(m=m, n=n, k=k)
    fixed = cm.charge(call, acc).memory.cycles
    auto = cm.charge(call, acc.replace(mapping="auto")).memory.cycles
    assert auto <= fixed


# The split search prunes by a lower bound (each split's core roofline); the exhaustive
# search, every split charged (exhaustive_splits=True), is the reference it must equal to
# the bit: the chosen split and every field of the charge. Calls drawn at random over the
# core presets (tpu_v5e given cores, so its ws array and int8 edge dequantizer are split
# too), mapping "auto" and "default", float and quantized widths, batches, long K.
_SCHEMES = ("none", "w8a8_per_channel_per_token", "w4a16_group128", "w8a16_per_channel")
_TPU_CORES = cm.Cores(count=4, shared_bandwidth_bits=8192, launch_cycles=300, max_split_k=8)


@pytest.mark.parametrize("name", ["a100", "h100_sxm", "h200", "tpu_v5e"])
def test_pruned_split_search_equals_the_exhaustive_one(name):
    from tenet_byoc.quantization import get_scheme

    base = preset(name) if name != "tpu_v5e" else preset(name).replace(cores=_TPU_CORES)
    rng = np.random.default_rng(sum(map(ord, name)))
    for i in range(24):
        acc = base.replace(mapping="auto" if i % 2 else "default")
        scheme = get_scheme(_SCHEMES[i % len(_SCHEMES)])
        m, n, k = (int(x) for x in np.exp(rng.uniform(0, np.log([4096, 16384, 16384]))))
        bits_a, bits_b = (min(16, b) for b in (scheme.activation_bits, scheme.weight_bits))
        call = cm.GemmCall(m=m, n=n, k=k, batch=int(rng.choice([1, 1, 4, 32])), bits_a=bits_a,
                           bits_b=bits_b, bits_c=16, scheme=scheme.name,
                           recipe=None if scheme.name == "none" else scheme)
        pruned = cm.charge(call, acc)
        assert pruned.ledger_fields() == cm.charge(call, acc, exhaustive_splits=True).ledger_fields(), (
            name, acc.mapping, call)
