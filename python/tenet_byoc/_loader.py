"""Loads the C++ runtime library into the process, after TVM and oneDNN, exactly once."""

from __future__ import annotations

import ctypes
import importlib.metadata
from pathlib import Path

import tvm  # noqa: F401  (loads libtvm_ffi.so, which the runtime library links against)

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


def load_runtime_library() -> ctypes.CDLL:
    """Load ``libtenet_runtime.so`` from the package directory (idempotent).

    Returns
    -------
    ctypes.CDLL
        The loaded library; its static initialisers have registered the tenet globals.
    """
    global _handle
    if _handle is None:
        path = Path(__file__).with_name(_LIBRARY)
        if not path.exists():
            raise ImportError(
                f"{path} is missing: tenet_byoc must be installed with `pip install .`, "
                "which compiles the runtime"
            )
        _preload_onednn()
        _handle = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    return _handle
