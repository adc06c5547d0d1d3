"""The one rule for how a step's charged calls add up to its latency and energy.

A step's calls run in order on each chip. An array (GEMM) call or a link (collective) adds
its time. A vector call adds its cycles, except a GEMM's fused epilogue (bias, activation)
under the vector unit's ``pipelined`` schedule: its input streams straight out of the array,
so the GEMM and its epilogues take max(GEMM cycles, sum of the epilogues' cycles); under
``serial`` every vector call adds. (Norms, softmax, residuals and the rest need a whole row,
or operands from several producers, and add under both.) Each pipeline stage is its chips'
chain of calls; the micro-batches pass the stages in order, and the step takes the critical
path over stages: the first micro-batch through every stage and hand-over, then one slowest
stage for each other micro-batch (GPipe's ``(stages + micro_batches - 1) x`` the slowest
stage when the stages are equal). Energy is the sum over every call on every chip.

:func:`chain_cycles` is the chain (``ledger.step_cycles`` applies it to ledger entries and
``LedgerColumns.totals`` to a ledger's columns, each group its own chain);
:func:`compose` applies it to a :class:`tenet_byoc.plan.Plan` with a charge per call, which
is how ``estimate``, ``dse`` and serving all time a step.

Thread safety: functions keep no state. Errors: a bad schedule raises ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["StepCost", "chain_cycles", "compose"]

_SCHEDULES = ("pipelined", "serial")


def chain_cycles(gemm: Sequence[bool], hides: Sequence[bool], cycles: Sequence[float],
                 count: Sequence[int] | int = 1, groups: np.ndarray | None = None,
                 n_groups: int = 1) -> list:
    """Cycles of each group's calls run in order on one chip, by the module's rule.

    One item per call of ``gemm`` (an array call?), ``hides`` (a fused epilogue hiding
    behind the GEMM before it: fused and ``pipelined``) and ``cycles``; ``count`` is how
    many times each call (with the epilogues after it) runs, a hidden epilogue's count its
    GEMM's; ``groups`` gives each call's chain (0 .. ``n_groups``-1, a chain's calls in
    order; None: one chain). Returns each chain's sum, ints when every ``cycles`` is an int.
    """
    cyc = np.asarray(cycles)
    n = len(cyc)
    if not n:
        return [0] * n_groups
    g = np.zeros(n, dtype=np.int64) if groups is None else np.asarray(groups)
    order = np.argsort(g, kind="stable")
    g, cyc = g[order], cyc[order]
    gemm, hides = np.asarray(gemm, dtype=bool)[order], np.asarray(hides, dtype=bool)[order]
    times = np.broadcast_to(count, (n,))[order]
    lead = ~hides
    lead[0] = True
    lead[1:] |= g[1:] != g[:-1]
    # An epilogue hides only behind a GEMM (and the epilogues hidden after it) of its chain;
    # behind any other call it adds as that call does.
    lead |= ~gemm[np.maximum.accumulate(np.where(lead, np.arange(n), 0))]
    heads = np.flatnonzero(lead)
    head = cyc[heads]
    hidden = np.add.reduceat(np.where(lead, 0, cyc), heads)
    part = times[heads] * np.where(gemm[heads], np.maximum(head, hidden), head)
    total = np.zeros(n_groups, dtype=part.dtype)
    np.add.at(total, g[heads], part)  # in call order, as a loop adds
    return total.tolist()


@dataclass(frozen=True)
class StepCost:
    """One step's time and energy by :func:`compose`."""

    seconds: float  #: the critical path over chips and pipeline stages
    energy_pj: float  #: every call on every chip, every micro-batch
    stage_cycles: tuple[int, ...]  #: array and vector cycles of one micro-batch per stage
    stage_seconds: tuple[float, ...]  #: those cycles at the clock plus the stage's collectives
    p2p_seconds: float  #: one hand-over between consecutive stages (0 with one stage)
    bubble_seconds: float  #: the critical path less the busiest stage's own work


def compose(plan: Any, cost: Callable[[Any], tuple[float, float]],
            schedule: str = "pipelined", clock_ghz: float = 1.0) -> StepCost:
    """A step's latency and energy from its plan and a charge per call.

    ``plan`` (a :class:`tenet_byoc.plan.Plan`) holds the step's calls (one micro-batch, on
    one chip of each stage), in order, or a tally of several steps' (``Plan.tally``): its
    stages' times are then the steps' summed, and with several micro-batches the slowest
    stage is the slowest over the tally (the sum of composing each step alone when one stage
    is the slowest in every step, as the last stage, which runs the head, usually is; below
    it otherwise). ``cost(planned_call) -> (time, pj)`` gives cycles for an array or vector
    call, seconds for a link call, and ``pj`` the call's energy on one chip. ``schedule`` is
    the vector unit's (``VectorUnit.schedule``: "pipelined" or "serial"); ``clock_ghz``, the
    chips' clock, turns cycles into seconds.
    """
    if schedule not in _SCHEDULES:
        raise ValueError(f"schedule must be 'pipelined' or 'serial', got {schedule!r}")
    pipelined = schedule == "pipelined"
    stages = plan.pipeline_parallel
    chain: list[tuple[bool, bool, float, int, int]] = []  # (gemm, hides, time, count, stage)
    links = [0.0] * stages
    p2p = p2p_all = 0.0
    energy = 0.0
    for pc in plan.calls:
        time, pj = cost(pc)
        energy += pc.count * pj
        if pc.unit == "link":
            if pc.call.kind == "p2p":
                p2p = time
                p2p_all += pc.count * time
            else:
                links[pc.stage] += pc.count * time
            continue
        chain.append((pc.unit == "array", pipelined and bool(pc.fused_with), time, pc.count,
                      pc.stage))
    gemm, hides, times, counts, stage = zip(*chain) if chain else ((),) * 5
    cycles = tuple(chain_cycles(gemm, hides, times, counts, np.array(stage, dtype=np.int64),
                                stages))
    hz = clock_ghz * 1e9
    stage_seconds = tuple(c / hz + s for c, s in zip(cycles, links, strict=True))
    mu = plan.micro_batches
    slowest = max(stage_seconds)
    # The module's critical path, in the closed form a stage-by-stage walk gives.
    critical = sum(stage_seconds) + p2p_all + (mu - 1) * slowest
    return StepCost(critical, energy * plan.tensor_parallel * mu, cycles, stage_seconds, p2p,
                    critical - mu * slowest)
