"""Vector kernels as a GPU runs them (src/cost_model/vector.h: launch_cycles, dram_efficiency,
streams_from_dram, softmax_passes / norm_passes, row_bits_per_cycle): each figure of a charge
against its hand formula, the defaults charging as before, the JSON form and bad values."""

from __future__ import annotations

import json
import math

import pytest

from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import Accelerator, preset

GPU_UNIT = dict(lanes=64, streams_from_dram=True, softmax_passes=3, norm_passes=2,
                launch_cycles=900, dram_efficiency=0.8, row_bits_per_cycle=10.0)


def _acc(**unit) -> Accelerator:
    return preset("os16").replace(vector=cm.VectorUnit(**unit))


@pytest.mark.parametrize("op, passes", [("softmax", 3), ("layer_norm", 2), ("rms_norm", 2),
                                        ("gelu_tanh", 1), ("silu", 1)])
def test_a_streaming_kernel_reads_its_input_once_per_pass_from_dram(op, passes):
    acc = _acc(**GPU_UNIT)
    shape, bits = (64, 1024), 16  # 256 KiB in and out: fits os16's buffer, streams anyway
    n, h = math.prod(shape), shape[-1]
    ch = cm.charge_vector(cm.VectorCall(op, shape, bits_in=bits, bits_out=bits), acc)
    params = {"layer_norm": 2 * h, "rms_norm": h}.get(op, 0) * bits
    assert ch.passes == passes
    assert ch.dram_read_bytes == (passes * n * bits + params) / 8
    assert ch.dram_write_bytes == n * bits / 8
    assert ch.buffer_read_bytes == (passes * n * bits + params) / 8
    bw = acc.memory.dram_bandwidth_bits * 0.8
    assert ch.dram_cycles == math.ceil((passes * n * bits + params + n * bits) / bw)
    rows = math.ceil(passes * h * bits / 10.0) if op in ("softmax", "layer_norm",
                                                         "rms_norm") else 0
    assert ch.row_cycles == rows and ch.launch_cycles == 900
    assert ch.cycles == 900 + max(ch.compute_cycles, ch.buffer_cycles, ch.dram_cycles, rows)
    assert ch.latency_us == pytest.approx(ch.cycles / (acc.hardware.clock_ghz * 1e3))


def test_a_small_kernel_on_a_streaming_unit_still_goes_through_dram():
    # 8 x 64 float32 fit any buffer: the default unit keeps them there, a GPU's does not.
    call = cm.VectorCall("add", (8, 64), operand_elements=8 * 64)
    kept = cm.charge_vector(call, _acc())
    streamed = cm.charge_vector(call, _acc(streams_from_dram=True))
    assert not kept.spilled and kept.dram_read_bytes == 0 and kept.dram_write_bytes == 0
    assert streamed.dram_read_bytes == 2 * 512 * 4 and streamed.dram_write_bytes == 512 * 4


def test_one_wide_row_is_bound_by_its_passes_on_one_core():
    # One row of 8,192 bf16 values, layer norm reading it twice at 10 bits per cycle:
    # 2 x 8,192 x 16 / 10 = 26,215 cycles (rounded up), far above its streaming time.
    ch = cm.charge_vector(cm.VectorCall("layer_norm", (1, 8192), bits_in=16, bits_out=16),
                          _acc(**GPU_UNIT))
    assert ch.row_cycles == 26_215 and ch.cycles == 900 + 26_215


def test_the_default_unit_charges_as_before_the_kernel_fields():
    # Defaults: no launch, full bandwidth, one pass, no row bound: the old formula (a spill).
    acc = _acc()
    ch = cm.charge_vector(cm.VectorCall("softmax", (1, 4096, 768)), acc)
    n = 4096 * 768
    assert ch.passes == 1 and ch.row_cycles == 0 and ch.launch_cycles == 0
    assert ch.spilled and ch.dram_read_bytes == n * 4 and ch.dram_write_bytes == n * 4
    assert ch.cycles == max(ch.compute_cycles, ch.buffer_cycles, ch.dram_cycles)


def test_gpu_presets_state_their_kernels():
    for name in ("h100_sxm", "h200"):
        u = preset(name).vector
        assert u.streams_from_dram and (u.softmax_passes, u.norm_passes) == (3, 2)
        assert u.launch_cycles == 0 and u.row_bits_per_cycle == 0  # unpublished
    a = preset("a100").vector
    assert a.streams_from_dram and (a.softmax_passes, a.norm_passes) == (3, 1)
    for name in ("os16", "tpu_v1", "tpu_v5e"):
        u = preset(name).vector
        assert not u.streams_from_dram and (u.softmax_passes, u.norm_passes) == (1, 1)


def test_json_round_trip_and_files_without_the_kernel_fields():
    acc = _acc(**GPU_UNIT)
    text = acc.to_json()
    back = Accelerator.from_json(text)
    assert back.vector == acc.vector and back.to_json() == text
    doc = json.loads(text)
    assert doc["vector"]["norm_passes"] == 2 and doc["vector"]["streams_from_dram"] is True
    for key in ("launch_cycles", "dram_efficiency", "streams_from_dram", "softmax_passes",
                "norm_passes", "row_bits_per_cycle"):
        del doc["vector"][key]
    old = Accelerator.from_json(json.dumps(doc))
    assert old.vector == cm.VectorUnit(lanes=64)


@pytest.mark.parametrize("field, value, message", [
    ("launch_cycles", -1, "VectorUnit.launch_cycles must be >= 0"),
    ("dram_efficiency", 0.0, r"VectorUnit.dram_efficiency must be in \(0, 1\]"),
    ("dram_efficiency", 1.5, "dram_efficiency"),
    ("softmax_passes", 0, "VectorUnit.softmax_passes must be 1..64"),
    ("norm_passes", 65, "VectorUnit.norm_passes"),
    ("row_bits_per_cycle", -2.0, "VectorUnit.row_bits_per_cycle"),
    ("row_bits_per_cycle", float("inf"), "row_bits_per_cycle"),
])
def test_bad_kernel_fields_are_refused_by_name(field, value, message):
    with pytest.raises(ValueError, match=message):
        cm.VectorUnit(**{field: value})
    doc = json.loads(_acc().to_json())
    if math.isfinite(value):
        doc["vector"][field] = value
        with pytest.raises(ValueError, match=message):
            Accelerator.from_json(json.dumps(doc))


def _four_cores(**unit) -> Accelerator:
    # 4 cores of 8 lanes each (32 in all), a shared level of 100 bits per cycle.
    return _acc(lanes=32, **unit).replace(cores=cm.Cores(count=4, shared_bandwidth_bits=100))


def test_a_call_spreads_its_rows_over_the_cores_in_waves_by_hand():
    # Softmax over 5 rows of 64 float32 on 4 cores: a row is one core's, so one core runs
    # ceil(5 / 4) = 2 rows. Per row: 3 x 64 adds, 64 multiplies (1 cycle each), 64 exps and
    # one reciprocal (4 cycles each) = 516 lane cycles; 2 rows on a core's 8 lanes: 129
    # cycles (one core of 32 lanes: ceil(5 x 516 / 32) = 81). The buffer (32 x 64 bits per
    # cycle, a quarter per core) moves the core's 2 rows in and out: 2 x 2 x 64 x 32 / 512 = 16.
    call = cm.VectorCall("softmax", (5, 64))
    ch = cm.charge_vector(call, _four_cores())
    assert (ch.cores, ch.compute_cycles, ch.buffer_cycles) == (4, 129, 16)
    assert ch.shared_cycles == 0 and ch.cycles == 129  # kept on chip: nothing crosses it
    assert cm.charge_vector(call, _acc(lanes=32)).compute_cycles == 81
    # Streamed through DRAM (one read, one write of 320 floats): the shared level carries
    # the 20,480 bits at 100 per cycle; DRAM is the chip's, as on one core.
    st = cm.charge_vector(call, _four_cores(streams_from_dram=True))
    assert st.shared_cycles == 205
    assert st.dram_cycles == math.ceil(20_480 / _acc().memory.dram_bandwidth_bits)
    assert st.cycles == max(129, 16, 205, st.dram_cycles)


def test_elementwise_work_splits_by_elements_and_few_rows_leave_cores_idle():
    # 100 adds of a (2, 50) tensor: 25 per core on 8 lanes, ceil(25 / 8) = 4 cycles.
    add = cm.charge_vector(cm.VectorCall("add", (2, 50), operand_elements=100), _four_cores())
    assert (add.cores, add.compute_cycles) == (4, 4)
    # A layer norm of 2 rows of 64 runs on 2 of the 4 cores: one row each, 4 x 64 + 1 adds,
    # 3 x 64 + 2 multiplies and one reciprocal (4 cycles) = 455 lane cycles / 8 -> 57.
    ln = cm.charge_vector(cm.VectorCall("layer_norm", (2, 64)), _four_cores())
    assert (ln.cores, ln.compute_cycles) == (2, 57)


def test_lanes_must_split_evenly_over_the_cores():
    with pytest.raises(ValueError, match=r"vector.lanes \(30\) must be a multiple of cores.count"):
        cm.charge_vector(cm.VectorCall("add", (4,), operand_elements=4),
                         _acc(lanes=30).replace(cores=cm.Cores(count=4, shared_bandwidth_bits=8)))
