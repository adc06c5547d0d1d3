"""Reading the runtime's cost ledger: entries, totals, groupings, and CSV / JSON / table output."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import tvm
from tvm import relax


@dataclass(frozen=True)
class TensorTraffic:
    """The data movement of one tensor (A, B or C) in one call, as TENET counts it."""

    bits: int
    is_write: bool
    total: int  #: (space-time point, element) access pairs
    unique: int  #: pairs no neighbouring point shares: what crosses the chip boundary
    reuse_factor: float
    spatial_reuse: float
    temporal_reuse: float
    offchip_elements: int
    offchip_bytes: float


@dataclass(frozen=True)
class LedgerEntry:
    """One offloaded GEMM call and what it would cost on the accelerator."""

    call_index: int  #: module-wide count of calls; the GEMMs of one merged call share it
    symbol: str  #: the offloaded function the VM called
    pattern: str  #: the composite pattern, e.g. ``tenet.matmul_transposed_bias``
    name: str  #: the step's name in the partitioned module
    phase: str  #: the tag set with :func:`set_phase` when the call ran ("" if none)
    scheme: str  #: the quantization scheme of the call ("none" for float32)
    batch: int
    m: int
    n: int
    k: int
    bits_a: int
    bits_b: int
    bits_c: int
    extra_read_bits: int  #: side data (quantization scales) read once per call
    extra_ops: int  #: non-MAC work: dequantization, activation max-abs and quantization
    macs: int
    cycles: int  #: the trusted latency in cycles (compute + stalls, see README)
    compute_cycles: int
    stall_cycles: int
    tenet_delay: float  #: TENET's max(ingress, egress, compute) delay
    ingress_delay: float
    egress_delay: float
    compute_delay: float  #: TENET's MACs / active PEs
    compute_delay_exact: float
    time_steps: int
    active_pes: int
    num_pes: int
    avg_active_pes: float
    pe_utilization: float  #: MACs / (cycles x PEs x MACs per PE per cycle)
    bandwidth_bits_per_cycle: float  #: off-chip bits / compute cycles
    latency_us: float  #: cycles at the configured clock
    offchip_read_bytes: float
    offchip_write_bytes: float
    tensors: Mapping[str, TensorTraffic]

    @property
    def offchip_bytes(self) -> float:
        return self.offchip_read_bytes + self.offchip_write_bytes

    @property
    def weight_bytes(self) -> float:
        """Bytes of the B operand (a linear layer's weight) and its scales, each once."""
        return (self.batch * self.k * self.n * self.bits_b + self.extra_read_bits) / 8


#: The scalar columns of a ledger table, in order (per-tensor traffic is flattened after them).
COLUMNS = [f.name for f in fields(LedgerEntry) if f.name != "tensors"]
TENSORS = ("A", "B", "C")
_TENSOR_COLUMNS = [f"{t}_{c}" for t in TENSORS for c in ("offchip_bytes", "reuse_factor")]


def _entry_row(e: LedgerEntry) -> list:
    row = [getattr(e, c) for c in COLUMNS]
    for t in TENSORS:
        tr = e.tensors.get(t)
        row += [tr.offchip_bytes, tr.reuse_factor] if tr else [0, 0]
    return row


@dataclass(frozen=True)
class Totals:
    """Sums over a set of entries; utilisation is MAC-weighted (sum MACs / sum PE-cycles)."""

    calls: int
    macs: int
    cycles: int
    latency_us: float
    offchip_bytes: float
    pe_utilization: float
    bandwidth_gbps: float  #: off-chip bytes / latency: the average bandwidth the calls need


def _totals(entries: list[LedgerEntry]) -> Totals:
    macs = sum(e.macs for e in entries)
    cycles = sum(e.cycles for e in entries)
    # Each entry's PE-cycle capacity is macs / utilization, so PEs doing several MACs per
    # cycle at low precision count at their real rate.
    pe_cycles = sum(e.macs / e.pe_utilization for e in entries if e.pe_utilization)
    latency = sum(e.latency_us for e in entries)
    offchip = sum(e.offchip_bytes for e in entries)
    return Totals(
        calls=len(entries),
        macs=macs,
        cycles=cycles,
        latency_us=latency,
        offchip_bytes=offchip,
        pe_utilization=macs / pe_cycles if pe_cycles else 0.0,
        bandwidth_gbps=offchip / (latency * 1e3) if latency else 0.0,
    )


class Ledger:
    """A snapshot of the charged calls of one executable or VM.

    Get one with :func:`tenet_byoc.ledger`. ``entries`` is a list of :class:`LedgerEntry`;
    ``totals()`` and ``group_by()`` sum them; ``to_csv``, ``to_json`` and ``to_dataframe``
    export them; ``reset()`` clears the runtime's ledger (not this snapshot).
    """

    def __init__(self, entries: list[LedgerEntry], accelerator: str, dataflow: str,
                 clock_ghz: float, modules: list[tvm.runtime.Module]):
        self.entries = entries
        self.accelerator = accelerator
        self.dataflow = dataflow
        self.clock_ghz = clock_ghz
        self._modules = modules

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[LedgerEntry]:
        return iter(self.entries)

    def totals(self) -> Totals:
        """Totals over all entries."""
        return _totals(self.entries)

    def group_by(self, key: str) -> dict[str, Totals]:
        """Totals per value of ``key``: symbol, pattern, name, phase or scheme."""
        if key not in ("symbol", "pattern", "name", "phase", "scheme"):
            raise ValueError(
                f"cannot group a ledger by {key!r}; use symbol, pattern, name, phase or scheme"
            )
        groups: dict[str, list[LedgerEntry]] = {}
        for e in self.entries:
            groups.setdefault(getattr(e, key), []).append(e)
        return {k: _totals(v) for k, v in groups.items()}

    def rows(self) -> tuple[list[str], list[list]]:
        """Column names and one row per entry (per-tensor traffic flattened)."""
        return COLUMNS + _TENSOR_COLUMNS, [_entry_row(e) for e in self.entries]

    def to_csv(self, path: str | Path | None = None) -> str:
        header, rows = self.rows()
        buf = io.StringIO()
        writer = csv.writer(buf)
        writer.writerow(header)
        writer.writerows(rows)
        text = buf.getvalue()
        if path is not None:
            Path(path).write_text(text)
        return text

    def to_json(self, path: str | Path | None = None) -> str:
        doc = {
            "accelerator": self.accelerator,
            "dataflow": self.dataflow,
            "clock_ghz": self.clock_ghz,
            "totals": asdict(self.totals()),
            "entries": [asdict(e) for e in self.entries],
        }
        text = json.dumps(doc, indent=1)
        if path is not None:
            Path(path).write_text(text)
        return text

    def to_dataframe(self):
        """The entries as a pandas DataFrame (pandas is optional and imported here)."""
        try:
            import pandas as pd
        except ImportError as err:
            raise ImportError("Ledger.to_dataframe needs pandas: pip install pandas") from err
        header, rows = self.rows()
        return pd.DataFrame(rows, columns=header)

    def reset(self) -> None:
        """Clear the runtime ledger this snapshot was read from."""
        for m in self._modules:
            m["__tenet_ledger_reset"]()

    def __str__(self) -> str:
        t = self.totals()
        return (
            f"Ledger({len(self)} calls on {self.accelerator} [{self.dataflow}]: "
            f"{t.macs:,} MACs, {t.cycles:,} cycles, {t.latency_us:,.1f} us, "
            f"{t.offchip_bytes / 1e6:,.3f} MB off chip, PE util {100 * t.pe_utilization:.1f}%)"
        )

    __repr__ = __str__


def tenet_modules(obj) -> list[tvm.runtime.Module]:
    """The tenet runtime modules inside a VM, an executable or a loaded library.

    Raises
    ------
    ValueError
        When there is none (nothing was offloaded, or it was built without tenet).
    """
    if isinstance(obj, relax.VirtualMachine):
        root = obj.module
    elif isinstance(obj, tvm.runtime.Executable):
        root = obj.jit()  # cached: a VM made from this executable uses the same modules
    elif isinstance(obj, tvm.runtime.Module):
        root = obj
    else:
        raise TypeError(
            f"expected a relax.VirtualMachine, an Executable or a runtime Module, got {type(obj)}"
        )
    found, stack, seen = [], [root], set()
    while stack:
        m = stack.pop()
        handle = m.__chandle__()
        if handle in seen:
            continue
        seen.add(handle)
        if m.kind == "tenet":
            found.append(m)
        stack.extend(m.imports)
    if not found:
        raise ValueError(
            f"{type(obj).__name__} has no tenet runtime module: nothing was offloaded to tenet "
            "(build it with tenet_byoc.build, or partition_for_tenet + RunCodegen)"
        )
    return found


def _parse(doc: dict) -> list[LedgerEntry]:
    tags = doc["tags"]
    costs = doc["costs"]
    funcs = doc["functions"]
    entries = []
    for call, prog, step, tag, batch, m, n, k, ba, bb, bc, cost_id, xbits, xops in doc["entries"]:
        if cost_id < 0:
            continue  # an empty GEMM (a zero dim): nothing to charge
        c = costs[cost_id]
        tensors = {
            name: TensorTraffic(
                bits=t["bits"], is_write=t["is_write"], total=t["total"], unique=t["unique"],
                reuse_factor=t["reuse_factor"], spatial_reuse=t["spatial_reuse"],
                temporal_reuse=t["temporal_reuse"], offchip_elements=t["offchip_elements"],
                offchip_bytes=t["offchip_bits"] / 8,
            )
            for name, t in c["tensors"].items()
        }
        s = funcs[prog]["steps"][step]
        entries.append(
            LedgerEntry(
                call_index=call, symbol=funcs[prog]["symbol"], pattern=s["pattern"],
                name=s["name"], phase=tags[tag], scheme=s["scheme"], batch=batch, m=m, n=n, k=k,
                bits_a=ba, bits_b=bb, bits_c=bc, extra_read_bits=xbits, extra_ops=xops,
                macs=c["macs"], cycles=c["cycles"],
                compute_cycles=c["compute_cycles"], stall_cycles=c["stall_cycles"],
                tenet_delay=c["delay"], ingress_delay=c["ingress_delay"],
                egress_delay=c["egress_delay"], compute_delay=c["compute_delay"],
                compute_delay_exact=c["compute_delay_exact"], time_steps=c["time_steps"],
                active_pes=c["active_pes"], num_pes=c["num_pes"],
                avg_active_pes=c["avg_active_pes"], pe_utilization=c["pe_utilization"],
                bandwidth_bits_per_cycle=c["bandwidth_bits_per_cycle"],
                latency_us=c["latency_us"], offchip_read_bytes=c["offchip_read_bits"] / 8,
                offchip_write_bytes=c["offchip_write_bits"] / 8, tensors=tensors,
            )
        )
    return entries


def ledger(obj) -> Ledger:
    """The charged calls so far of a VM, an executable or a loaded library.

    Parameters
    ----------
    obj : relax.VirtualMachine, Executable or runtime.Module
        What ran the model. A VM made from an executable shares its ledger.

    Returns
    -------
    Ledger
        A snapshot; call ``tenet_byoc.ledger`` again after more runs.
    """
    modules = tenet_modules(obj)
    entries: list[LedgerEntry] = []
    names = set()
    for m in modules:
        doc = json.loads(m["__tenet_ledger_json"]())
        entries.extend(_parse(doc))
        names.add((doc["hardware"], doc["dataflow"], doc["clock_ghz"]))
    hw, df, clock = min(names)
    entries.sort(key=lambda e: e.call_index)
    return Ledger(entries, hw, df, clock, modules)


def set_phase(obj, phase: str) -> None:
    """Tag the calls that follow with ``phase`` (e.g. "prefill", "decode") in the ledger."""
    for m in tenet_modules(obj):
        m["__tenet_set_tag"](phase)


def set_charging(obj, on: bool) -> None:
    """Turn cost charging on or off (the GEMMs run either way); on by default."""
    for m in tenet_modules(obj):
        m["__tenet_set_charging"](bool(on))
