"""Operands kept on chip between calls (GemmCall a_on_chip / c_on_chip): the DRAM traffic they
drop, counted by hand from the shapes, and the fall-back when they do not fit."""

from __future__ import annotations

import pytest

from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import preset


def _charge(acc, on_chip, **shape):
    call = cm.GemmCall(**shape, a_on_chip=on_chip, c_on_chip=on_chip)
    return cm.charge(call, acc)


def test_operands_on_chip_leave_only_the_weights_in_dram():
    # One TPU v1 convolution layer: A (2,888 x 2,048 int8) in the unified buffer, C (2,888 x
    # 256 32-bit sums) in the accumulators: only B, 2,048 x 256 int8, crosses DRAM.
    acc = preset("tpu_v1", mapping="auto")
    shape = dict(m=2888, n=256, k=2048, bits_a=8, bits_b=8, bits_c=32)
    kept, moved = _charge(acc, True, **shape), _charge(acc, False, **shape)
    assert kept.memory.compulsory_dram_bits == 2048 * 256 * 8
    assert kept.memory.tensors["A"].dram_read_bits == 0
    assert kept.memory.dram_write_bits == 0
    assert kept.memory.dram_read_bits == kept.memory.tensors["B"].dram_read_bits
    assert moved.memory.compulsory_dram_bits == (2888 * 2048 + 2048 * 256) * 8 + 2888 * 256 * 32
    # A over its own 34 GB/s channel bounds the call from below; on chip, the array does.
    a_cycles = 2888 * 2048 * 8 / acc.memory.dram_bandwidth_bits
    assert moved.memory.cycles >= a_cycles > 4 * kept.memory.cycles
    macs_cycles = 2888 * 256 * 2048 / (256 * 256)
    assert macs_cycles <= kept.memory.cycles < 1.2 * macs_cycles
    # The buffer holds both operands whole beside the tiles.
    assert kept.memory.buffer_bytes_used >= 2888 * 2048 + 2888 * 256 * 4


def test_operands_that_do_not_fit_are_charged_through_dram():
    # os16's buffer is 1 MiB: a 16 MiB A cannot stay there; the call is charged as without.
    acc = preset("os16")
    shape = dict(m=4096, n=64, k=4096, bits_a=8, bits_b=8, bits_c=32)
    kept, moved = _charge(acc, True, **shape), _charge(acc, False, **shape)
    assert kept.memory.cycles == moved.memory.cycles
    assert kept.memory.dram_read_bits == moved.memory.dram_read_bits
    assert kept.memory.compulsory_dram_bits == moved.memory.compulsory_dram_bits


def test_on_cores_the_shared_level_holds_them():
    # a100: A (4,096 x 4,096 fp16, 32 MiB) fits its 40 MiB L2; with C (1 MiB) on chip too,
    # only B crosses HBM. A 64 MiB A does not fit: charged as without.
    acc = preset("a100")
    shape = dict(m=4096, n=128, k=4096, bits_a=16, bits_b=16, bits_c=16)
    kept, moved = _charge(acc, True, **shape), _charge(acc, False, **shape)
    assert kept.memory.compulsory_dram_bits == 4096 * 128 * 16
    assert moved.memory.compulsory_dram_bits == (4096 * 4096 + 4096 * 128 * 2) * 16
    assert kept.memory.cycles <= moved.memory.cycles
    big = dict(shape, m=8192)
    assert _charge(acc, True, **big).memory.cycles == _charge(acc, False, **big).memory.cycles


def test_the_flags_travel_with_the_call():
    call = cm.GemmCall(m=8, n=8, k=8, a_on_chip=True)
    again = cm.GemmCall.from_json(call.to_json())
    assert again == call and again.a_on_chip and not again.c_on_chip
    assert call != cm.GemmCall(m=8, n=8, k=8)
    assert "a_on_chip=True" in repr(call)
    with pytest.raises(ValueError, match="a_on_chip must be true or false"):
        cm.GemmCall.from_json(call.to_json().replace('"a_on_chip":true', '"a_on_chip":1'))
