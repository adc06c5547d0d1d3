"""Disaggregated serving: prompts prefilled on one pool of chips, their keys and values sent over a link, the tokens after the first decoded on another pool.

:func:`simulate_disaggregated` runs three stages, each a discrete-event run of its own:

1. the prefill pool: :func:`~tenet_byoc.serving.simulator.simulate` of the trace with one
   output token per request (its prefill emits the first token: the request's TTFT);
2. the KV transfer: each request with tokens left to decode sends its prompt's cache over one
   link, first come first served in the order prefills finish (ties by request), for
   ``transfer_s(prompt_tokens)`` seconds (:func:`kv_transfer_seconds`: the bytes over the
   link's bandwidth plus one hop's latency);
3. the decode pool: ``simulate(..., transferred=True)`` of those requests arriving when their
   transfer ends, each holding its prompt in the pool's cache and decoding its other tokens.

Each pool has its own cost, scheduler and cache (a :class:`~tenet_byoc.system.System` per
pool through :func:`~tenet_byoc.serving.cost.model_step_cost`). The pools do not wait on
each other beyond the transfer (the prefill pool frees a prompt's blocks when its transfer
is queued: its cache is sized for prefills alone).

Thread safety: no state between calls. Errors: ``ValueError`` naming the option or request.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .requests import TraceRequest, check_count
from .scheduler import SchedulerConfig
from .simulator import ServingRun, simulate

__all__ = ["DisaggregatedRun", "kv_transfer_seconds", "simulate_disaggregated"]


@dataclass(frozen=True)
class DisaggregatedRun:
    """The three stages of a disaggregated run and the requests' times over all of them."""

    run: ServingRun  #: per request end to end; per iteration the decode pool's
    prefill: ServingRun  #: the prefill pool's run (one output token per request)
    decode: ServingRun | None  #: the decode pool's run (None when no request decodes)
    transfer_start_s: np.ndarray  #: per request (NaN: nothing to decode, no transfer)
    transfer_end_s: np.ndarray


def kv_transfer_seconds(kv_bytes_per_token: float, link: Any, senders: int = 1
                        ) -> Callable[[int], float]:
    """``transfer_s(prompt_tokens)``: a prompt's ``prompt_tokens x kv_bytes_per_token``
    bytes over ``link`` (a :class:`~tenet_byoc.system.Link`), split over ``senders`` chips
    sending at once (the prefill pool's tensor-parallel chips, each its heads' share), plus
    one hop's latency."""
    if not kv_bytes_per_token > 0:
        raise ValueError(f"kv_bytes_per_token={kv_bytes_per_token!r} must be > 0")
    check_count("senders", senders)
    bandwidth = link.bandwidth_gbps * 1e9 * senders
    latency = link.latency_us * 1e-6

    def transfer_s(prompt_tokens: int) -> float:
        return prompt_tokens * kv_bytes_per_token / bandwidth + latency
    return transfer_s


def simulate_disaggregated(requests: Sequence[TraceRequest], prefill_cost: Any, decode_cost: Any,
                           transfer_s: Callable[[int], float], *,
                           prefill_scheduler: SchedulerConfig | None = None,
                           decode_scheduler: SchedulerConfig | None = None,
                           prefill_kv_blocks: int = 1 << 30, decode_kv_blocks: int = 1 << 30,
                           block_size: int = 16, prefill_stages: int = 1,
                           decode_stages: int = 1) -> DisaggregatedRun:
    """Serve ``requests`` on a prefill pool and a decode pool (see the module).

    Parameters
    ----------
    prefill_cost, decode_cost : callable or cost object
        Each pool's step cost (as :func:`~tenet_byoc.serving.simulator.simulate` takes).
    transfer_s : callable
        Seconds to send a prompt's cache of ``prompt_tokens`` tokens.
    prefill_kv_blocks, decode_kv_blocks : int
        Each pool's cache, in blocks of ``block_size`` tokens.
    prefill_stages, decode_stages : int
        Each pool's pipeline stages, each holding a step in flight (``simulate(stages=)``).

    Raises
    ------
    ValueError
        As :func:`simulate` for either pool, or for a negative or non-finite transfer time.
    """
    requests = list(requests)
    first_pass = [replace(r, output_tokens=1) for r in requests]
    pre = simulate(first_pass, prefill_cost, scheduler=prefill_scheduler,
                   kv_blocks=prefill_kv_blocks, block_size=block_size, stages=prefill_stages)
    n = len(requests)
    first = pre.finish_s.copy()
    finish = first.copy()
    start, end = np.full((2, n), np.nan)
    link_free = 0.0
    movers = [i for i in range(n) if requests[i].output_tokens > 1]
    for i in sorted(movers, key=lambda i: (first[i], i)):
        seconds = float(transfer_s(requests[i].prompt_tokens))
        if not np.isfinite(seconds) or seconds < 0:
            raise ValueError(f"transfer_s({requests[i].prompt_tokens}) = {seconds!r} s for "
                             f"request {i}; a transfer takes a finite number of seconds >= 0")
        start[i] = max(first[i], link_free)
        end[i] = link_free = start[i] + seconds
    movers.sort(key=lambda i: (end[i], i))
    dec = None
    preemptions = pre.preemptions.copy()
    if movers:
        dec = simulate([TraceRequest(float(end[i]), requests[i].prompt_tokens,
                                     requests[i].output_tokens) for i in movers],
                       decode_cost, scheduler=decode_scheduler, kv_blocks=decode_kv_blocks,
                       block_size=block_size, transferred=True, stages=decode_stages)
        finish[movers] = dec.finish_s
        preemptions[movers] += dec.preemptions
    run = replace(pre if dec is None else dec, arrival_s=pre.arrival_s, first_token_s=first, finish_s=finish,
                  prompt_tokens=pre.prompt_tokens,
                  output_tokens=np.array([r.output_tokens for r in requests]),
                  preemptions=preemptions,
                  cost_calls=pre.cost_calls + (dec.cost_calls if dec else 0),
                  cost_misses=pre.cost_misses + (dec.cost_misses if dec else 0))
    return DisaggregatedRun(run, pre, dec, start, end)
