"""Accelerators from TENET's own files and from presets, as the ledger charges them."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tvm
from tvm import relax

import tenet_byoc
from relax_testing import matmul_module
from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import Accelerator
from tenet_byoc.documents import MAX_DOCUMENT_BYTES
from tenet_byoc.quantization import quantize
from tenet_data import TENET_DATA


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
    (entry,) = [x for x in tenet_byoc.ledger(vm).entries if x.unit == "array"]
    ref = cm.analyze(cm.Statement.gemm(20, 9, 12), hw, df)
    assert (entry.array_cycles, entry.time_steps, entry.tenet_delay) == (
        ref.cycles, ref.time_steps, ref.delay)
    # The .p line "L1 L2 bandwidth latency" is the memory hierarchy: L1 the per-PE
    # registers, L2 the buffer, bandwidth the DRAM's (systolic.p: 256 B, 1 KiB, 64 bits).
    line = (TENET_DATA / "pe_array" / "systolic.p").read_text().splitlines()[2].split()
    assert (acc.memory.register_bytes, acc.memory.buffer_bytes,
            acc.memory.dram_bandwidth_bits) == (int(line[0]), int(line[1]), float(line[2]))
    assert entry.roofline_cycles <= entry.cycles


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
    (util,) = {e.pe_utilization for e in ledger if e.unit == "array"}  # vector entries: no PEs
    assert ledger.totals().pe_utilization == pytest.approx(util)
    assert util == pytest.approx(16 * 16 * 64 / (ledger.entries[0].cycles * 256 * 4))
    assert np.isfinite(util)


def test_mac_rates_too_wide_for_the_cost_model_are_refused_when_made():
    # 64 MACs of 32 bits are costed as one 2048-bit element: beyond the cost model's 1024.
    with pytest.raises(ValueError, match=r"macs_per_pe_per_cycle\[32\]=64: 32 bits x 64 MACs "
                                         r"per cycle = 2048 bits .* \(rate <= 32 at 32 bits\)"):
        Accelerator.systolic("os", 4, 4, macs_per_pe_per_cycle={32: 64})
    ok = Accelerator.systolic("os", 4, 4, macs_per_pe_per_cycle={32: 32})
    assert ok.hardware.macs_per_pe_per_cycle == {32: 32}


def test_a_clock_too_slow_for_a_finite_latency_is_refused_when_made():
    # latency_us would be inf, which the ledger's JSON cannot hold.
    with pytest.raises(ValueError, match=r"latency_us \(cycles / clock\) is not finite"):
        Accelerator.systolic("os", 4, 4, clock_ghz=1e-310)


def test_tenet_files_that_are_directories_or_not_utf8(tmp_path):
    m = tmp_path / "os.m"
    m.write_text("{S[i,j,k]->PE[i%4, j%4]}\n{S[i,j,k]->T[floor(i/4), floor(j/4), i%4+j%4+k]}\n")
    with pytest.raises(ValueError, match=rf"TENET .p file \(PE array\) '{tmp_path}' is a "
                                         "directory, not a file"):
        Accelerator.from_tenet_files(tmp_path, m)
    p = tmp_path / "arr.p"
    p.write_bytes(b"{PE[p,q]: 0<=p<4 and 0<=q<4}\n{PE[p,q]->PE[p-1,q]}\n256 1024 64 16 \xe9\n")
    with pytest.raises(ValueError, match=r"arr.p' is not UTF-8 text \(byte 0xe9 at offset 65\)"):
        Accelerator.from_tenet_files(p, m)


def test_tenet_files_that_are_fifos_or_too_large(tmp_path):
    # A named pipe is refused by its kind, before opening it (it was called missing before).
    m = tmp_path / "os.m"
    m.write_text("{S[i,j,k]->PE[i%4, j%4]}\n{S[i,j,k]->T[floor(i/4), floor(j/4), i%4+j%4+k]}\n")
    fifo = tmp_path / "pipe.p"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match=r"TENET .p file \(PE array\) .*pipe.p' is a FIFO"):
        Accelerator.from_tenet_files(fifo, m)
    # A file over the documents' size limit (sparse: no disk used) is refused by its size.
    big = tmp_path / "big.m"
    with open(big, "wb") as f:
        f.truncate(MAX_DOCUMENT_BYTES + 1)
    with pytest.raises(ValueError, match=rf"TENET .m file \(mapping\) .*big.m' is "
                                         rf"{MAX_DOCUMENT_BYTES + 1:,} bytes; at most"):
        Accelerator.from_tenet_files(TENET_DATA / "pe_array" / "systolic.p", big)


def _transposed_os(n: int) -> Accelerator:
    # An output-stationary map with the array's axes swapped: not a preset, so enumerated.
    hw = cm.Hardware.systolic(n, n)
    df = cm.Dataflow(space=f"{{S[i,j,k]->PE[j%{n}, i%{n}]}}",
                     time=f"{{S[i,j,k]->T[floor(i/{n}), floor(j/{n}), i%{n}+j%{n}+k]}}",
                     name="os_swapped")
    return Accelerator("swapped", hw, df)


def test_fast_path_is_the_presets_on_a_systolic_array():
    assert Accelerator.systolic("ws", 8, 8).fast_path
    assert not _transposed_os(8).fast_path


def test_a_gemm_too_large_to_enumerate_fails_at_build_time():
    acc = _transposed_os(8)
    limit = cm.MAX_ENUMERATED_INSTANCES
    assert limit == 4_000_000
    with pytest.raises(ValueError, match=r"step 'lv' of 256 x 256 x 256 = 16,777,216 instances "
                                         r"cannot be costed: dataflow 'os_swapped' is not an "
                                         r"os/ws/is preset.*up to 4,000,000 instances"):
        tenet_byoc.build(matmul_module((256, 256), (256, 256)), accelerator=acc)
    # Below the limit it builds and charges: the same counts as enumerating by hand.
    ex = tenet_byoc.build(matmul_module((16, 32), (32, 8)), accelerator=acc)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    vm["main"](tvm.runtime.tensor(np.ones((16, 32), "float32")),
               tvm.runtime.tensor(np.ones((32, 8), "float32")))
    (entry,) = [x for x in tenet_byoc.ledger(vm).entries if x.unit == "array"]
    want = cm.analyze_array(cm.GemmCall(m=16, n=8, k=32), acc, "enumerate")
    assert (entry.macs, entry.array_cycles) == (want.macs, want.cycles)
