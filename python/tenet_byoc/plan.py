"""The sequences of one forward pass (:class:`Step`), the value every path plans a model's calls from.

A step is what one engine iteration runs: each sequence brings some new tokens and has some
tokens already in its KV cache. A prefill of P tokens is ``Step.prefill(P)``; a decode step at
context L is ``Step.decode(L)``; a batch of equal sequences is ``batch=``; continuous batching
and chunked prefill put sequences of different kinds in one step
(``Step([StepSequence(512, 0)] + [StepSequence(1, L) for L in contexts])``).

Thread safety: values are immutable. Errors: a bad count raises ``TypeError`` (not an
integer) or ``ValueError`` (out of range), naming the field and the value.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Step", "StepSequence"]


def _count(owner: str, name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{owner}.{name} must be an integer, got {type(value).__name__} "
                        f"{value!r}")
    if value < low:
        raise ValueError(f"{owner}.{name} must be >= {low}, got {value}")


@dataclass(frozen=True)
class StepSequence:
    """One sequence in a step: ``new_tokens`` it computes now, after ``context`` tokens
    already in its KV cache (its queries attend to ``context + new_tokens`` keys, causally)."""

    new_tokens: int
    context: int = 0

    def __post_init__(self) -> None:
        _count("StepSequence", "new_tokens", self.new_tokens, 1)
        _count("StepSequence", "context", self.context, 0)

    @property
    def keys(self) -> int:
        """Keys the last new token attends to."""
        return self.context + self.new_tokens

    @property
    def phase(self) -> str:
        """``"prefill"`` for a sequence with nothing cached (a whole prompt), ``"decode"``
        for one new token after a context, ``"chunk"`` for a later piece of a prompt."""
        if self.context == 0:
            return "prefill"
        return "decode" if self.new_tokens == 1 else "chunk"


@dataclass(frozen=True)
class Step:
    """The sequences of one forward pass, in the order the engine batches them.

    Sequences that are equal are kept as one entry with a count (``groups``), so a decode
    step of batch 256 is one group, not 256 values.
    """

    groups: tuple[tuple[StepSequence, int], ...]

    def __init__(self, sequences: Iterable[StepSequence | tuple[StepSequence, int]]):
        merged: dict[StepSequence, int] = {}
        for item in sequences:
            seq, count = item if isinstance(item, tuple) else (item, 1)
            if not isinstance(seq, StepSequence):
                raise TypeError(f"Step takes StepSequence values (or (StepSequence, count) "
                                f"pairs), got {type(seq).__name__}")
            _count("Step", "count", count, 1)
            merged[seq] = merged.get(seq, 0) + count
        if not merged:
            raise ValueError("Step must hold at least one sequence")
        object.__setattr__(self, "groups", tuple(merged.items()))

    @classmethod
    def prefill(cls, prompt_len: int, batch: int = 1) -> Step:
        """``batch`` prompts of ``prompt_len`` tokens, nothing cached."""
        return cls([(StepSequence(prompt_len, 0), batch)])

    @classmethod
    def decode(cls, context: int, batch: int = 1) -> Step:
        """One new token for each of ``batch`` sequences holding ``context`` tokens."""
        return cls([(StepSequence(1, context), batch)])

    @property
    def sequences(self) -> int:
        """Sequences in the step."""
        return sum(n for _, n in self.groups)

    @property
    def tokens(self) -> int:
        """New tokens over all sequences: the rows of the step's weight GEMMs."""
        return sum(s.new_tokens * n for s, n in self.groups)

    @property
    def phase(self) -> str:
        """``"prefill"`` or ``"decode"`` when every sequence is of that kind, else
        ``"mixed"``."""
        phases = {s.phase for s, _ in self.groups}
        if phases == {"prefill"}:
            return "prefill"
        if phases == {"decode"}:
            return "decode"
        return "mixed"

    def uniform(self) -> tuple[StepSequence, int] | None:
        """The one sequence shape and its count when every sequence is alike, else None."""
        return self.groups[0] if len(self.groups) == 1 else None
