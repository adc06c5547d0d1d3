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

:func:`chain_cycles` is the chain (``ledger.step_cycles`` applies it to ledger entries);
:func:`compose` applies it to a :class:`tenet_byoc.plan.Plan` with a charge per call, which
is how ``estimate``, ``dse`` and serving all time a step.

Thread safety: functions keep no state. Errors: a bad schedule raises ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["StepCost", "chain_cycles", "compose"]

_SCHEDULES = ("pipelined", "serial")


def chain_cycles(items: Iterable[tuple[str, bool, float, int]]) -> float:
    """Cycles of calls run in order on one chip, by the module's rule.

    Parameters
    ----------
    items : iterable of (unit, hides, cycles, count)
        Each call's unit ("array", "vector", "link"), whether it is a fused epilogue that
        hides behind the GEMM before it (fused and ``pipelined``), its cycles, and how many
        times it (with the epilogues after it) runs. A hidden epilogue's count is its GEMM's.

    Returns
    -------
    float
        The sum; an int when every ``cycles`` is an int.
    """
    total, gemm, hidden, times = 0, None, 0, 0
    for unit, hides, cycles, count in items:
        if hides and gemm is not None:
            hidden += cycles
            continue
        if gemm is not None:
            total += times * max(gemm, hidden)
            gemm, hidden = None, 0
        if unit == "array":
            gemm, times = cycles, count
        else:
            total += count * cycles
    if gemm is not None:
        total += times * max(gemm, hidden)
    return total


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

    Parameters
    ----------
    plan : tenet_byoc.plan.Plan
        The step's calls (one micro-batch, on one chip of each stage), in order, or a tally
        of several steps' (``Plan.tally``): its stages' times are then the steps' summed, and
        with several micro-batches the slowest stage is the slowest over the tally (the sum
        of composing each step alone when one stage is the slowest in every step, as the last
        stage, which runs the head, usually is; below it otherwise).
    cost : callable
        ``cost(planned_call) -> (time, pj)``: cycles for an array or vector call, seconds for
        a link call; ``pj`` the call's energy on one chip.
    schedule : {"pipelined", "serial"}
        The vector unit's schedule (``VectorUnit.schedule``).
    clock_ghz : float
        The chips' clock (cycles to seconds).
    """
    if schedule not in _SCHEDULES:
        raise ValueError(f"schedule must be 'pipelined' or 'serial', got {schedule!r}")
    pipelined = schedule == "pipelined"
    stages = plan.pipeline_parallel
    chains: list[list[tuple[str, bool, float, int]]] = [[] for _ in range(stages)]
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
        chains[pc.stage].append((pc.unit, pipelined and bool(pc.fused_with), time, pc.count))
    cycles = tuple(chain_cycles(c) for c in chains)
    hz = clock_ghz * 1e9
    stage_seconds = tuple(c / hz + s for c, s in zip(cycles, links, strict=True))
    mu = plan.micro_batches
    slowest = max(stage_seconds)
    # The first micro-batch passes every stage and hand-over; each of the other mu - 1
    # leaves the last stage one slowest stage later (the schedule a stage-by-stage walk
    # gives, in closed form; GPipe's (stages + mu - 1) x the slowest stage when the stages are equal).
    critical = sum(stage_seconds) + p2p_all + (mu - 1) * slowest
    return StepCost(critical, energy * plan.tensor_parallel * mu, cycles, stage_seconds, p2p,
                    critical - mu * slowest)
