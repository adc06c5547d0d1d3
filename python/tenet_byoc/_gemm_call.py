"""The old keyword form of a GEMM call, written once: every deprecated keyword function of the
cost model (``charge_gemm``, ``analyze_gemm``, ``analyze_memory``, ``roofline_cycles``,
``search_mapping``, ``MappingSearch.best``) forwards its call keywords here and then calls
the entry point that takes a :class:`~tenet_byoc.cost_model.GemmCall`."""

from __future__ import annotations

import warnings
from typing import Any

from ._cost_model import GemmCall


def _call_from_keywords(
    M: int,
    N: int,
    K: int,
    bits: int = 32,
    *,
    batch: int = 1,
    bits_a: int | None = None,
    bits_b: int | None = None,
    bits_c: int | None = None,
    extra_read_bits: int = 0,
    extra_ops: int = 0,
    extra_register_bits: int = 0,
    scheme: str = "none",
    recipe: Any = None,
) -> GemmCall:
    """The GemmCall the old keywords describe (``bits`` is every width not given apart)."""
    return GemmCall(
        m=M, n=N, k=K, batch=batch,
        bits_a=bits if bits_a is None else bits_a,
        bits_b=bits if bits_b is None else bits_b,
        bits_c=bits if bits_c is None else bits_c,
        scheme=scheme, recipe=recipe, extra_read_bits=extra_read_bits, extra_ops=extra_ops,
        extra_register_bits=extra_register_bits,
    )


def _deprecated(old: str, new: str) -> None:
    """Warn once per call site that ``old`` is kept for one release; ``new`` replaces it."""
    warnings.warn(
        f"tenet_byoc.cost_model.{old} is deprecated and will be removed in the next release; "
        f"use {new}", DeprecationWarning, stacklevel=3,
    )
