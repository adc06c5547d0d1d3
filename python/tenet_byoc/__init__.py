"""tenet-byoc: run a Relax model's GEMMs on the CPU and charge them to a TENET cost model.

Importing the package loads the C++ runtime (registering ``ffi.Module.load_from_bytes.tenet``
so exported libraries load), registers the ``relax.ext.tenet`` codegen and the ``tenet``
patterns.
"""

from __future__ import annotations

from ._loader import CpuInfo, cpu_info, load_runtime_library

load_runtime_library()
# The imports below need the runtime library loaded first (E402 is intended here).
from .codegen import TenetCodegenError  # noqa: E402
from .estimate import estimate  # noqa: E402
from .accelerators import Accelerator  # noqa: E402
from .ledger import Ledger, LedgerEntry, ledger, set_charging, set_phase  # noqa: E402
from .library import load_module  # noqa: E402
from .partition import build, partition_for_tenet  # noqa: E402
from .patterns import refusal_reason, tenet_patterns  # noqa: E402
from .profiling import Report, VirtualMachine  # noqa: E402
from .quantization import SCHEMES, QuantScheme, quantize  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "SCHEMES",
    "Accelerator",
    "CpuInfo",
    "Ledger",
    "LedgerEntry",
    "QuantScheme",
    "Report",
    "TenetCodegenError",
    "VirtualMachine",
    "build",
    "cpu_info",
    "estimate",
    "ledger",
    "load_module",
    "partition_for_tenet",
    "quantize",
    "refusal_reason",
    "set_charging",
    "set_phase",
    "tenet_patterns",
]
