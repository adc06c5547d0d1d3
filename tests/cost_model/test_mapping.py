"""The mapping search against an independent brute force over the same declared space.

The brute force below re-implements the declared space from its description in mapping.h
(not from the search's code), analyses every candidate with ``cm.analyze_memory`` and keeps
the least (objective, secondary, index). The search must return that very candidate.
Fresh random cases every run; replay with TENET_MAPPING_SEED.
"""

from __future__ import annotations

import math
import os
import random

import pytest

from tenet_byoc import cost_model as cm
from tenet_byoc.quantization import get_scheme

SEED = int(os.environ.get("TENET_MAPPING_SEED", random.randrange(1 << 30)))
ORDERS = ("mnk", "mkn", "nmk", "nkm", "kmn", "knm")
STREAM = {"os": "k", "ws": "m", "is": "n"}


def declared_tiles(extent: int, granule: int, splits: int) -> list[int]:
    """Powers of two times the granule below the extent, the smallest granule multiple that
    covers the extent in c even tiles (c = 1..splits), the extent; clamped, distinct."""
    out = {extent}
    t = granule
    while t < extent:
        out.add(t)
        t *= 2
    units = -(-extent // granule)
    for c in range(1, splits + 1):
        out.add(min(extent, granule * -(-units // c)))
    return sorted(out)


def declared_dataflows(presets, rows, cols, stream_tiles, extents):
    dfs = [cm.Dataflow.preset(p, rows=rows, cols=cols) for p in presets]
    for p in presets:
        dim = STREAM[p]
        seen = set()
        for t in stream_tiles:
            if t < extents[dim] and t not in seen:
                seen.add(t)
                dfs.append(cm.Dataflow.preset(p, rows=rows, cols=cols, **{dim: t}))
    return dfs


def case_call(case, **more) -> cm.GemmCall:
    """The case's GEMM (shape, batch, widths, extra reads and ops; ``more`` fields beside)."""
    a, b, c = case["bits"]
    return cm.GemmCall(m=case["M"], n=case["N"], k=case["K"], batch=case["batch"], bits_a=a,
                       bits_b=b, bits_c=c, extra_read_bits=case["extra_read_bits"],
                       extra_ops=case["extra_ops"], **more)


def brute_force(case, objective):
    M, N, K = case["M"], case["N"], case["K"]
    a, b, c = case["bits"]
    dfs = declared_dataflows(case["presets"], case["rows"], case["cols"], case["stream_tiles"],
                             {"m": M, "n": N, "k": K})
    g = max(case["rows"], case["cols"])
    tms, tns, tks = (declared_tiles(d, g, case["splits"]) for d in (M, N, K))
    mac = cm.PrecisionTable.horowitz_45nm().lookup(a, b)
    best, best_mm, index = None, None, 0
    for df in dfs:
        for tm in tms:
            for tn in tns:
                for tk in tks:
                    for order in ORDERS:
                        for acc in (True, False):
                            t = cm.TileMapping(tm, tn, tk, order, accumulate_in_buffer=acc)
                            try:
                                mm = cm.analyze_memory(
                                    case_call(case),
                                    cm.Accelerator("t", case["hw"], df, memory=case["mem"]),
                                    t,
                                )
                            except ValueError:
                                index += 1
                                continue
                            # Register bits beyond the MACs' own (K-group rescaling) cost
                            # the register energy per bit, whatever the mapping; summed in
                            # the order energy.h states, so ties break as in the search.
                            e = cm.call_energy(mm, case["mem"], mac, case["extra_ops"])
                            register = ((mm.register_access_bits + case["extra_register_bits"])
                                        * case["mem"].register_pj_per_bit)
                            pj = e.mac_pj + register + e.buffer_pj + e.dram_pj
                            key = {"latency": (mm.cycles, pj), "energy": (pj, mm.cycles),
                                   "edp": (mm.cycles * pj, mm.cycles)}[objective] + (index,)
                            if best is None or key < best:
                                best, best_mm = key, mm
                            index += 1
    return best, best_mm, index


def random_case(rng: random.Random) -> dict:
    rows, cols = rng.choice([(2, 2), (2, 3), (4, 4), (4, 2), (3, 5)])
    M, N, K = (rng.choice([1, rng.randint(1, 12), rng.randint(5, 40)]) for _ in range(3))
    bits = rng.choice([(8, 8, 32), (32, 32, 32), (16, 4, 16), (8, 8, 16)])
    mem = cm.MemoryHierarchy(
        dram_bandwidth_bits=rng.choice([8, 32, 64, 256]),
        dram_channel_per_operand=rng.random() < 0.3,
        buffer_bytes=rng.choice([256, 1024, 4096, 1 << 16]),
        buffer_bandwidth_bits=rng.choice([16, 64, 1024]),
        buffer_double_buffered=rng.random() < 0.8,
        stationary_double_buffered=rng.random() < 0.3,
        psum_bits=rng.choice([16, 32]),
    )
    return {
        "M": M, "N": N, "K": K, "rows": rows, "cols": cols, "bits": bits, "mem": mem,
        "hw": cm.Hardware.systolic(rows, cols),
        "presets": rng.choice([("os", "ws", "is"), ("os",), ("ws", "is")]),
        "stream_tiles": rng.choice([(), (), (2,), (3, 8)]),
        "splits": rng.choice([1, 3, 8]),
        "batch": rng.choice([1, 1, 2]),
        "extra_read_bits": rng.choice([0, 0, 128]),
        "extra_ops": rng.choice([0, 0, 50]),
        "extra_register_bits": rng.choice([0, 0, 4096]),
    }


def search(case, objective, threads=0):
    a, b, c = case["bits"]
    return cm.MappingSearch(
        case["hw"],
        case["mem"],
        dataflows=case["presets"],
        rows=case["rows"],
        cols=case["cols"],
        objective=objective,
        stream_tiles=case["stream_tiles"],
        max_even_split=case["splits"],
        threads=threads,
    ).best(
        case_call(case, extra_register_bits=case["extra_register_bits"])
    )


@pytest.mark.parametrize("i", range(8))
def test_search_equals_brute_force(i):
    rng = random.Random(SEED * 31 + i)
    case = random_case(rng)
    objective = ("latency", "energy", "edp", "latency")[i % 4]
    expected, mm, candidates = brute_force(case, objective)
    desc = f"seed {SEED} case {i} {objective} {case}"
    if expected is None:
        with pytest.raises(ValueError, match="no candidate of the space fits"):
            search(case, objective)
        return
    got = search(case, objective)
    assert got.candidates == candidates, desc
    assert got.index == expected[-1], f"{desc}: chose {got.mapping}, brute force {mm.mapping}"
    assert got.metrics.cycles == mm.cycles, desc
    assert got.metrics.mapping == mm.mapping, desc
    assert got.objective == expected[0], desc
    assert got.evaluated + got.pruned + got.unfit == got.candidates, desc


@pytest.mark.slow
@pytest.mark.parametrize("i", range(40))
def test_search_equals_brute_force_many(i):
    test_search_equals_brute_force(100 + i)


def _k_group_case(with_rescaling: bool) -> dict:
    """An mxfp4 call (K-groups of 32) on a 4 x 2 array whose registers cost as much as its
    DRAM does per bit: the workload as the charge derives it from the recipe."""
    m, n, k = 17, 13, 62
    hw = cm.Hardware.systolic(4, 2)
    mem = cm.MemoryHierarchy(dram_bandwidth_bits=64, buffer_bytes=4096,
                             buffer_bandwidth_bits=1024, register_pj_per_bit=10.0,
                             dram_pj_per_bit=20.0)
    q = cm.charge(
        cm.GemmCall(m=m, n=n, k=k, bits_a=4, bits_b=4, bits_c=16, recipe=get_scheme("mxfp4")),
        cm.Accelerator("analysis", hw, cm.Dataflow.preset("os", rows=4, cols=2), memory=mem),
    ).quant
    groups = math.ceil(k / 32)
    # By hand: e8m0 weight scales N x ceil(K/32) x 8 bits; dynamic activations 2 ops per
    # element; one rescale per output and group, each reading and writing 32 bits.
    assert q["weight_side_bits"] + q["activation_side_bits"] == n * groups * 8
    assert q["quantize_ops"] + q["dequant_ops"] == 2 * m * k + m * n * groups
    assert q["accumulator_traffic_bits"] == 2 * m * n * groups * 32
    return {
        "M": m, "N": n, "K": k, "rows": 4, "cols": 2, "bits": (4, 4, 16), "mem": mem, "hw": hw,
        "presets": ("os", "ws", "is"), "stream_tiles": (), "splits": 8, "batch": 1,
        "extra_read_bits": n * groups * 8, "extra_ops": 2 * m * k + m * n * groups,
        "extra_register_bits": 2 * m * n * groups * 32 if with_rescaling else 0,
    }


@pytest.mark.parametrize("objective", ["energy", "edp"])
def test_k_group_call_search_equals_brute_force(objective):
    case = _k_group_case(with_rescaling=True)
    expected, mm, candidates = brute_force(case, objective)
    got = search(case, objective)
    assert got.candidates == candidates
    assert got.index == expected[-1], f"chose {got.mapping}, brute force {mm.mapping}"
    assert got.objective == pytest.approx(expected[0], rel=1e-12)
    # The charged energy includes the rescaling's register bits, by hand.
    plain = cm.call_energy(got.metrics, case["mem"], cm.PrecisionTable.horowitz_45nm().lookup(4, 4),
                           case["extra_ops"])
    assert got.energy.register_pj - plain.register_pj == pytest.approx(
        case["extra_register_bits"] * 10.0, rel=1e-12)
    if objective == "edp":
        # A constant energy moves the EDP optimum: without the term the search would pick
        # another mapping here, so leaving it out would fail the comparison above.
        without = search(_k_group_case(with_rescaling=False), objective)
        assert without.index != got.index


def test_declared_tiles_match_the_rule():
    for extent, g, s in [(1, 16, 8), (768, 16, 8), (50257, 16, 8), (129, 16, 3), (40, 3, 5)]:
        assert cm.tile_size_candidates(extent, g, s) == declared_tiles(extent, g, s)
    # By hand: 768 on a 16 edge: 16..512 by doubling, 768/c rounded up to 16 for c = 1..8.
    assert declared_tiles(768, 16, 8) == [16, 32, 64, 96, 112, 128, 160, 192, 256, 384, 512, 768]


def test_relations_are_searched_like_the_preset_they_equal():
    # TENET's os relations on a 4 x 4 array, given as text: the same costs as the preset.
    hw = cm.Hardware.systolic(4, 4)
    mem = cm.MemoryHierarchy(dram_bandwidth_bits=64, buffer_bytes=2048)
    rel = cm.parse_tenet_mapping("{S[i,j,k]->PE[i%4, j%4]}\n"
                                 "{S[i,j,k]->T[floor(i/4), floor(j/4), i%4+j%4+k]}\n", "os_rel")
    by_rel = cm.MappingSearch(hw, mem, dataflows=[rel], granule=4).best(
        cm.GemmCall(m=9, n=10, k=11, bits_a=8, bits_b=8, bits_c=8)
    )
    by_preset = cm.MappingSearch(hw, mem, dataflows=["os"], rows=4, cols=4).best(
        cm.GemmCall(m=9, n=10, k=11, bits_a=8, bits_b=8, bits_c=8)
    )
    assert by_rel.metrics.cycles == by_preset.metrics.cycles
    assert by_rel.tiles.describe() == by_preset.tiles.describe()


def test_deterministic_across_threads_and_runs():
    hw = cm.Hardware.systolic(16, 16)
    mem = cm.MemoryHierarchy(dram_bandwidth_bits=256, buffer_bytes=1 << 20)
    runs = [
        cm.MappingSearch(hw, mem, threads=t).best(
            cm.GemmCall(m=128, n=768, k=768, bits_a=8, bits_b=8, bits_c=32)
        )
        for t in (1, 2, 2, 3)
    ]
    assert len({(r.index, r.mapping, r.metrics.cycles, r.energy.total_pj) for r in runs}) == 1


@pytest.mark.parametrize("seed", range(6))
def test_never_below_roofline(seed):
    rng = random.Random(SEED + 7 * seed)
    rows, cols = rng.choice([(4, 4), (8, 8), (16, 16), (8, 16)])
    hw = cm.Hardware.systolic(rows, cols)
    mem = cm.MemoryHierarchy(dram_bandwidth_bits=rng.choice([64, 256, 1024]),
                             buffer_bytes=rng.choice([1 << 14, 1 << 18, 1 << 20]),
                             stationary_double_buffered=rng.random() < 0.5)
    M, N, K = rng.choice([1, 7, 64, 128]), rng.randint(1, 900), rng.randint(1, 900)
    a, b = rng.choice([(8, 8), (32, 32), (16, 4)])
    for objective in ("latency", "energy", "edp"):
        r = cm.MappingSearch(hw, mem, objective=objective).best(
            cm.GemmCall(m=M, n=N, k=K, bits_a=a, bits_b=b, bits_c=32)
        )
        roof = cm.roofline(cm.GemmCall(m=M, n=N, k=K, bits_a=a, bits_b=b, bits_c=32),
                           cm.Accelerator("t", hw, cm.Dataflow.preset("os", rows, cols),
                                          memory=mem))
        assert r.metrics.roofline_cycles == roof
        assert r.metrics.cycles >= roof, (seed, objective, r.mapping)


def test_objectives_order_their_own_figure():
    hw = cm.Hardware.systolic(8, 8)
    mem = cm.MemoryHierarchy(dram_bandwidth_bits=64, buffer_bytes=1 << 16)
    r = {
        o: cm.MappingSearch(hw, mem, objective=o).best(
            cm.GemmCall(m=64, n=200, k=300, bits_a=8, bits_b=8, bits_c=32)
        )
        for o in ("latency", "energy", "edp")
    }
    assert r["latency"].metrics.cycles <= min(x.metrics.cycles for x in r.values())
    assert r["energy"].energy.total_pj <= min(x.energy.total_pj for x in r.values())
    edp = {o: x.metrics.cycles * x.energy.total_pj for o, x in r.items()}
    assert edp["edp"] <= min(edp.values())
    assert math.isclose(r["edp"].objective, edp["edp"])


def test_cache_searches_each_distinct_call_once():
    hw = cm.Hardware.systolic(8, 8)
    mem = cm.MemoryHierarchy(dram_bandwidth_bits=64, buffer_bytes=1 << 16)
    s = cm.MappingSearch(hw, mem, objective="latency")
    first = s.best(cm.GemmCall(m=16, n=40, k=24, bits_a=8, bits_b=8, bits_c=8))
    again = s.best(cm.GemmCall(m=16, n=40, k=24, bits_a=8, bits_b=8, bits_c=8))
    other = s.best(cm.GemmCall(m=16, n=40, k=24, bits_a=8, bits_b=8, bits_c=8, extra_ops=10))
    assert s.searches == 2
    assert first.mapping == again.mapping and first.index == again.index
    direct = cm.MappingSearch(hw, mem).best(
        cm.GemmCall(m=16, n=40, k=24, bits_a=8, bits_b=8, bits_c=8, extra_ops=10)
    )
    assert other.index == direct.index and other.metrics.cycles == direct.metrics.cycles


def test_cache_keys_on_extra_register_bits():
    # A call that differs only in its K-group register traffic is another call: its energy
    # is the search's for those bits, not the cached energy of the call without them.
    hw = cm.Hardware.systolic(8, 8)
    mem = cm.MemoryHierarchy(dram_bandwidth_bits=64, buffer_bytes=1 << 16)
    s = cm.MappingSearch(hw, mem, objective="energy")
    plain = s.best(cm.GemmCall(m=16, n=40, k=24, bits_a=8, bits_b=8, bits_c=8))
    grouped = s.best(
        cm.GemmCall(m=16, n=40, k=24, bits_a=8, bits_b=8, bits_c=8, extra_register_bits=4096)
    )
    assert s.searches == 2
    assert grouped.energy.register_pj - plain.energy.register_pj == pytest.approx(
        4096 * mem.register_pj_per_bit, rel=1e-9)
    direct = cm.MappingSearch(hw, mem, objective="energy").best(
        cm.GemmCall(m=16, n=40, k=24, bits_a=8, bits_b=8, bits_c=8, extra_register_bits=4096)
    )
    assert (grouped.index, grouped.energy.total_pj) == (direct.index, direct.energy.total_pj)


SPACE_KEYWORDS = ("objective", "dataflows", "stream_tiles", "granule", "max_even_split",
                  "threads")


@pytest.mark.parametrize("kwargs, message", [
    ({"objective": "speed"}, "objective must be one of latency, energy, edp"),
    ({"dataflows": []}, "MappingSpace.dataflows is empty"),
    ({"dataflows": ["xs"]}, "'xs' is neither a Dataflow nor a preset name"),
    ({"stream_tiles": [0]}, "MappingSpace.stream_tiles must be tilings >= 1"),
    ({"granule": -1}, "MappingSpace.granule must be >= 0"),
    ({"max_even_split": 0}, "MappingSpace.max_even_split must be in 1..64"),
    ({"threads": -1}, "MappingSearchOptions.threads must be >= 0"),
    ({"extra_register_bits": -1}, "GemmWorkload.extra_register_bits must be >= 0"),
    ({"bits_a": 64, "bits_b": 64}, "the PEs do not support 64-bit A x 64-bit B"),
])
def test_bad_input_refused_with_message(kwargs, message):
    hw = cm.Hardware.systolic(4, 4)
    mem = cm.MemoryHierarchy(dram_bandwidth_bits=64, buffer_bytes=4096)
    space = {k: v for k, v in kwargs.items() if k in SPACE_KEYWORDS}
    call = {k: v for k, v in kwargs.items() if k not in SPACE_KEYWORDS}
    with pytest.raises(ValueError, match=message):
        cm.MappingSearch(hw, mem, **space).best(cm.GemmCall(m=8, n=8, k=8, **call))


def test_nothing_fits_is_refused_with_the_reason():
    hw = cm.Hardware.systolic(4, 4)
    mem = cm.MemoryHierarchy(dram_bandwidth_bits=64, buffer_bytes=4)
    with pytest.raises(ValueError, match="no candidate of the space fits.*bytes of buffer"):
        cm.MappingSearch(hw, mem).best(cm.GemmCall(m=8, n=8, k=8, bits_a=32, bits_b=32, bits_c=32))


def test_rows_and_cols_are_read_from_a_rectangular_array():
    from tenet_byoc.mapping import array_edges

    assert array_edges(cm.Hardware.systolic(16, 8)) == (16, 8)
    odd = cm.parse_tenet_hardware("{PE[p]: 0<=p<8}\n{PE[p]->PE[p-1]}\n256 1048576 64 1\n")
    with pytest.raises(ValueError, match="pass rows= and cols="):
        array_edges(odd)



# GPT-2 small against the roofline with mapping="auto" on the real presets:
# tests/ledger/test_ledger_auto.py.


def test_auto_mapping_searches_presets_for_a_preset_and_keeps_user_relations():
    from tenet_byoc.mapping import auto_mapping_dataflows

    tiled = cm.Dataflow.preset("ws", rows=8, cols=4, m=16)
    names = [(d.preset_name, d.rows, d.cols, dict(d.tiling)) for d in auto_mapping_dataflows(tiled)]
    assert names == [("os", 8, 4, {}), ("ws", 8, 4, {}), ("is", 8, 4, {})]
    rel = cm.parse_tenet_mapping("{S[i,j,k]->PE[i%4, j%4]}\n"
                                 "{S[i,j,k]->T[floor(i/4), floor(j/4), i%4+j%4+k]}\n", "mine")
    kept = auto_mapping_dataflows(rel)
    assert len(kept) == 1 and kept[0].space == rel.space and kept[0].time == rel.time
