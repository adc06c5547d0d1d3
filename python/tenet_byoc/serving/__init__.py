"""Serving as it is run: an iteration scheduler (continuous batching, chunked prefill), a paged KV cache with its capacity, request traces and the figures of a run.

``simulate(trace, step_cost, scheduler=..., kv_blocks=..., block_size=...)`` serves a trace
(:func:`poisson_trace`, :func:`read_trace`) on one engine, :func:`simulate_disaggregated` on a prefill pool and a decode pool with the
KV cache sent between them; :func:`serving_metrics` gives its
TTFT / TPOT / end-to-end percentiles, throughput and goodput. Static batching (every request
of a batch starts and ends together) stays in :mod:`tenet_byoc.experiments.serving`.
"""

from .cost import CachedStepCost, SplitStepCost, as_step_cost
from .disaggregated import DisaggregatedRun, kv_transfer_seconds, simulate_disaggregated
from .kv_cache import CacheSizing, PagedKVCache, cache_sizing, weight_bytes
from .metrics import ServingMetrics, request_latencies, serving_metrics
from .requests import (
    SHAREGPT_LIKE,
    FixedLengths,
    LognormalLengths,
    TraceRequest,
    poisson_trace,
    read_trace,
    write_trace,
)
from .scheduler import POLICIES, Scheduler, SchedulerConfig
from .simulator import ServingRun, simulate

__all__ = [
    "POLICIES", "SHAREGPT_LIKE", "CacheSizing", "CachedStepCost", "DisaggregatedRun",
    "FixedLengths", "kv_transfer_seconds", "simulate_disaggregated",
    "LognormalLengths", "PagedKVCache", "Scheduler", "SchedulerConfig", "ServingMetrics",
    "ServingRun", "SplitStepCost", "TraceRequest", "as_step_cost", "cache_sizing",
    "poisson_trace", "read_trace", "request_latencies",
    "serving_metrics", "simulate", "weight_bytes", "write_trace",
]
