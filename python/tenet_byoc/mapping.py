"""The mapping search: the best array dataflow, buffer tiles and tile-loop order of one GEMM call.

Python face of ``src/cost_model/mapping.h`` (the declared space, the pruning argument and
measured speed in ``src/cost_model/README.md``, "The mapping search"). Deterministic: the
same call gives the same mapping with any number of threads. Every bad input raises
``ValueError`` naming the field, the value and what is accepted; a space in which nothing
fits the buffer is refused the same way. The C++ search releases the GIL.

Example
-------
>>> from tenet_byoc import cost_model as cm
>>> hw = cm.Hardware.systolic(16, 16)
>>> mem = cm.MemoryHierarchy(dram_bandwidth_bits=256, buffer_bytes=1 << 20)
>>> acc = cm.Accelerator("os16", hw, cm.Dataflow.preset("os", 16, 16), memory=mem)
>>> best = cm.search_mapping(cm.GemmCall(m=1, n=2304, k=768, bits_a=8, bits_b=8), acc)
>>> best.mapping, best.metrics.cycles, best.metrics.roofline_cycles
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ._cost_model import (
    Dataflow,
    GemmCall,
    Hardware,
    MappingChoice,
    MemoryHierarchy,
    PrecisionTable,
    _MappingSearch,
    auto_mapping_dataflows,
)

__all__ = [
    "OBJECTIVES",
    "PRESETS",
    "MappingSearch",
    "array_edges",
    "auto_mapping_dataflows",
]

OBJECTIVES = ("latency", "energy", "edp")
PRESETS = ("os", "ws", "is")


#: A rectangular PE domain, ``{PE[p,q]: 0<=p<R and 0<=q<C}`` (any two names).
_RECTANGLE = re.compile(r"\s*\{\s*PE\[\s*(\w+)\s*,\s*(\w+)\s*\]\s*:\s*0\s*<=\s*\1\s*<\s*(\d+)\s*"
                        r"and\s*0\s*<=\s*\2\s*<\s*(\d+)\s*\}\s*")


def domain_edges(pe_domain: str) -> tuple[int, int] | None:
    """(rows, cols) of a rectangular ``PE[p,q]: 0<=p<R and 0<=q<C`` domain, else None."""
    match = _RECTANGLE.fullmatch(pe_domain)
    return (int(match[3]), int(match[4])) if match else None


def array_edges(hardware: Hardware) -> tuple[int, int]:
    """(rows, cols) of a rectangular ``PE[p,q]: 0<=p<R and 0<=q<C`` domain.

    Raises
    ------
    ValueError
        The PE domain is not such a rectangle (pass ``rows`` and ``cols`` then).
    """
    edges = domain_edges(hardware.pe_domain)
    if edges is None:
        raise ValueError(f"cannot read the array's rows and cols from Hardware.pe_domain "
                         f"{hardware.pe_domain!r}: pass rows= and cols=")
    return edges


def check_objective(objective: str) -> str:
    """``objective``, refused unless one of :data:`OBJECTIVES`."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    return objective


class MappingSearch:
    """The best mapping of each distinct call over a declared space (``search_mapping``
    searches an accelerator's own auto space instead).

    Thread-safe; a call (shape, batch, widths, side data, extra ops, extra register bits) is
    searched once.

    Parameters
    ----------
    dataflows : sequence of str or Dataflow
        Preset names on the ``rows`` x ``cols`` array (read from ``hardware`` when omitted)
        and/or Dataflow values (presets, tiled or not, or TENET relations).
    objective : {"latency", "energy", "edp"}
        What is minimised; ties go to the lower energy (latency) or cycles (energy, edp),
        then to the earlier candidate.
    precision : PrecisionTable
        MAC energy by widths (default Horowitz 45 nm).
    stream_tiles : sequence of int
        Extra tilings of every untiled preset's streamed dimension (os k, ws m, is n).
    granule, max_even_split : int
        The tile-size rule (``tile_size_candidates``); granule 0 = the array edge.
    threads : int
        Worker threads (0 = 1, or 2 on spaces of 50,000+ tile-size items: after pruning a
        call is milliseconds of work); the result does not depend on it.
    """

    def __init__(self, hardware: Hardware, memory: MemoryHierarchy, *,
                 dataflows: Sequence[str | Dataflow] = PRESETS, rows: int | None = None,
                 cols: int | None = None, objective: str = "latency",
                 precision: PrecisionTable | None = None, stream_tiles: Sequence[int] = (),
                 granule: int = 0, max_even_split: int = 8, threads: int = 0) -> None:
        dfs = []  # preset names on the array, and Dataflow values as they are
        for d in dataflows:
            if not isinstance(d, Dataflow) and d not in PRESETS:
                raise ValueError(f"dataflows: {d!r} is neither a Dataflow nor a preset name "
                                 f"(accepted: {', '.join(PRESETS)})")
            if not isinstance(d, Dataflow) and (rows is None or cols is None):
                rows, cols = array_edges(hardware)
            dfs.append(d if isinstance(d, Dataflow) else Dataflow.preset(d, rows=rows, cols=cols))
        table = precision if precision is not None else PrecisionTable.horowitz_45nm()
        self.objective = check_objective(objective)
        self._search = _MappingSearch(hardware, memory, dfs, table, self.objective,
                                      list(stream_tiles), granule, max_even_split, threads)

    def best(self, call: GemmCall) -> MappingChoice:
        """The cached best mapping of ``call`` (searched on the first request): its
        ``dataflow``, ``tiles``, ``metrics``, ``energy``, ``mapping`` (a readable string) and
        the search's counts (candidates, evaluated, pruned, unfit)."""
        return self._search.best(call)

    @property
    def searches(self) -> int:
        """Distinct calls searched so far."""
        return self._search.searches
