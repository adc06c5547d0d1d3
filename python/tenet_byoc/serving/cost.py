"""What one serving iteration costs in seconds: a caller's ``step_cost(step)``, cached per step shape, or a cost split into a dense part (by the step's tokens) and an attention part (per sequence), each cached.

The simulator asks for the seconds of a list of ``(new_tokens, context)`` pairs, one per
sequence of the step. Two kinds of cost answer:

* :class:`CachedStepCost` wraps any ``step_cost(step: Step) -> float`` and caches it per
  step shape (the multiset of sequences: a :class:`~tenet_byoc.plan.Step` groups equal
  sequences, and the order of groups does not change the cost). Exact, but a continuous
  batch rarely repeats a shape: for synthetic costs and small runs.
* :class:`SplitStepCost`: ``dense(tokens) + head(sequences) + sum of attention(new_tokens,
  context)`` over the sequences, each term cached (``head`` optional: the logits of each
  sequence's last token, what an engine samples from). This is the form of a step's cost when its calls run one
  after another: the weight GEMMs, norms and activations of a step take its tokens' rows
  together, whatever sequences they come from; the attention GEMMs, softmax and KV reads
  are per sequence. With ``context_granularity`` G > 1, contexts are rounded up to a
  multiple of G before the attention term is asked for (a paged kernel reads whole blocks
  of G tokens), with ``token_granularity`` a step's tokens likewise (rows padded to a
  tile), and with ``prompt_granularity`` the new tokens of a prompt's first chunk (context
  0) in its attention term: these bound the distinct terms (a prompt's attention term
  otherwise is charged anew for every distinct prompt length).

:func:`model_step_cost` builds the split cost of a model under a scheme on an accelerator
from :func:`tenet_byoc.estimate` (see there).

Thread safety: the caches are plain dicts (one cost per simulation thread). Errors: a
negative or non-finite cost raises ``ValueError`` naming the step.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ..plan import SCORE_OPS, Step, StepSequence
from .kv_cache import _layers_heads_dim
from .requests import check_count

__all__ = ["ATTENTION_PARTS", "CachedStepCost", "SplitStepCost", "as_step_cost",
           "model_step_cost"]


def _checked(seconds: float, what: object) -> float:
    seconds = float(seconds)
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"the cost of {what} is {seconds!r} s; a step costs a finite number "
                         "of seconds >= 0")
    return seconds


def _up(n: int, g: int) -> int:
    """``n`` rounded up to a multiple of ``g``."""
    return -(-n // g) * g


class _StepCost:
    """A cost asked per step: the seconds of its ``(new_tokens, context)`` sequences."""

    def __call__(self, step: Step) -> float:
        return self.seconds_of(s_key for s, n in step.groups
                               for s_key in [(s.new_tokens, s.context)] * n)


class CachedStepCost(_StepCost):
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
            step = Step([(StepSequence(k, c, logits="last"), n) for (k, c), n in key])
            found = self._seen[key] = _checked(self.step_cost(step), step)
        return found


class SplitStepCost(_StepCost):
    """``dense(tokens) + head(sequences) + sum over sequences of attention(new_tokens,
    context)``, each cached (see the module; no ``head``: 0)."""

    def __init__(self, dense: Callable[[int], float], attention: Callable[[int, int], float],
                 context_granularity: int = 1, token_granularity: int = 1,
                 prompt_granularity: int = 1, head: Callable[[int], float] | None = None,
                 stage_split: Callable[[int, int, float], list[float]] | None = None):
        for name, value in (("context_granularity", context_granularity),
                            ("token_granularity", token_granularity),
                            ("prompt_granularity", prompt_granularity)):
            check_count(name, value)
        self.granularity = context_granularity
        self.token_granularity = token_granularity
        self.prompt_granularity = prompt_granularity
        self.dense, self.attention, self.head = dense, attention, head
        #: ``stage_split(tokens, sequences, seconds)``: each pipeline stage's share of a step
        #: of that many tokens and sequences costing ``seconds`` (None: equal shares).
        self.stage_split = stage_split
        self._dense: dict[tuple[int], float] = {}
        self._head: dict[tuple[int], float] = {}
        self._attention: dict[tuple[int, int], float] = {}
        self._decode_table = np.full(0, np.nan)  # decode terms by context / granularity
        self.calls = 0

    @property
    def misses(self) -> int:
        """Distinct terms computed."""
        return len(self._dense) + len(self._attention) + len(self._head)

    @staticmethod
    def _term(table: dict, term: Callable[..., float], key: tuple, what: str) -> float:
        """``term(*key)`` cached in ``table``, checked (``what`` formatted with the key)."""
        found = table.get(key)
        if found is None:
            found = table[key] = _checked(term(*key), what.format(*key))
        return found

    def _head_s(self, sequences: int) -> float:
        if self.head is None:
            return 0.0
        # The head's rows padded as a step's tokens are.
        return self._term(self._head, self.head, (_up(sequences, self.token_granularity),),
                          "the head of {} sequences")

    def _dense_s(self, tokens: int) -> float:
        return self._term(self._dense, self.dense, (_up(tokens, self.token_granularity),),
                          "{} tokens' dense part")

    def _attention_s(self, new: int, context: int) -> float:
        context = _up(context, self.granularity)
        if context == 0:
            new = _up(new, self.prompt_granularity)
        return self._term(self._attention, self.attention, (new, context),
                          "attention of {} tokens after {}")

    def seconds_of(self, items: Iterable[tuple[int, int]]) -> float:
        """Seconds of the step of these ``(new_tokens, context)`` sequences."""
        self.calls += 1
        tokens = sequences = 0
        total = 0.0
        att = self._attention
        g = self.granularity
        for new, context in items:
            tokens += new
            sequences += 1
            context = -(-context // g) * g
            if context == 0:  # a prompt's first chunk: _attention_s rounds it
                total += self._attention_s(new, 0)
                continue
            found = att.get((new, context))
            total += found if found is not None else self._attention_s(new, context)
        return total + self._dense_s(tokens) + self._head_s(sequences)

    def decode_seconds(self, contexts: Sequence[int], m: int) -> np.ndarray:
        """Seconds of ``m`` consecutive decode steps of the same sequences: in step ``t``
        sequence ``j`` decodes one token after ``contexts[j] + t``.

        Each step's value is exactly what :meth:`seconds_of` gives for it: its attention
        terms added in the sequences' order, starting from 0.0, then its dense term (a
        vector add per sequence does every step's sum in that order). The caller counts
        the steps it uses in :attr:`calls`.
        """
        g = self.granularity
        steps = np.asarray(contexts, dtype=np.int64)[:, None] + np.arange(m)
        rounded = -(-steps // g)  # in units of g
        table = self._decode_table
        top = int(rounded.max())
        if top >= len(table):
            table = self._decode_table = np.concatenate(
                (table, np.full(max(top + 1, 2 * len(table)) - len(table), np.nan)))
        values = table[rounded]
        missing = np.isnan(values)
        if missing.any():  # charge the new terms (cached in the dict as seconds_of does)
            for r in np.unique(rounded[missing]).tolist():
                table[r] = self._attention_s(1, r * g)
            values = table[rounded]
        total = np.zeros(m)
        for row in values:  # the sequences' terms in their order, as seconds_of adds them
            total += row
        total += self._dense_s(len(contexts))  # then the head: seconds_of's order of adds
        total += self._head_s(len(contexts))
        return total


def as_step_cost(cost: object) -> Any:
    """A cost the simulator can ask per step: an object with ``seconds_of(items)``,
    ``calls`` and ``misses`` (:class:`SplitStepCost`, :class:`CachedStepCost`) as is, any
    other callable ``Step -> seconds`` cached per step shape."""
    if all(hasattr(cost, a) for a in ("seconds_of", "calls", "misses")):
        return cost
    return CachedStepCost(cost)


#: The entries of a ledger that belong to one sequence's attention (the rest of a step's
#: entries take all its tokens' rows together): the two GEMMs over the cache, the calls over
#: its scores (the plan's ``SCORE_OPS``: scale, soft-capping, masks, softmax) or the fused
#: kernel in their place, and the writes of its new keys and values to its own cache
#: (``…_cache``: under a window kept in a rolling cache, the last W of a prompt's).
ATTENTION_PARTS = ("attn.qk", "attn.pv", "attn.fused", *SCORE_OPS, "_cache")


@functools.lru_cache(maxsize=8)
def _charges(accelerator: Any, link: Any) -> Any:
    """The charges of an accelerator (and link) shared by the split costs made on it: the
    costs of several schemes share the calls they have alike (attention at the same KV
    width, the vector unit's calls), each charged once. Not shared between threads."""
    from ..estimate import Charges

    return Charges(accelerator, link)


def model_step_cost(model: Any, scheme: Any, accelerator: Any, *, context_granularity: int = 16,
                    token_granularity: int = 16, mapping: str | None = None,
                    system: Any = None, prompt_granularity: int | None = None,
                    attention: str = "unfused") -> SplitStepCost:
    """The split cost of ``model`` under ``scheme`` on ``accelerator``, from the call plan.

    Each term is a :func:`tenet_byoc.plan.plan` of a one-kind step, its calls charged once
    each (``estimate.Charges``, shared by every term) and composed by the one step rule
    (:func:`tenet_byoc.compose.compose`), on the part of its calls the term stands for:

    * ``dense(T)``: the calls of a ``T``-token prefill other than :data:`ATTENTION_PARTS`
      and the head (weight GEMMs with their fused epilogues, norms, activations and, for an
      int cache, the quantization of the new keys and values on the vector unit: the
      plan's, as a run charges them);
    * ``head(S)``: the head (and under tensor parallelism its all-gather) over the last
      token of each of the step's ``S`` sequences (``StepSequence.logits="last"``; ``S``
      rounded up to ``token_granularity``), as a serving engine computes only the logits
      it samples (a prompt's earlier chunks are charged a row too);
    * ``attention(n, 0)``: the attention calls of an ``n``-token prefill (``n`` rounded up
      to ``prompt_granularity``, by default ``token_granularity``, as the dense part
      rounds a step's tokens: an ``n x n`` score matrix charged up to ``g - 1`` rows and
      columns larger);
      ``attention(1, L)``: those of a decode step after ``L`` tokens;
      ``attention(n, L)`` for a later chunk of a prompt (``n > 1``, ``L > 0``): those of the
      plan of that chunk (``StepSequence(n, L)``: per head ``n x (L + n)`` scores, their
      scale, mask and softmax; ``L`` rounded up to ``context_granularity``).
      Each term writes its sequence's new keys and values at the cache's stored width
      (a prompt under a window W in a rolling cache its last W), and reads K and V at that
      width with their scales (the plan's attention scheme). ``attention="fused"`` makes
      each term the plan's fused kernel (``cost_model.AttentionCall``); the default is the
      unfused plan even on the GPU presets that run it fused (``Accelerator.attention``): a
      term is one sequence's, and a fused kernel per sequence would charge each decode a
      kernel over its KV heads' few cores (Llama-3-8B: 8 of h100_sxm's 132), where engines
      run every decode of a step in one kernel (TPOT 38 against 7 ms in
      ``benchmarks/serving_speed.py``).

    Splitting a step's chain of calls into these parts keeps every GEMM with its epilogues,
    so the parts add up to the composed step. Each term composes the plan's written calls
    (the plan cut to its repeating layers, ``Plan.period``), each counted as many times as
    its layer stands for, which is what the whole plan composes (without making 32
    layers' calls per term).

    Several chips (``system``, a :class:`tenet_byoc.system.System`): each term is planned
    Megatron-LM sharded over the system's ``tensor_parallel`` chips (each chip's share of
    every GEMM and vector call, the all-reduces of the row-parallel GEMMs over the links in
    the dense part), and with ``pipeline_parallel`` stages the dense part adds the
    ``pipeline_parallel - 1`` hand-overs of the step's activations between stages (the
    plan's ``p2p`` calls). A step's seconds are one micro-batch's critical path through the
    stages, ``sum of stages + hand-overs``: the layers' calls once each, as on one chip, plus
    the hand-overs; the simulator keeps one step in flight per stage and splits this time
    over them by the cost's ``stage_split`` (:func:`~tenet_byoc.serving.simulator.simulate`,
    ``stages``), which is where pipeline stages add speed as well as memory. ``System(acc)`` costs what ``acc``
    alone does.

    Raises
    ------
    ValueError
        For an unknown model, scheme or preset (as :func:`tenet_byoc.estimate`), a system of
        several micro-batches, or a sharding the model does not split into.
    """
    from ..compose import compose
    from ..accelerators import resolve
    from ..plan import (BEFORE_LAYERS, Plan, Sharding, check_tensor_parallel, context_limit,
                        hand_overs, model_config, plan, stage_layers)
    from ..quantization import get_scheme

    config = model_config(model)
    tp = pp = 1
    link = None
    if system is not None:
        if system.micro_batches != 1:
            raise ValueError(f"System.micro_batches={system.micro_batches}: a serving "
                             "iteration is one batch; give micro_batches=1")
        tp, pp, link = system.tensor_parallel, system.pipeline_parallel, system.link
        accelerator = system.accelerator
        if tp > 1 and hasattr(config, "experts"):
            raise ValueError(f"{config.name}: serving a mixture of experts over "
                             f"tensor_parallel={tp} chips is not planned (its experts are "
                             "spread by expert parallelism: tenet_byoc.plan.expert_parallel)")
        check_tensor_parallel(config, tp)
    n_layers = _layers_heads_dim(config)[0]
    sizes = [len(r) for r in stage_layers(n_layers, pp)]
    sharding = Sharding(tp, 1, 1)
    acc = resolve(accelerator, mapping=mapping)
    charges = _charges(acc, link)
    clock = acc.hardware.clock_ghz

    def seconds(p: Plan, calls: list) -> float:
        return compose(Plan(p.step, p.phase, tuple(calls)), charges.cost, charges.schedule,
                       clock).seconds

    def scaled(step: Step | Plan, part: bool) -> float:
        # The written calls of the part asked for (see the docstring), layer j of a cut
        # plan's period counted for layers j, j + period, ...: a prompt's attention term
        # charges no weight GEMMs of its unrounded length.
        p = step if isinstance(step, Plan) else plan(config, step, scheme, sharding,
                                                     attention=attention)
        calls = [pc._replace(count=len(range(pc.layer, p.layers, p.period))
                             if p.layers and pc.layer else 1) for pc in p.written
                 if not pc.name.startswith("lm_head")  # below
                 and (pc.fused_with or pc.name).endswith(ATTENTION_PARTS) == part]
        return seconds(p, calls)

    prefill_plans: dict[int, Plan] = {}

    @functools.cache
    def ends(tokens: int) -> tuple[float, float]:
        # The dense part's calls outside the layers: those before them (the embedding, on
        # the first stage) and after them (the final norm, on the last).
        p = plan(config, Step([StepSequence(tokens, 0, logits=False)]), scheme, sharding,
                 attention=attention)
        outside = [pc for pc in p.written if pc.layer is None and not pc.name.startswith(
            "lm_head") and not (pc.fused_with or pc.name).endswith(ATTENTION_PARTS)]
        before = [pc for pc in outside if pc.name.startswith(BEFORE_LAYERS)]
        return (seconds(p, before) if before else 0.0,
                seconds(p, [pc for pc in outside if pc not in before]))

    def stage_split(tokens: int, sequences: int, total: float) -> list[float]:
        # Stage s: its layers' share of the layer calls (every layer alike), the first the
        # embedding, the last the final norm and the head; each stage but the last its
        # hand-over to the next (busy until the next stage has it).
        tokens = _up(tokens, cost.token_granularity)
        first, last = ends(tokens)
        last += cost._head_s(sequences)
        hand = handovers(tokens) / (pp - 1)
        per_layer = (total - first - last - (pp - 1) * hand) / n_layers
        out = [n * per_layer + hand for n in sizes]
        out[0] += first
        out[-1] += last - hand
        return out

    @functools.cache
    def prefill(tokens: int, part: bool) -> float:
        # The other part's term of this prefill takes the plan made here (once).
        p = prefill_plans.pop(tokens, None) or prefill_plans.setdefault(tokens, plan(
            config, Step.prefill(tokens), scheme, sharding, attention=attention))
        return scaled(p, part)

    def head(sequences: int) -> float:
        p = plan(config, Step([(StepSequence(1, 0, logits="last"), sequences)]), scheme,
                 sharding, attention=attention)
        return seconds(p, [pc for pc in p.written if pc.name.startswith("lm_head")])

    def handovers(tokens: int) -> float:
        # The plan's hand-over of this many tokens' activations between two stages.
        if pp == 1:
            return 0.0
        return (pp - 1) * charges.cost(hand_overs(config, tokens, get_scheme(scheme), 2)[0])[0]

    def dense(tokens: int) -> float:
        return prefill(tokens, False) + handovers(tokens)

    limit = context_limit(config)[0]

    def attention_s(new: int, context: int) -> float:
        # A context rounded up to the granularity stops at what the model can hold.
        context = min(context, limit - new)
        if context == 0:
            return prefill(min(new, limit), True)
        if new == 1:
            return scaled(Step.decode(context), True)
        return scaled(Step([StepSequence(new, context)]), True)

    prefill(1, True)
    prefill(1, False)  # a bad scheme or a call the accelerator cannot cost fails here
    cost = SplitStepCost(dense, attention_s, context_granularity, token_granularity,
                         token_granularity if prompt_granularity is None else prompt_granularity,
                         head, stage_split if pp > 1 else None)
    return cost
