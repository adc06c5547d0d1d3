"""MAC units keyed by number format (issue 31): int8 and fp8 are two units of 8 bits, each
preset's from its data sheet; float codes a chip has no unit for run emulated on its wider
float unit, at that unit's rate, and a table that cannot take them refuses them by name."""

from __future__ import annotations

import math

import pytest

from tenet_byoc import cost_model as cm
from tenet_byoc.area import mac_figure
from tenet_byoc.accelerators import Accelerator, preset
from tenet_byoc.quantization import get_scheme

# Compute-bound on every chip below: 4096^3 MACs against 3 x 4096^2 bytes.
M = N = K = 4096


def _call(float_codes: bool, bits: int = 8) -> cm.GemmCall:
    recipe = cm.QuantRecipe(float_codes=float_codes)  # no extra ops: the MACs alone
    return cm.GemmCall(m=M, n=N, k=K, bits_a=bits, bits_b=bits, bits_c=16, recipe=recipe)


def _pes(acc: Accelerator) -> int:
    return acc.hardware.num_pes * acc.cores.count


@pytest.mark.parametrize(("name", "int8_per_bf16", "fp8_per_bf16"), [
    ("h200", 2, 2),      # H100/H200 whitepaper: FP8 and INT8 1,978.9 dense, bf16 989.4
    ("a100", 2, 1),      # A100 data sheet: INT8 624 TOPS, bf16 312, no FP8
    ("tpu_v5e", 2, 1),   # Google Cloud TPU v5e: int8 393 TOPS, bf16 197, no fp8
])
def test_the_roofline_is_the_data_sheets_peak_of_the_format(name, int8_per_bf16, fp8_per_bf16):
    acc = preset(name)
    bf16 = acc.hardware.macs_per_pe_per_cycle_at(16)
    for float_codes, ratio in ((False, int8_per_bf16), (True, fp8_per_bf16)):
        c = cm.charge(_call(float_codes), acc)
        by_hand = math.ceil(M * N * K / (_pes(acc) * bf16 * ratio))
        assert c.memory.roofline_cycles == max(by_hand, acc.cores.launch_cycles), float_codes
        assert c.memory.cycles >= c.memory.roofline_cycles


def test_fp8_without_its_unit_is_emulated_at_the_bf16_units_rate():
    acc = preset("a100")
    fp8, int8 = cm.charge(_call(True), acc), cm.charge(_call(False), acc)
    bf16 = cm.charge(_call(False, bits=16), acc)
    assert acc.precision.lookup(8, 8, float_codes=True).bits_a == 16  # the fp16 unit
    assert fp8.memory.cycles > 1.8 * int8.memory.cycles
    # the 8-bit codes still move as 8 bits: fewer DRAM bits than the bf16 call
    assert fp8.memory.dram_read_bits < bf16.memory.dram_read_bits
    assert fp8.memory.cycles <= bf16.memory.cycles


def test_h200_runs_fp8_on_its_fp8_unit_and_int8_on_its_int8_unit():
    acc = preset("h200")
    fp8, int8 = acc.precision.lookup(8, 8, float_codes=True), acc.precision.lookup(8, 8)
    assert (fp8.format, int8.format) == ("float", "int")
    assert fp8.pj_per_mac == pytest.approx(mac_figure("fp8_e4m3", key="pj"))
    assert int8.pj_per_mac == pytest.approx(cm.integer_mac_pj(8, 8, 32))
    a, b = cm.charge(_call(True), acc), cm.charge(_call(False), acc)
    assert a.memory.cycles == b.memory.cycles  # one dense peak for both formats
    assert a.energy.mac_pj == pytest.approx(b.energy.mac_pj * fp8.pj_per_mac / int8.pj_per_mac)


def test_a_table_of_units_without_a_format_charges_both_codes_alike():
    acc = preset("os16_mp")  # Horowitz's units: any codes of their width
    assert cm.charge(_call(True), acc).ledger_fields() == cm.charge(_call(False), acc).ledger_fields()


def test_codes_no_unit_takes_are_refused_naming_them():
    table = cm.PrecisionTable([cm.MacSpec(8, 8, 1, 0.3, format="int")])
    with pytest.raises(ValueError, match="float codes.*units: \\(8, 8, int\\)"):
        table.lookup(8, 8, float_codes=True)
    with pytest.raises(ValueError, match="format must be"):
        cm.PrecisionTable([cm.MacSpec(8, 8, 1, 0.3, format="fp8")])


def test_formats_round_trip_in_the_json_form():
    acc = preset("h200")
    back = Accelerator.from_json(acc.to_json())
    assert [u.format for u in back.precision.units] == [u.format for u in acc.precision.units]
    assert back.to_json() == acc.to_json()


@pytest.mark.parametrize(("scheme", "float_codes"), [
    ("e4m3_e4m3_f16", True), ("mxfp8", True), ("per_token", False), ("q4f16_1", False)])
def test_schemes_say_whether_their_codes_are_floats(scheme, float_codes):
    assert get_scheme(scheme).recipe().float_codes is float_codes
