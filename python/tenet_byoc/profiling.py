"""Per-callee profiling of a Relax VM run, with the accelerator cost of every tenet call.

TVM 0.27 dropped ``relax.VirtualMachine(..., profile=True)``, ``vm.profile`` and
``tvm.runtime.profiling``. :class:`VirtualMachine` brings ``vm.profile("main", *args)`` back:
a C++ instrument (``src/runtime/profiler.cc``) times each call the VM makes, and the tenet
calls' rows are joined with the ledger entries charged during the same run.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import tvm
import tvm_ffi
from tvm import relax

from .documents import write_json, write_rows
from .ledger import LedgerEntry, Totals, _parse, tenet_modules, text_table, totals

#: The timing columns, in the order TVM's old profiler report had them (Count before shapes).
TIMING_COLUMNS = ("Name", "Duration (us)", "Percent", "Count", "Argument Shapes", "Device")
#: The accelerator cost columns, filled for tenet calls only.
COST_COLUMNS = (
    "MACs", "Est. cycles", "Roofline cycles", "x Roofline", "Est. latency (us)", "PE util (%)",
    "Off-chip bytes", "DRAM bytes", "Energy (uJ)", "Bandwidth (GB/s)",
)
COLUMNS = TIMING_COLUMNS + COST_COLUMNS
#: What ``str(report)`` shows: the columns that answer "where did the time and the cost go"
#: in about 120 characters (argument shapes, device and the byte counts are in ``full``).
COMPACT_COLUMNS = ("Name", "Duration (us)", "Percent", "Count", "MACs", "Est. latency (us)",
                   "x Roofline", "PE util (%)", "Energy (uJ)")


@dataclass
class ReportRow:
    """One callee (aggregated) or one call, with its accelerator cost when it is a tenet call.

    ``percent`` is the share of the summed time of the calls the profiled function made
    itself (depth 0); a nested callee's share is of the same sum.
    """

    name: str
    duration_us: float
    percent: float
    count: int
    argument_shapes: str
    device: str
    depth: int = 0
    entries: list[LedgerEntry] = field(default_factory=list)  #: the ledger entries it charged
    layer: str = ""  #: the model's layer(s) of a tenet call, when the caller named them

    @property
    def label(self) -> str:
        """What the compact table shows: the layer, else the offloaded pattern, else the
        callee's name (fused kernel names run to 80 characters)."""
        if self.layer:
            return self.layer
        if self.entries and all(e.unit == "vector" for e in self.entries):
            # a function's charge call: the operators TVM ran, charged to the vector unit
            return "vector unit: " + ", ".join(dict.fromkeys(e.op for e in self.entries))
        if self.entries:
            return " + ".join(dict.fromkeys(e.pattern for e in self.entries))
        return self.name

    @property
    def is_tenet(self) -> bool:
        return bool(self.entries)

    @property
    def cost(self) -> Totals:
        """The accelerator cost of the row's tenet calls, summed as the ledger sums it."""
        return totals(self.entries)

    def values(self) -> dict[str, object]:
        """The row as column name -> value (cost columns None for non-tenet calls)."""
        t = self.cost
        cost = ([t.macs, t.cycles, t.roofline_cycles, t.roofline_ratio, t.latency_us,
                 100 * t.pe_utilization, t.offchip_bytes, t.dram_bytes, t.energy_pj / 1e6,
                 t.bandwidth_gbps] if self.is_tenet else [None] * len(COST_COLUMNS))
        return dict(zip(COLUMNS, [self.name, self.duration_us, self.percent, self.count,
                                  self.argument_shapes, self.device, *cost], strict=True))


def _merge(rows: Sequence[ReportRow]) -> ReportRow:
    return replace(rows[0], duration_us=sum(r.duration_us for r in rows),
                   percent=sum(r.percent for r in rows), count=sum(r.count for r in rows),
                   entries=[e for r in rows for e in r.entries],
                   layer=_merge_layers([r.layer for r in rows]))


def _merge_layers(layers: Sequence[str]) -> str:
    """One label for the layers of merged rows: ``h.0.attn.c_attn`` and ``h.1.attn.c_attn``
    become ``h.*.attn.c_attn``; unrelated names are joined."""
    names = list(dict.fromkeys(x for x in layers if x))
    if len(names) <= 1:
        return names[0] if names else ""
    starred = list(dict.fromkeys(re.sub(r"\.\d+\.", ".*.", x) for x in names))
    return starred[0] if len(starred) == 1 else ", ".join(names)


#: How a column's values print (the others as ``str``).
_FORMATS = {"Duration (us)": "{:,.2f}", "Est. latency (us)": "{:,.2f}", "Percent": "{:.2f}",
            "PE util (%)": "{:.2f}", "Bandwidth (GB/s)": "{:.2f}", "x Roofline": "{:.2f}",
            "Energy (uJ)": "{:,.3f}", "MACs": "{:,}", "Est. cycles": "{:,}",
            "Roofline cycles": "{:,}", "Count": "{:,}", "Off-chip bytes": "{:,.0f}",
            "DRAM bytes": "{:,.0f}"}


def _format(column: str, value: object) -> str:
    return "" if value is None else _FORMATS.get(column, "{}").format(value)


class Report:
    """What one profiled run cost: per call, per callee, and on the accelerator.

    ``str(report)`` is the aggregated table (one row per callee and argument shapes, longest
    first, then a ``Sum`` row over the calls the function made itself and a ``Total`` row
    with the wall time of the whole run, as TVM's old report printed them). ``calls`` holds one
    :class:`ReportRow` per call in call order.
    """

    def __init__(self, function: str, calls: list[ReportRow], wall_us: float,
                 configuration: dict[str, str]):
        self.function = function
        self.calls = calls
        self.wall_us = wall_us
        self.configuration = configuration

    def rows(self, aggregate: bool = True, sort: bool = True) -> list[ReportRow]:
        """Per callee (``aggregate``: same name, shapes and device) or per call."""
        if aggregate:
            groups: dict[tuple, list[ReportRow]] = {}
            for r in self.calls:
                groups.setdefault((r.name, r.argument_shapes, r.device), []).append(r)
            rows = [_merge(g) for g in groups.values()]
        else:
            rows = list(self.calls)
        if sort:
            rows.sort(key=lambda r: -r.duration_us)
        return rows

    def sum_row(self) -> ReportRow:
        """The calls the profiled function made itself (nested calls are inside them)."""
        top = [r for r in self.calls if r.depth == 0]
        tenet = [e for r in self.calls for e in r.entries]
        return ReportRow(
            name="Sum", duration_us=sum(r.duration_us for r in top),
            percent=sum(r.percent for r in top), count=len(top), argument_shapes="",
            device="", entries=tenet,
        )

    def name_layers(self, layers: Sequence[str]) -> None:
        """Name the layers of the tenet calls' GEMM ledger entries, one name per entry in call
        order (e.g. from a model's GEMM list); the compact table then shows them instead of
        kernel names (a call that runs several GEMMs shows each of its layers)."""
        tenet = [r for r in self.calls if any(e.unit == "array" for e in r.entries)]
        count = sum(e.unit == "array" for r in tenet for e in r.entries)
        if len(layers) != count:
            raise ValueError(f"name_layers: got {len(layers)} layer names for the {count} "
                             "GEMM ledger entries of this run's tenet calls")
        it = iter(layers)
        for row in tenet:  # the GEMMs' layers (their fused epilogues ride along)
            row.layer = _merge_layers([next(it) for e in row.entries if e.unit == "array"])

    def table(self, aggregate: bool = True, sort: bool = True, full: bool = False) -> str:
        """The report as an aligned text table, as TVM's ``Report.table`` printed it.

        By default the compact form that fits a terminal (:data:`COMPACT_COLUMNS`, names
        shortened to the layer or pattern); ``full=True`` gives every column of
        :data:`COLUMNS` with the kernels' own names, as CSV and JSON have them.
        """
        columns = COLUMNS if full else COMPACT_COLUMNS
        body = [{**r.values(), **({} if full else {"Name": r.label})}
                for r in self.rows(aggregate, sort)]
        body += [self.sum_row().values(), {"Name": "Total", "Duration (us)": self.wall_us}]
        lines = [[_format(c, v.get(c)) for c in columns] for v in body]
        lines.insert(-2, ["----------"] + [""] * (len(columns) - 1))  # above Sum and Total
        out = text_table([list(columns), *lines]) + ["", "Configuration", "-------------"]
        out += [f"{k}: {v}" for k, v in self.configuration.items()]
        return "\n".join(out) + "\n"

    def csv(self, aggregate: bool = True) -> str:
        """The rows (no Sum/Total) as CSV with the column names of :data:`COLUMNS`."""
        return write_rows(COLUMNS, [list(r.values().values()) for r in self.rows(aggregate)])

    def json(self, aggregate: bool = False) -> str:
        """``{"function", "wall_us", "configuration", "calls": [{column: value}, ...]}``."""
        doc = {
            "function": self.function,
            "wall_us": self.wall_us,
            "configuration": self.configuration,
            "calls": [r.values() for r in self.rows(aggregate, sort=False)],
        }
        return write_json(doc)

    def __str__(self) -> str:
        return self.table()

    __repr__ = __str__


def _serialized(func, lock: threading.RLock):
    """``func``, holding its VM's ``lock`` while it runs."""

    def call(*args, **kwargs):
        with lock:
            return func(*args, **kwargs)

    return call


class VirtualMachine(relax.VirtualMachine):
    """``relax.VirtualMachine`` with TVM's old ``profile=True`` mode back.

    ``rt_mod``, ``device`` and ``memory_cfg`` are :class:`tvm.relax.VirtualMachine`'s.
    ``profile=False``: exactly a ``relax.VirtualMachine``; True: ``profile(func_name, *args)``
    works, and the executable must contain a tenet module (else ``ValueError`` here).

    Notes
    -----
    A Relax VM holds per-run state (registers, frames): two threads running one
    ``relax.VirtualMachine`` at once corrupt it (a crash, not an error). This class
    serializes its calls with a lock (``vm["main"](...)``, ``invoke_stateful``,
    ``set_input``, ``get_outputs``, ``profile``), so sharing one is safe, but its calls then
    run one at a time; for parallel runs give each thread its own VM on the shared
    executable. Their tenet runtime module (and so the ledger) is shared.
    """

    def __init__(self, rt_mod, device, memory_cfg=None, profile: bool = False) -> None:
        # Re-entrant: profile() holds it around the function it runs through self[...].
        self._lock = threading.RLock()
        super().__init__(rt_mod, device, memory_cfg)
        for attr in ("_invoke_closure", "_save_function", "_set_input", "_invoke_stateful",
                     "_get_output", "_get_output_arity", "_set_instrument"):
            setattr(self, attr, _serialized(getattr(self, attr), self._lock))
        self._profiling = bool(profile)
        self._timer = None
        if self._profiling:
            self._tenet = tenet_modules(self)  # raises ValueError when nothing is offloaded
            self._timer = tvm_ffi.get_global_func("tenet_byoc.profiler.create_call_timer")()

    def __getitem__(self, key: str):
        """The VM function ``key``, callable from any thread (calls run one at a time)."""
        return _serialized(super().__getitem__(key), self._lock)

    def profile(self, func_name: str, *args, warmup: int = 1) -> Report:
        """Run ``func_name`` on ``args`` (after ``warmup`` untimed runs) and report each call:
        per call and per callee durations, and for tenet calls the ledger entries charged
        during the timed run (the warmup runs are charged to the ledger too, but are not in
        the report)."""
        if not self._profiling:
            raise AttributeError(
                "this VirtualMachine was made with profile=False; use "
                "tenet_byoc.VirtualMachine(ex, dev, profile=True) to call profile()"
            )
        with self._lock:  # the instrument and the capture belong to this one run
            return self._profile(func_name, args, warmup)

    def _profile(self, func_name: str, args: Sequence, warmup: int) -> Report:
        func = self[func_name]
        tensors = [tvm.runtime.tensor(a) if not isinstance(a, tvm.runtime.Tensor) and
                   hasattr(a, "__array__") else a for a in args]
        for _ in range(warmup):
            func(*tensors)
        # The modules capture what this thread charges during the run: calls of the same
        # library from other threads are not attributed to it, and the cost of collecting
        # does not grow with the ledger.
        for m in self._tenet:
            m["__tenet_capture_begin"]()
        self.set_instrument(self._timer["instrument"])
        try:
            self._timer["start"]()
            func(*tensors)
            self._timer["stop"]()
        finally:
            self.set_instrument(None)  # 0.27 accepts None: calls go uninstrumented again
            docs = [json.loads(m["__tenet_capture_end"]()) for m in self._tenet]
        recorded = json.loads(self._timer["records"]())
        # The entries per symbol, one list per call (the steps of one call share call_index).
        by_symbol: dict[str, dict[int, list[LedgerEntry]]] = {}
        for e in sorted((e for doc in docs for e in _parse(doc)), key=lambda e: e.call_index):
            by_symbol.setdefault(e.symbol, {}).setdefault(e.call_index, []).append(e)
        charged = {symbol: list(by_call.values()) for symbol, by_call in by_symbol.items()}
        hw = min((d["accelerator"], d["dataflow"], d["clock_ghz"]) for d in docs)
        top_ns = sum(ns for _, depth, ns, _, _ in recorded["calls"] if depth == 0 and ns > 0)
        seen: dict[str, int] = {}
        calls = []
        for name_id, depth, ns, shapes, device in recorded["calls"]:
            name = recorded["names"][name_id]
            entries: list[LedgerEntry] = []
            if name in charged:
                i = seen.get(name, 0)
                seen[name] = i + 1
                if i < len(charged[name]):
                    entries = charged[name][i]
            calls.append(ReportRow(
                name=name, duration_us=max(ns, 0) / 1e3,
                percent=100.0 * max(ns, 0) / top_ns if top_ns else 0.0, count=1,
                argument_shapes=shapes, device=device, depth=depth, entries=entries,
            ))
        configuration = {
            "Executor": "VM",
            "Accelerator": f"{hw[0]} [{hw[1]}] at {hw[2]:g} GHz",
            "Timer": "tenet_byoc C++ VM instrument (steady_clock)",
        }
        return Report(func_name, calls, recorded["wall_ns"] / 1e3, configuration)


__all__ = ["COLUMNS", "COMPACT_COLUMNS", "COST_COLUMNS", "Report", "ReportRow", "VirtualMachine"]
