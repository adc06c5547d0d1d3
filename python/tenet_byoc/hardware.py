"""Accelerators the runtime charges calls to: shipped presets and custom TENET configurations.

An :class:`Accelerator` is a named pair of a :class:`~tenet_byoc.cost_model.Hardware` (PE array,
interconnect, bandwidth, latency, clock, MAC rates by operand width) and a
:class:`~tenet_byoc.cost_model.Dataflow` (space and time maps). It is chosen at build time
and travels inside the runtime module in the cost model's one JSON form
(:meth:`Accelerator.to_json`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from . import cost_model as cm


@dataclass(frozen=True)
class Accelerator:
    """A named hardware + dataflow pair, checked when it is made.

    Parameters
    ----------
    name : str
        The accelerator's one name: ledgers, reports and sweeps show it.
    hardware : cost_model.Hardware
        The PE array, interconnect, memory system, clock and MACs per PE per cycle (an int,
        or a dict by operand width such as ``{16: 2, 8: 4, 4: 8}``: see
        ``cost_model.Hardware``).
    dataflow : cost_model.Dataflow
        Space and time maps of a GEMM ``S[i,j,k]`` (``C[i,j] += A[i,k] * B[k,j]``).

    Raises
    ------
    ValueError
        When the dataflow cannot run on the hardware: the cost model costs a probe GEMM
        larger than the array (``2 * num_pes + 3`` rows and columns, capped at 259), so a
        space map that leaves the PE domain or a time map with conflicts fails here rather
        than at the first call.
    """

    name: str
    hardware: cm.Hardware
    dataflow: cm.Dataflow

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"Accelerator.name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.hardware, cm.Hardware):
            raise TypeError(
                f"Accelerator.hardware must be a cost_model.Hardware, got {type(self.hardware)}"
            )
        if not isinstance(self.dataflow, cm.Dataflow):
            raise TypeError(
                f"Accelerator.dataflow must be a cost_model.Dataflow, got {type(self.dataflow)}"
            )
        cm.validate_accelerator(self.name, self.hardware, self.dataflow)

    @property
    def fast_path(self) -> bool:
        """Whether every GEMM is costed in closed form, whatever its size (see
        :func:`check_gemm_size`)."""
        return _fast_path(self.hardware, self.dataflow)

    def check_gemm(self, m: int, n: int, k: int, where: str = "a GEMM") -> None:
        """Refuse, before anything runs, a GEMM this accelerator could not cost (see
        :func:`check_gemm_size`)."""
        check_gemm_size(self.hardware, self.dataflow, m, n, k, where, self.name)

    def to_json(self) -> str:
        """The cost model's one serialized form of this accelerator (what the runtime reads)."""
        return cm.serialize_accelerator(self.name, self.hardware, self.dataflow)

    @classmethod
    def from_json(cls, text: str) -> Accelerator:
        """The accelerator :meth:`to_json` wrote."""
        return cls(*cm.parse_accelerator(text))

    @classmethod
    def systolic(
        cls,
        dataflow: str,
        rows: int,
        cols: int,
        *,
        name: str | None = None,
        bandwidth_bits: float = 256.0,
        avg_latency: float = 16.0,
        clock_ghz: float = 1.0,
        l1_bytes: int = 256,
        l2_bytes: int = 1 << 20,
        macs_per_pe_per_cycle: int | Mapping[int, int] = 1,
        **tiling: int,
    ) -> Accelerator:
        """An ``rows x cols`` systolic array running preset ``dataflow`` ("os", "ws", "is")."""
        name = name or f"{dataflow}{rows}x{cols}"
        rate = macs_per_pe_per_cycle
        hw = cm.Hardware.systolic(
            rows, cols, bandwidth_bits=bandwidth_bits, avg_latency=avg_latency,
            clock_ghz=clock_ghz, l1_bytes=l1_bytes, l2_bytes=l2_bytes,
            macs_per_pe_per_cycle=dict(rate) if isinstance(rate, Mapping) else rate, name=name,
        )
        return cls(name, hw, cm.Dataflow.preset(dataflow, rows, cols, **tiling))

    @classmethod
    def from_tenet_files(
        cls, p_file: str | Path, m_file: str | Path, *, name: str | None = None,
        clock_ghz: float = 1.0,
    ) -> Accelerator:
        """A TENET ``.p`` (PE array) and ``.m`` (mapping) file pair, used unchanged.

        The accelerator and its hardware are both called ``name`` (default ``"<p>+<m>"``,
        the two files' stems).
        """
        texts = []
        for path, what in ((p_file, ".p file (PE array)"), (m_file, ".m file (mapping)")):
            if Path(path).is_dir():
                raise ValueError(f"TENET {what} {str(path)!r} is a directory, not a file")
            if not Path(path).is_file():
                raise FileNotFoundError(f"TENET {what} {str(path)!r} does not exist")
            try:
                texts.append(Path(path).read_text(encoding="utf-8"))
            except UnicodeDecodeError as err:
                raise ValueError(
                    f"TENET {what} {str(path)!r} is not UTF-8 text (byte at offset {err.start})"
                ) from None
        name = name or f"{Path(p_file).stem}+{Path(m_file).stem}"
        hw = cm.parse_tenet_hardware(texts[0], Path(p_file).stem)
        hw = cm.Hardware(
            pe_domain=hw.pe_domain, interconnect=hw.interconnect,
            bandwidth_bits=hw.bandwidth_bits, avg_latency=hw.avg_latency,
            clock_ghz=clock_ghz, l1_bytes=hw.l1_bytes, l2_bytes=hw.l2_bytes,
            macs_per_pe_per_cycle=hw.macs_per_pe_per_cycle, name=name,
        )
        df = cm.parse_tenet_mapping(texts[1], Path(m_file).stem)
        return cls(name, hw, df)


def _fast_path(hardware: cm.Hardware, dataflow: cm.Dataflow) -> bool:
    try:
        cm.analyze_gemm(2, 2, 2, hardware, dataflow, method="fast")
    except ValueError:
        return False
    return True


def check_gemm_size(
    hardware: cm.Hardware, dataflow: cm.Dataflow, m: int, n: int, k: int,
    where: str = "a GEMM", name: str | None = None,
) -> None:
    """Refuse a GEMM the cost model could only cost by enumerating too many instances.

    Every GEMM size is costed in closed form ("fast path") for an os/ws/is preset dataflow
    (``Dataflow.preset``, or TENET relations equal to one, such as TENET's
    ``matmul_systolic_os.m`` / ``_ws.m``) on the systolic interconnect
    ``{PE[p,q]->PE[p-1,q]; PE[p,q]->PE[p,q-1]}``. Any other TENET file pair is costed by
    enumerating each call's M x N x K instances, up to
    ``cost_model.MAX_ENUMERATED_INSTANCES``.

    Raises
    ------
    ValueError
        When ``m * n * k`` is over that limit and the fast path does not apply; the
        message names the GEMM and says what to do.
    """
    limit = cm.MAX_ENUMERATED_INSTANCES
    if m * n * k > limit and not _fast_path(hardware, dataflow):
        raise ValueError(
            f"accelerator {name or hardware.name!r}: {where} of {m} x {n} x {k} = "
            f"{m * n * k:,} instances cannot be costed: dataflow {dataflow.name!r} is not an "
            f"os/ws/is preset on a systolic array, so each call is enumerated, up to "
            f"{limit:,} instances. Use a preset dataflow (or TENET's matmul_systolic_os.m / "
            "_ws.m form) for large GEMMs, or smaller shapes"
        )


def _tenet_paper(dataflow: str) -> Callable[[], Accelerator]:
    # The 8x8 array of TENET's systolic.p: L1 256 B, L2 1 KiB, 64 bits/cycle, latency 16.
    return lambda: Accelerator.systolic(
        dataflow, 8, 8, name=f"tenet_{dataflow}8", bandwidth_bits=64, avg_latency=16,
        l1_bytes=256, l2_bytes=1024,
    )


#: Shipped presets by name. Bandwidth is off-chip bits per cycle at ``clock_ghz``.
PRESETS: dict[str, Callable[[], Accelerator]] = {
    "os16": lambda: Accelerator.systolic("os", 16, 16, name="os16"),
    "ws16": lambda: Accelerator.systolic("ws", 16, 16, name="ws16"),
    "is16": lambda: Accelerator.systolic("is", 16, 16, name="is16"),
    # A 16x16 output-stationary array whose PEs are dot-product units that do more MACs per
    # cycle at lower precision (2 at 16 bits, 4 at 8, 8 at 4): compute follows the bits.
    "os16_mp": lambda: Accelerator.systolic(
        "os", 16, 16, name="os16_mp", macs_per_pe_per_cycle={16: 2, 8: 4, 4: 8}
    ),
    "os128": lambda: Accelerator.systolic(
        "os", 128, 128, name="os128", bandwidth_bits=2048, l2_bytes=24 << 20
    ),
    "ws128": lambda: Accelerator.systolic(
        "ws", 128, 128, name="ws128", bandwidth_bits=2048, l2_bytes=24 << 20
    ),
    "tenet_os8": _tenet_paper("os"),
    "tenet_ws8": _tenet_paper("ws"),
}

DEFAULT_PRESET = "os16"


def preset(name: str) -> Accelerator:
    """The shipped accelerator called ``name``; see :data:`PRESETS`."""
    if name not in PRESETS:
        raise ValueError(
            f"unknown accelerator preset {name!r}; available: {', '.join(sorted(PRESETS))}"
        )
    return PRESETS[name]()


def resolve(accelerator: str | Accelerator | None) -> Accelerator:
    """An :class:`Accelerator` from a preset name, an Accelerator, or None (the default)."""
    if accelerator is None:
        return preset(DEFAULT_PRESET)
    if isinstance(accelerator, str):
        return preset(accelerator)
    if isinstance(accelerator, Accelerator):
        return accelerator
    raise TypeError(
        f"accelerator must be a preset name or a tenet_byoc.Accelerator, got {type(accelerator)}"
    )


__all__ = ["DEFAULT_PRESET", "PRESETS", "Accelerator", "check_gemm_size", "preset", "resolve"]
