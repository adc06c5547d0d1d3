"""An exported library, loaded in a fresh process, gives the outputs of the in-memory build."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np

import tenet_byoc
from relax_testing import matmul_module, run


def test_export_and_load_in_new_process(tmp_path, rng):
    mod = matmul_module((3, 5, 16), (12, 16), transposed=True, bias=True, activation="gelu")
    ex = tenet_byoc.build(mod)
    arrays = [rng.standard_normal(s).astype("float32") for s in [(3, 5, 16), (12, 16), (12,)]]
    expected = run(ex, *arrays)
    lib = tmp_path / "model.so"
    ex.export_library(str(lib))
    for i, a in enumerate(arrays):
        np.save(tmp_path / f"in{i}.npy", a)
    script = textwrap.dedent(
        f"""
        import numpy as np, tvm
        from tvm import relax
        import tenet_byoc
        lib = tvm.runtime.load_module({str(lib)!r})
        assert any(m.kind == "tenet" for m in lib.imports), [m.kind for m in lib.imports]
        vm = relax.VirtualMachine(lib, tvm.cpu())
        args = [tvm.runtime.tensor(np.load({str(tmp_path)!r} + f"/in{{i}}.npy")) for i in range(3)]
        np.save({str(tmp_path / "out.npy")!r}, vm["main"](*args).numpy())
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=300)
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), expected)


def test_loading_without_import_names_the_missing_loader(tmp_path):
    """Without `import tenet_byoc`, loading fails with an error rather than a crash."""
    ex = tenet_byoc.build(matmul_module((2, 4), (4, 3)))
    lib = tmp_path / "model.so"
    ex.export_library(str(lib))
    script = f"import tvm; tvm.runtime.load_module({str(lib)!r})"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 1  # a Python exception, not a signal
    assert "tenet" in proc.stderr
