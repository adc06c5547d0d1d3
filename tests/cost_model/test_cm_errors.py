"""Every bad input is a ValueError that says what is wrong."""

from __future__ import annotations

import json
import re

import pytest

from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import Accelerator

HW = cm.Hardware.systolic(4, 4)
OS = cm.Dataflow.preset("os", rows=4, cols=4)
ACC = cm.Accelerator("os4", HW, OS)


@pytest.mark.parametrize("text,match", [
    ("{S[i,j,k]->PE[i%4, j%4]", r"expected '}' at position 23 \(token '<end>'\)"),
    ("{S[i,j,k]->PE[i%4 j%4]}", r"expected '\]' at position 18 \(token 'j'\)"),
    ("{S[i,j,k]->PE[i$4, j]}", r"unexpected character at position 15 \(token '\$'\)"),
    ("{S[i,j,k]->PE[i*j, k]}", r"non-affine product .*\* by an integer constant.* at position 15"),
    ("{S[i,j,k]->PE[i/2, k]}", r"division is supported only as floor\(e/c\)"),
    ("{S[i,j,k]->PE[i%j, k]}", r"'%' needs a positive integer constant"),
    ("{S[i,j,k]->PE[i%0, k]}", r"'%' needs a positive integer constant"),
    ("{S[i,j,k]->PE[floor(i/x), k]}", r"unknown identifier 'x'"),
    ("{S[i,j,k]->PE[sqrt(i), k]}", r"unknown function 'sqrt'"),
    ("{S[i,i,k]->PE[i, k]}", r"variable 'i' repeated"),
    ("{S[i,j,k]->PE[i, k] : i > 0 or j > 0}", r"'or' is not supported"),
])
def test_malformed_space_maps(text, match):
    with pytest.raises(ValueError, match=match):
        cm.Dataflow(space=text, time=OS.time)


def test_messages_name_the_relation():
    with pytest.raises(ValueError, match=r"^Dataflow.time '"):
        cm.Dataflow(space=OS.space, time="{S[i,j,k]->T[i j]}")
    with pytest.raises(ValueError, match=r"^Hardware.pe_domain '"):
        cm.Hardware(pe_domain="{PE[p,q]: 0<=p<4 and q<4}", interconnect="{PE[p,q]->PE[p-1,q]}")


def test_hardware_fields():
    ic = "{PE[p]->PE[p-1]}"
    with pytest.raises(ValueError, match="bandwidth_bits must be a positive"):
        cm.Hardware(pe_domain="{PE[p]: 0<=p<4}", interconnect=ic, bandwidth_bits=0)
    with pytest.raises(ValueError, match="clock_ghz must be positive"):
        cm.Hardware(pe_domain="{PE[p]: 0<=p<4}", interconnect=ic, clock_ghz=-1)
    with pytest.raises(ValueError, match="macs_per_pe_per_cycle must be a positive"):
        cm.Hardware(pe_domain="{PE[p]: 0<=p<4}", interconnect=ic, macs_per_pe_per_cycle=0)
    with pytest.raises(ValueError, match="must be 1-D or 2-D, got 3-D"):
        cm.Hardware(pe_domain="{PE[a,b,c]: 0<=a<2 and 0<=b<2 and 0<=c<2}",
                    interconnect="{PE[a,b,c]->PE[a-1,b,c]}")
    with pytest.raises(ValueError, match="no constant lower and upper bound"):
        cm.Hardware(pe_domain="{PE[p]: 0<=p}", interconnect=ic)
    with pytest.raises(ValueError, match="Hardware::Systolic rows must be a positive integer"):
        cm.Hardware.systolic(0, 4)


@pytest.mark.parametrize("m,n,k,field", [(0, 4, 4, "m"), (4, -1, 4, "n"), (4, 4, 0, "k")])
def test_sizes(m, n, k, field):
    with pytest.raises(ValueError, match=f"GemmWorkload.{field} must be a positive integer"):
        cm.analyze_array(cm.GemmCall(m=m, n=n, k=k), ACC)


def test_other_workload_fields():
    with pytest.raises(ValueError, match="batch must be a positive"):
        cm.analyze_array(cm.GemmCall(m=4, n=4, k=4, batch=0), ACC)
    with pytest.raises(ValueError, match="bits_b must be in 1..1024, got 0"):
        cm.analyze_array(cm.GemmCall(m=4, n=4, k=4, bits_b=0), ACC)
    with pytest.raises(ValueError, match="extra_ops must be >= 0"):
        cm.analyze_array(cm.GemmCall(m=4, n=4, k=4, extra_ops=-5), ACC)
    with pytest.raises(ValueError, match="method must be 'auto', 'fast' or 'enumerate'"):
        cm.analyze_array(cm.GemmCall(m=4, n=4, k=4), ACC, "magic")
    with pytest.raises(ValueError, match="exceeds 2"):
        cm.analyze_array(cm.GemmCall(m=2**30, n=2**30, k=2**30), ACC)


def test_space_map_leaving_the_pe_domain():
    df8 = cm.Dataflow.preset("os", rows=8, cols=8)
    # Fast path: the used 8x8 rectangle does not fit the 4x4 array.
    with pytest.raises(ValueError, match=r"PE\[4,0\], outside Hardware.pe_domain"):
        cm.analyze(cm.Statement.gemm(16, 16, 4), HW, df8)
    # Small shapes that stay in the first 4x4 corner are fine.
    assert cm.analyze(cm.Statement.gemm(4, 3, 4), HW, df8).macs == 48
    with pytest.raises(ValueError, match=r"sends instance S\[0,4,0\] to PE\[0,4\], outside"):
        cm.analyze(cm.Statement.gemm(4, 5, 4), HW, df8, "enumerate")


def test_time_conflicts():
    # Every k of one (i, j) at the same stamp on the same PE.
    df = cm.Dataflow(space="{S[i,j,k]->PE[i%4,j%4]}", time="{S[i,j,k]->T[floor(i/4),floor(j/4)]}")
    with pytest.raises(ValueError, match=r"puts 3 instances on PE\[0,0\] at T\[0,0\].*allows 1"):
        cm.analyze(cm.Statement.gemm(4, 4, 3), HW, df)
    hw3 = cm.Hardware.systolic(4, 4, macs_per_pe_per_cycle=3)
    r = cm.analyze(cm.Statement.gemm(4, 4, 3), hw3, df)
    # one stamp, 16 PEs x 3 instances: exact compute delay ceil(3/3) = 1 cycle.
    assert (r.time_steps, r.compute_delay_exact, r.macs) == (1, 1, 48)


def test_mismatched_arities_and_methods():
    df = cm.Dataflow(space="{S[i,j,k]->PE[i%4]}", time="{S[i,j,k]->T[i,j,k]}")
    with pytest.raises(ValueError, match="1-D PE coordinates but Hardware.pe_domain is 2-D"):
        cm.analyze(cm.Statement.gemm(2, 2, 2), HW, df)
    with pytest.raises(ValueError, match="fast method does not apply: the dataflow is not"):
        cm.analyze(cm.Statement.gemm(2, 2, 2), HW, df, "fast")
    with pytest.raises(ValueError, match="take different numbers of iteration variables"):
        cm.Dataflow(space="{S[i,j]->PE[i,j]}", time="{S[i,j,k]->T[k]}")
    with pytest.raises(ValueError, match="limited to 4000000"):
        cm.analyze(cm.Statement.gemm(200, 200, 200), HW, df)


def test_presets():
    with pytest.raises(ValueError, match="unknown dataflow preset 'xs'"):
        cm.Dataflow.preset("xs", rows=4, cols=4)
    with pytest.raises(ValueError, match="takes one tiling factor 'k'.*got 'm'"):
        cm.Dataflow.preset("os", rows=4, cols=4, m=8)
    with pytest.raises(ValueError, match="tiling factor 'n' must be a positive"):
        cm.Dataflow.preset("is", rows=4, cols=4, n=0)


def test_tenet_text_formats():
    with pytest.raises(ValueError, match="must have 3 lines"):
        cm.parse_tenet_hardware("{PE[i]: 0<=i<4}\n")
    with pytest.raises(ValueError, match="four numbers"):
        cm.parse_tenet_hardware("{PE[i]: 0<=i<4}\n{PE[i]->PE[i-1]}\n1 2 x 4\n")
    with pytest.raises(ValueError, match="expected 5 lines"):
        cm.parse_tenet_statement("2 1\n{S[i]: 0<=i<4}\n{S[i]->A[i]}\n")
    with pytest.raises(ValueError, match="cannot read file"):
        cm.load_tenet("/nonexistent.p", "/nonexistent.m", "/nonexistent.s")
    with pytest.raises(ValueError, match="JSON at character 0: .*invalid literal; last read: 'h'"):
        Accelerator.from_json("hello")


def test_accelerator_json_errors_name_the_field():
    good = json.loads(cm.Accelerator("a", HW, cm.Dataflow.preset("os", 4, 4)).to_json())

    def parse(edit):
        doc = json.loads(json.dumps(good))
        edit(doc)
        return Accelerator.from_json(json.dumps(doc))

    cases = [
        (lambda d: d["hardware"].pop("clock_ghz"), "accelerator.hardware has no field 'clock_ghz'"),
        (lambda d: d["dataflow"].update(speed=3), "accelerator.dataflow has an unknown field 'speed'"),
        (lambda d: d["hardware"].update(l1_bytes=2.5), "accelerator.hardware.l1_bytes must be an int"),
        (lambda d: d["hardware"].update(bandwidth_bits="fast"),
         "accelerator.hardware.bandwidth_bits must be a number"),
        (lambda d: d["hardware"].update(macs_per_pe_per_cycle={"128": 2}),
         "key '128' is not an operand width in 1..64 bits"),
        (lambda d: d["hardware"].update(bandwidth_bits=-1), "bandwidth_bits must be a positive"),
        (lambda d: d["dataflow"].update(space="{S[i,j,k]->PE[i%8, j%8]}"),
         "accelerator 'a': dataflow 'os_4x4' does not run on hardware"),
        (lambda d: d.update(name=""), "Accelerator.name must not be empty"),
    ]
    for edit, message in cases:
        with pytest.raises(ValueError, match=re.escape(message)):
            parse(edit)
    with pytest.raises(ValueError, match="JSON at character 7: .*expected string literal"):
        Accelerator.from_json('{"a":1,}')


def test_mac_rate_table_is_checked():
    ic = "{PE[p]->PE[p-1]}"
    with pytest.raises(ValueError, match=r"macs_per_pe_per_cycle\[8\] must be a positive"):
        cm.Hardware(pe_domain="{PE[p]: 0<=p<4}", interconnect=ic, macs_per_pe_per_cycle={8: 0})
    with pytest.raises(ValueError, match="must be an int or a dict"):
        cm.Hardware(pe_domain="{PE[p]: 0<=p<4}", interconnect=ic, macs_per_pe_per_cycle=2.5)


def _systolic(**kw):
    return cm.Hardware.systolic(4, 4, **kw)


@pytest.mark.parametrize("kwargs,hw_kwargs,what", [
    ({}, {"bandwidth_bits": 1e-300}, "transfer cycles"),
    ({"extra_read_bits": 2**63 - 1}, {}, "off-chip read bits"),
], ids=["tiny-bandwidth", "extra-read-bits"])
def test_derived_counts_that_leave_int64_are_refused(kwargs, hw_kwargs, what):
    # Each of these used to come back as a negative or wrapped count.
    with pytest.raises(ValueError, match=f"cost model: {what}.* overflows int64"):
        cm.analyze_array(
            cm.GemmCall(m=64, n=64, k=64, **kwargs), cm.Accelerator("t", _systolic(**hw_kwargs), OS)
        )


def test_a_huge_call_at_wide_bits_is_refused_not_zero():
    # 2^60 MACs are allowed; their off-chip bits at 1024 bits per element (2^57 unique
    # elements x 2^10) are not representable, and used to wrap to 0.
    with pytest.raises(ValueError, match="off-chip bits overflows int64"):
        cm.analyze_array(
            cm.GemmCall(m=2**20, n=2**20, k=2**20, bits_a=1024, bits_b=1024, bits_c=1024),
            ACC,
        )


def test_int64_max_extra_ops_give_their_exact_cycles():
    # ceil((2^63 - 1) / lanes) used to overflow inside (a + b - 1) / b and go negative.
    base = cm.analyze_array(cm.GemmCall(m=64, n=64, k=64), ACC)
    r = cm.analyze_array(
        cm.GemmCall(m=64, n=64, k=64, extra_ops=2**63 - 1), ACC
    )
    assert r.compute_cycles == base.compute_cycles + -(-(2**63 - 1) // base.active_pes)


def test_large_side_data_below_the_limit_is_counted_exactly():
    # The reference is the same call without side data: extra bits add to the reads, extra
    # ops add ceil(ops / active PEs) cycles (Python integers, no overflow).
    base = cm.analyze_array(cm.GemmCall(m=64, n=64, k=64), ACC)
    r = cm.analyze_array(
        cm.GemmCall(m=64, n=64, k=64, extra_ops=2**40 + 3, extra_read_bits=2**50),
        ACC,
    )
    assert r.offchip_read_bits == base.offchip_read_bits + 2**50
    assert r.compute_cycles == base.compute_cycles + -(-(2**40 + 3) // base.active_pes)


def test_a_clock_so_slow_that_latency_is_infinite_is_refused():
    with pytest.raises(ValueError, match="latency_us .* is not finite"):
        cm.analyze_array(
            cm.GemmCall(m=64, n=64, k=64), cm.Accelerator("t", _systolic(clock_ghz=1e-310), OS)
        )


def test_tenet_hardware_file_line_3():
    head = "{PE[i]: 0<=i<4}\n{PE[i]->PE[i-1]}\n"
    with pytest.raises(ValueError, match="four numbers.*got '256 1024 64 16 xyz'"):
        cm.parse_tenet_hardware(head + "256 1024 64 16 xyz\n", "extra")
    with pytest.raises(ValueError, match="'big': line 3 L1 size 1000000000000000019884624838656"
                                         r".* bytes must be in \[0, 2\^62\]"):
        cm.parse_tenet_hardware(head + "1e30 1024 64 16\n", "big")
    hw = cm.parse_tenet_hardware(head + "256 1024 64 16\n", "ok")
    assert (hw.l1_bytes, hw.l2_bytes, hw.bandwidth_bits, hw.avg_latency) == (256, 1024, 64, 16)


def test_tenet_files_that_are_directories_or_not_utf8(tmp_path):
    with pytest.raises(ValueError, match=f"'{tmp_path}' is a directory, not a TENET file"):
        cm.load_tenet(tmp_path, tmp_path, tmp_path)
    p = tmp_path / "latin1.p"
    p.write_bytes("{PE[i]: 0<=i<4}\n{PE[i]->PE[i-1]}\n256 1024 64 16 # caf\xe9\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1.p' is not UTF-8 text \(byte 0xe9 at offset"):
        cm.load_tenet(p, p, p)
