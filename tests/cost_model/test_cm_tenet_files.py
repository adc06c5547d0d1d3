"""TENET's own data files read through cm.load_tenet give the numbers isl gives on them."""

from __future__ import annotations

import re

import pytest

from tenet_byoc import cost_model as cm
from tenet_data import TENET_DATA

isl_oracle = pytest.importorskip("isl_oracle", reason="islpy-barvinok (test extra) missing")

def oracle_for(statement: cm.Statement, hw: cm.Hardware, df: cm.Dataflow):
    accesses = {}
    for a in statement.accesses:
        name = re.search(r"->\s*(\w+)\s*\[", a.relation).group(1)
        accesses[name] = a.relation
    return isl_oracle.analyze(statement.domain, accesses, hw.pe_domain, hw.interconnect,
                              df.space, df.time)


def assert_matches(got: cm.Metrics, ref) -> None:
    assert (got.macs, got.time_steps, got.active_pes) == (ref.macs, ref.time_steps,
                                                          ref.active_pes)
    assert got.avg_active_pes == ref.st_points / ref.time_steps
    for name, t in ref.tensors.items():
        g = got.tensors[name]
        assert (g.total, g.unique) == (t.total, t.unique), name
        assert g.spatial_reuse == t.spatial / ref.macs, name
        assert g.temporal_reuse == t.temporal / ref.macs, name


def shrink(statement: cm.Statement, bounds: dict[str, int]) -> cm.Statement:
    """The same statement with smaller upper bounds, so enumeration stays cheap."""
    dom = statement.domain
    for var, hi in bounds.items():
        dom, n = re.subn(rf"(\b{var}\s*<\s*)\d+", rf"\g<1>{hi}", dom)
        assert n == 1, (var, statement.domain)
    return cm.Statement(dom, list(statement.accesses), statement.name)


def test_paper_gemm_mappings_full_size_fast_path():
    # TENET's 256x256x256 matmul on its 8x8 systolic array: the fast path applies.
    for mapping in ["matmul_systolic_os.m", "matmul_systolic_ws.m"]:
        st, hw, df = cm.load_tenet(TENET_DATA / "pe_array/systolic.p",
                                   TENET_DATA / "mapping" / mapping,
                                   TENET_DATA / "statement/matmul.s")
        got = cm.analyze(st, hw, df)
        assert got.method == "fast"
        assert got.macs == 256 ** 3
        assert_matches(got, oracle_for(st, hw, df))


PE_8x8 = ["1d_systolic1.p", "1d_systolic2.p", "1d_systolic3.p", "1d_systolic4.p",
          "pe_8_8.p", "switch.p", "switch2.p", "systolic.p", "pe_12_14.p"]


@pytest.mark.parametrize("pe_file", PE_8x8)
@pytest.mark.parametrize("mapping", ["matmul_systolic_os.m", "matmul_systolic_ws.m"])
def test_every_pe_array_with_gemm_mappings(pe_file, mapping):
    st, hw, df = cm.load_tenet(TENET_DATA / "pe_array" / pe_file, TENET_DATA / "mapping" / mapping,
                               TENET_DATA / "statement/matmul.s")
    small = shrink(st, {"i": 11, "j": 19, "k": 9})
    got = cm.analyze(small, hw, df, method="enumerate")
    assert_matches(got, oracle_for(small, hw, df))


def test_gemm_2d_mapping_on_16x64():
    st, hw, df = cm.load_tenet(TENET_DATA / "pe_array/pe_16_64.p",
                               TENET_DATA / "mapping/gemm_2d.m", TENET_DATA / "statement/matmul.s")
    small = shrink(st, {"i": 20, "j": 18, "k": 5})
    assert_matches(cm.analyze(small, hw, df), oracle_for(small, hw, df))


def test_mttkrp():
    st, hw, df = cm.load_tenet(TENET_DATA / "pe_array/pe_8_8.p",
                               TENET_DATA / "mapping/mttkrp_systolic1.m",
                               TENET_DATA / "statement/mttkrp.s")
    small = shrink(st, {"i": 9, "j": 10, "k": 3, "l": 4})
    assert_matches(cm.analyze(small, hw, df), oracle_for(small, hw, df))


@pytest.mark.parametrize("mapping", ["conv2d_os.m", "conv2d_ws.m"])
def test_conv2d_needs_several_macs_per_pe(mapping):
    st, hw, df = cm.load_tenet(TENET_DATA / "pe_array/pe_8_8.p", TENET_DATA / "mapping" / mapping,
                               TENET_DATA / "statement/conv2d.s")
    small = shrink(st, {"k": 3, "c": 9, "ox": 4, "oy": 10, "rx": 3, "ry": 3})
    # Both mappings put the 3x3 window of one output on one PE at one stamp.
    with pytest.raises(ValueError, match="macs_per_pe_per_cycle allows 1"):
        cm.analyze(small, hw, df)
    hw9 = cm.Hardware(pe_domain=hw.pe_domain, interconnect=hw.interconnect,
                      bandwidth_bits=hw.bandwidth_bits, avg_latency=hw.avg_latency,
                      macs_per_pe_per_cycle=9)
    got = cm.analyze(small, hw9, df)
    assert_matches(got, oracle_for(small, hw9, df))
    # Every busy (PE, stamp) runs exactly 9 instances: one cycle per stamp at 9 MACs/cycle.
    assert got.compute_delay_exact == got.time_steps


def test_mapping_outside_the_pe_array_is_refused():
    # gemm_1d.m spreads j over 256 PEs; lineral.p has 64.
    st, hw, df = cm.load_tenet(TENET_DATA / "pe_array/lineral.p", TENET_DATA / "mapping/gemm_1d.m",
                               TENET_DATA / "statement/matmul.s")
    small = shrink(st, {"i": 2, "j": 70, "k": 2})
    with pytest.raises(ValueError, match=r"PE\[64\], outside Hardware.pe_domain"):
        cm.analyze(small, hw, df)


def test_files_round_trip(tmp_path):
    st, hw, df = cm.load_tenet(TENET_DATA / "pe_array/pe_12_14.p",
                               TENET_DATA / "mapping/matmul_systolic_ws.m",
                               TENET_DATA / "statement/matmul.s")
    p, m, s = tmp_path / "a.p", tmp_path / "a.m", tmp_path / "a.s"
    cm.save_tenet(p, m, s, hardware=hw, dataflow=df, statement=st)
    st2, hw2, df2 = cm.load_tenet(p, m, s)
    assert (hw2.pe_domain, hw2.interconnect, hw2.l1_bytes, hw2.l2_bytes, hw2.bandwidth_bits,
            hw2.avg_latency) == (hw.pe_domain, hw.interconnect, 600, 110592, 64.0, 2.0)
    assert (df2.space, df2.time) == (df.space, df.time)
    assert st2.domain == st.domain
    assert [(a.relation, a.is_write) for a in st2.accesses] == \
        [(a.relation, a.is_write) for a in st.accesses]
