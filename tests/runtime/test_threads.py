"""The GEMM threads sleep when idle: OMP_WAIT_POLICY is set before any libgomp loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROBE = (
    "import json, warnings\n"
    "with warnings.catch_warnings(record=True) as caught:\n"
    "    warnings.simplefilter('always')\n"
    "    {before}\n"
    "    import tenet_byoc\n"
    "info = tenet_byoc.cpu_info()\n"
    "print(json.dumps({{'policy': info.omp_wait_policy, 'threads': info.threads,\n"
    "                   'warned': [str(w.message) for w in caught\n"
    "                              if issubclass(w.category, RuntimeWarning)]}}))\n"
)


def probe(before: str = "pass", **env: str) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
    proc = subprocess.run([sys.executable, "-c", PROBE.format(before=before)], check=False,
                          env={**clean, **env}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_sets_a_passive_wait():
    got = probe()
    assert got["policy"] == "PASSIVE" and got["warned"] == []


def test_user_settings_win():
    got = probe(OMP_WAIT_POLICY="ACTIVE", OMP_NUM_THREADS="1")
    assert got["policy"] == "ACTIVE" and got["threads"] == 1 and got["warned"] == []


def test_a_libgomp_loaded_first_is_reported():
    pytest.importorskip("torch", reason="torch (which ships its own libgomp) is not installed")
    got = probe(before="import torch")
    assert got["policy"] == ""
    assert any("OMP_WAIT_POLICY=PASSIVE" in w for w in got["warned"]), got


def test_readme_import_order_does_not_warn_with_torch_installed():
    # The README imports tenet_byoc before tvm: even where tvm-ffi would import torch (and
    # its libgomp), the policy is set first, so a user following it sees no warning.
    pytest.importorskip("torch", reason="torch (which ships its own libgomp) is not installed")
    got = probe(before="pass\n    import tenet_byoc, tvm, torch")
    assert got["policy"] == "PASSIVE" and got["warned"] == []


def test_the_warning_is_one_line_saying_what_to_do():
    pytest.importorskip("torch", reason="torch (which ships its own libgomp) is not installed")
    (message,) = probe(before="import tvm, torch")["warned"]
    assert "\n" not in message and "libgomp" in message
    assert "import tenet_byoc first" in message and "OMP_WAIT_POLICY=PASSIVE" in message
