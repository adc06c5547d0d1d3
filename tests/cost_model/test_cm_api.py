"""The Python API: presets, configuration text, thread safety, derived figures."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import Accelerator
from tenet_data import TENET_DATA


@pytest.mark.parametrize("name", ["os", "ws"])
def test_presets_generalise_tenets_mapping_files(name):
    lines = (TENET_DATA / "mapping" / f"matmul_systolic_{name}.m").read_text().split()
    df = cm.Dataflow.preset(name, rows=8, cols=8)
    assert [df.space.replace(" ", ""), df.time.replace(" ", "")] == lines


def test_preset_fields_and_tiling():
    df = cm.Dataflow.preset("ws", rows=4, cols=8, m=16)
    assert (df.preset_name, df.rows, df.cols, df.tiling) == ("ws", 4, 8, {"m": 16})
    assert "floor(i/16)" in df.time
    assert cm.Hardware.systolic(4, 8).num_pes == 32
    assert cm.Hardware(pe_domain="{PE[p,q]: 0<=p<4 and 0<=q<4 and p+q<3}",
                       interconnect="{PE[p,q]->PE[p-1,q]}").num_pes == 6


@settings(max_examples=50, deadline=None)
@given(rows=st.integers(1, 64), cols=st.integers(1, 64),
       bw=st.floats(1e-3, 1e9, allow_nan=False), lat=st.floats(0, 1e4, allow_nan=False),
       clock=st.floats(1e-3, 10),
       mpc=st.one_of(st.integers(1, 8), st.dictionaries(st.sampled_from([4, 8, 16]),
                                                        st.integers(1, 8), min_size=1)),
       preset=st.sampled_from(["os", "ws", "is"]), tile=st.one_of(st.none(), st.integers(1, 99)),
       name=st.text(max_size=12), buffer=st.integers(1, 1 << 30),
       dram_pj=st.floats(0, 1e3, allow_nan=False), flags=st.tuples(st.booleans(), st.booleans()),
       tiles=st.one_of(st.none(), st.tuples(st.integers(1, 999), st.integers(1, 999),
                                            st.integers(1, 999), st.sampled_from(["mnk", "kmn"]),
                                            st.booleans(), st.integers(0, 3))),
       pj=st.floats(0, 10, allow_nan=False))
def test_accelerator_round_trip(rows, cols, bw, lat, clock, mpc, preset, tile, name, buffer,
                                dram_pj, flags, tiles, pj):
    hw = cm.Hardware(pe_domain=f"{{PE[p,q]: 0<=p<{rows} and 0<=q<{cols}}}",
                     interconnect="{PE[p,q]->PE[p-1,q]; PE[p,q]->PE[p,q-1]}",
                     bandwidth_bits=bw, avg_latency=lat, clock_ghz=clock,
                     macs_per_pe_per_cycle=mpc, name=name)
    key = {"os": "k", "ws": "m", "is": "n"}[preset]
    df = cm.Dataflow.preset(preset, rows=rows, cols=cols, **({key: tile} if tile else {}))
    memory = cm.MemoryHierarchy(dram_bandwidth_bits=bw, buffer_bytes=buffer,
                                dram_pj_per_bit=dram_pj, buffer_double_buffered=flags[0],
                                stationary_double_buffered=flags[1], psum_bits=24)
    precision = cm.PrecisionTable([cm.MacSpec(16, 8, 1, pj), cm.MacSpec(32, 32, 1, pj / 3)])
    mapping = "default" if tiles is None else cm.TileMapping(
        *tiles[:4], accumulate_in_buffer=tiles[4], span_a=tiles[5], a_align_m=tiles[5] + 1)
    text = cm.Accelerator(name or "acc", hw, df, memory, precision, mapping).to_json()
    a = Accelerator.from_json(text)
    name2, hw2, df2, memory2, precision2, mapping2, objective2 = (
        a.name, a.hardware, a.dataflow, a.memory, a.precision, a.mapping, a.objective)
    assert objective2 is None  # only a searched mapping has an objective
    assert name2 == (name or "acc")
    for f in ["dram_bandwidth_bits", "buffer_bytes", "dram_pj_per_bit", "buffer_double_buffered",
              "stationary_double_buffered", "psum_bits", "buffer_pj_per_bit", "register_bytes"]:
        assert getattr(memory2, f) == getattr(memory, f), f
    # The rates are the hardware's (one setting), the widths and energies the table's.
    assert [(u.bits_a, u.bits_b, u.pj_per_mac, u.macs_per_pe_per_cycle)
            for u in precision2.units] == [
        (u.bits_a, u.bits_b, u.pj_per_mac, hw.macs_per_pe_per_cycle_at(max(u.bits_a, u.bits_b)))
        for u in precision.units]
    assert (mapping2 if tiles is None else mapping2.describe()) == (
        mapping if tiles is None else mapping.describe())
    for f in ["name", "pe_domain", "interconnect", "bandwidth_bits", "avg_latency", "clock_ghz",
              "l1_bytes", "l2_bytes", "macs_per_pe_per_cycle"]:
        assert getattr(hw2, f) == getattr(hw, f), f
    for f in ["name", "space", "time", "preset_name", "rows", "cols", "tiling"]:
        assert getattr(df2, f) == getattr(df, f), f
    assert cm.Accelerator(name2, hw2, df2, memory2, precision2, mapping2).to_json() == text


def test_threads_agree_with_serial():
    hw = cm.Hardware.systolic(16, 16, bandwidth_bits=256)
    shapes = [(m, n, k, p) for m in (1, 37, 128) for n in (17, 768) for k in (5, 300)
              for p in ("os", "ws", "is")]

    def run(s):
        r = cm.analyze_array(
            cm.GemmCall(m=s[0], n=s[1], k=s[2]),
            cm.Accelerator("t", hw, cm.Dataflow.preset(s[3], rows=16, cols=16)),
        )
        return (r.cycles, r.time_steps, tuple(r.tensors[t].unique for t in "ABC"))

    serial = [run(s) for s in shapes]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(5):
            assert list(pool.map(run, shapes)) == serial


def test_gpt2_sized_counts_are_exact():
    # 1024x768x3072 = 2,415,919,104 MACs (above 2^31, where TENET's int overflows).
    hw = cm.Hardware.systolic(16, 16)
    r = cm.analyze_array(
        cm.GemmCall(m=1024, n=768, k=3072),
        cm.Accelerator("t", hw, cm.Dataflow.preset("os", rows=16, cols=16)),
    )
    assert r.macs == 1024 * 768 * 3072
    # OS, 64x48 full folds of 3072+16+16-2 stamps and cycles each.
    assert r.folds == 64 * 48 and r.time_steps == 64 * 48 * 3102 == r.cycles
    assert r.tensors["C"].unique == 1024 * 768
    assert r.tensors["A"].unique == 48 * 1024 * 3072
    assert r.array_utilization == r.macs / (r.cycles * 256)
    assert r.latency_us == r.cycles / 1e3


def test_general_statement_api():
    st_ = cm.Statement("{S[i,j]: 0<=i<6 and 0<=j<4}",
                       [cm.TensorAccess("{S[i,j]->X[i+j]}", False, 16),
                        cm.TensorAccess("{S[i,j]->Y[i]}", True, 16)])
    hw = cm.Hardware(pe_domain="{PE[p]: 0<=p<4}", interconnect="{PE[p]->PE[p-1]}")
    df = cm.Dataflow(space="{S[i,j]->PE[j]}", time="{S[i,j]->T[i]}")
    r = cm.analyze(st_, hw, df)
    # 1-D convolution-like: X[i+j] at PE j, stamp i; PE j-1 had X[i+j] at stamp i-1+... :
    # PE j-1 at stamp i+1 reads X[i+j] (not a neighbour stamp), at stamp i reads X[i+j-1].
    # The previous stamp i-1 at PE j-1 reads X[i+j-2]. So no reuse of X: unique = total = 24.
    # Y[i] is written by all 4 PEs at stamp i: PEs 1..3 find it at PE j-1 -> unique 6.
    assert r.method == "enumerate"
    assert (r.tensors["X"].unique, r.tensors["X"].total) == (24, 24)
    assert (r.tensors["Y"].unique, r.tensors["Y"].spatial_reuse) == (6, 18 / 24)


def test_accelerator_round_trip_keeps_subnormal_and_odd_values():
    hw = cm.Hardware(pe_domain="{PE[p]: 0<=p<3}", interconnect="{PE[p]->PE[p-1]}",
                     bandwidth_bits=0.1, avg_latency=2.2250738585069563e-311,
                     name='odd\nname="with\\escapes\u00e9')
    df = cm.Dataflow(space="{S[i,j,k]->PE[i%3]}", time="{S[i,j,k]->T[floor(i/3),j,k]}",
                     name="x=y")
    a = Accelerator.from_json(cm.Accelerator("a", hw, df).to_json())
    hw2, df2 = a.hardware, a.dataflow
    assert (hw2.avg_latency, hw2.bandwidth_bits, hw2.name) == (hw.avg_latency, 0.1, hw.name)
    assert (df2.name, df2.space, df2.time) == (df.name, df.space, df.time)


def test_as_dict_carries_every_field():
    r = cm.analyze_array(
        cm.GemmCall(m=9, n=5, k=7),
        cm.Accelerator("t", cm.Hardware.systolic(4, 4), cm.Dataflow.preset("is", rows=4, cols=4)),
    )
    d = r.as_dict()
    for key, value in d.items():
        if key != "tensors":
            assert getattr(r, key) == value, key
    assert d["tensors"]["B"]["unique"] == r.tensors["B"].unique
    assert sorted(d["tensors"]) == ["A", "B", "C"]


def test_tenet_data_folder_follows_the_environment(tmp_path):
    # TENET_DATA_DIR points the tests at another copy of TENET's files (TENET's own data
    # folder, say); unset, the tests write their own into a temporary folder.
    import subprocess
    import sys

    tests = Path(__file__).resolve().parents[1]
    code = f"import sys; sys.path.insert(0, {str(tests)!r}); import tenet_data; " \
           "print(tenet_data.TENET_DATA); print(sorted(p.name for p in " \
           "(tenet_data.TENET_DATA / 'mapping').iterdir()))"
    (tmp_path / "mapping").mkdir()
    env_set = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, env={"TENET_DATA_DIR": str(tmp_path), "PATH": ""})
    assert env_set.stdout.splitlines()[0] == str(tmp_path)
    assert env_set.stdout.splitlines()[1] == "[]"
    unset = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env={"PATH": ""})
    folder, names = unset.stdout.splitlines()
    assert folder != str(tmp_path) and not Path(folder).exists()  # removed at exit
    assert "matmul_systolic_os.m" in names and "gemm_1d.m" in names
    missing = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=False, env={"TENET_DATA_DIR": str(tmp_path / "no"),
                                               "PATH": ""})
    assert missing.returncode == 1 and "TENET_DATA_DIR=" in missing.stderr
