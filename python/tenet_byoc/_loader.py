"""Loads the C++ runtime library into the process, after TVM and oneDNN, exactly once."""

from __future__ import annotations

import ctypes
import importlib.metadata
import importlib.util
import json
import os
import platform
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


def _first_line(path: str, match: Callable[[str], bool]) -> str | None:
    """The first line of the file ``path`` that ``match`` accepts (None: none, or unreadable)."""
    try:
        with open(path) as f:
            return next((line for line in f if match(line)), None)
    except OSError:
        return None


def _passive_openmp_threads() -> None:
    # oneDNN's GNU OpenMP threads spin after every parallel region by default; beside TVM's
    # thread pool, numpy's OpenBLAS threads or another process on the same cores that spin
    # made small calls 40-100x slower (measured on 2 cores). A passive wait puts them to
    # sleep at once; waking them costs tens of microseconds, which the GEMMs large enough
    # to use them (>= 2^22 multiply-adds) do not notice. libgomp reads the policy once, when
    # it is loaded, so it is set before oneDNN brings libgomp in; a user's setting wins.
    if "OMP_WAIT_POLICY" in os.environ:
        return
    loaded = _first_line("/proc/self/maps", lambda line: "libgomp" in line and ".so" in line)
    if loaded is not None:  # the line of the libgomp already mapped into this process
        # One line that says what to do: the usual cause is `import tvm` (whose tvm-ffi
        # imports torch, which brings its own libgomp) before `import tenet_byoc`.
        warnings.warn(
            f"{loaded.split()[-1]} was loaded before tenet_byoc (e.g. by torch through `import tvm`), so "
            "oneDNN's idle threads spin and slow small GEMMs; import tenet_byoc first, or "
            "set OMP_WAIT_POLICY=PASSIVE before starting Python",
            RuntimeWarning,
            stacklevel=4,
        )
        return
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"


# Before `import tvm`: tvm-ffi imports torch when it is installed, and torch brings its own
# libgomp.so.1, which oneDNN then shares; libgomp reads the wait policy when it loads.
_passive_openmp_threads()


def _import_tvm_without_torch():
    """``import tvm`` without the ``import torch`` tvm-ffi attempts when torch is installed
    (about 5 CPU s, paid by every process and dse worker); torch stays importable afterwards
    and is loaded as usual when the user, or a module of ours that needs it, imports it.
    When torch is already imported, tvm-ffi sees it as before."""
    import sys

    if "torch" in sys.modules:
        import tvm

        return tvm
    sys.modules["torch"] = None  # tvm-ffi's `import torch` raises ImportError: torch absent
    try:
        import tvm
    finally:
        if sys.modules.get("torch", 0) is None:
            del sys.modules["torch"]
    return tvm


tvm = _import_tvm_without_torch()

_LIBRARY = "libtenet_runtime.so"
_handle: ctypes.CDLL | None = None


def _preload_onednn() -> None:
    # The onednn-cpu-gomp wheel installs libdnnl.so.3 into <prefix>/lib; the runtime's RPATH
    # finds it there for ordinary installs, and this covers the layouts it does not.
    try:
        dist = importlib.metadata.distribution("onednn-cpu-gomp")
    except importlib.metadata.PackageNotFoundError:
        return
    for f in dist.files or []:
        if str(f).endswith("libdnnl.so.3"):
            path = Path(dist.locate_file(f)).resolve()
            if path.exists():
                ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
            return


@dataclass(frozen=True)
class CpuInfo:
    """What the runtime's GEMM kernels run on in this process.

    Attributes
    ----------
    isa : str
        The instruction set oneDNN uses (``avx2``, ``avx512_core_vnni``, ...); the
        ``ONEDNN_MAX_CPU_ISA`` environment variable, read when oneDNN loads, can lower it.
    int8_path : str
        ``native``: one oneDNN int8 GEMM, exact because the ISA has VNNI (checked by a
        worst-case probe). ``widened``: on other CPUs (whose oneDNN int8 kernels saturate
        16-bit pair sums), int8 operands widened to int16 and multiplied in exact
        32-bit pair sums (``vpmaddwd``) by the runtime's own kernel.
    threads : int
        OpenMP threads a large GEMM uses (``OMP_NUM_THREADS``, else every core available).
    omp_wait_policy : str
        ``OMP_WAIT_POLICY`` as libgomp read it (``PASSIVE`` unless the user set it).
    model : str
        The CPU's model name (``/proc/cpuinfo`` on Linux, else the platform's processor
        string, else ``"unknown CPU"``): what benchmark figures name.
    """

    isa: str
    int8_path: str
    threads: int
    omp_wait_policy: str
    model: str = "unknown CPU"


def _cpu_model() -> str:
    line = _first_line("/proc/cpuinfo", lambda line: line.startswith("model name"))
    return line.split(":", 1)[1].strip() if line else platform.processor() or "unknown CPU"


def cpu_info() -> CpuInfo:
    """Return the CPU model, ISA, int8 path and thread count of the runtime's GEMM kernels."""
    load_runtime_library()
    fields = json.loads(tvm.get_global_func("tenet_byoc.runtime.cpu_info")())
    return CpuInfo(**fields, model=_cpu_model())


def _runtime_library_path() -> Path:
    # Beside this file in a normal install; in an editable install (pip install -e) the
    # Python sources stay in the checkout and the compiled libraries are installed beside
    # the _cost_model extension, in site-packages.
    here = Path(__file__).with_name(_LIBRARY)
    if here.exists():
        return here
    spec = importlib.util.find_spec("tenet_byoc._cost_model")
    if spec is not None and spec.origin:
        there = Path(spec.origin).with_name(_LIBRARY)
        if there.exists():
            return there
    raise ImportError(
        f"{here} is missing: tenet_byoc must be installed with `pip install .`, "
        "which compiles the runtime"
    )


def load_runtime_library() -> ctypes.CDLL:
    """Load ``libtenet_runtime.so`` from the package directory (idempotent): once it is
    loaded, its static initialisers have registered the tenet globals."""
    global _handle
    if _handle is None:
        path = _runtime_library_path()
        _preload_onednn()
        _handle = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    return _handle
