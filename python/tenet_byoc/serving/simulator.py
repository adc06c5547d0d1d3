"""The serving simulator: requests arrive, the scheduler forms each iteration's step, the step's cost advances the clock (discrete-event, one engine).

Events are arrivals (the trace, in order) and the end of each iteration. The engine runs
iterations back to back while it has work: at the start of an iteration the requests that
have arrived join the waiting queue, the :class:`~tenet_byoc.serving.scheduler.Scheduler`
forms the step, the step's cost (:mod:`tenet_byoc.serving.cost`) is its duration, and at its
end every sequence whose pending tokens are computed emits a token (a request's first token
gives its TTFT, its last its finish). An idle engine waits for the next arrival. A request
arriving during an iteration waits for its end, as in a real engine.

With ``stages`` pipeline stages (pipeline parallelism) up to ``stages`` steps are in flight:
a step's cost (its critical path through every stage, as
:func:`~tenet_byoc.serving.cost.model_step_cost` gives it on a ``System``) is split into
stage times by the cost's ``stage_split`` (each stage's whole layers, the embedding on the
first, the final norm and the head on the last), or equally for a cost without one; the next step is formed when the first stage is free, from the
running sequences not in flight and the waiting requests (the token budget is a step's, the
sequence limit counts every running sequence, in flight or not); a step enters a stage when
the step before it has left that stage, and its sequences emit their tokens when it leaves
the last.
One stage (the default) is the loop above: each step starts when the last one ends.

Thread safety: :func:`simulate` keeps no state between calls (the cost object keeps its
cache). Errors: a request that can never fit the cache, or a bad option, raises
``ValueError`` naming the request or option.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .cost import SplitStepCost, as_step_cost
from .kv_cache import PagedKVCache
from .requests import TraceRequest
from .scheduler import Scheduler, SchedulerConfig
from .scheduler import Sequence as EngineSequence

__all__ = ["ServingRun", "simulate"]


@dataclass(frozen=True)
class ServingRun:
    """What one simulation gives: per request and per iteration (arrays)."""

    arrival_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    preemptions: np.ndarray  #: per request
    step_start_s: np.ndarray  #: per iteration
    step_seconds: np.ndarray
    step_sequences: np.ndarray  #: sequences in the step (the batch size)
    step_tokens: np.ndarray  #: new tokens computed in the step
    step_kv_blocks: np.ndarray  #: blocks in use during the step
    kv_blocks: int  #: the cache's capacity in blocks
    block_size: int
    cost_calls: int = 0
    cost_misses: int = 0

    @property
    def requests(self) -> int:
        return len(self.arrival_s)

    @property
    def iterations(self) -> int:
        return len(self.step_seconds)


def simulate(requests: Sequence[TraceRequest], step_cost: Callable | object, *,
             scheduler: SchedulerConfig | None = None, kv_blocks: int = 1 << 30,
             block_size: int = 16, progress: Callable[[int], None] | None = None,
             transferred: bool = False, stages: int = 1, fast_forward: bool = True
             ) -> ServingRun:
    """Serve ``requests`` on one engine.

    Parameters
    ----------
    requests : sequence of TraceRequest
        In arrival order.
    step_cost : callable or cost object
        ``step_cost(step: Step) -> seconds`` (cached per step shape here), or a
        :class:`~tenet_byoc.serving.cost.SplitStepCost` / ``CachedStepCost``.
    scheduler : SchedulerConfig, optional
        The policy, token budget and sequence limit (default vLLM-style, 2048 tokens, 256
        sequences).
    kv_blocks, block_size : int
        The KV cache (default: unbounded in practice).
    progress : callable, optional
        Called with the number of requests finished since the last call.
    transferred : bool
        The requests arrive with their prompt's keys and values computed elsewhere and their
        first token emitted (the decode pool of disaggregated serving,
        :mod:`tenet_byoc.serving.disaggregated`): each joins with its prompt in the cache
        (the blocks taken when it is admitted) and decodes from there; a preempted one
        recomputes its prompt here. Its first token is not this run's (``first_token_s``
        stays NaN); prefixes are not shared.
    stages : int
        Pipeline stages, each holding one step in flight (see the module). The step arrays
        then record each step's start (entering the first stage) and its cost through all
        stages; steps overlap in time.
    fast_forward : bool
        With one stage and a :class:`~tenet_byoc.serving.cost.SplitStepCost`, run a stretch
        of iterations that only decode, and in which nothing can change the step (no
        arrival, no sequence finishing, no preemption, nothing admitted), in one go (see
        :func:`_fast_forward`): the same figures as the iteration-by-iteration loop
        (``False``), to the last bit.

    Raises
    ------
    ValueError
        For requests out of arrival order, or one whose prompt and output need more blocks
        than the cache has (naming it).
    """
    if isinstance(stages, bool) or not isinstance(stages, int) or stages < 1:
        raise ValueError(f"stages={stages!r} must be an integer >= 1 (pipeline stages)")
    config = scheduler or SchedulerConfig()
    cache = PagedKVCache(kv_blocks, block_size)
    sched = Scheduler(config, cache)
    cost = as_step_cost(step_cost)
    n = len(requests)
    if n == 0:
        raise ValueError("requests is empty: nothing to serve")
    arrival = np.array([r.arrival_s for r in requests], dtype=np.float64)
    if np.any(np.diff(arrival) < 0):
        bad = int(np.argmax(np.diff(arrival) < 0)) + 1
        raise ValueError(f"request {bad} arrives at {arrival[bad]} s, before request "
                         f"{bad - 1} ({arrival[bad - 1]} s): give requests in arrival order")
    seqs = []
    for i, r in enumerate(requests):
        # The last token emitted is never written to the cache.
        need = cache.blocks_for(r.prompt_tokens + r.output_tokens - 1)
        if need > kv_blocks:
            raise ValueError(f"request {i} (prompt {r.prompt_tokens}, output "
                             f"{r.output_tokens} tokens) needs {need} KV blocks of "
                             f"{block_size} tokens; the cache has {kv_blocks}")
        if transferred and r.output_tokens < 2:
            raise ValueError(f"request {i} has {r.output_tokens} output token: a "
                             "transferred request has a token left to decode")
        seqs.append(EngineSequence(i, r.prompt_tokens, r.output_tokens, generated=1,
                                   computed=r.prompt_tokens) if transferred else
                    EngineSequence(i, r.prompt_tokens, r.output_tokens, r.prefix,
                                   r.prefix_tokens))
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    record: tuple[list, ...] = ([], [], [], [], [])  # starts, durations, batch, tokens, blocks
    _loop(sched, cost, seqs, arrival, stages, first, finish, record, progress,
          fast_forward and stages == 1 and isinstance(cost, SplitStepCost))
    starts, durations, batch, tokens, blocks = record
    return ServingRun(
        arrival, first, finish,
        np.array([r.prompt_tokens for r in requests], dtype=np.int64),
        np.array([r.output_tokens for r in requests], dtype=np.int64),
        np.array([s.preemptions for s in seqs], dtype=np.int64),
        np.array(starts), np.array(durations), np.array(batch, dtype=np.int64),
        np.array(tokens, dtype=np.int64), np.array(blocks, dtype=np.int64),
        kv_blocks, block_size, cost.calls, cost.misses,
    )


def _fast_forward(sched: Scheduler, cost: SplitStepCost, now: float, next_arrival: float,
                  record: tuple) -> float | None:
    """Run the coming stretch of decode-only iterations at once; the clock after it, or
    None when there is no stretch of two or more.

    A stretch starts when every running sequence decodes (one pending token after its
    first), all of them fit the token budget and none can be admitted beside them (nothing
    waits, or the sequence limit is reached). Its steps are then the same sequences, each
    one token further, until the first of: a sequence's last token (that iteration is left
    to the loop), the blocks running out (the iteration that would preempt is left to the
    loop), an arrival (the iterations starting at or after it are left to the loop, where it
    joins). Within the stretch each sequence takes its new blocks as the scheduler would.
    The steps' seconds are :meth:`SplitStepCost.decode_seconds` (each summed as
    ``seconds_of`` sums it) and the clock their running sum, so every time is the loop's.
    """
    running = sched.running
    config = sched.config
    nseq = len(running)
    if nseq > config.token_budget or (sched.waiting and nseq < config.max_seqs):
        return None
    left = 1 << 62
    for seq in running:
        if (seq.generated < 1 or seq.prompt + seq.generated - seq.computed != 1
                or (seq.attached and seq.computed < seq.prefix_tokens)):
            return None
        left = min(left, seq.output - seq.generated)
    m = left - 1  # the iteration in which a sequence finishes is the loop's
    if m < 2:
        return None
    cache = sched.cache
    bs = cache.block_size
    steps = np.arange(m)
    computed = np.array([s.computed for s in running], dtype=np.int64)
    shared = np.array([s.shared for s in running], dtype=np.int64)
    own = np.array([s.own_blocks for s in running], dtype=np.int64)
    # Blocks each sequence holds after step t (it takes one when its tokens cross a block).
    held = np.maximum(own[:, None],
                      -(-(computed[:, None] + steps[None, :] + 1 - shared[:, None]) // bs))
    taken = (held - own[:, None]).sum(axis=0)  # new blocks in use after step t
    m = min(m, int(np.searchsorted(taken, cache.blocks - cache.used, side="right")))
    if m < 2:
        return None
    seconds = cost.decode_seconds(computed.tolist(), m)
    clock = np.cumsum(np.concatenate(([now], seconds)))  # the loop's `now += seconds`
    m = min(m, int(np.searchsorted(clock[:m], next_arrival, side="left")))
    if m < 2:
        return None
    cost.calls += m
    for column, values in zip(record, (clock[:m].tolist(), seconds[:m].tolist(), [nseq] * m,
                                       [nseq] * m, (cache.used + taken[:m]).tolist())):
        column.extend(values)  # starts, durations, batch, tokens, blocks
    cache.used += int(taken[m - 1])
    for seq, blocks_now in zip(running, held[:, m - 1].tolist()):
        seq.computed += m
        seq.generated += m
        seq.own_blocks = blocks_now
    return float(clock[m])


def _loop(sched: Scheduler, cost, seqs: list, arrival: np.ndarray, stages: int,
          first: np.ndarray, finish: np.ndarray, record: tuple, progress: Callable | None,
          fast: bool) -> None:
    """The iteration loop with up to ``stages`` steps in flight (see the module; one stage:
    each step starts when the last one ends), stretches of decoding run at once where
    ``fast`` (:func:`_fast_forward`); fills ``first``, ``finish`` and the per-step lists of
    ``record``."""
    from collections import deque

    durations = record[1]
    n = len(seqs)
    waiting = sched.waiting
    cache = sched.cache
    free_at = [0.0] * stages  # when each stage has passed on its last step
    split = getattr(cost, "stage_split", None) if stages > 1 else None  # None: equal shares
    flight: deque = deque()  # (time out of the last stage, step), in order
    now = 0.0  # when the first stage is free
    arrived = done = reported = 0
    try_fast = True
    while done < n:
        while flight and flight[0][0] <= now:
            end, step = flight.popleft()
            for seq, _, _ in step:
                seq.in_flight = False
            for seq, finished in sched.finish_step(step):
                if seq.generated == 1:
                    first[seq.index] = end
                if finished:
                    finish[seq.index] = end
                    done += 1
        if done == n:
            break
        while arrived < n and arrival[arrived] <= now:
            waiting.append(seqs[arrived])
            arrived += 1
        # A stretch is tried after a step of the loop and when the next arrival leaves
        # room for three steps as long as the last (a guess that only saves vain tries).
        if fast and try_fast and sched.running and (
                arrived == n or arrival[arrived] - now > 3 * durations[-1]):
            ahead = _fast_forward(sched, cost, now, arrival[arrived] if arrived < n
                                  else math.inf, record)
            if ahead is not None:
                now = free_at[0] = ahead
                try_fast = False
                continue
        try_fast = True
        full = len(flight) == stages
        step = [] if full else sched.schedule()
        if not step and not full and not flight and (waiting or sched.running):
            step = sched.schedule()  # every running sequence was preempted: admit again
            if not step:
                raise RuntimeError(f"the scheduler formed an empty step with "
                                   f"{len(sched.running)} running and {len(waiting)} waiting "
                                   f"sequences at {now} s")
        if not step:
            # Wait for the oldest step to come out, or (a stage being free) the next arrival.
            events = [flight[0][0]] if flight else []
            if arrived < n and not full:
                events.append(float(arrival[arrived]))
            now = max(now, min(events))
            continue
        items = [(k, c) for _, k, c in step]
        seconds = cost.seconds_of(items)
        new_tokens = sum([k for k, _ in items])
        parts = ([seconds / stages] * stages if split is None
                 else split(new_tokens, len(items), seconds))
        t = now  # one stage: now + seconds, the step's end
        for s_ in range(stages):
            t = max(t, free_at[s_]) + parts[s_]
            free_at[s_] = t
        for seq, _, _ in step:
            seq.in_flight = True
        flight.append((t, step))
        for column, value in zip(record, (now, seconds, len(step), new_tokens, cache.used)):
            column.append(value)  # starts, durations, batch, tokens, blocks
        now = free_at[0]
        if progress is not None and done - reported >= 64:
            progress(done - reported)
            reported = done
    if progress is not None and done > reported:
        progress(done - reported)
