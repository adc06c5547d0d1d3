"""The sample TENET files in examples/tenet/ describe TENET's 8x8 systolic array: loaded,
they cost every GEMM as the `tenet_os8` / `tenet_ws8` presets (built from parameters, not
files) do, and the test suite's own TENET-format files load the same way."""

from __future__ import annotations

from pathlib import Path

import pytest

from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import Accelerator, preset
from tenet_data import TENET_DATA

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tenet"


@pytest.mark.parametrize("dataflow", ["os", "ws"])
def test_example_files_cost_as_the_preset(dataflow):
    acc = Accelerator.from_tenet_files(EXAMPLES / "systolic_8x8.p",
                                       EXAMPLES / f"gemm_{dataflow}.m")
    ref = preset(f"tenet_{dataflow}8")
    assert acc.hardware.num_pes == 64
    assert (acc.hardware.bandwidth_bits, acc.hardware.avg_latency) == (64, 16)
    assert (acc.memory.register_bytes, acc.memory.buffer_bytes) == (256, 1024)
    for m, n, k in [(1, 8, 8), (20, 9, 12), (33, 70, 17)]:
        got = cm.analyze_array(cm.GemmCall(m=m, n=n, k=k), acc)
        want = cm.analyze_array(cm.GemmCall(m=m, n=n, k=k), ref)
        assert (got.macs, got.cycles, got.time_steps, got.active_pes) == (
            want.macs, want.cycles, want.time_steps, want.active_pes), (m, n, k)
        assert got.macs == m * n * k


def test_suite_files_match_the_examples():
    # tests/tenet_data.py writes its systolic array and mappings from the format; the
    # examples are written by hand with other variable names: the same relations.
    for ours, example in [("pe_array/systolic.p", "systolic_8x8.p")]:
        a = cm.load_tenet(TENET_DATA / ours, EXAMPLES / "gemm_os.m",
                          TENET_DATA / "statement" / "matmul.s")[1]
        b = cm.load_tenet(EXAMPLES / example, TENET_DATA / "mapping" / "matmul_systolic_os.m",
                          TENET_DATA / "statement" / "matmul.s")[1]
        assert (a.num_pes, a.bandwidth_bits, a.l1_bytes, a.l2_bytes) == (
            b.num_pes, b.bandwidth_bits, b.l1_bytes, b.l2_bytes)
