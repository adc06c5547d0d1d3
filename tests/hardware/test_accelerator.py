"""Accelerators from TENET's own files and from presets, as the ledger charges them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relax

import tenet_byoc
from relax_testing import matmul_module
from tenet_byoc import cost_model as cm
from tenet_byoc.hardware import Accelerator
from tenet_byoc.quantization import quantize

TENET_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "tenet-data"
needs_data = pytest.mark.skipif(
    not TENET_DATA.is_dir(), reason=f"TENET's data files are not at {TENET_DATA}"
)


@needs_data
def test_from_tenet_files_charges_as_the_cost_model(rng):
    p = TENET_DATA / "pe_array" / "systolic.p"
    m = TENET_DATA / "mapping" / "matmul_systolic_os.m"
    acc = Accelerator.from_tenet_files(p, m)
    _statement, hw, df = cm.load_tenet(p, m, TENET_DATA / "statement" / "matmul.s")
    assert acc.hardware.pe_domain == hw.pe_domain
    assert acc.hardware.bandwidth_bits == hw.bandwidth_bits
    assert (acc.dataflow.space, acc.dataflow.time) == (df.space, df.time)
    vm = relax.VirtualMachine(
        tenet_byoc.build(matmul_module((20, 12), (12, 9)), accelerator=acc), tvm.cpu()
    )
    vm["main"](*[tvm.runtime.tensor(rng.standard_normal(s).astype("float32"))
                 for s in [(20, 12), (12, 9)]])
    (entry,) = tenet_byoc.ledger(vm).entries
    ref = cm.analyze_gemm(20, 9, 12, hw, df)
    assert (entry.cycles, entry.time_steps, entry.tenet_delay) == (ref.cycles, ref.time_steps,
                                                                   ref.delay)


def test_from_tenet_files_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"TENET \.p file \(PE array\) .*nope\.p"):
        Accelerator.from_tenet_files(tmp_path / "nope.p", tmp_path / "nope.m")


def test_totals_count_pes_at_their_precision_rate(rng):
    """On os16_mp int8 MACs run 4 per PE per cycle: the totals' utilization is the entries'."""
    mod = matmul_module((16, 64), (16, 64), transposed=True)
    w = rng.standard_normal((16, 64)).astype("float32")
    qmod = quantize(relax.transform.BindParams("main", {"w": w})(mod), "w8a8_per_tensor")
    vm = relax.VirtualMachine(tenet_byoc.build(qmod, accelerator="os16_mp"), tvm.cpu())
    for _ in range(3):
        vm["main"](tvm.runtime.tensor(rng.standard_normal((16, 64)).astype("float32")))
    ledger = tenet_byoc.ledger(vm)
    (util,) = {e.pe_utilization for e in ledger}
    assert ledger.totals().pe_utilization == pytest.approx(util)
    assert util == pytest.approx(16 * 16 * 64 / (ledger.entries[0].cycles * 256 * 4))
    assert np.isfinite(util)
