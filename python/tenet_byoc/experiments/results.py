"""What a sweep produces: one row per (case, scheme, accelerator, phase), the cost of every
offloaded call, and their CSV, JSON and markdown forms."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ..documents import write_json, write_rows

__all__ = ["LAYER_COLUMNS", "MANIFEST", "ROW_COLUMNS", "LayerCost", "SweepResult", "SweepRow",
           "markdown_table", "si", "write_manifest"]

#: The file naming a run (command line, models, schemes, accelerators, CPU, versions, date)
#: that each command writes beside its outputs; ``tenet-byoc report`` reads it.
MANIFEST = "manifest.json"


def _as_declared(item) -> None:
    """Store the ``float`` fields of a frozen row as floats.

    The runtime's ledger JSON gives an integral float as an int (``1340108288``) and the
    cost model's binding as a float (``1340108288.0``); a row made from either is the same
    row, and prints the same in CSV and JSON.
    """
    for f in fields(item):
        value = getattr(item, f.name)
        if f.type in ("float", "float | None") and isinstance(value, int) \
                and not isinstance(value, bool):
            object.__setattr__(item, f.name, float(value))


_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def si(value: float, unit: str = "", digits: int = 3) -> str:
    """``value`` with an SI prefix and ``digits`` significant figures: ``147.8 T`` for
    147,837,069,295,616, ``35.8 TB`` for 35,829,318,811,648 bytes, ``4.6`` for
    4.6000000000000005; below 1,000 no prefix."""
    if value != value or value in (float("inf"), float("-inf")):
        return f"{value}{' ' + unit if unit else ''}"
    for scale, prefix in _PREFIXES:
        if abs(value) >= scale * (1 - 0.5 * 10 ** (1 - digits)):
            return f"{value / scale:.{digits}g} {prefix}{unit}"
    text = f"{value:.{digits}g}" if value else "0"
    return f"{text} {unit}" if unit else text


@dataclass(frozen=True)
class SweepRow:
    """What one phase of one case costs under one scheme on one accelerator.

    Cost columns are sums over the phase's offloaded calls (utilisation MAC-weighted,
    bandwidth = off-chip bytes / est. latency). ``weight_bytes`` counts the linear layers'
    weights and their scales once each (attention's K and V are not weights).
    Errors compare the output (logits) with the float32 build's on the same inputs;
    ``accuracy`` is the FashionMNIST test accuracy (None without the real data).
    """

    model: str
    scheme: str
    accelerator: str
    phase: str
    tokens: int  #: prefill: prompt length P; decode: context length L; MLP: images
    calls: int
    macs: int
    cycles: int
    roofline_cycles: int  #: sum of the calls' rooflines (cycles / roofline_cycles >= 1)
    latency_us: float
    pe_utilization: float
    weight_bytes: float
    offchip_bytes: float
    dram_bytes: float  #: DRAM reads + writes of the buffer level
    energy_pj: float
    bandwidth_gbps: float
    max_abs_error: float
    rel_error: float  #: max_abs_error / max |float32 output|
    top1_agreement: float  #: fraction of positions (images) whose argmax matches float32
    accuracy: float | None
    build_s: float  #: the (case, scheme)'s one build, shared by its accelerators; quantize excluded
    wall_s: float  #: median CPU time of the phase's timed runs (after a warm-up run)

    def __post_init__(self) -> None:
        _as_declared(self)


@dataclass(frozen=True)
class LayerCost:
    """One offloaded call of one run, named after the model's layer."""

    model: str
    scheme: str
    accelerator: str
    phase: str
    layer: str  #: e.g. ``h.3.mlp.c_fc``, ``lm_head``, ``fc0``; the call's name if unknown
    pattern: str
    call_scheme: str  #: the call's own scheme ("none" for attention in quantized runs)
    batch: int
    m: int
    n: int
    k: int
    macs: int
    cycles: int
    roofline_cycles: int
    latency_us: float
    pe_utilization: float
    offchip_bytes: float
    dram_bytes: float
    energy_pj: float
    mapping: str  #: dataflow, buffer tiles and tile-loop order
    weight_bytes: float  #: 0 for calls whose B operand is an activation (attention)

    def __post_init__(self) -> None:
        _as_declared(self)


ROW_COLUMNS = [f.name for f in fields(SweepRow)]
LAYER_COLUMNS = [f.name for f in fields(LayerCost)]


def write_csv(columns: Sequence[str], items: Sequence, path: str | Path | None) -> str:
    """CSV text of ``items``' attributes ``columns`` (None as empty), written to ``path``
    when given."""
    return write_rows(columns, ([getattr(item, c) for c in columns] for item in items), path)


def save_files(out_dir: str | Path, writers: dict[str, Callable[[Path], Any]]) -> list[Path]:
    """Write each file ``name`` of ``writers`` into ``out_dir`` (made if needed) with
    ``writers[name](path)``; return the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, write in writers.items():
        write(out / name)
    return [out / name for name in writers]


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub markdown table; numbers are right-aligned."""
    def align(col: int) -> str:
        numeric = rows and all(
            isinstance(r[col], (int, float)) or str(r[col]).lstrip("-").replace(".", "", 1)[:1]
            .isdigit() for r in rows
        )
        return "---:" if numeric else "---"

    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join(align(i) for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


@dataclass
class SweepResult:
    """The rows of a sweep, the per-call costs of every run, and notes on the inputs."""

    rows: list[SweepRow] = field(default_factory=list)
    layers: list[LayerCost] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    def to_csv(self, path: str | Path | None = None) -> str:
        """One line per :class:`SweepRow`."""
        return write_csv(ROW_COLUMNS, self.rows, path)

    def layers_to_csv(self, path: str | Path | None = None) -> str:
        """One line per offloaded call (:class:`LayerCost`) of every run."""
        return write_csv(LAYER_COLUMNS, self.layers, path)

    def to_json(self, path: str | Path | None = None) -> str:
        """Rows, notes and total wall time (per-call costs are in :meth:`layers_to_csv`)."""
        return write_json({"wall_s": self.wall_s, "notes": self.notes,
                           "rows": [asdict(r) for r in self.rows]}, path)

    def save(self, out_dir: str | Path, prefix: str = "sweep") -> list[Path]:
        """Write ``sweep.csv``, ``sweep.json`` and ``layers.csv`` into ``out_dir`` (``prefix``
        names the first two: ``run`` for ``tenet-byoc run``)."""
        return save_files(out_dir, {f"{prefix}.csv": self.to_csv, f"{prefix}.json": self.to_json,
                                    "layers.csv": self.layers_to_csv})

    def table(self, model: str | None = None) -> str:
        """The rows (of ``model``, or all) as a markdown table with readable units."""
        header = ["model", "scheme", "accelerator", "phase", "tokens", "MACs", "est. cycles",
                  "x roofline", "est. latency (us)", "PE util", "weight bytes",
                  "off-chip bytes", "DRAM bytes", "energy (uJ)", "bandwidth (GB/s)", "max abs err",
                  "top-1 agree", "accuracy", "wall (ms)"]
        return markdown_table(header, [[
            r.model, r.scheme, r.accelerator, r.phase, r.tokens, si(r.macs), si(r.cycles),
            f"{r.cycles / r.roofline_cycles:.2f}" if r.roofline_cycles else "-",
            f"{r.latency_us:,.1f}", f"{100 * r.pe_utilization:.1f}%",
            si(r.weight_bytes, "B"), si(r.offchip_bytes, "B"),
            si(r.dram_bytes, "B"), f"{r.energy_pj / 1e6:,.2f}",
            f"{r.bandwidth_gbps:.1f}", f"{r.max_abs_error:.3g}",
            f"{100 * r.top1_agreement:.1f}%",
            "-" if r.accuracy is None else f"{100 * r.accuracy:.2f}%", f"{1e3 * r.wall_s:.1f}",
        ] for r in self.rows if model is None or r.model == model])


def _accelerator_entry(acc) -> dict:
    """An accelerator as the manifest records it: its one JSON form, plus the roofs a
    roofline plot needs (peak MACs per cycle by operand width, DRAM bytes per cycle)."""
    rates = acc.hardware.macs_per_pe_per_cycle
    rates = ({str(bits): r for bits, r in sorted(rates.items())} if isinstance(rates, dict)
             else {"all": rates})
    return {
        "name": acc.name,
        "num_pes": acc.hardware.num_pes * acc.cores.count,  # every core's, as the ledger's
        "macs_per_pe_per_cycle": rates,
        "dram_bytes_per_cycle": acc.memory.dram_bandwidth_bits / 8,
        "clock_ghz": acc.hardware.clock_ghz,
        "json": json.loads(acc.to_json()),
    }


def write_manifest(out_dir: str | Path, *, command: str, argv: Sequence[str],
                   models: Sequence[str], schemes: Sequence[str],
                   accelerators: Sequence, system: dict | None = None) -> Path:
    """Write :data:`MANIFEST` into ``out_dir`` (the command's ``--out`` folder, made if
    needed): what ran, where and when.

    ``command`` is the subcommand (``sweep``, ``run``, ``estimate``, ``eval``) and ``argv``
    the command line's arguments after ``tenet-byoc``; each accelerator is recorded with its
    JSON (:meth:`~tenet_byoc.Accelerator.to_json`); ``system`` holds several chips'
    ``chips``, ``tensor_parallel``, ``pipeline_parallel``, ``micro_batches`` and ``link``
    (one chip when absent).
    """
    import datetime
    import platform
    import shlex
    from importlib import metadata

    from .. import __version__, cpu_info

    versions = {"tenet-byoc": __version__, "python": platform.python_version()}
    for dist in ("apache-tvm", "apache-tvm-ffi", "numpy", "onednn-cpu-gomp"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    doc = {
        "command": command,
        "command_line": shlex.join(["tenet-byoc", *argv]),
        "models": list(models),
        "schemes": list(schemes),
        "accelerators": [_accelerator_entry(a) for a in accelerators],
        "system": system or {"chips": 1},
        "cpu": asdict(cpu_info()),
        "platform": platform.platform(),
        "versions": versions,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    return save_files(out_dir, {MANIFEST: lambda path: write_json(doc, path)})[0]
