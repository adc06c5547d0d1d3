"""The iteration scheduler: which sequences run in the next forward pass, and how many tokens each, under a token budget and the KV cache's blocks.

A sequence of prompt ``P`` that has emitted ``g`` tokens and holds ``c`` tokens in the cache
computes ``k <= P + g - c`` new tokens in a step; when ``c`` reaches ``P + g`` it emits a
token. The prefill (``c = 0``, ``k = P``), a prompt's later chunks and a decode (``k = 1``) are
all this one rule, and so is a recompute after preemption (``c`` back to 0, ``P + g`` tokens
to compute again; the tokens emitted stay emitted).

Policies (:class:`SchedulerConfig`):

* ``"vllm"`` (vLLM's scheduler with chunked prefill, Sarathi-Serve's stall-free batching):
  the running sequences first, oldest first, each its pending tokens up to the budget left
  (a decode takes 1, a prompt in progress its next chunk); then waiting requests in arrival
  order while the budget, ``max_seqs`` and the free blocks allow, the last one's prompt cut
  to what the budget leaves;
* ``"orca"`` (Orca's iteration-level scheduling, no chunking): the same order, but a prompt
  is never cut: it joins when all of it fits in the budget left, or alone when it is longer
  than the whole budget.

When the blocks for a running sequence's tokens are not free, the most recently admitted
running sequence is preempted (its blocks freed, recomputed later: vLLM's recompute), and no
new request is admitted in that step. A waiting request is admitted only when the blocks for
its first tokens are free.

With pipeline stages several steps are in flight at once: a running sequence whose step has
not come out of the last stage (``Sequence.in_flight``) is left out of the next step and is
never the one preempted (its blocks are being read).

Thread safety: a :class:`Scheduler` is mutable (one per simulation). Errors: a bad
configuration raises ``ValueError`` naming the field.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .kv_cache import PagedKVCache
from .requests import check_count

__all__ = ["POLICIES", "Scheduler", "SchedulerConfig", "Sequence"]

POLICIES = ("vllm", "orca")


@dataclass(frozen=True)
class SchedulerConfig:
    """How iterations are formed."""

    policy: str = "vllm"  #: "vllm" (chunked prefill) or "orca" (whole prompts); see the module
    token_budget: int = 2048  #: new tokens one step may compute (vLLM's ``max_num_batched_tokens``)
    max_seqs: int = 256  #: sequences one step may hold (vLLM's ``max_num_seqs``)

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"SchedulerConfig.policy={self.policy!r}; expected one of {POLICIES}")
        check_count("SchedulerConfig.token_budget", self.token_budget)
        check_count("SchedulerConfig.max_seqs", self.max_seqs)


@dataclass(slots=True, eq=False)
class Sequence:
    """One request's state in the engine."""

    index: int
    prompt: int
    output: int
    prefix: str | None = None
    prefix_tokens: int = 0
    generated: int = 0
    computed: int = 0
    own_blocks: int = 0
    shared: int = 0  #: tokens in the prefix's blocks this sequence references
    attached: bool = False
    preemptions: int = 0
    in_flight: bool = False  #: in a step not yet out of the last pipeline stage


class Scheduler:
    """Forms each step from the running and waiting sequences (see the module)."""

    def __init__(self, config: SchedulerConfig, cache: PagedKVCache):
        self.config = config
        self.cache = cache
        self.running: list[Sequence] = []
        self.waiting: deque[Sequence] = deque()

    def _release(self, seq: Sequence) -> None:
        """Give back ``seq``'s blocks and prefix reference; its tokens are to compute anew."""
        self.cache.give(seq.own_blocks)
        seq.own_blocks = 0
        if seq.attached:
            self.cache.detach(seq.prefix, seq)
            seq.attached = False
        seq.shared = 0
        seq.computed = 0

    def schedule(self) -> list[tuple[Sequence, int, int]]:
        """The next step: ``(sequence, new tokens, context)`` per sequence, blocks taken.
        Empty when nothing can run."""
        budget = self.config.token_budget
        chunked = self.config.policy == "vllm"
        cache = self.cache
        bs = cache.block_size
        step: list[tuple[Sequence, int, int]] = []
        append = step.append
        preempted = False
        running = self.running
        i = 0
        n = len(running)
        blocks = cache.blocks
        while i < n and budget > 0:
            seq = running[i]
            if seq.in_flight:
                i += 1
                continue
            computed = seq.computed
            pending = seq.prompt + seq.generated - computed
            if pending > budget:
                if not chunked and step:
                    i += 1
                    continue
                k = budget if chunked else pending
            else:
                k = pending
            # The blocks to hold computed + k tokens past the shared ones.
            over = computed + k - seq.shared - seq.own_blocks * bs
            if over > 0:
                need = -(-over // bs)
                if need > blocks - cache.used:
                    preempted = True
                    if not self._make_room(seq, need):
                        break  # seq itself was preempted: it was the last running
                    n = len(running)
                cache.used += need
                seq.own_blocks += need
            append((seq, k, computed))
            budget -= k
            i += 1
        if preempted:
            return step
        waiting = self.waiting
        while waiting and budget > 0 and len(running) < self.config.max_seqs:
            seq = waiting[0]
            if seq.prefix is not None:
                seq.shared = cache.attach(seq.prefix, seq, seq.prompt + seq.generated - 1)
                seq.attached = True
                seq.computed = seq.shared
            pending = seq.prompt + seq.generated - seq.computed
            k = min(pending, budget) if chunked else pending
            need = cache.blocks_for(seq.computed + k - seq.shared) - seq.own_blocks
            if (not chunked and pending > budget and step) or need > blocks - cache.used:
                if seq.attached:  # a waiting sequence holds no reference
                    self._release(seq)
                break
            cache.used += need
            seq.own_blocks += need
            waiting.popleft()
            running.append(seq)
            append((seq, k, seq.computed))
            budget -= k
        return step

    def _make_room(self, seq: Sequence, need: int) -> bool:
        """Preempt the latest admitted running sequences not in flight until ``need`` blocks
        are free; False when ``seq`` itself had to go."""
        running = self.running
        cache = self.cache
        while need > cache.blocks - cache.used:
            j = len(running) - 1
            while running[j].in_flight:  # seq itself is not in flight: j stops there at last
                j -= 1
            victim = running.pop(j)
            self._release(victim)  # recomputed when admitted again
            victim.preemptions += 1
            self.waiting.appendleft(victim)
            if victim is seq:
                return False
        return True

    def finish_step(self, step: list[tuple[Sequence, int, int]]) -> list[tuple[Sequence, bool]]:
        """Advance each sequence of ``step``; return those that emitted a token, each with
        whether it is done (a done sequence leaves and frees its blocks)."""
        emitted = []
        done_any = False
        cache = self.cache
        for seq, k, computed in step:
            computed += k
            seq.computed = computed
            if seq.attached and computed - k < seq.prefix_tokens:
                seq.shared = cache.publish(seq.prefix, seq, seq.shared, computed,
                                           seq.prefix_tokens)
                seq.own_blocks = cache.blocks_for(computed - seq.shared)
            generated = seq.generated
            if computed == seq.prompt + generated:
                generated += 1
                seq.generated = generated
                done = generated == seq.output
                if done:
                    self._release(seq)
                    done_any = True
                emitted.append((seq, done))
        if done_any:
            self.running = [s for s in self.running if s.generated < s.output]
        return emitted
