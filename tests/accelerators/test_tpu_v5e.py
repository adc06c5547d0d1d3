"""The tpu_v5e preset against the public figures it is built from (Google Cloud's TPU v5e page).

Peak compute and HBM bandwidth are read back from the cost model's roofline of calls (its
``roofline_cycles``: MACs over the peak, or compulsory DRAM bits over the bandwidth) and
compared with the published 197 TFLOPs bf16, 393 TOPs int8 and 819 GB/s.
"""

from __future__ import annotations

import pytest

from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import preset

CLOCK_HZ = 1.5e9


def roofline_cycles(bits: tuple[int, int, int], m: int, n: int, k: int) -> int:
    call = cm.GemmCall(m=m, n=n, k=k, bits_a=bits[0], bits_b=bits[1], bits_c=bits[2])
    return cm.charge(call, preset("tpu_v5e")).ledger_fields()["roofline_cycles"]


@pytest.mark.parametrize(("bits", "published_ops"), [((16, 16, 16), 197e12),
                                                      ((8, 8, 32), 393e12)])
def test_peak_is_the_published_one(bits, published_ops):
    m = n = k = 4096  # compute-bound: 2 x 4096 ops per operand element fetched
    ops = 2 * m * n * k / (roofline_cycles(bits, m, n, k) / CLOCK_HZ)
    assert ops == pytest.approx(published_ops, rel=0.005)  # 1.5 GHz is derived, to 0.2 %


def test_hbm_bandwidth_is_819_gb_per_s():
    # One token through a [16384, 16384] int8 weight: memory-bound on the weight.
    m, n, k = 1, 16384, 16384
    compulsory_bytes = n * k + (m * k + m * n) * 2  # int8 weight, bf16 input and output
    seconds = roofline_cycles((16, 8, 16), m, n, k) / CLOCK_HZ
    assert compulsory_bytes / seconds == pytest.approx(819e9, rel=1e-5)


def test_array_is_weight_stationary_128_wide_with_48_mib():
    acc = preset("tpu_v5e")
    assert (acc.dataflow.rows, acc.dataflow.cols) == (128, 128)
    assert acc.supported_dataflows == ("ws",)
    assert acc.memory.buffer_bytes == 48 << 20
    assert acc.hardware.clock_ghz == 1.5
