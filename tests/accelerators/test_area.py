"""Accelerator.area: a preset's components equal the published figures summed by hand, the
node and format rules give the numbers they state, and a user's table replaces figures."""

from __future__ import annotations

import json
import math

import pytest

from tenet_byoc import area
from tenet_byoc.accelerators import preset


def test_os16_at_45nm_equals_horowitz_summed_by_hand():
    acc = preset("os16")  # 256 PEs, precision units fp32, fp16, int8; 1 MAC/PE/cycle
    got = acc.area(node_nm=45)
    # one MAC = multiply + add (Horowitz 45 nm um2); int8 accumulates at 32 bits
    assert got["mac:fp32"] == pytest.approx(256 * (7700 + 4184) / 1e6, rel=1e-12)
    assert got["mac:fp16"] == pytest.approx(256 * (1640 + 1360) / 1e6, rel=1e-12)
    assert got["mac:int8"] == pytest.approx(256 * (282 + 137) / 1e6, rel=1e-12)
    # 256 B of registers per PE, NanGate45 DFF_X1 4.522 um2 per bit
    assert got["registers"] == pytest.approx(256 * 256 * 8 * 4.522 / 1e6, rel=1e-12)
    # 1 MiB at 0.346 um2/bit over 70% efficiency; (16 + 2*16) x 32 = 1536 bits/cycle of
    # buffer port -> 12 banks of 128 bits, 5000 um2 each
    assert got["buffer"] == pytest.approx((8 * 2**20 * 0.346 / 0.7 + 12 * 5000) / 1e6,
                                          rel=1e-12)
    # 256 bits/cycle at 1 GHz = 32 GB/s, 0.05 mm2 per GB/s
    assert got["dram_interface"] == pytest.approx(32 * 0.05, rel=1e-12)
    # 16 float32 lanes, an fp32 add and multiply each, and their 16 x 64 = 1024-bit buffer
    # port: 8 banks of 128 bits
    assert got["vector_unit"] == pytest.approx((16 * (4184 + 7700) + 8 * 5000) / 1e6,
                                               rel=1e-12)
    # 16 weight elements a cycle at the edge, an fp16 multiply and add each
    assert got["edge_dequantizer"] == pytest.approx(16 * (1640 + 1360) / 1e6, rel=1e-12)
    parts = [v for k, v in got.items() if k != "total"]
    assert got["total"] == pytest.approx(sum(parts), rel=1e-12)
    assert set(got) == {"mac:fp32", "mac:fp16", "mac:int8", "registers", "buffer",
                        "dram_interface", "vector_unit", "edge_dequantizer", "total"}


def test_node_scaling_follows_the_bitcell_ratio():
    acc = preset("os16")
    at45, at7 = acc.area(node_nm=45), acc.area(node_nm=7)
    s = 0.027 / 0.346
    assert at7["mac:int8"] == pytest.approx(at45["mac:int8"] * s, rel=1e-12)
    assert at7["buffer"] == pytest.approx((8 * 2**20 * 0.027 / 0.7 + 12 * 5000 * s) / 1e6,
                                          rel=1e-12)
    # 12 nm lies between 16 (0.070) and 7 (0.027): log-log interpolation
    t = (math.log(12) - math.log(7)) / (math.log(16) - math.log(7))
    cell = math.exp(math.log(0.027) + t * (math.log(0.070) - math.log(0.027)))
    assert area.AreaTable().bitcell_um2(12) == pytest.approx(cell, rel=1e-12)
    with pytest.raises(ValueError, match="node_nm=3 is outside"):
        acc.area(node_nm=3)


def test_format_rules():
    t = area.AreaTable()
    # int4: a quarter of the int8 multiplier, the same 32-bit accumulator
    assert area.mac_figure("int4") == pytest.approx(282 / 4 + 137)
    assert area.mac_figure("int4", key="pj") == pytest.approx(0.2 / 4 + 0.1)
    # fp8 e4m3: significand 4 bits, (4/11)^2 of the fp16 multiplier, fp16 accumulation
    assert area.mac_figure("fp8_e4m3") == pytest.approx(1640 * 16 / 121 + 1360)
    assert area.mac_figure("fp8_e5m2") == pytest.approx(1640 * 9 / 121 + 1360)
    assert area.mac_figure("bf16") == pytest.approx(1640 * 64 / 121 + 4184)
    # MX: the element MAC + (8-bit add + accumulator add) / 32
    assert area.mac_figure("mxint8") == pytest.approx(282 + 137 + (36 + 137) / 32)
    assert area.mac_figure("mxfp4") == pytest.approx(1640 * 4 / 121 + 1360 + (36 + 1360) / 32)
    assert t.mx_block == 32
    with pytest.raises(ValueError, match="unknown PE format 'fp8e4m3'.*did you mean"):
        area.mac_figure("fp8e4m3")


def test_formats_name_a_unit_by_width():
    acc = preset("os16")
    got = acc.area(formats={8: "fp8_e4m3"})
    assert "mac:int8" not in got
    assert got["mac:fp8_e4m3"] == pytest.approx(256 * (1640 * 16 / 121 + 1360) / 1e6)
    with pytest.raises(ValueError, match="no 4-bit precision unit"):
        acc.area(formats={4: "int4"})
    with pytest.raises(ValueError, match="'int4' is 4-bit, not 8-bit"):
        acc.area(formats={8: "int4"})


def test_every_default_figure_names_its_source():
    from dataclasses import fields

    assert {f.name for f in fields(area.AreaTable)} == set(area.SOURCES)


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_user_table_replaces_figures(tmp_path, suffix):
    path = tmp_path / f"synth{suffix}"
    data = {"int8_mult_um2": 100.0, "sram_bitcell_um2": {45: 0.5}}
    if suffix == ".json":
        path.write_text(json.dumps(data))
    else:
        path.write_text("int8_mult_um2: 100.0\nsram_bitcell_um2:\n  45: 0.5\n")
    got = preset("os16").area(table=path)
    assert got["mac:int8"] == pytest.approx(256 * (100 + 137) / 1e6)
    assert got["buffer"] == pytest.approx((8 * 2**20 * 0.5 / 0.7 + 12 * 5000) / 1e6)
    # the other nodes stay: 7 nm still resolves, scaled by the new 45 nm cell
    assert preset("os16").area(7, table=path)["mac:int8"] == pytest.approx(
        256 * (100 + 137) * 0.027 / 0.5 / 1e6)


@pytest.mark.parametrize(("text", "match"), [
    ('{"int8_mul_um2": 1}', "unknown field 'int8_mul_um2'.*did you mean 'int8_mult_um2'"),
    ('{"fp32_add_um2": -3}', "fp32_add_um2.*positive number, got -3"),
    ('{"fp32_add_um2": "big"}', "fp32_add_um2.*positive number, got 'big'"),
    ('{"sram_array_efficiency": 1.5}', r"sram_array_efficiency must be in \(0, 1\]"),
    ('[1, 2]', "must hold a mapping"),
    ('{"int8', "not valid JSON"),
])
def test_a_bad_table_names_the_field(tmp_path, text, match):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        area.AreaTable.load(path)


def test_a_missing_table_file():
    with pytest.raises(FileNotFoundError, match="area table 'nope.json' does not exist"):
        preset("os16").area(table="nope.json")
