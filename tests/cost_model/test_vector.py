"""The vector unit and the edge dequantizer (src/cost_model/vector.h): every operator kind's
charge against a hand formula (ops per class from the operator's arithmetic, cycles as ops x
lane cycles / lanes, bytes by level), their JSON form and the errors that name bad fields."""

from __future__ import annotations

import json
import math
import pickle

import pytest

from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import Accelerator, preset

CLASSES = ("add", "mul", "exp", "recip", "tanh")


def _hand_ops(op: str, n: int, h: int, e: int) -> dict:
    """Operations per class written out from each operator's arithmetic (N elements in rows
    of H, R = N / H rows; e: the second operand's or the tables' elements)."""
    r = n // h
    ops = {
        # mean: sum x, /H; var: x - mean, square, sum, /H; + eps; rsqrt; x rstd, x g, + b
        "layer_norm": {"add": n + n + n + n + r, "mul": n + r + r + n + n, "recip": r},
        # sum of squares, /H, + eps, rsqrt, x rstd, x g
        "rms_norm": {"add": n + r, "mul": n + r + n + n, "recip": r},
        # max, subtract, exp, sum, 1/sum per row, multiply
        "softmax": {"add": 3 * n, "exp": n, "recip": r, "mul": n},
        # x^2, x^3, c x^3, k (..), 0.5 x, (..)(1 + t); x + c x^3, 1 + t; tanh
        "gelu_tanh": {"mul": 6 * n, "add": 2 * n, "tanh": n},
        # x / sqrt2, 0.5 x, (..)(1 + erf); 1 + erf; erf
        "gelu_erf": {"mul": 3 * n, "add": n, "tanh": n},
        # exp(-x), 1 + ., 1 / ., x * .
        "silu": {"exp": n, "add": n, "recip": n, "mul": n},
        "add": {"add": n},
        "multiply": {"mul": n},
        "divide": {"recip": e, "mul": n},
        "rotary": {"mul": 2 * n, "add": n},
        "take": {},
        "mask": {"add": n},
        "quantize": {"mul": n, "add": 3 * n},
        "kv_write": {},
        "relu": {"add": n},  # max(x, 0): one compare-select per element
        "tanh": {"tanh": n},  # soft-capping's tanh alone
    }[op]
    return {c: ops.get(c, 0) for c in CLASSES}


def _hand_bits(op: str, n: int, h: int, e: int, bits_in: int, bits_out: int, buffer_bytes: int):
    """(buffer read, buffer write, DRAM read, DRAM write) bits: activations through the buffer,
    parameters from DRAM, a spill when activations and output exceed the buffer together."""
    r = n // h
    act = {"add": (n + e) * bits_in, "multiply": (n + e) * bits_in, "divide": (n + e) * bits_in,
           "take": r * 32, "mask": 0}.get(op, n * bits_in)
    param = {"layer_norm": 2 * h * bits_in, "rms_norm": h * bits_in, "rotary": e * bits_in,
             "take": n * bits_out}.get(op, 0)
    out = n * bits_out
    spill = act + out > buffer_bytes * 8
    dram_w = out if (spill or op == "kv_write") else 0
    return act + param, 0 if op == "kv_write" else out, param + (act if spill else 0), dram_w


OPS = ("layer_norm", "rms_norm", "softmax", "gelu_tanh", "gelu_erf", "silu", "add", "multiply",
       "divide", "rotary", "take", "mask", "quantize", "kv_write", "relu", "tanh")


def _operand(op: str, n: int, h: int) -> int | None:
    if op == "divide":
        return 12  # a broadcast divisor (one per head): 12 reciprocals, not N
    if op == "rotary":
        return 2 * 128 * 64  # cos and sin of [seq 128, head_dim 64]
    return None


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("acc_name", ["os16", "tpu_v1"])
def test_each_operator_kind_equals_its_hand_formula(op, acc_name):
    acc = preset(acc_name)
    shape, bits_in, bits_out = (1, 128, 12, 64), 16, 32
    n, h = math.prod(shape), shape[-1]
    call = cm.VectorCall(op, shape, bits_in=bits_in, bits_out=bits_out,
                         operand_elements=_operand(op, n, h))
    e = call.operand_elements
    assert e == (_operand(op, n, h) or (n if op in ("add", "multiply") else 0))
    ch = cm.charge_vector(call, acc)
    ops = _hand_ops(op, n, h, e)
    assert ch.ops == ops and call.ops == ops
    assert ch.unit == "vector" and ch.elements == n and ch.rows == n // h
    unit, mem = acc.vector, acc.memory
    compute = math.ceil(sum(ops[c] * unit.cycles_per_op[c] for c in CLASSES) / unit.lanes)
    br, bw, dr, dw = _hand_bits(op, n, h, e, bits_in, bits_out, mem.buffer_bytes)
    assert (ch.buffer_read_bytes, ch.buffer_write_bytes) == (br / 8, bw / 8)
    assert (ch.dram_read_bytes, ch.dram_write_bytes) == (dr / 8, dw / 8)
    assert ch.compute_cycles == compute
    assert ch.buffer_cycles == math.ceil((br + bw) / unit.buffer_bandwidth_bits)
    assert ch.dram_cycles == math.ceil((dr + dw) / mem.dram_bandwidth_bits)
    assert ch.cycles == max(compute, ch.buffer_cycles, ch.dram_cycles)
    assert ch.latency_us == pytest.approx(ch.cycles / (acc.hardware.clock_ghz * 1e3), rel=1e-12)
    op_pj = sum(ops[c] * unit.pj_per_op[c] for c in CLASSES)
    assert ch.op_pj == pytest.approx(op_pj, rel=1e-12)
    assert ch.energy_pj == pytest.approx(
        op_pj + (br + bw) * mem.buffer_pj_per_bit + (dr + dw) * mem.dram_pj_per_bit, rel=1e-12)
    assert ch.schedule == "pipelined"


def test_a_layer_norm_too_large_for_the_buffer_spills_to_dram():
    acc = preset("os16")  # 1 MiB buffer: 2 x 1 x 4096 x 768 float32 (24 MiB) does not fit
    ch = cm.charge_vector(cm.VectorCall("layer_norm", (1, 4096, 768)), acc)
    n = 4096 * 768
    assert ch.spilled
    assert ch.dram_read_bytes == (n + 2 * 768) * 4 and ch.dram_write_bytes == n * 4
    small = cm.charge_vector(cm.VectorCall("layer_norm", (1, 16, 768)), acc)
    assert not small.spilled and small.dram_read_bytes == 2 * 768 * 4
    assert small.dram_write_bytes == 0


def test_softmax_on_os16_by_hand():
    # 12 heads of a 128 x 128 score matrix: N = 196,608, R = 1,536 rows; 16 lanes.
    # lane cycles = 3N x 1 + N x 1 + N x 4 + R x 4 = 8N + 4R = 1,579,008 -> / 16 = 98,688.
    ch = cm.charge_vector(cm.VectorCall("softmax", (1, 12, 128, 128)), preset("os16"))
    assert ch.compute_cycles == 98_688
    # 2 x N x 32 bits through 1,024 bits per cycle: 12,288 cycles; compute bound.
    assert ch.buffer_cycles == 12_288 and ch.cycles == 98_688


def test_lanes_and_costs_change_the_charge_as_the_formula_says():
    base = preset("os16")
    fast = base.replace(vector=cm.VectorUnit(lanes=64, cycles_per_op={"exp": 1}))
    call = cm.VectorCall("softmax", (4, 256))
    a, b = cm.charge_vector(call, base), cm.charge_vector(call, fast)
    n, r = 1024, 4
    assert a.compute_cycles == math.ceil((3 * n + n + 4 * n + 4 * r) / 16)
    assert b.compute_cycles == math.ceil((3 * n + n + 1 * n + 4 * r) / 64)


def test_presets_document_their_vector_units():
    assert preset("os16").vector.lanes == 16 and preset("os128").vector.lanes == 128
    assert preset("tpu_v1").vector.lanes == 256  # the activation pipeline's width
    assert preset("os16").edge_dequantizer.bits == (4, 8)
    assert preset("os16").edge_dequantizer.elements_per_cycle == 16
    assert preset("tpu_v1").edge_dequantizer.elements_per_cycle == 0  # int8 only: none
    u = cm.VectorUnit()
    # Horowitz ISSCC 2014, 45 nm float32: add 0.9 pJ, multiply 3.7 pJ.
    assert u.pj_per_op["add"] == 0.9 and u.pj_per_op["mul"] == 3.7
    assert u.buffer_bandwidth_bits == 16 * 64


@pytest.mark.parametrize("name", ["os16", "os128", "tpu_v1", "tenet_os8"])
def test_json_round_trip_is_exact_with_the_new_units(name):
    acc = preset(name)
    custom = acc.replace(
        vector=cm.VectorUnit(lanes=7, cycles_per_op={"tanh": 2.5}, pj_per_op={"exp": 0.1},
                             buffer_bandwidth_bits=333.3, schedule="serial"),
        edge_dequantizer=cm.EdgeDequantizer(3, bits=[2, 4], pj_per_element=0.7))
    for a in (acc, custom):
        text = a.to_json()
        back = Accelerator.from_json(text)
        assert back == a and back.to_json() == text
        assert back.vector == a.vector and back.edge_dequantizer == a.edge_dequantizer
    doc = json.loads(custom.to_json())
    assert doc["vector"]["schedule"] == "serial" and doc["vector"]["cycles_per_op"]["tanh"] == 2.5
    assert doc["edge_dequantizer"] == {"elements_per_cycle": 3, "bits": [2, 4],
                                       "pj_per_element": 0.7}


def _doc_with(path: tuple, value) -> str:
    doc = json.loads(preset("os16").to_json())
    obj = doc
    for key in path[:-1]:
        obj = obj[key]
    if value is _DELETE:
        del obj[path[-1]]
    else:
        obj[path[-1]] = value
    return json.dumps(doc)


_DELETE = object()


def test_json_written_before_the_units_reads_with_their_defaults():
    # Design files written before issue 20 have neither key: the defaults, no dequantizer.
    doc = json.loads(preset("os16").to_json())
    del doc["vector"], doc["edge_dequantizer"]
    acc = Accelerator.from_json(json.dumps(doc))
    assert acc.vector == cm.VectorUnit() and acc.edge_dequantizer == cm.EdgeDequantizer()
    assert acc.vector.lanes == 16 and acc.edge_dequantizer.elements_per_cycle == 0


@pytest.mark.parametrize(
    "path, value, message",
    [
        (("vector", "lanes"), 0, "VectorUnit.lanes must be >= 1, got 0"),
        (("vector", "lanes"), 1.5, "lanes"),
        (("vector", "cycles_per_op", "exp"), 0, "VectorUnit.cycles_per_op.exp"),
        (("vector", "cycles_per_op", "log"), 1, "log"),
        (("vector", "pj_per_op", "mul"), -1, "VectorUnit.pj_per_op.mul"),
        (("vector", "pj_per_op", "tanh"), _DELETE, "tanh"),
        (("vector", "buffer_bandwidth_bits"), 0, "VectorUnit.buffer_bandwidth_bits"),
        (("vector", "schedule"), "later", "accelerator.vector.schedule.*pipelined.*serial"),
        (("vector", "extra"), 1, "extra"),
        (("edge_dequantizer", "elements_per_cycle"), -2, "elements_per_cycle must be >= 0"),
        (("edge_dequantizer", "bits"), [], "EdgeDequantizer.bits"),
        (("edge_dequantizer", "bits"), [8, 4], "ascending"),
        (("edge_dequantizer", "bits"), [40], r"bits\[0\] = 40"),
        (("edge_dequantizer", "bits"), "4", "bits must be a list"),
        (("edge_dequantizer", "pj_per_element"), -0.5, "pj_per_element"),
    ],
)
def test_bad_vector_fields_in_json_are_refused_by_name(path, value, message):
    with pytest.raises(ValueError, match=message):
        Accelerator.from_json(_doc_with(path, value))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"op": "norm", "shape": (4,)}, "VectorCall.op: unknown vector operator 'norm'"),
        ({"op": "add", "shape": ()}, "at least one axis"),
        ({"op": "add", "shape": (4, 0)}, r"shape\[1\] = 0"),
        ({"op": "softmax", "shape": (4,), "bits_in": 0}, "bits_in = 0"),
        ({"op": "softmax", "shape": (4,), "bits_out": 65}, "bits_out = 65"),
        ({"op": "add", "shape": (4,), "operand_elements": 5}, "operand_elements of add = 5"),
        ({"op": "rotary", "shape": (4,)}, "operand_elements of rotary = 0"),
        ({"op": "softmax", "shape": (4,), "operand_elements": 3}, "operand_elements of softmax"),
    ],
)
def test_bad_vector_calls_are_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        cm.VectorCall(**kwargs)


def test_bad_unit_values_are_refused_by_name():
    with pytest.raises(ValueError, match="unknown op class 'sqrt'"):
        cm.VectorUnit(cycles_per_op={"sqrt": 2})
    with pytest.raises(ValueError, match="VectorUnit.schedule"):
        cm.VectorUnit(schedule="overlap")
    with pytest.raises(ValueError, match="EdgeDequantizer.bits"):
        cm.EdgeDequantizer(16)
    with pytest.raises(ValueError, match="EdgeDequantizer.bits"):
        cm.EdgeDequantizer(0, bits=[4])


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_a_vector_call_pickles_to_an_equal_call_and_is_checked_again(protocol):
    # dse and serving send vector calls to worker processes: the call that arrives is the
    # one sent, field for field, and charges the same.
    call = cm.VectorCall("add", [3, 5], bits_in=16, bits_out=8, operand_elements=5)
    back = pickle.loads(pickle.dumps(call, protocol=protocol))
    assert back == call
    assert (back.op, back.shape, back.bits_in, back.bits_out, back.operand_elements) == (
        "add", (3, 5), 16, 8, 5)
    acc = preset("os16")
    assert cm.charge_vector(back, acc).cycles == cm.charge_vector(call, acc).cycles
    # A pickle edited in transit is refused as the constructor refuses it, by field.
    for state, message in ((("nope", [1], 32, 32, 0), "unknown vector operator 'nope'"),
                           (("add", [1, -3], 32, 32, 0), r"shape\[1\] = -3")):
        with pytest.raises(ValueError, match=message):
            cm.VectorCall.__new__(cm.VectorCall).__setstate__(state)

