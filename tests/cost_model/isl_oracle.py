"""TENET's metrics computed the way TENET's src/dataflow.cpp does, with isl + barvinok.

An independent reference for the C++ cost model: isl sets and maps, ``card`` and ``sum``;
no code is shared with the model under test.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import islpy as isl


def _count(obj) -> int:
    """Cardinality of a union set / union map as a Python int (barvinok's card + sum)."""
    if isinstance(obj, isl.UnionMap):
        obj = obj.wrap()
    if obj.is_empty():
        return 0
    text = obj.card().to_str()
    m = re.fullmatch(r"\{\s*(-?\d+)\s*\}", text.strip())
    if not m:
        raise AssertionError(f"card is not a constant: {text}")
    return int(m.group(1))


@dataclass
class TensorRef:
    total: int
    unique: int
    spatial: int
    temporal: int


@dataclass
class OracleMetrics:
    macs: int
    time_steps: int
    active_pes: int
    st_points: int
    injective: bool
    tensors: dict[str, TensorRef] = field(default_factory=dict)


def analyze(domain: str, accesses: dict[str, str], pe_domain: str, interconnect: str,
            space: str, time: str) -> OracleMetrics:
    """``accesses`` maps a tensor name to its access relation."""
    ctx = isl.DEFAULT_CONTEXT
    dom = isl.UnionSet.read_from_str(ctx, domain)
    space_map = isl.UnionMap.read_from_str(ctx, space).intersect_domain(dom)
    time_map = isl.UnionMap.read_from_str(ctx, time).intersect_domain(dom)
    st_map = space_map.range_product(time_map)  # S -> [PE -> T]
    space_dom = dom.apply(space_map)
    time_dom = dom.apply(time_map)
    st_dom = dom.apply(st_map)
    pe = isl.UnionSet.read_from_str(ctx, pe_domain)
    ic = isl.UnionMap.read_from_str(ctx, interconnect)

    # Time: t -> t and t -> the lexicographically previous stamp of the time domain.
    prev = time_dom.lex_gt_union_set(time_dom).lexmax()
    time_id = time_dom.identity()
    # Space: p -> p and p -> interconnect neighbours (TENET's MapSpaceToNeighbor).
    space_id = space_dom.identity()
    space_nb = space_id.apply_range(ic.union(pe.identity()))
    space_nb_exact = space_nb.subtract(space_id)
    st_id = st_dom.identity()
    full_nb = space_nb.product(time_id.union(prev)).subtract(st_id)
    temporal_nb = space_id.product(prev)
    spatial_nb = space_nb_exact.product(time_id.union(prev))

    out = OracleMetrics(
        macs=_count(dom), time_steps=_count(time_dom), active_pes=_count(space_dom),
        st_points=_count(st_dom), injective=st_map.is_injective())
    for name, rel in accesses.items():
        acc = isl.UnionMap.read_from_str(ctx, rel).intersect_domain(dom)
        st_acc = st_map.reverse().apply_range(acc)
        unique = st_acc.subtract(full_nb.apply_range(st_acc))
        temporal = st_acc.intersect(temporal_nb.apply_range(st_acc))
        spatial = st_acc.intersect(spatial_nb.apply_range(st_acc))
        out.tensors[name] = TensorRef(_count(st_acc), _count(unique), _count(spatial),
                                      _count(temporal))
    return out


def gemm(m: int, n: int, k: int, pe_domain: str, interconnect: str, space: str,
         time: str) -> OracleMetrics:
    return analyze(
        f"{{S[i,j,k]: 0<=i<{m} and 0<=j<{n} and 0<=k<{k}}}",
        {"A": "{S[i,j,k]->A[i,k]}", "B": "{S[i,j,k]->B[k,j]}", "C": "{S[i,j,k]->C[i,j]}"},
        pe_domain, interconnect, space, time)
