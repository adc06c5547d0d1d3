"""The buffer level: closed forms against a brute-force tile walk, roofline, capacity, errors."""

from __future__ import annotations

import os
import random

import pytest

from tenet_byoc import cost_model as cm

tile_walk = pytest.importorskip("tile_walk")

SEED = int(os.environ.get("TENET_MEMORY_SEED", random.randrange(1 << 30)))


def _random_case(rng: random.Random):
    rows, cols = rng.choice([(1, 1), (2, 3), (4, 4), (8, 4), (3, 8)])
    name = rng.choice(["os", "ws", "is"])
    tiling = {}
    if rng.random() < 0.25:
        tiling = {{"os": "k", "ws": "m", "is": "n"}[name]: rng.randint(1, 6)}
    df = cm.Dataflow.preset(name, rows=rows, cols=cols, **tiling)
    hw = cm.Hardware.systolic(rows, cols)
    M, N, K = (rng.randint(1, 40) for _ in range(3))
    bits_a, bits_b = rng.choice([(8, 8), (32, 32), (16, 4), (4, 8)])
    bits_c = rng.choice([8, 16, 32])
    mem = cm.MemoryHierarchy(
        dram_bandwidth_bits=rng.choice([1, 7, 32, 256, 4096]),
        dram_channel_per_operand=rng.random() < 0.3,
        buffer_bytes=1 << 30,
        buffer_bandwidth_bits=rng.choice([8, 64, 1024]),
        buffer_double_buffered=rng.random() < 0.8,
        stationary_double_buffered=rng.random() < 0.3,
        psum_bits=rng.choice([16, 32]),
    )
    tiles = tuple(rng.randint(1, d + 2) for d in (M, N, K))
    order = "".join(rng.sample("mnk", 3))
    return {"M": M, "N": N, "K": K, "hw": hw, "df": df, "mem": mem, "tiles": tiles,
            "order": order, "batch": rng.choice([1, 1, 2, 3]), "bits": (bits_a, bits_b, bits_c),
            "accumulate": rng.random() < 0.75, "extra": rng.choice([0, 0, 100]),
            "align": {"A": {d: rng.choice([1, 1, 3, 4]) for d in "mk"},
                      "B": {d: rng.choice([1, 1, 3, 4]) for d in "kn"}},
            "span": {op: rng.choice([0, 0, 1, 2, 3]) for op in "ABC"}}


def _check(case):
    M, N, K = case["M"], case["N"], case["K"]
    tm, tn, tk = case["tiles"]
    a, b, c = case["bits"]
    align = case.get("align", {"A": {}, "B": {}})
    span = dict(case.get("span", {}))
    if not case["accumulate"]:
        span["C"] = 0
    mapping = cm.TileMapping(tm, tn, tk, case["order"], accumulate_in_buffer=case["accumulate"],
                             a_align_m=align["A"].get("m", 1), a_align_k=align["A"].get("k", 1),
                             b_align_k=align["B"].get("k", 1), b_align_n=align["B"].get("n", 1),
                             span_a=span.get("A", 0), span_b=span.get("B", 0),
                             span_c=span.get("C", 0))
    got = cm.analyze_memory(
        cm.GemmCall(
            m=M,
            n=N,
            k=K,
            batch=case["batch"],
            bits_a=a,
            bits_b=b,
            bits_c=c,
            extra_read_bits=case["extra"],
        ),
        cm.Accelerator("t", case["hw"], case["df"], memory=case["mem"]),
        mapping,
    )
    ref = tile_walk.walk(M, N, K, case["hw"], case["df"], case["mem"], tm, tn, tk,
                         case["order"], batch=case["batch"], bits_a=a, bits_b=b, bits_c=c,
                         accumulate=case["accumulate"], extra_read_bits=case["extra"],
                         align=align, span=span)
    for op in "ABC":
        assert got.tensors[op].dram_read_bits == ref.dram_read_bits[op], op
        assert got.tensors[op].dram_fetches == ref.fetches[op], op
    assert got.tensors["C"].dram_write_bits == ref.dram_write_bits
    assert got.dram_read_bits == sum(ref.dram_read_bits.values()) + case["extra"]
    assert got.tile_steps == ref.steps
    assert got.array_cycles == ref.array_cycles
    assert got.first_fetch_cycles == ref.first_fetch_cycles
    assert got.last_writeback_cycles == ref.last_writeback_cycles
    assert got.cycles == ref.cycles
    assert got.cycles >= got.roofline_cycles
    return got


def test_closed_forms_equal_tile_walk_random():
    rng = random.Random(SEED)
    for _ in range(150):
        case = _random_case(rng)
        try:
            _check(case)
        except AssertionError as e:
            raise AssertionError(f"TENET_MEMORY_SEED={SEED}: {case} -> {e}") from e


@pytest.mark.parametrize("order", ["mnk", "mkn", "nmk", "nkm", "kmn", "knm"])
def test_every_order_on_edge_tiles(order):
    # Tiles that divide nothing (every dimension has an edge tile) and > 5 tiles per loop,
    # so the representative-step summation is exercised on long loops.
    hw = cm.Hardware.systolic(4, 4)
    mem = cm.MemoryHierarchy(dram_bandwidth_bits=16, buffer_bandwidth_bits=64)
    for name in ("os", "ws", "is"):
        case = {"M": 29, "N": 31, "K": 37, "hw": hw, "df": cm.Dataflow.preset(name, rows=4, cols=4),
                    "mem": mem, "tiles": (4, 5, 6), "order": order, "batch": 2, "bits": (8, 8, 32),
                    "accumulate": True, "extra": 0}
        _check(case)


def test_traffic_by_hand():
    # M=N=K=64, 8-bit, tiles 16x32x64 in order mnk: A (m,k) is fetched once per m tile,
    # B (k,n) once per (m, n) step = 4 times over, C written once at 32 bits.
    hw = cm.Hardware.systolic(8, 8)
    df = cm.Dataflow.preset("os", rows=8, cols=8)
    mem = cm.MemoryHierarchy()
    got = cm.analyze_memory(
        cm.GemmCall(m=64, n=64, k=64, bits_a=8, bits_b=8, bits_c=32),
        cm.Accelerator("t", hw, df, memory=mem),
        cm.TileMapping(16, 32, 64, "mnk"),
    )
    assert got.tensors["A"].dram_read_bits == 64 * 64 * 8
    assert got.tensors["B"].dram_read_bits == 4 * 64 * 64 * 8
    assert got.tensors["C"].dram_write_bits == 64 * 64 * 32
    assert got.tensors["C"].dram_read_bits == 0
    # K outermost (kmn) with 4 K tiles of 16: C goes out 4 times (3 partial at 32 bits,
    # 1 final) and comes back 3 times; A once; B (k, n) again for each of the 4 m tiles
    # (the m loop sits outside the n loop).
    got = cm.analyze_memory(
        cm.GemmCall(m=64, n=64, k=64, bits_a=8, bits_b=8, bits_c=16),
        cm.Accelerator("t", hw, df, memory=mem),
        cm.TileMapping(16, 32, 16, "kmn"),
    )
    assert got.tensors["A"].dram_read_bits == 64 * 64 * 8
    assert got.tensors["B"].dram_read_bits == 4 * 64 * 64 * 8
    assert got.tensors["C"].dram_write_bits == 64 * 64 * (3 * 32 + 16)
    assert got.tensors["C"].dram_read_bits == 64 * 64 * 3 * 32
    # Spans: in order mnk with 4 m tiles, 2 n tiles and 4 k tiles, A (m, k) goes around
    # again for each n tile (2x); when A's tile spans the k loop it stays for both n tiles.
    t = {"tm": 16, "tn": 32, "tk": 16, "order": "mnk"}
    plain = cm.analyze_memory(
        cm.GemmCall(m=64, n=64, k=64, bits_a=8, bits_b=8, bits_c=8),
        cm.Accelerator("t", hw, df, memory=mem),
        cm.TileMapping(**t),
    )
    spanned = cm.analyze_memory(
        cm.GemmCall(m=64, n=64, k=64, bits_a=8, bits_b=8, bits_c=8),
        cm.Accelerator("t", hw, df, memory=mem),
        cm.TileMapping(**t, span_a=1),
    )
    assert plain.tensors["A"].dram_read_bits == 2 * 64 * 64 * 8
    assert spanned.tensors["A"].dram_read_bits == 64 * 64 * 8
    assert spanned.buffer_bytes_used - plain.buffer_bytes_used == 2 * 16 * (64 - 16)
    with pytest.raises(ValueError, match="span_c = 1 keeps C in the buffer"):
        cm.TileMapping(4, 4, 4, span_c=1, accumulate_in_buffer=False)


def test_roofline_never_beaten_random_hardware():
    rng = random.Random(SEED + 1)
    for _ in range(200):
        rows, cols = rng.randint(1, 16), rng.randint(1, 16)
        name = rng.choice(["os", "ws", "is"])
        # One rate for every width, or a rate table by width (base 1 for other ops).
        mpc = rng.choice([1, 2, 4, {16: 2, 8: 4, 4: 8}])
        hw = cm.Hardware.systolic(rows, cols, macs_per_pe_per_cycle=mpc)
        df = cm.Dataflow.preset(name, rows=rows, cols=cols)
        M, N, K = (rng.randint(1, 3000) for _ in range(3))
        bits_a, bits_b = rng.choice([(4, 16), (8, 8), (16, 16), (32, 32), (8, 4)])
        bits_c = rng.choice([16, 32])
        mem = cm.MemoryHierarchy(
            dram_bandwidth_bits=rng.choice([8, 64, 256, 2048, 100.5]),
            dram_channel_per_operand=rng.random() < 0.3,
            buffer_bytes=rng.choice([1 << 14, 1 << 20, 1 << 26]),
            buffer_bandwidth_bits=rng.choice([64, 512, 1e6]),
            buffer_double_buffered=rng.random() < 0.8,
            stationary_double_buffered=rng.random() < 0.5)
        order = "".join(rng.sample("mnk", 3))
        tm, tn, tk = (rng.randint(1, d) for d in (M, N, K))
        accumulate = rng.random() < 0.8
        mapping = cm.TileMapping(tm, tn, tk, order, accumulate_in_buffer=accumulate,
                                 span_a=rng.choice([0, 0, 1, 3]), span_b=rng.choice([0, 0, 2]),
                                 span_c=rng.choice([0, 1]) if accumulate else 0)
        kw = {"batch": rng.choice([1, 4]), "bits_a": bits_a, "bits_b": bits_b, "bits_c": bits_c,
                  "extra_read_bits": rng.choice([0, 4096]), "extra_ops": rng.choice([0, 10000])}
        call, acc = cm.GemmCall(m=M, n=N, k=K, **kw), cm.Accelerator("t", hw, df, memory=mem)
        try:
            got = cm.analyze_memory(call, acc, mapping)
        except ValueError as e:
            assert "use smaller tiles" in str(e)
            continue
        roof = cm.roofline(call, acc)
        assert got.roofline_cycles == roof
        assert got.cycles >= roof, (SEED, M, N, K, rows, cols, name, mapping, mem)
        assert got.dram_read_bits + got.dram_write_bits >= got.compulsory_dram_bits


def test_roofline_by_hand():
    hw, df = cm.Hardware.systolic(16, 16), cm.Dataflow.preset("os", rows=16, cols=16)
    acc = cm.Accelerator("os16", hw, df, memory=cm.MemoryHierarchy(dram_bandwidth_bits=256))
    # 128 x 768 x 768 float32 on 256 PEs: compute 128*768*768/256 = 294,912 cycles; DRAM
    # (128*768 + 768*768 + 128*768) * 32 / 256 = 86,016 cycles -> compute-bound.
    assert cm.roofline(cm.GemmCall(m=128, n=768, k=768), acc) == 294_912
    # Decode (M=1): DRAM (768 + 589,824 + 768) * 32 / 256 = 73,920 > 768*768/256 = 2,304.
    assert cm.roofline(cm.GemmCall(m=1, n=768, k=768), acc) == 73_920
    split = cm.Accelerator("os16", hw, df, memory=cm.MemoryHierarchy(
        dram_bandwidth_bits=256, dram_channel_per_operand=True))
    assert cm.roofline(cm.GemmCall(m=1, n=768, k=768), split) == 768 * 768 * 32 // 256


def test_capacity_refused_with_message():
    hw = cm.Hardware.systolic(4, 4)
    df = cm.Dataflow.preset("os", rows=4, cols=4)
    mem = cm.MemoryHierarchy(buffer_bytes=4096)
    # 2 x (32*32 + 32*32) bytes of 8-bit inputs + 32*32*4 bytes of accumulator = 8192.
    mapping = cm.TileMapping(32, 32, 32)
    assert cm.buffer_bytes_needed(64, 64, 64, mem, mapping, 8, 8) == 8192
    with pytest.raises(ValueError, match=r"needs 8192 bytes of buffer .*buffer_bytes is 4096"):
        cm.analyze_memory(
            cm.GemmCall(m=64, n=64, k=64, bits_a=8, bits_b=8),
            cm.Accelerator("t", hw, df, memory=mem),
            mapping,
        )
    single = cm.MemoryHierarchy(buffer_bytes=4096, buffer_double_buffered=False)
    assert cm.buffer_bytes_needed(64, 64, 64, single, mapping, 8, 8) == 6144
    # A tile larger than the call is clamped to it.
    assert cm.buffer_bytes_needed(8, 8, 8, mem, mapping, 8, 8) == 2 * 128 + 256
    with pytest.raises(ValueError, match="register_bytes is 2"):
        cm.analyze_memory(
            cm.GemmCall(m=8, n=8, k=8),
            cm.Accelerator("t", hw, df, memory=cm.MemoryHierarchy(register_bytes=2)),
            mapping,
        )


@pytest.mark.parametrize("kwargs,match", [
    ({"dram_bandwidth_bits": 0}, r"dram_bandwidth_bits .* must be a finite number > 0, got 0"),
    ({"buffer_bytes": 0}, r"buffer_bytes must be > 0, got 0"),
    ({"buffer_bandwidth_bits": -1}, r"buffer_bandwidth_bits .* got -1"),
    ({"dram_pj_per_bit": float("nan")}, r"dram_pj_per_bit must be a finite number >= 0"),
    ({"psum_bits": 0}, r"psum_bits must be in 1..128, got 0"),
    ({"register_bytes": -4}, r"register_bytes must be > 0, got -4"),
])
def test_memory_hierarchy_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        cm.MemoryHierarchy(**kwargs)


def test_tile_mapping_validation():
    with pytest.raises(ValueError, match=r"TileMapping.tk must be a tile size >= 1 .* got 0"):
        cm.TileMapping(4, 4, 0)
    with pytest.raises(ValueError, match=r'permutation of "mnk" .* got "mmk"'):
        cm.TileMapping(4, 4, 4, "mmk")


def test_overflow_is_refused():
    hw = cm.Hardware.systolic(16, 16)
    df = cm.Dataflow.preset("os", rows=16, cols=16)
    mem = cm.MemoryHierarchy(buffer_bytes=1 << 40)
    # 2^59 MACs pass the workload's check; their register traffic (x 128 bits) does not fit.
    with pytest.raises(ValueError, match="register bits overflows int64"):
        cm.analyze_memory(
            cm.GemmCall(m=1 << 20, n=1 << 20, k=1 << 19),
            cm.Accelerator("t", hw, df, memory=mem),
            cm.TileMapping(4096, 4096, 4096),
        )


def test_defaults_follow_horowitz():
    mem = cm.MemoryHierarchy()
    assert mem.dram_pj_per_bit == 20.0                      # 640 pJ / 32 bits
    assert cm.sram_pj_per_bit(8192) == 5 / 32               # 5 pJ / 32 bits at 8 KB
    assert mem.buffer_pj_per_bit == pytest.approx(5 / 32 * (2 ** 20 / 8192) ** 0.5)
    assert cm.MemoryHierarchy(buffer_bytes=32768).buffer_pj_per_bit == pytest.approx(2 * 5 / 32)


def test_default_mapping_always_fits_random():
    rng = random.Random(SEED + 2)
    for _ in range(300):
        rows, cols = rng.randint(1, 32), rng.randint(1, 32)
        M, N, K = (rng.randint(1, 5000) for _ in range(3))
        a, b = rng.choice([(32, 32), (8, 8), (16, 4)])
        mem = cm.MemoryHierarchy(buffer_bytes=rng.choice([64, 4096, 1 << 20, 24 << 20]),
                                 buffer_double_buffered=rng.random() < 0.8)
        t = cm.default_tile_mapping(M, N, K, mem, rows, cols, bits_a=a, bits_b=b)
        assert t.order == "mnk"
        assert cm.buffer_bytes_needed(M, N, K, mem, t, a, b) <= mem.buffer_bytes, (M, N, K, t)
    with pytest.raises(ValueError, match="cannot hold one element each"):
        cm.default_tile_mapping(8, 8, 8, cm.MemoryHierarchy(buffer_bytes=8), 4, 4)


# GPT-2 small's GEMMs (attention per head, 12 heads as the batch).
GPT2_PREFILL = [(128, 2304, 768, 1), (128, 768, 768, 1), (128, 3072, 768, 1),
                (128, 768, 3072, 1), (128, 128, 64, 12), (128, 64, 128, 12)]
GPT2_DECODE = [(1, 2304, 768, 1), (1, 768, 768, 1), (1, 3072, 768, 1), (1, 768, 3072, 1),
               (1, 129, 64, 12), (1, 64, 129, 12)]


@pytest.mark.parametrize("gemms,limit", [(GPT2_PREFILL, 1.5), (GPT2_DECODE, 1.5)],
                         ids=["prefill", "decode"])
def test_gpt2_float32_default_mapping_near_roofline(gemms, limit):
    # os16 with a 1 MiB buffer and 256 bit/cycle DRAM; the buffer feeds an array edge of A and
    # B and one of C every cycle. Issue 12: float32 prefill within 1.5x of the roofline.
    hw = cm.Hardware.systolic(16, 16)
    df = cm.Dataflow.preset("os", rows=16, cols=16)
    mem = cm.MemoryHierarchy(dram_bandwidth_bits=256, buffer_bytes=1 << 20,
                             buffer_bandwidth_bits=16 * 3 * 32)
    cycles = roof = 0
    for M, N, K, batch in gemms:
        t = cm.default_tile_mapping(M, N, K, mem, 16, 16, batch=batch)
        r = cm.analyze_memory(
            cm.GemmCall(m=M, n=N, k=K, batch=batch), cm.Accelerator("t", hw, df, memory=mem), t
        )
        assert r.cycles >= r.roofline_cycles
        cycles += r.cycles
        roof += r.roofline_cycles
    assert cycles / roof <= limit, cycles / roof


def test_readme_worked_example():
    # src/cost_model/README.md, "The memory hierarchy": every number of the worked example.
    hw = cm.Hardware.systolic(4, 4)
    df = cm.Dataflow.preset("os", rows=4, cols=4)
    mem = cm.MemoryHierarchy(dram_bandwidth_bits=64, buffer_bytes=1024,
                             buffer_bandwidth_bits=1 << 20)
    t = cm.TileMapping(8, 4, 8, "mnk")
    r = cm.analyze_memory(
        cm.GemmCall(m=8, n=12, k=16, bits_a=8, bits_b=8, bits_c=32),
        cm.Accelerator("t", hw, df, memory=mem),
        t,
    )
    assert r.buffer_bytes_used == 320
    assert (r.tensors["A"].dram_read_bits, r.tensors["B"].dram_read_bits) == (3072, 1536)
    assert (r.tensors["C"].dram_write_bits, r.tensors["C"].dram_read_bits) == (3072, 0)
    assert (r.tensors["A"].dram_fetches, r.tensors["B"].dram_fetches,
            r.tensors["C"].dram_fetches) == (6, 6, 3)
    assert r.tile_steps == 6 and r.array_cycles == 6 * 28
    assert (r.first_fetch_cycles, r.overlapped_cycles, r.last_writeback_cycles) == (12, 168, 16)
    assert (r.cycles, r.roofline_cycles, r.dram_stall_cycles) == (196, 96, 28)
    assert (r.buffer_read_bits, r.buffer_write_bits) == (6 * 1024, 6 * 1024)
    e = cm.call_energy(r, mem, cm.PrecisionTable.horowitz_45nm().lookup(8, 8))
    assert e.mac_pj == pytest.approx(1536 * 0.3)
    assert e.register_pj == pytest.approx(1536 * 80 * cm.sram_pj_per_bit(64))
    assert e.buffer_pj == pytest.approx((12288 + 7680) * cm.sram_pj_per_bit(1024))
    assert e.dram_pj == pytest.approx(7680 * 20.0)


def test_cached_array_model_gives_the_same_metrics():
    from tenet_byoc import _cost_model as core

    hw = cm.Hardware.systolic(8, 8)
    df = cm.Dataflow.preset("ws", rows=8, cols=8)
    mem = cm.MemoryHierarchy(dram_bandwidth_bits=64, stationary_double_buffered=True)
    mappings = [cm.TileMapping(tm, tn, tk, order) for tm in (16, 40) for tn in (8, 24)
                for tk in (7, 64) for order in ("mnk", "kmn", "nkm")]
    many = core._analyze_memory_many(100, 70, 90, hw, df, mem, mappings, 2, 8, 8, 32)
    for t, got in zip(mappings, many):
        one = cm.analyze_memory(
            cm.GemmCall(m=100, n=70, k=90, batch=2, bits_a=8, bits_b=8),
            cm.Accelerator("t", hw, df, memory=mem),
            t,
        )
        assert got.as_dict() == one.as_dict()


def test_stationary_double_buffering_by_hand():
    # ws on 4 x 4, M=8 N=4 K=8, one tile: 2 folds (K by rows) of 4 (load) + 8 + 4 + 4 - 2 = 18
    # cycles = 36. Double-buffered stationary registers load the next fold's B during this
    # fold and the folds overlap their fill and drain (steady state): 2 folds of max(8, 4)
    # + one load of 4 + one fill and drain of 4 + 4 - 2 = 26. DRAM and buffer ample.
    hw = cm.Hardware.systolic(4, 4)
    df = cm.Dataflow.preset("ws", rows=4, cols=4)
    t = cm.TileMapping(8, 4, 8)
    kw = {"dram_bandwidth_bits": 1 << 20, "buffer_bandwidth_bits": 1 << 20}
    plain = cm.analyze_memory(
        cm.GemmCall(m=8, n=4, k=8), cm.Accelerator("t", hw, df, memory=cm.MemoryHierarchy(**kw)), t
    )
    fifo = cm.analyze_memory(
        cm.GemmCall(m=8, n=4, k=8),
        cm.Accelerator(
            "t", hw, df, memory=cm.MemoryHierarchy(**kw, stationary_double_buffered=True)
        ),
        t,
    )
    assert (plain.array_cycles, fifo.array_cycles) == (36, 26)
    # one cycle each for the first fetch and the last write-back at this bandwidth
    assert (plain.cycles, fifo.cycles) == (38, 28)


def _fold_schedule(folds: list[int], rows: int, cols: int) -> int:
    # An event schedule of a ws array with a double-buffered weight FIFO, fold by fold: fold
    # f's R-row weight load starts when fold f-1 starts streaming (its shadow registers are
    # free) and takes R cycles; fold f streams once its weights are in and the array's first
    # row is free (fold f-1's stream of L cycles has entered); the call ends when the last
    # fold's stream has passed the array (its fill and drain, R + C - 2).
    start = rows  # the first load
    prev_start, prev_len = start, folds[0]
    for length in folds[1:]:
        start = max(prev_start + prev_len, prev_start + rows)
        prev_start, prev_len = start, length
    return prev_start + prev_len + rows + cols - 2


@pytest.mark.parametrize(("m", "n", "k", "rows", "cols"), [
    (8, 4, 8, 4, 4), (12, 8, 16, 4, 4), (5, 3, 9, 4, 2), (32, 16, 24, 8, 4), (4, 4, 4, 4, 4),
])
def test_steady_state_folds_equal_an_event_schedule(m, n, k, rows, cols):
    # One buffer tile, ample bandwidth: the array cycles of the steady-state rule against the
    # event schedule, which equals the rule (sum of max(L, R) + load + fill and drain) when
    # the last fold's stream is at least R long, and is below it by R - L otherwise.
    hw = cm.Hardware.systolic(rows, cols)
    df = cm.Dataflow.preset("ws", rows=rows, cols=cols)
    mem = cm.MemoryHierarchy(dram_bandwidth_bits=1 << 20, buffer_bandwidth_bits=1 << 20,
                             stationary_double_buffered=True)
    got = cm.analyze_memory(
        cm.GemmCall(m=m, n=n, k=k), cm.Accelerator("t", hw, df, memory=mem), cm.TileMapping(m, n, k)
    ).array_cycles
    folds = [m] * (-(-k // rows) * -(-n // cols))  # ws: each fold streams all M rows
    ref = _fold_schedule(folds, rows, cols)
    assert got == ref + max(0, rows - folds[-1])
