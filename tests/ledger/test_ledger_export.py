"""An exported library, loaded in a fresh process, charges exactly what the in-memory one does."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import tvm
from tvm import relax

import tenet_byoc
from ledger_testing import mlp_executable


def test_reloaded_library_reports_the_same_ledger(tmp_path):
    _, ex = mlp_executable("ws16")
    lib = tmp_path / "mlp.so"
    ex.export_library(str(lib))
    x = np.random.default_rng(1).standard_normal((5, 784)).astype("float32")
    np.save(tmp_path / "x.npy", x)

    vm = relax.VirtualMachine(ex, tvm.cpu())
    tenet_byoc.set_phase(vm, "infer")
    want_out = vm["main"](tvm.runtime.tensor(x)).numpy()
    want = json.loads(tenet_byoc.ledger(vm).to_json())

    script = textwrap.dedent(f"""
        import numpy as np, tvm
        from tvm import relax
        import tenet_byoc
        lib = tvm.runtime.load_module({str(lib)!r})
        vm = relax.VirtualMachine(lib, tvm.cpu())
        tenet_byoc.set_phase(vm, "infer")
        out = vm["main"](tvm.runtime.tensor(np.load({str(tmp_path / "x.npy")!r}))).numpy()
        np.save({str(tmp_path / "out.npy")!r}, out)
        print(tenet_byoc.ledger(vm).to_json())
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got == want
    # two GEMMs, and their fused epilogues on the vector unit (bias + ReLU, bias)
    units = [e["unit"] for e in got["entries"]]
    assert got["accelerator"] == "ws16" and units.count("array") == 2 and len(units) == 5
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), want_out)
