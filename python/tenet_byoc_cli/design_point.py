"""The design point's schema, light enough for the console entry (no TVM, no numpy): each
axis of a design (its field and default, its name in a space, its check, unit, whose
charges it enters and its piece of the point's name) and the columns of a point's result.
``tenet_byoc.dse`` builds its :class:`~tenet_byoc.dse.DesignPoint` and
:class:`~tenet_byoc.dse.PointResult` on them; ``tenet-byoc dse --objective`` reads the
columns from here."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["AXES", "COLUMNS", "DEFAULTS", "LATER", "Axis", "DesignAxes", "PointColumns"]


@dataclass(frozen=True)
class Axis:
    """What the schema says of one :class:`DesignAxes` field. The rest is made from it:
    the ``tenet_byoc.dse.DesignSpace`` list of its values and their check, its column of
    :class:`PointColumns` (the results file, ``dse.csv`` and ``--objective``), its piece of
    the point's name and the charge keys it enters.

    Attributes
    ----------
    space : str
        Its name in a :class:`DesignSpace` and a space file, where it is a list of values.
    check : {"int", "float", "dataflow", "formats", "mapping"}
        How a space checks a value: a positive integer or number, a dataflow, a set of PE
        formats (written ``"+"``-joined in its column) or a mapping choice.
    unit : str
        What a value counts ("" for a name).
    charges : {"array", "memory", "vector", "system", "clock"}
        Whose charges depend on it: a GEMM's ("array"), a vector call's ("vector"), both
        ("memory"), the composition over chips ("system"), or none ("clock": charges are
        in cycles, and DRAM enters them as bits per cycle).
    tag : callable, optional
        ``tag(value, point)``: its piece of the point's name ("" leaves it out).
    charged_as : callable, optional
        ``charged_as(point)``: what the charges see of it (default: its value).
    later : bool
        Added after the first release: left out of the point's key at its default, so the
        keys of older results files stay valid, and filled in from the default when an
        older row is read.
    """

    space: str
    check: str
    unit: str
    charges: str
    tag: Callable[[Any, Any], str] | None = None
    charged_as: Callable[[Any], Any] | None = None
    later: bool = False


def _axis(space: str = "", *, default: Any, **schema: Any) -> Any:
    """A :class:`DesignAxes` field of ``default`` and its :class:`Axis` (``space`` defaults
    to the field's own name)."""
    return field(default=default, metadata={"axis": Axis(space, **schema)})


@dataclass(frozen=True)
class DesignAxes:
    """One design: a ``rows x cols`` systolic array of PEs with a MAC unit per format, a
    global buffer, DRAM at ``dram_gbps``, a clock, a vector unit, and the chips it is one of.
    Energies are the cost model's 45 nm figures (Horowitz; a format's MAC energy by
    :func:`tenet_byoc.area.mac_figure`). The defaults are a design space's.
    ``tenet_byoc.dse.DesignPoint`` adds what is made from them (its accelerator and its
    charge keys)."""

    rows: int = _axis(default=16, check="int", unit="PEs", charges="array",
                      tag=lambda v, p: f"{p.dataflow}{v}x{p.cols}")
    cols: int = _axis(default=16, check="int", unit="PEs", charges="array")  # rows' tag
    dataflow: str = _axis("dataflows", default="os", check="dataflow", unit="",
                          charges="array")  # rows' tag
    pe_formats: tuple[str, ...] = _axis(
        default=("int8", "fp16", "fp32"), check="formats", unit="", charges="array",
        tag=lambda v, p: "+".join(v),
        charged_as=lambda p: tuple(sorted(p.formats_by_width.items())))
    buffer_bytes: int = _axis(default=1 << 20, check="int", unit="bytes", charges="memory",
                              tag=lambda v, p: f"{v >> 10}KiB")
    dram_gbps: float = _axis(default=32.0, check="float", unit="GB/s (1e9 bytes per second)",
                             charges="memory", tag=lambda v, p: f"{v:g}GBps",
                             charged_as=lambda p: p.dram_bits_per_cycle)
    clock_ghz: float = _axis(default=1.0, check="float", unit="GHz", charges="clock",
                             tag=lambda v, p: f"{v:g}GHz")
    #: per-PE registers (a float32 operand pair, weight and sum)
    register_bytes: int = _axis(default=16, check="int", unit="bytes", charges="memory")
    #: "default" (each call's default tiles) or "auto" (each distinct call's mapping searched
    #: for latency, about 16x the charging time; large prefills can need it)
    mapping: str = _axis("mappings", default="default", check="mapping", unit="",
                         charges="array", tag=lambda v, p: "auto" if v == "auto" else "")
    #: the vector unit's float32 lanes (``cost_model.VectorUnit``)
    vector_lanes: int = _axis(default=16, check="int", unit="lanes", charges="vector",
                              tag=lambda v, p: f"v{v}" if v != 16 else "", later=True)
    #: chips sharing each layer (``tenet_byoc.system.System``)
    tensor_parallel: int = _axis(default=1, check="int", unit="chips", charges="system",
                                 tag=lambda v, p: f"tp{v}" if v > 1 else "", later=True)
    #: pipeline stages, each of ``tensor_parallel`` chips
    pipeline_parallel: int = _axis(default=1, check="int", unit="stages", charges="system",
                                   tag=lambda v, p: f"pp{v}" if v > 1 else "", later=True)
    #: GB/s each chip sends per direction (with several chips)
    link_gbps: float = _axis(default=100.0, check="float", unit="GB/s", charges="system",
                             tag=lambda v, p: f"link{v:g}GBps" if p.chips > 1 else "",
                             later=True)
    #: micro-batches the batch is split into through the pipeline (each must divide it)
    micro_batches: int = _axis(default=1, check="int", unit="micro-batches", charges="system",
                               tag=lambda v, p: f"mb{v}" if v > 1 else "", later=True)

    @property
    def key(self) -> str:
        """A short stable name of the point (its fields hashed): the results file's key.
        Fields added after the first release are left out at their defaults, so the keys
        of older results files stay valid."""
        fields_ = {name: value for name, value in dataclasses.asdict(self).items()
                   if name not in LATER or LATER[name] != value}
        text = json.dumps(fields_, sort_keys=True)
        return hashlib.sha1(text.encode()).hexdigest()[:16]

    @property
    def chips(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel

    @property
    def name(self) -> str:
        """The point for people: each field's tag, ``_``-joined."""
        tags = (a.tag(getattr(self, name), self) for name, a in AXES.items() if a.tag)
        return "_".join(t for t in tags if t)

    @property
    def dram_bits_per_cycle(self) -> float:
        return self.dram_gbps * 8 / self.clock_ghz


#: The schema: each :class:`DesignAxes` field's :class:`Axis`, in the fields' order.
AXES: dict[str, Axis] = {f.name: f.metadata["axis"] for f in dataclasses.fields(DesignAxes)}
for _name, _a in AXES.items():  # a field's name is its space name unless given
    if not _a.space:
        object.__setattr__(_a, "space", _name)
DEFAULTS = {f.name: f.default for f in dataclasses.fields(DesignAxes)}
#: The fields added after the first release, at their defaults (see DesignAxes.key).
LATER = {name: DEFAULTS[name] for name, a in AXES.items() if a.later}


def _with_point_columns(cls: type) -> type:
    """``cls`` (a dataclass to be) with a column per :data:`AXES` field after ``scheme``."""
    own = cls.__dict__["__annotations__"]
    at = list(own).index("scheme") + 1
    columns = {name: "str" if a.check == "formats" else DesignAxes.__annotations__[name]
               for name, a in AXES.items()}
    items = list(own.items())
    cls.__annotations__ = dict(items[:at] + list(columns.items()) + items[at:])
    return cls


@dataclass(frozen=True)
@_with_point_columns
class PointColumns:
    """One design point under one scheme: its key, name and scheme, a column per
    :class:`DesignAxes` field (:data:`AXES`; a set of PE formats ``+``-joined), then its
    figures. Figures are NaN when the scheme cannot run on it (``reason`` says why)."""

    key: str
    name: str
    scheme: str
    area_mm2: float  #: all chips'
    ttft_ms: float = math.nan
    tpot_ms: float = math.nan
    tokens_per_s: float = math.nan  #: the batch's decode tokens per second
    #: decode, per generated token of one sequence; the calls' energy and the static power
    #: (area x ``AreaTable.static_w_per_mm2``) over the decode time
    energy_per_token_mj: float = math.nan
    prefill_energy_per_token_mj: float = math.nan  #: the same for the prefill, per prompt token
    power_w: float = math.nan  #: average over the run (prefill + decode), static included
    feasible: bool = False
    reason: str = ""
    perplexity: float = math.nan
    top1_agreement: float = math.nan
    fronts: tuple[str, ...] = ()  #: names of the fronts the point is on


#: A point's result columns, in order: what ``tenet-byoc dse --objective`` may sort by.
COLUMNS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(PointColumns))
