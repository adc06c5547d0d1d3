"""The GEMM threads sleep when idle: OMP_WAIT_POLICY is set before any libgomp loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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


BIND_PROBE = """
import json, os, sys, threading
import numpy as np
import tenet_byoc, tvm
from tvm import relax
sys.path.insert(0, TESTS)
from relax_testing import matmul_module

def allowed():
    out = {}
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/status") as f:
            for line in f:
                if line.startswith("Cpus_allowed_list:"):
                    out[int(tid)] = line.split(":", 1)[1].strip()
    return out

m = k = n = 256  # 2^24 multiply-adds: a two-thread GEMM
mod = matmul_module((m, k), (n, k), transposed=True)
vm = relax.VirtualMachine(tenet_byoc.build(mod), tvm.cpu())
a = np.ones((m, k), "float32")
before = allowed()
out = vm["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(a)).numpy()
assert (out == k).all()
after = allowed()
seen = {}
t = threading.Thread(target=lambda: seen.update(cpus=sorted(os.sched_getaffinity(0))))
t.start(); t.join()
print(json.dumps({"main": after[os.getpid()], "process": before[os.getpid()],
                  "new": {str(tid): v for tid, v in after.items() if tid not in before},
                  "python_thread": seen["cpus"]}))
"""


def _cpus(spec: str) -> set[int]:
    """The CPUs of a /proc Cpus_allowed_list such as ``0-3,6``."""
    cpus: set[int] = set()
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def _bind_probe(cpus: set[int] | None = None, **env: str) -> dict:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("OMP_NUM_THREADS", "TENET_BIND_THREADS")}
    code = BIND_PROBE.replace("TESTS", repr(str(Path(__file__).resolve().parents[1])))
    proc = subprocess.run([sys.executable, "-c", code], check=False,
                          env={**clean, "OMP_NUM_THREADS": "2", **env}, capture_output=True,
                          text=True, timeout=300,
                          preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2,
                    reason="binding needs a CPU for the worker beside the caller's")
def test_gemm_workers_are_kept_off_the_callers_cpu_and_the_caller_is_not_bound():
    got = _bind_probe()
    full = got["process"]  # the calling thread's CPUs before the GEMM
    assert got["main"] == full  # the calling thread keeps the process's set
    assert set(got["python_thread"]) == _cpus(full)  # and so do the threads it starts
    # The one worker: barred from the CPU the caller ran on, free on the rest of its set.
    bound = [_cpus(v) for v in got["new"].values() if _cpus(v) != _cpus(full)]
    assert len(bound) == 1 and bound[0] < _cpus(full) and len(_cpus(full) - bound[0]) == 1


def test_binding_is_skipped_where_the_worker_has_no_cpu_of_its_own_or_when_asked():
    # A process held to one CPU has none to spare for the worker; TENET_BIND_THREADS=0
    # turns binding off. No thread is then bound tighter than the process.
    one = {min(os.sched_getaffinity(0))}
    for got in (_bind_probe(cpus=one), _bind_probe(TENET_BIND_THREADS="0")):
        full = got["process"]
        assert got["main"] == full and got["new"], got
        assert all(v == full for v in got["new"].values()), got
