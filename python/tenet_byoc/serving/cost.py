"""What one serving iteration costs in seconds: a caller's ``step_cost(step)``, cached per step shape, or a cost split into a dense part (by the step's tokens) and an attention part (per sequence), each cached.

The simulator asks for the seconds of a list of ``(new_tokens, context)`` pairs, one per
sequence of the step. Two kinds of cost answer:

* :class:`CachedStepCost` wraps any ``step_cost(step: Step) -> float`` and caches it per
  step shape (the multiset of sequences: a :class:`~tenet_byoc.plan.Step` groups equal
  sequences, and the order of groups does not change the cost). Exact, but a continuous
  batch rarely repeats a shape: for synthetic costs and small runs.
* :class:`SplitStepCost`: ``dense(tokens) + sum of attention(new_tokens, context)`` over the
  sequences, each term cached. This is the form of a step's cost when its calls run one
  after another: the weight GEMMs, norms and activations of a step take its tokens' rows
  together, whatever sequences they come from; the attention GEMMs, softmax and KV reads
  are per sequence. With ``context_granularity`` G > 1, contexts are rounded up to a
  multiple of G before the attention term is asked for (a paged kernel reads whole blocks
  of G tokens), which bounds the distinct terms.

Thread safety: the caches are plain dicts (one cost per simulation thread). Errors: a
negative or non-finite cost raises ``ValueError`` naming the step.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from ..plan import Step, StepSequence

__all__ = ["CachedStepCost", "SplitStepCost", "as_step_cost"]


def _checked(seconds: float, what: object) -> float:
    seconds = float(seconds)
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"the cost of {what} is {seconds!r} s; a step costs a finite number "
                         "of seconds >= 0")
    return seconds


class CachedStepCost:
    """``step_cost`` cached per step shape."""

    def __init__(self, step_cost: Callable[[Step], float]):
        if not callable(step_cost):
            raise TypeError(f"step_cost must be callable (Step -> seconds), got "
                            f"{type(step_cost).__name__}")
        self.step_cost = step_cost
        self._seen: dict[tuple, float] = {}
        self.misses = 0
        self.calls = 0

    def seconds_of(self, items: Iterable[tuple[int, int]]) -> float:
        """Seconds of the step of these ``(new_tokens, context)`` sequences."""
        self.calls += 1
        key = tuple(sorted(Counter(items).items()))
        found = self._seen.get(key)
        if found is None:
            self.misses += 1
            step = Step([(StepSequence(k, c), n) for (k, c), n in key])
            found = self._seen[key] = _checked(self.step_cost(step), step)
        return found

    def __call__(self, step: Step) -> float:
        return self.seconds_of(s_key for s, n in step.groups
                               for s_key in [(s.new_tokens, s.context)] * n)


class SplitStepCost:
    """``dense(tokens) + sum over sequences of attention(new_tokens, context)``, each cached
    (see the module)."""

    def __init__(self, dense: Callable[[int], float], attention: Callable[[int, int], float],
                 context_granularity: int = 1):
        if isinstance(context_granularity, bool) or not isinstance(context_granularity, int) \
                or context_granularity < 1:
            raise ValueError(f"context_granularity={context_granularity!r} must be an "
                             "integer >= 1")
        self.dense = dense
        self.attention = attention
        self.granularity = context_granularity
        self._dense: dict[int, float] = {}
        self._attention: dict[tuple[int, int], float] = {}
        self.calls = 0

    @property
    def misses(self) -> int:
        """Distinct terms computed."""
        return len(self._dense) + len(self._attention)

    def _dense_s(self, tokens: int) -> float:
        found = self._dense.get(tokens)
        if found is None:
            found = self._dense[tokens] = _checked(self.dense(tokens), f"{tokens} tokens' "
                                                   "dense part")
        return found

    def _attention_s(self, new: int, context: int) -> float:
        g = self.granularity
        if g > 1:
            context = -(-context // g) * g
        key = (new, context)
        found = self._attention.get(key)
        if found is None:
            found = self._attention[key] = _checked(
                self.attention(new, context), f"attention of {new} tokens after {context}")
        return found

    def seconds_of(self, items: Iterable[tuple[int, int]]) -> float:
        """Seconds of the step of these ``(new_tokens, context)`` sequences."""
        self.calls += 1
        tokens = 0
        total = 0.0
        att = self._attention
        g = self.granularity
        for new, context in items:
            tokens += new
            if g > 1:
                context = -(-context // g) * g
            found = att.get((new, context))
            total += found if found is not None else self._attention_s(new, context)
        return total + self._dense_s(tokens)

    def __call__(self, step: Step) -> float:
        return self.seconds_of(s_key for s, n in step.groups
                               for s_key in [(s.new_tokens, s.context)] * n)


def as_step_cost(cost: object) -> Any:
    """A cost the simulator can ask per step: an object with ``seconds_of(items)``,
    ``calls`` and ``misses`` (:class:`SplitStepCost`, :class:`CachedStepCost`) as is, any
    other callable ``Step -> seconds`` cached per step shape."""
    if all(hasattr(cost, a) for a in ("seconds_of", "calls", "misses")):
        return cost
    return CachedStepCost(cost)
