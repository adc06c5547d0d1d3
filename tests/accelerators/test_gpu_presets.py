"""The GPU presets (a100, h100_sxm, h200) against the public figures they are built from.

Peak compute and HBM bandwidth are read back from the cost model's roofline of calls
(``roofline_cycles``: MACs over the peak, or compulsory DRAM bits over the bandwidth) and
compared with NVIDIA's data-sheet figures (H100 whitepaper Table 3, H100 / H200 data sheets)
and LLMCompass's A100 description.
"""

from __future__ import annotations

import pytest

from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import _a100, preset


def _roofline_seconds(name, bits: tuple[int, int, int], m: int, n: int, k: int) -> float:
    acc = preset(name) if isinstance(name, str) else name
    call = cm.GemmCall(m=m, n=n, k=k, bits_a=bits[0], bits_b=bits[1], bits_c=bits[2])
    cycles = cm.charge(call, acc).ledger_fields()["roofline_cycles"]
    return cycles / (acc.hardware.clock_ghz * 1e9)


@pytest.mark.parametrize(("name", "bits", "published"), [
    ("h100_sxm", (16, 16, 16), 989.4e12), ("h100_sxm", (8, 8, 16), 1978.9e12),
    ("h200", (16, 16, 16), 989.4e12), ("h200", (8, 8, 32), 1978.9e12),
    ("a100", (16, 16, 16), 312e12), ("a100", (8, 8, 32), 624e12),
])
def test_dense_peak_is_the_data_sheets(name, bits, published):
    m = n = k = 8192  # compute-bound
    ops = 2 * m * n * k / _roofline_seconds(name, bits, m, n, k)
    assert ops == pytest.approx(published, rel=0.002)


def test_hopper_fp32_runs_on_the_cuda_cores():
    # 132 SMs x 128 FP32 lanes x 2 FLOP at the 1.83 GHz the tensor peaks are given at.
    m = n = k = 8192
    ops = 2 * m * n * k / _roofline_seconds("h200", (32, 32, 32), m, n, k)
    assert ops == pytest.approx(132 * 128 * 2 * 1.83e9, rel=1e-6)


@pytest.mark.parametrize(("name", "gbps"), [("h100_sxm", 3350), ("h200", 4800), ("a100", 2039),
                                            (_a100(hbm_gbps=1800.0), 1800)])  # a sustained rate
def test_hbm_bandwidth(name, gbps):
    m, n, k = 1, 16384, 16384  # one token through a bf16 weight: memory-bound
    compulsory = (n * k + m * k + m * n) * 2
    assert compulsory / _roofline_seconds(name, (16, 16, 16), m, n, k) == pytest.approx(
        gbps * 1e9, rel=1e-4)
