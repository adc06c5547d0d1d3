"""A model served on one chip per quantization scheme: the scheme's KV capacity, its step cost, a simulation of a trace, and the largest rate meeting the latency targets.

:func:`serve` is the Python face of ``tenet-byoc serve``. Per scheme it sizes the paged cache
(:func:`~tenet_byoc.serving.kv_cache.cache_sizing`: the chip's memory less the scheme's weights,
KV at the scheme's width), builds the step cost (:func:`~tenet_byoc.serving.cost.model_step_cost`
unless a cost is given), simulates the trace (a file's, or Poisson arrivals at ``rate``) and,
with targets, searches the largest Poisson rate whose p90 TTFT and TPOT meet them (the same
requests at scaled arrival times).

Thread safety: no state is kept between calls. Errors: bad arguments raise ``ValueError``
naming them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..accelerators import DRAM_CAPACITY_BYTES
from .disaggregated import kv_transfer_seconds, simulate_disaggregated
from .kv_cache import CacheSizing, cache_sizing
from .metrics import ServingMetrics, serving_metrics
from .rate_search import RateSearch, max_rate
from .requests import SHAREGPT_LIKE, FixedLengths, LognormalLengths, TraceRequest, poisson_trace
from .scheduler import SchedulerConfig
from .simulator import ServingRun, simulate

__all__ = ["ServedScheme", "memory_bytes_of", "serve"]


@dataclass(frozen=True)
class ServedScheme:
    """One scheme's answer."""

    scheme: str
    sizing: CacheSizing
    run: ServingRun  #: the trace as given (or at ``rate``)
    metrics: ServingMetrics
    search: RateSearch | None  #: the largest rate meeting the targets, when targets are given
    cost: Any  #: the step cost (its cache filled)


def memory_bytes_of(accelerator: Any) -> float | None:
    """The chip memory an accelerator states (its ``dram_capacity_bytes``), else that of the
    preset of its name (:data:`tenet_byoc.accelerators.DRAM_CAPACITY_BYTES`, its sources
    named there), or None."""
    value = getattr(accelerator, "dram_capacity_bytes", None)
    if isinstance(value, int | float) and value > 0:
        return float(value)
    preset = getattr(accelerator, "name", accelerator)
    found = DRAM_CAPACITY_BYTES.get(preset) if isinstance(preset, str) else None
    return None if found is None else float(found)


def serve(model: Any, accelerator: Any, schemes: Sequence[str], *,
          trace: Sequence[TraceRequest] | None = None, rate: float | None = None,
          requests: int = 1000, lengths: FixedLengths | LognormalLengths = SHAREGPT_LIKE,
          seed: int = 0, ttft_ms: float | None = None, tpot_ms: float | None = None,
          scheduler: SchedulerConfig | None = None, block_size: int = 16,
          memory_bytes: float | None = None, utilization: float = 0.9,
          step_cost: Callable[[str], Any] | None = None, rel_tol: float = 0.02,
          progress: Callable[[str, int], Callable[[int], None] | None] | None = None,
          system: Any = None, pools: tuple[Any, Any] | None = None) -> list[ServedScheme]:
    """Serve ``model`` on ``accelerator`` under each scheme (see the module).

    Parameters
    ----------
    trace : sequence of TraceRequest, optional
        The requests; else ``requests`` Poisson arrivals at ``rate`` with ``lengths``, seeded.
    ttft_ms, tpot_ms : float, optional
        p90 targets: goodput counts requests meeting both, and the rate search runs (over
        Poisson arrivals of the trace's lengths, or of ``lengths``).
    memory_bytes : float, optional
        The chip's memory (default: what the accelerator states; required when it states
        none).
    step_cost : callable, optional
        ``step_cost(scheme) -> cost`` (a cost object or ``Step -> seconds``); default
        :func:`~tenet_byoc.serving.cost.model_step_cost`.
    progress : callable, optional
        ``progress(label, total)`` returns a callback taking the requests finished.
    system : tenet_byoc.system.System, optional
        Several chips of ``accelerator`` (tensor and pipeline parallel): each iteration
        costs its critical path over the chips, with one step in flight per pipeline stage
        (``simulate(stages=)``), and ``memory_bytes`` is each chip's, the cache sized on the
        fullest chip after its weight share.
    pools : (System, System), optional
        Disaggregated serving (:mod:`tenet_byoc.serving.disaggregated`): prompts on the
        first system, their KV cache sent over its link (all its chips sending their
        share at once), the other tokens on the second; each pool's cache sized as ``system``'s.
        The result's sizing is the decode pool's. Excludes ``system`` and ``step_cost``.

    Raises
    ------
    ValueError
        For neither or both of ``trace`` and ``rate``, no memory size, a scheme whose weights
        do not fit, or a request longer than the cache or the model's context.
    """
    from ..models.footprint import kv_bytes_per_token
    from ..plan import context_limit, model_config
    from .cost import model_step_cost

    if (trace is None) == (rate is None):
        raise ValueError("give either trace= (a list of requests) or rate= (Poisson arrivals)")
    if not schemes:
        raise ValueError("schemes is empty: name at least one quantization scheme")
    config = model_config(model)
    memory = memory_bytes if memory_bytes is not None else memory_bytes_of(accelerator)
    if memory is None:
        name = getattr(accelerator, "name", accelerator)
        raise ValueError(f"accelerator {name!r} states no memory size: give memory_bytes "
                         "(--memory-gb)")
    requests_list = list(trace) if trace is not None else poisson_trace(rate, requests, lengths,
                                                                        seed)
    limit, field = context_limit(config)
    for i, r in enumerate(requests_list):
        if r.prompt_tokens + r.output_tokens - 1 > limit:
            raise ValueError(f"request {i} (prompt {r.prompt_tokens}, output "
                             f"{r.output_tokens} tokens) outruns {config.name}'s context "
                             f"{field}={limit}")
    if pools is not None and (system is not None or step_cost is not None):
        raise ValueError("pools (disaggregated serving) excludes system and step_cost")
    targets = ttft_ms is not None or tpot_ms is not None
    if targets:
        # The search runs the requests' lengths at Poisson arrivals of each rate it tries (one
        # seed: a drawn trace's own arrivals at its rate).
        base = poisson_trace(1.0, len(requests_list), FixedLengths(1, 1), seed)
        start = (rate if trace is None
                 else len(requests_list) / max(requests_list[-1].arrival_s, 1e-9))
    out = []
    for scheme in schemes:
        if pools is not None:
            first, second = pools
            sizing = cache_sizing(config, scheme, memory, block_size, utilization, second)
            pre_sizing = cache_sizing(config, scheme, memory, block_size, utilization, first)
            pre_cost = model_step_cost(config, scheme, accelerator, system=first)
            cost = model_step_cost(config, scheme, accelerator, system=second)
            # Every prefill chip sends its share at once: the fullest chip's bytes decide.
            transfer = kv_transfer_seconds(
                kv_bytes_per_token(config, scheme, first.tensor_parallel,
                                   first.pipeline_parallel),
                first.link)

            def run_of(reqs: Sequence[TraceRequest], label: str) -> ServingRun:
                return simulate_disaggregated(
                    reqs, pre_cost, cost, transfer, prefill_scheduler=scheduler,
                    decode_scheduler=scheduler, prefill_kv_blocks=pre_sizing.blocks,
                    decode_kv_blocks=sizing.blocks, block_size=block_size,
                    prefill_stages=first.pipeline_parallel,
                    decode_stages=second.pipeline_parallel).run
        else:
            sizing = cache_sizing(config, scheme, memory, block_size, utilization, system)
            stages = 1 if system is None else system.pipeline_parallel
            cost = (step_cost or (lambda s: model_step_cost(config, s, accelerator,
                                                            system=system)))(scheme)

            def run_of(reqs: Sequence[TraceRequest], label: str) -> ServingRun:
                callback = progress(label, len(reqs)) if progress else None
                return simulate(reqs, cost, scheduler=scheduler, kv_blocks=sizing.blocks,
                                block_size=block_size, progress=callback, stages=stages)

        run = run_of(requests_list, f"{scheme}")
        search = None
        if targets:
            def metrics_at(rate_: float) -> ServingMetrics:
                at = [TraceRequest(b.arrival_s / rate_, r.prompt_tokens, r.output_tokens)
                      for b, r in zip(base, requests_list, strict=True)]
                return serving_metrics(run_of(at, f"{scheme} @ {rate_:.3g}/s"), ttft_ms,
                                       tpot_ms)
            search = max_rate(metrics_at, ttft_ms, tpot_ms, start=start, rel_tol=rel_tol)
        out.append(ServedScheme(scheme, sizing, run, serving_metrics(run, ttft_ms, tpot_ms),
                                search, cost))
    return out
