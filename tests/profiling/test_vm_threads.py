"""One tenet_byoc.VirtualMachine called from several threads gives every call's right answer.

A plain ``relax.VirtualMachine`` shared by two threads corrupts its registers (SIGSEGV);
the run happens in a subprocess so a crash fails this test rather than ending pytest.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_shared_vm_from_two_threads_matches_numpy(tmp_path):
    script = textwrap.dedent(
        """
        import threading
        import numpy as np, tvm
        import tenet_byoc
        from tenet_byoc.models.mlp import mlp_module, random_mlp_params

        params = random_mlp_params()
        ex = tenet_byoc.build(mlp_module(params), accelerator="os16")
        vm = tenet_byoc.VirtualMachine(ex, tvm.cpu())
        rng = np.random.default_rng(0)
        inputs = [rng.random((1 + i % 3, 784), dtype=np.float32) for i in range(8)]
        results, errors = {}, []

        def work(t):
            try:
                for i in range(200):
                    x = inputs[(t + i) % len(inputs)]
                    results[(t, i)] = (x, vm["main"](tvm.runtime.tensor(x)).numpy())
            except Exception as err:  # reported below, the test fails on it
                errors.append(repr(err))

        def read_ledger():
            for _ in range(50):
                tenet_byoc.ledger(vm).reset()

        threads = [threading.Thread(target=work, args=(t,)) for t in range(2)]
        threads.append(threading.Thread(target=read_ledger))
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors, errors
        worst = 0.0
        for x, y in results.values():
            # The numpy forward of the same weights: 784 -> 128 -> ReLU -> 10.
            h = np.maximum(x @ params["w0"].T + params["b0"], 0)
            ref = h @ params["w1"].T + params["b1"]
            worst = max(worst, float(np.abs(y - ref).max() / np.abs(ref).max()))
        print("CALLS", len(results), "WORST", worst)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    calls = worst = None
    for line in proc.stdout.splitlines():
        if line.startswith("CALLS"):
            _, calls, _, worst = line.split()
    assert int(calls) == 400
    assert float(worst) < 1e-5
