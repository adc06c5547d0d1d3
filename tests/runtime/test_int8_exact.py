"""int8 GEMMs equal numpy's int64 sums on every oneDNN path, worst-case operands included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from int8_worst_case import accumulator_mismatches, kernel_mismatches, scheme_mismatches

import tenet_byoc

SCRIPT = Path(__file__).with_name("int8_worst_case.py")
VNNI_ISAS = {"avx2_vnni", "avx2_vnni_2", "avx512_core_vnni", "avx512_core_bf16",
             "avx512_core_fp16", "avx512_core_amx", "avx512_core_amx_fp16"}


def test_worst_case_accumulators_are_exact():
    assert accumulator_mismatches() == []


def test_kernel_edges_are_exact():
    assert kernel_mismatches() == []


def test_worst_case_w8a8_schemes_equal_tvm():
    assert scheme_mismatches() == []


def test_saturating_isa_takes_the_widened_path():
    info = tenet_byoc.cpu_info()
    assert info.threads >= 1
    if info.isa not in VNNI_ISAS:
        assert info.int8_path == "widened", info


@pytest.mark.parametrize("isa", ["AVX2", "AVX512_CORE", "SSE41"])
def test_limited_isa_in_subprocess(isa):
    """oneDNN held to an ISA without VNNI (as a plain AVX2 or AVX-512 CPU runs it): the int16
    kernel; held below AVX2 (SSE41), the runtime's scalar loop."""
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA=isa)
    proc = subprocess.run([sys.executable, str(SCRIPT)], check=False, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    info = report["cpu_info"]
    # The cap lowers the ISA (never raises it above the CPU's), and never to one with VNNI.
    assert info["isa"] not in VNNI_ISAS, info
    assert info["int8_path"] == "widened", info
    assert report["mismatches"] == []
