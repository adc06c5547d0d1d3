"""tenet_byoc.load_module: an intact export loads and runs; a truncated one is a ValueError.

Loading a truncated library with ``tvm.runtime.load_module`` dies with SIGBUS, so every
load runs in a subprocess: a crash fails the test instead of ending pytest.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tenet_byoc
from relax_testing import matmul_module, run


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("export")
    rng = np.random.default_rng(0)
    ex = tenet_byoc.build(matmul_module((4, 16), (8, 16), transposed=True))
    arrays = [rng.standard_normal(s).astype("float32") for s in [(4, 16), (8, 16)]]
    lib = tmp / "m.so"
    ex.export_library(str(lib))
    for i, a in enumerate(arrays):
        np.save(tmp / f"in{i}.npy", a)
    return lib, arrays, run(ex, *arrays)


def test_intact_loads_and_truncated_is_a_value_error(exported, tmp_path):
    lib, arrays, expected = exported
    data = lib.read_bytes()
    cuts = []
    for keep in (len(data) // 2, len(data) * 9 // 10, len(data) - 1, 40):
        cut = tmp_path / f"m_{keep}.so"
        cut.write_bytes(data[:keep])
        cuts.append(str(cut))
    script = textwrap.dedent(
        f"""
        import numpy as np, tvm
        import tenet_byoc
        from tvm import relax
        lib = tenet_byoc.load_module({str(lib)!r})
        vm = relax.VirtualMachine(lib, tvm.cpu())
        args = [tvm.runtime.tensor(np.load({str(lib.parent)!r} + f"/in{{i}}.npy"))
                for i in range(2)]
        np.save({str(tmp_path / "out.npy")!r}, vm["main"](*args).numpy())
        for cut in {cuts!r}:
            try:
                tenet_byoc.load_module(cut)
            except ValueError as err:
                print("REFUSED", cut, "|", err)
            else:
                print("LOADED", cut)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])  # not a signal
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), expected)
    np.testing.assert_allclose(expected, arrays[0] @ arrays[1].T, rtol=1e-5, atol=1e-5)
    lines = proc.stdout.splitlines()
    assert len(lines) == len(cuts)
    for cut, line in zip(cuts, lines, strict=True):
        assert line.startswith(f"REFUSED {cut} | {cut!r} is not a loadable"), line


def test_not_a_library(tmp_path):
    text = tmp_path / "notes.so"
    text.write_text("hello")
    with pytest.raises(ValueError, match="notes.so.*no ELF header"):
        tenet_byoc.load_module(text)
    with pytest.raises(FileNotFoundError, match="missing.so"):
        tenet_byoc.load_module(tmp_path / "missing.so")
    with pytest.raises(ValueError, match="is a folder"):
        tenet_byoc.load_module(tmp_path)
