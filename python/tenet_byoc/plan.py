"""The calls of one forward pass: the :class:`Step` (its sequences) and :func:`plan`, the one
place that walks a model's structure into the calls it runs.

A step is what one engine iteration runs: each sequence brings some new tokens and has some
tokens already in its KV cache. A prefill of P tokens is ``Step.prefill(P)``; a decode step at
context L is ``Step.decode(L)``; a batch of equal sequences is ``batch=``; continuous batching
and chunked prefill put sequences of different kinds in one step
(``Step([StepSequence(512, 0)] + [StepSequence(1, L) for L in contexts])``).

``plan(config, step, scheme, system)`` lists every call of that step as values a charge takes
(:class:`PlannedCall`: a ``cost_model.GemmCall``, a ``cost_model.VectorCall`` or a
:class:`LinkCall`, with its name, layer, pipeline stage, the GEMM a fused epilogue runs behind,
and a count). The linear layers take every new token of the step as rows, once; attention is
per group of equal sequences at its own context.

A later chunk of a prompt (``StepSequence(n, c)``, ``n > 1`` new tokens after ``c`` cached)
is planned as a prefill of its ``n`` tokens (linear layers, norms and KV writes over ``n``
rows) whose attention is widened to the ``c + n`` keys (``cache_length(c) + n`` under a
sliding window): per head Q x K^T of ``n x (c + n)`` and P x V over ``c + n``, and the score
scale, mask and softmax over the ``n x (c + n)`` block. Like a whole prefill, which charges
its full ``P x P`` block (the masked half included, as the runners compute it), a chunk is
charged its full rectangular block, not the causal triangle: a prompt cut in chunks charges
less attention than the whole prompt (the masked corners of the chunks not computed), the
cache re-read by each later chunk included. The head runs over a sequence's new tokens only
when it asks for logits (``StepSequence.logits``: a prompt's last chunk, not the ones
before), over its last token only with ``logits="last"`` (a serving engine's sampling). Tensor parallelism (Megatron-LM) and pipeline
stages are transformations of each call (:func:`shard_gemm`, :func:`shard_vector`,
:func:`stage_layers`) with the collectives they need added as link calls.
``tenet_byoc.compose.compose`` turns a plan and a charge per call into the step's time.

Thread safety: values are immutable; functions keep no state but a cache of the scheme's
charging rules. Errors: a bad count raises ``TypeError`` (not an integer) or ``ValueError``
(out of range), naming the field and the value; a model, scheme or sharding that cannot be
planned raises ``ValueError`` naming it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any, NamedTuple

from . import cost_model as cm
from .codegen import GemmCharging, gemm_charging
from .partition import operands_on_chip
from .quantization import QuantScheme, get_scheme

__all__ = ["ATTENTION_CHOICES", "BEFORE_LAYERS", "HOST_CALLS", "LinkCall", "expert_parallel", "Plan", "PlannedCall", "SCORE_OPS", "Sharding", "Step", "StepSequence",
           "check_tensor_parallel", "hand_overs",
           "context_limit", "model_config", "plan", "shard_gemm", "shard_vector", "layer_stages",
           "stage_layers"]


def _count(owner: str, name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{owner}.{name} must be an integer, got {type(value).__name__} "
                        f"{value!r}")
    if value < low:
        raise ValueError(f"{owner}.{name} must be >= {low}, got {value}")


@dataclass(frozen=True)
class StepSequence:
    """One sequence in a step: ``new_tokens`` it computes now, after ``context`` tokens
    already in its KV cache (its queries attend to ``context + new_tokens`` keys, causally).

    ``logits``: which of its new tokens the step computes logits for (the head over them):
    True all of them (as the runners compute a prompt), ``"last"`` its last one (what a
    serving engine samples from), False none. A prompt cut into chunks (chunked prefill)
    computes them only on its last chunk: ``StepSequence(256, 0, logits=False)`` then
    ``StepSequence(256, 256)``.
    """

    new_tokens: int
    context: int = 0
    logits: bool | str = True

    def __post_init__(self) -> None:
        _count("StepSequence", "new_tokens", self.new_tokens, 1)
        _count("StepSequence", "context", self.context, 0)
        if not isinstance(self.logits, bool) and self.logits != "last":
            raise TypeError(f"StepSequence.logits must be True, False or 'last', got "
                            f"{type(self.logits).__name__} {self.logits!r}")

    @property
    def logit_rows(self) -> int:
        """Rows the head runs over for this sequence."""
        return 1 if self.logits == "last" else self.new_tokens if self.logits else 0

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
        return phases.pop() if len(phases) == 1 and "chunk" not in phases else "mixed"

    def uniform(self) -> tuple[StepSequence, int] | None:
        """The one sequence shape and its count when every sequence is alike, else None."""
        return self.groups[0] if len(self.groups) == 1 else None


# ---- The calls ----------------------------------------------------------------------------

class Sharding(NamedTuple):
    """How a step is spread over chips (a ``tenet_byoc.system.System`` has the same three
    fields): chips per layer, pipeline stages, micro-batches."""

    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    micro_batches: int = 1


#: A collective over the links of a system, charged by the cost model
#: (``cost_model.charge_link``): ``kind`` "all_reduce", "all_gather", "all_to_all" or "p2p"
#: of a tensor of ``nbytes`` bytes (the whole result each chip ends with; for an all-to-all
#: what each chip holds before the exchange) among ``chips`` chips.
LinkCall = cm.LinkCall


def _link_call(link: Any, name: str, layer: int | None, stage: int) -> PlannedCall:
    """The planned call of the collective ``link``, keyed by its plain values."""
    return PlannedCall(link, name, "link", layer, stage, "", "none", 1,
                       ("link", link.kind, link.nbytes, link.chips))


def hand_overs(config: Any, tokens: int, quant: QuantScheme, stages: int) -> list[PlannedCall]:
    """The point-to-point sends of ``tokens`` tokens' hidden states, at the linear layers'
    output width under ``quant``, from each of ``stages`` pipeline stages to the next."""
    hidden = getattr(config, "n_embd", None) or config.hidden_size
    link = LinkCall("p2p", tokens * hidden * _charging(quant)["weight"].bits[2] / 8, 2)
    return [_link_call(link, f"stage{s}.p2p", None, s) for s in range(stages - 1)]


class PlannedCall(NamedTuple):
    """One call of a step, as a charge takes it, and where it runs.

    ``call`` is a ``cost_model.GemmCall`` (``unit="array"``), a ``cost_model.VectorCall``
    (``"vector"``) or a :class:`LinkCall` (``"link"``). ``layer`` is the decoder layer
    (None: the embedding before the layers, the final norm and head after them); ``stage``
    the pipeline stage whose chips run it (each of its ``tensor_parallel`` chips runs it
    alike); ``fused_with`` the GEMM a fused epilogue (bias, activation) runs behind ("" for
    any other call: an epilogue follows its GEMM in a plan); ``scheme`` the scheme a ledger
    entry records ("none" but for activation quantization and quantized GEMMs); ``count``
    how many times it runs on each chip (1 in a plan; more in :meth:`Plan.tally`).
    """

    call: Any
    name: str
    unit: str
    layer: int | None = None
    stage: int = 0
    fused_with: str = ""
    scheme: str = "none"
    count: int = 1
    #: The call as plain values (unit, sizes, widths, scheme): what charges are cached and
    #: calls tallied by (hashing a cost-model value costs more than its charge's look-up).
    key: tuple = ()


@dataclass(frozen=True)
class Plan:
    """Every call of one step: one micro-batch on one chip of each pipeline stage, in the
    order a run charges them (each GEMM with its fused epilogues after it; the vector unit's
    other calls after the GEMMs; the stages' hand-overs last).

    A step of ``micro_batches`` runs these calls that many times on every chip of each
    stage; chip ``stage x tensor_parallel + rank`` is rank ``rank`` of ``stage``.

    ``written`` holds the calls as planned: all of them, or (``layers`` > 0) those of a
    model cut to ``period + 1`` decoder layers, layers 1 .. period standing in turn for every
    layer after the first (a decoder's later layers repeat the same calls, or Gemma's
    sliding and full layers the same mix; layer 0 can differ, as a batch's mask built
    there). :attr:`calls` is the whole list either way, made when first read.
    """

    step: Step
    phase: str  #: "prefill", "decode" or "mixed" (the ledger's tag)
    written: tuple[PlannedCall, ...]
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    micro_batches: int = 1
    layers: int = 0  #: > 0: ``written`` is a cut plan of a model of this many layers
    prefix: str = ""  #: the layers' name prefix ("h." or "layers.") when ``layers`` > 0
    period: int = 1  #: how many of ``written``'s layers after the first repeat in turn

    @property
    def size(self) -> int:
        """How many calls :attr:`calls` holds (without making them)."""
        if not self.layers:
            return len(self.written)
        per = [sum(c.layer == j for c in self.written) for j in range(self.period + 1)]
        return len(self.written) + sum(per[(i - 1) % self.period + 1]
                                       for i in range(self.period + 1, self.layers))

    @cached_property
    def calls(self) -> tuple[PlannedCall, ...]:
        """Every call of the step (one micro-batch, one chip of each stage), in order."""
        if not self.layers:
            return self.written
        stage_of = layer_stages(self.layers, self.pipeline_parallel)
        period = self.period
        out: list[PlannedCall] = []
        block: list[PlannedCall] = []

        def expand() -> None:
            out.extend(block)
            for i in range(period + 1, self.layers):
                j = (i - 1) % period + 1
                head, st, cut = f"{self.prefix}{i}.", stage_of[i], len(f"{self.prefix}{j}.")
                out.extend(c._replace(name=head + c.name[cut:], layer=i, stage=st,
                                      fused_with=head + c.fused_with[cut:] if c.fused_with
                                      else "") for c in block if c.layer == j)
            block.clear()

        for c in self.written:
            if c.layer:
                block.append(c)
                continue
            if block:
                expand()
            out.append(c)
        if block:
            expand()
        return tuple(out)

    def tally(self, plans: Iterable[Plan] = ()) -> Plan:
        """This plan (and ``plans`` of the same sharding) with equal calls counted once: each
        distinct GEMM with its fused epilogues, and each other call, with how many times it
        runs (names and layers of the first; order: first seen). Composing the tally gives
        the sum of composing each plan alone; with several micro-batches, when one stage is
        the slowest in every plan (``tenet_byoc.compose.compose``)."""
        plans = tuple(plans)
        counts: dict[tuple, int] = {}
        first: dict[tuple, tuple[PlannedCall, ...]] = {}
        for p in (self, *plans):
            if (p.tensor_parallel, p.pipeline_parallel, p.micro_batches) != (
                    self.tensor_parallel, self.pipeline_parallel, self.micro_batches):
                raise ValueError("Plan.tally: plans of different shardings do not add up")
            calls = p.calls
            i = 0
            while i < len(calls):
                j = i + 1
                while j < len(calls) and calls[j].fused_with:
                    j += 1
                group = calls[i:j]
                key = tuple((c.key, c.stage) for c in group)
                counts[key] = counts.get(key, 0) + group[0].count
                first.setdefault(key, group)
                i = j
        out = tuple(c._replace(count=counts[key]) for key, group in first.items()
                    for c in group)
        return Plan(self.step, self.phase, out, self.tensor_parallel, self.pipeline_parallel,
                    self.micro_batches)


# ---- The model -----------------------------------------------------------------------------

def model_config(model: Any) -> Any:
    """The config of ``model``: a built-in name, a ``config.json`` or checkpoint folder path,
    or a ``GPT2Config`` / ``LlamaConfig`` / ``MoEConfig`` as is."""
    # The backend reaches the models' shape tables only here, when asked to plan one, so
    # importing tenet_byoc still loads no model code (tests/test_layering.py).
    from .models.configs import resolve_config
    from .models.gpt2 import GPT2Config
    from .models.llama import LlamaConfig
    from .models.moe import MoEConfig

    if isinstance(model, GPT2Config | LlamaConfig | MoEConfig):
        return model
    if not isinstance(model, str | os.PathLike):
        raise TypeError(
            f"model must be a built-in name, a config.json or checkpoint folder path, or a "
            f"GPT2Config / LlamaConfig / MoEConfig; got {type(model).__name__}"
        )
    return resolve_config(model)


def _layers(config: Any) -> int:
    return getattr(config, "n_layer", None) or config.num_hidden_layers


def context_limit(config: Any) -> tuple[int, str]:
    """The most tokens a sequence of ``config`` may hold, and the config field that says so."""
    if hasattr(config, "n_positions"):
        return config.n_positions, "n_positions"
    return config.max_position_embeddings, "max_position_embeddings"


@lru_cache(maxsize=64)
def _cut_layers(config: Any) -> tuple[Any, int]:
    """``config`` cut to ``period + 1`` decoder layers whose layers 1 .. period repeat in
    turn after them (the period of ``layer_types`` from layer 1 on; 1 where the layers are
    alike), and the period; ``(None, 0)`` for a config whose layers may differ otherwise
    (one that says ``uniform_layers = False`` and has no ``layer_types``)."""
    field = "n_layer" if hasattr(config, "n_layer") else "num_hidden_layers"
    n, types = getattr(config, field), getattr(config, "layer_types", None)
    if types is None:
        if not getattr(config, "uniform_layers", True):
            return None, 0
        types = ("",) * n
    period = next((p for p in range(1, n - 1) if all(
        types[i] == types[(i - 1) % p + 1] for i in range(p + 1, n))), 0)
    if not period:
        return None, 0
    cut = {"layer_types": types[:period + 1]} if getattr(config, "layer_types", None) else {}
    return dataclasses.replace(config, **{field: period + 1}, **cut), period


@lru_cache(maxsize=1 << 16)
def _layer_of(name: str) -> int | None:
    """The decoder layer of a call named ``h.3.…`` / ``layers.3.…``; None outside them."""
    head, _, rest = name.partition(".")
    if head in ("h", "layers"):
        return int(rest.split(".", 1)[0])
    return None


#: Calls before the first layer (their stage is the first; other calls outside the layers,
#: the final norm and the head, run on the last).
BEFORE_LAYERS = ("wte", "wpe", "embed_tokens", "positions")

# The cost model's GEMM sizes are 32-bit signed integers (GemmWorkload).
_SIZE_LIMIT = 2**31 - 1


def _check_sizes(name: str, phase: str, batch: int, b: int, m: int, n: int, k: int) -> None:
    """Refuse a GEMM the cost model cannot size, naming ``batch`` when it is the cause."""
    for dim, value in (("batch", b), ("M", m), ("N", n), ("K", k)):
        if value > _SIZE_LIMIT:
            cause = f"batch={batch} makes " if batch > 1 and value // batch <= _SIZE_LIMIT else ""
            raise ValueError(
                f"{cause}{phase} GEMM {name!r} {dim} = {value:,}, above the cost model's "
                f"limit of {_SIZE_LIMIT:,} (2^31 - 1) per dimension; use a smaller batch or "
                f"shorter lengths"
            )


@lru_cache(maxsize=64)
def _charging(quant: QuantScheme) -> dict[str, GemmCharging]:
    """What the codegen charges each class of GEMM with under ``quant`` (its own rule)."""
    # "absorbed": MLA's per-head products with a slice of kv_b_proj, plain float matmuls.
    return {**{role: gemm_charging(quant, role) for role in ("weight", "key", "value")},
            "absorbed": gemm_charging(get_scheme("none"), "weight")}


#: The GEMM whose output is the step's result (the logits, handed to the host).
HEAD = "lm_head"


def _gemm_call(name: str, b: int, m: int, n: int, k: int, how: GemmCharging, role: str,
               layer: int | None, stage: int, phase: str, batch: int) -> PlannedCall:
    """The planned call of a GEMM (its K padded as ``how`` pads it; refused with
    :func:`_check_sizes`), its operands on chip by ``partition.operands_on_chip``: a step's
    caller passes in no GEMM's A and gets back the head's C (the logits)."""
    k = -(-k // how.k_multiple) * how.k_multiple
    _check_sizes(name, phase, batch, b, m, n, k)
    on_chip = operands_on_chip(passed_in=False, returned=name == HEAD)
    key = ("array", b, m, n, k, how.scheme, role, how.bits, on_chip["c_on_chip"])
    call = _interned(key, lambda: cm.GemmCall(
        m=m, n=n, k=k, batch=b, bits_a=how.bits[0], bits_b=how.bits[1], bits_c=how.bits[2],
        scheme=how.scheme, recipe=how.recipe, **on_chip))
    return PlannedCall(call, name, "array", layer, stage, "", how.scheme, 1, key)


def _epilogue(op: str, rows: int, width: int, gemm: PlannedCall) -> PlannedCall:
    """The planned call of an epilogue fused behind ``gemm`` over its ``[rows, width]``
    output, as a run's runtime charges it (``EpilogueCall``): a bias add reads one value per
    column, an activation no second operand."""
    operand = width if op == "add" else 0
    key = ("vector", op, (rows, width), 32, operand, "none")
    call = _interned(key, lambda: cm.VectorCall(op, [rows, width],
                                                operand_elements=operand or None))
    return PlannedCall(call, f"{gemm.name}.{op}", "vector", gemm.layer, gemm.stage, gemm.name,
                       "none", 1, key)


def _vector_call(v: Any, shape: tuple, operand: int, label: str, stage: Any) -> PlannedCall:
    """The planned call of the vector operator ``v`` (a ``VectorOpShape``) over ``shape``,
    with ``operand`` elements of a second operand, its ledger scheme ``label``."""
    key = ("vector", v.op, shape, v.bits_out, operand, label)
    call = _interned(key, lambda: cm.VectorCall(
        v.op, list(shape), bits_in=32, bits_out=v.bits_out,
        operand_elements=operand if operand else (None if v.op not in _BINARY else 0)))
    layer = _layer_of(v.name)
    return PlannedCall(call, v.name, "vector", layer, stage(v.name, layer), "", label, 1, key)


#: Vector kinds that take a second operand (its element count 0 when there is none).
_BINARY = ("add", "multiply", "divide")
#: Vector calls of one sequence's attention (per group in a mixed step); every other vector
#: call works token by token and takes all of a step's new tokens at once.
_PER_SEQUENCE_OPS = ("kv_write", "softmax", "mask")
_PER_SEQUENCE_NAMES = ("attn.scale", "attn.masked", "attn.softcap", "attn.softcap.scale")


def _phase_tokens(config: Any, seq: StepSequence) -> tuple[str, int, int]:
    """The (phase, tokens, context) the models' call tables take for one sequence: a later
    chunk of a prompt is a prefill of its new tokens over the ``context`` its cache holds
    (checked against the model's context; 0 for any other sequence)."""
    if seq.phase == "decode":
        return "decode", seq.context, 0
    limit, field = context_limit(config)
    if seq.context + seq.new_tokens > limit and seq.phase == "chunk":
        raise ValueError(f"StepSequence(new_tokens={seq.new_tokens}, context={seq.context}): "
                         f"{seq.context + seq.new_tokens} tokens exceed {config.name}'s "
                         f"context {field}={limit}")
    return "prefill", seq.new_tokens, seq.context


#: Vector calls over a sequence's score block (rows x keys): scale, masks, softmax.
SCORE_OPS = ("attn.scale", "attn.mask", "attn.window_mask", "attn.batch_mask",
             "attn.masked", "attn.softmax", "attn.softcap", "attn.softcap.scale")


def _merge_token_ops(lists: list[list[Any]]) -> list[Any]:
    """The vector calls of a mixed step from each group's own list (batched form): a
    per-sequence call once per group, a token-wise one once over all groups' tokens (shape
    ``(1, tokens, ...)``, second operands summed); names in the order first seen."""
    from .models.vector_ops import VectorOpShape

    order: list[str] = []
    where: dict[str, int] = {}
    by_name: dict[str, list[Any]] = {}
    for ops in lists:
        last = -1
        for v in ops:
            if v.name not in where:
                if last + 1 == len(order):
                    where[v.name] = len(order)
                    order.append(v.name)
                else:  # a call only this group has (a prefill's mask, say): after its forerunner
                    order.insert(last + 1, v.name)
                    where = {n: i for i, n in enumerate(order)}
            last = where[v.name]
            by_name.setdefault(v.name, []).append(v)
    out = []
    for name in order:
        ops = by_name[name]
        first = ops[0]
        if first.op in _PER_SEQUENCE_OPS or name.endswith(_PER_SEQUENCE_NAMES):
            out.extend(ops)
            continue
        rows = sum(v.shape[0] * v.shape[1] for v in ops)
        operand = sum(v.operand for v in ops) if first.operand > 1 else first.operand
        out.append(VectorOpShape(name, first.op, (1, rows, *first.shape[2:]), operand,
                                 first.bits_out, first.quantize))
    return out


#: Calls made so far by their plain key: plans of many steps share their call values (a
#: decode step repeats most of the last one's), made once. Cleared when it grows large.
_CALLS: dict[tuple, Any] = {}
_CALLS_LIMIT = 1 << 18


def _interned(key: tuple, make: Any) -> Any:
    found = _CALLS.get(key)
    if found is None:
        if len(_CALLS) >= _CALLS_LIMIT:
            _CALLS.clear()
        found = _CALLS[key] = make()
    return found


#: How a plan may run attention (``plan(attention=)``).
ATTENTION_CHOICES = ("unfused", "fused")


def _fused_attention(a: Any, seq: StepSequence, n: int, config: Any, tp: int,
                     bits: int) -> tuple[tuple, Any]:
    """The key and ``cost_model.AttentionCall`` of one group's fused attention, from its
    Q x K^T product ``a`` (``n`` equal sequences; its K is the head dim, its N the keys)."""
    heads, kv = _heads(config)
    here = heads // tp
    kv_here = here if heads == kv else max(1, kv // tp)
    key = ("attention", n, here, kv_here, seq.new_tokens, a.n, a.k, bits)
    return key, _interned(key, lambda: cm.AttentionCall(
        batch=n, heads=here, kv_heads=kv_here, queries=seq.new_tokens, keys=a.n,
        head_dim=a.k, bits=bits, causal=True))


def _fused_groups(groups: list, gemm_lists: list, i: int) -> list[tuple[Any, Any, int]]:
    """(Q x K^T product, sequence, count) of each fused kernel: one per group of equal
    prompts or chunks; the decoding sequences together in one, at their mean keys rounded
    up (the K and V they read; a paged kernel runs a step's decodes in one launch)."""
    out, decodes = [], []
    for (seq, n, *_), gemms in zip(groups, gemm_lists, strict=True):
        (decodes if seq.phase == "decode" else out).append((gemms[i], seq, n))
    if decodes:
        count = sum(n for _, _, n in decodes)
        keys = -(-sum(a.n * n for a, _, n in decodes) // count)
        a, seq, _ = decodes[0]
        out.append((a._replace(n=keys), StepSequence(1, keys - 1), count))
    return out


#: Name endings of the calls a mixture-of-experts run does on the host (the router's scores
#: and top-k, the weighted combine): an estimate charges them on the vector unit, a run's
#: ledger does not list them.
HOST_CALLS = ("router.scores", "router.top_k", "experts.scale", "experts.combine")


def plan(config: Any, step: Step, scheme: str | QuantScheme = "none",
         system: Any = None, routing: Any = None, *, attention: str = "unfused") -> Plan:
    """Every call of ``step`` of the model ``config`` under ``scheme``.

    A dense decoder's calls are those of ``models.vector_ops.decoder_calls``; a mixture of
    experts' (a ``MoEConfig``) those of ``models.moe.moe_call_groups``, in a run's order:
    per Relax function call its GEMMs (with their fused epilogues), then its other vector
    work. Per mixture layer: attention (grouped-query, or DeepSeek's latent attention,
    expanded in a prefill and absorbed in a decode step), the shared experts, the router
    GEMM, the host's scores and top-k (:data:`HOST_CALLS`), each expert that receives tokens
    over exactly those rows, and the combine.

    Parameters
    ----------
    config : GPT2Config, LlamaConfig, MoEConfig, str or PathLike
        The model (a name or path is resolved by :func:`model_config`).
    step : Step
        The sequences of the forward pass.
    scheme : str or QuantScheme
        The quantization scheme of the linear layers: each GEMM carries the widths, recipe
        and K padding the quantize pass and codegen give it (``codegen.gemm_charging``);
        static schemes are charged as dynamic, as ``quantize`` without calibration data
        charges them.
    system : tenet_byoc.system.System or Sharding, optional
        Several chips: each call is the share of one chip of its stage (Megatron-LM tensor
        parallelism, :func:`shard_gemm`, :func:`shard_vector`), the row-parallel GEMMs and the
        head followed by their collectives, and with several stages the hand-overs between
        them; ``micro_batches`` must divide every group of equal sequences. A System's
        ``expert_parallel`` spreads a mixture's experts (:func:`expert_parallel`).
    routing : sequence of sequences of int, optional
        A mixture-of-experts model only: per mixture layer, the tokens each expert receives
        in this step (a run's router's choices, ``MoERunner.tokens_per_expert``). By default
        the expected uniform routing: ``tokens x k`` rows spread evenly over
        ``E x (1 - (1 - k/E) ** tokens)`` distinct experts (rounded;
        ``models.moe.expected_routing``), so a decode step of one sequence reads its k
        experts' weights and a large batch nearly all of them.
    attention : {"unfused", "fused"}
        "unfused": attention as the Relax graph runs it (Q x K^T and P x V per sequence and
        head, the scores scaled, masked and softmaxed on the vector unit: a run's ledger).
        "fused": one ``cost_model.AttentionCall`` per layer and group of equal prompts or
        chunks, and one for all decoding sequences at their mean keys (rounded up), in
        their place (FlashAttention's structure, causal, K and V read once per KV head; named
        ``….attn.fused``, ``unit="attention"``), at the wider of the activations' and the KV
        cache's widths; rotary and the KV-cache writes stay. Mixture-of-experts models are
        planned unfused either way.

    Returns
    -------
    Plan
        For a step of one kind of sequence, the calls a real run charges, in its order
        (``tests/estimate`` checks them against a run's ledger).

    Raises
    ------
    ValueError
        For a sharding the model does not split into, a GEMM the cost model cannot size, or a
        sequence longer than the model's context; for a mixture of experts also a step of
        several kinds of sequence (not planned for these models yet), tensor parallelism (the
        experts are spread by expert parallelism instead) or a routing that does not fit.
    """
    from .models.moe import MoEConfig, moe_call_groups
    from .models.vector_ops import KVCache, decoder_calls

    config = model_config(config)
    if not isinstance(step, Step):
        raise TypeError(f"step must be a tenet_byoc.plan.Step, got {type(step).__name__}")
    quant = get_scheme(scheme)
    if attention not in ATTENTION_CHOICES:
        raise ValueError(f"attention={attention!r} must be one of {ATTENTION_CHOICES}")
    ep = getattr(system, "expert_parallel", 1)  # a System's; 1 for a Sharding or none
    moe = isinstance(config, MoEConfig)
    if moe and ep > 1:
        return expert_parallel(config, step, ep, quant, routing)
    if moe and step.uniform() is None:
        raise ValueError(f"{config.name}: a step of several kinds of sequence is not planned "
                         "for mixture-of-experts models yet; plan each kind alone")
    if ep > 1:
        raise ValueError(f"System.expert_parallel={ep}: {config.name} has no experts to spread")
    if routing is not None and not moe:
        raise ValueError(f"routing is given, but {config.name} has no experts to route to")
    tp, pp, mu = (1, 1, 1) if system is None else (
        system.tensor_parallel, system.pipeline_parallel, system.micro_batches)
    if any(n % mu for _, n in step.groups):
        raise ValueError(f"System.micro_batches={mu} must divide batch={step.sequences}"
                         + ("" if step.uniform() else " (every group of equal sequences)"))
    if tp > 1 and moe:
        raise ValueError(f"tensor_parallel={tp}: {config.name}'s experts are not split by "
                         "Megatron-LM's rules here; spread them over chips with "
                         "tenet_byoc.plan.expert_parallel")
    if tp > 1:
        check_tensor_parallel(config, tp)
    whole = step
    if mu > 1:
        step = Step([(seq, n // mu) for seq, n in step.groups])
    layers = _layers(config)
    stage_of = layer_stages(layers, pp)

    def stage(name: str, layer: int | None) -> int:
        """The pipeline stage that runs a call (the calls before the layers,
        :data:`BEFORE_LAYERS`, on the first; the others outside them on the last)."""
        return stage_of[layer] if layer is not None else (
            0 if name.startswith(BEFORE_LAYERS) else pp - 1)
    # Walk two layers and let the second stand for the rest (Plan.calls makes them).
    cut, period = _cut_layers(config) if layers > 2 and not moe else (None, 0)
    if cut is not None:
        config = cut

    hows = _charging(quant)
    weights = hows["weight"]
    activation_bits = min(32, weights.bits[0])
    float_gemm = weights.scheme == "none"
    fused = attention == "fused" and not moe
    fused_bits = max(activation_bits, hows["key"].bits[1])
    groups = [(seq, n, *_phase_tokens(config, seq)) for seq, n in step.groups]
    kv = KVCache(quant.kv_bits, quant.kv_granularity, quant.kv_group)
    uniform = len(groups) == 1
    phase = step.phase
    calls: list[PlannedCall] = []
    sharded_k: dict[str, int] = {}

    def gemm(name: str, b: int, m: int, n: int, k: int, how: GemmCharging, role: str,
             count: int, ph: str, epilogue: Iterable[str]) -> None:
        layer = _layer_of(name)
        st = stage(name, layer)
        collective = None
        full_n = n
        if tp > 1:
            (b, m, n, k), collective = shard_gemm(name, b, m, n, k, config, tp)
        planned = _gemm_call(name, b, m, n, k, how, role, layer, st, ph, count)
        sharded_k[name] = planned.call.k
        calls.append(planned)
        calls.extend(_epilogue(op, b * m, n, planned) for op in epilogue)
        if collective is not None:
            # The [m, n] result at the call's output width: all-reduced whole, or the logits
            # gathered whole from each chip's slice of the vocabulary.
            size = m * (full_n if collective == "all_gather" else n) * how.bits[2] / 8
            calls.append(_link_call(LinkCall(collective, size, tp), f"{name}.{collective}",
                                    layer, st))

    def vector(v: Any) -> None:
        if fused and v.name.endswith(SCORE_OPS):  # inside the fused kernel
            return
        shape, operand = tuple(v.shape), v.operand
        if tp > 1:
            shape, operand = shard_vector(v.name, v.op, shape, operand, config, tp, sharded_k)
        calls.append(_vector_call(v, shape, operand, quant.name if v.quantize else "none",
                                  stage))

    if moe:
        (seq, n, ph, tokens, context), = groups
        for group in moe_call_groups(config, tokens, ph, routing, n, activation_bits,
                                     weights.k_multiple, float_gemm, context, seq.logit_rows,
                                     kv):
            for g, role in group.gemms:
                gemm(g.name, g.batch, g.m, g.n, g.k, hows[role], role, n, ph,
                     group.epilogues.get(g.name, ()))
            for v in group.vectors:
                vector(v)
        calls += hand_overs(config, step.tokens, quant, pp)
        return Plan(whole, phase, tuple(calls), tp, pp, mu)

    # With one kind of sequence the calls are those of the runners' functions (batched when
    # there are several sequences); a mixed step packs all new tokens into one batch.
    walks = [decoder_calls(config, ph, tokens, activation_bits, weights.k_multiple, n,
                           float_gemm, None if uniform else True, context, seq.logit_rows,
                           kv)
             for seq, n, ph, tokens, context in groups]
    gemm_lists = [w.gemms for w in walks]
    epilogues = walks[0].epilogues
    for i, g in enumerate(gemm_lists[0]):
        if g.weight is None and fused:  # one kernel in place of both products
            if g.name.endswith("attn.qk"):
                name = g.name.removesuffix("qk") + "fused"
                layer = _layer_of(name)
                for a, seq, n in _fused_groups(groups, gemm_lists, i):
                    key, call = _fused_attention(a, seq, n, config, tp, fused_bits)
                    calls.append(PlannedCall(call, name, "attention", layer,
                                             stage(name, layer), "", "none", 1, key))
        elif g.weight is None:  # attention: one product per sequence and head, per group
            role = "key" if g.name.endswith("attn.qk") else "value"
            for (_, n, ph, *_), gemms in zip(groups, gemm_lists, strict=True):
                a = gemms[i]
                gemm(a.name, a.batch * n, a.m, a.n, a.k, hows[role], role, n, ph,
                     epilogues.get(a.name, ()))
        else:  # a weight GEMM: every new token of the step shares the weight
            rows = sum(gemms[i].m * n
                       for (_, n, *_), gemms in zip(groups, gemm_lists, strict=True))
            if not rows:  # the head of a step that computes no logits
                continue
            gemm(g.name, g.batch, rows, g.n, g.k, weights, "weight", step.sequences,
                 groups[0][2], epilogues.get(g.name, ()))

    for v in walks[0].vectors if uniform else _merge_token_ops([w.vectors for w in walks]):
        vector(v)
    calls += hand_overs(config, step.tokens, quant, pp)
    if cut is None:
        return Plan(whole, phase, tuple(calls), tp, pp, mu)
    return Plan(whole, phase, tuple(calls), tp, pp, mu, layers,
                "h." if hasattr(cut, "n_layer") else "layers.", period)


# ---- Mixture of experts ---------------------------------------------------------------------

def expert_parallel(config: Any, step: Step, chips: int, scheme: str | QuantScheme = "none",
                    routing: Any = None) -> Plan:
    """The plan of ``step`` of a mixture-of-experts model on ``chips`` chips by expert
    parallelism: the busiest chip's calls, every chip charged as it.

    Expert ``j`` lives on chip ``j mod chips`` (round-robin: the first experts, which the
    expected routing fills first, land on different chips). The rest of each layer
    (attention, shared experts, router, the host's routing work) is data-parallel: each chip
    runs it for ``1 / chips`` of the sequences (the plan of that smaller step). Between the
    router and the experts each chip sends its tokens' hidden states to their experts'
    chips (``experts.dispatch``: an all-to-all of ``tokens x k x d`` values per chip, at the
    activations' width) and gets the outputs back after them (``experts.gather``, the same
    size at the output width), both all-to-all link calls (each chip holding ``tokens x k x d``
values, ``1 / chips`` of them for each chip: ``tenet_byoc.system``'s formulas). The experts' calls are those of
    the chip whose experts receive the most rows in the whole step (``routing``: as
    :func:`plan` takes it, for the whole step; default the expected uniform routing).

    Returns
    -------
    Plan
        ``tensor_parallel = chips`` (so composing it charges each chip as the busiest).

    Raises
    ------
    ValueError
        If ``config`` has no experts, ``chips`` does not divide the routed experts or the
        step's sequences, or the step mixes kinds of sequence.
    """
    from .models.moe import MoEConfig

    config = model_config(config)
    if not isinstance(config, MoEConfig):
        raise ValueError(f"expert_parallel: {config.name} has no experts to spread")
    _count("expert_parallel", "chips", chips, 1)
    e = config.experts
    one = step.uniform()
    if one is None:
        raise ValueError("expert_parallel: a step of several kinds of sequence is not planned "
                         "for mixture-of-experts models yet")
    seq, n = one
    if e.num_experts % chips or n % chips:
        raise ValueError(f"expert_parallel: chips={chips} must divide {config.name}'s "
                         f"{e.num_experts} routed experts and the step's {n} sequences")
    quant = get_scheme(scheme)
    whole = plan(config, step, quant, None, routing)
    local = plan(config, Step([(seq, n // chips)]), quant)

    def expert_of(name: str) -> int | None:
        head, sep, rest = name.partition(".experts.")
        if not sep or name.endswith(HOST_CALLS):
            return None
        return int(rest.split(".", 1)[0])

    rows = [0] * chips
    for c in whole.calls:
        j = expert_of(c.name)
        if j is not None and c.unit == "array" and c.name.endswith("gate_proj"):
            rows[j % chips] += c.call.m
    busiest = rows.index(max(rows))
    held: dict[int | None, list[PlannedCall]] = {}
    for c in whole.calls:
        j = expert_of(c.name)
        if j is not None and j % chips == busiest:
            held.setdefault(c.layer, []).append(c)
    weights = _charging(quant)["weight"]
    values = step.tokens // chips * e.experts_per_token * config.hidden_size
    calls: list[PlannedCall] = []
    for c in local.calls:
        if expert_of(c.name) is not None:
            continue
        calls.append(c)
        if c.name.endswith(".router.top_k"):
            prefix = c.name.removesuffix("router.top_k")
            for what, bits in (("dispatch", min(32, weights.bits[0])),
                               ("gather", weights.bits[2])):
                link = LinkCall("all_to_all", values * bits / 8, chips)
                if what == "gather":
                    calls += held.get(c.layer, [])
                calls.append(_link_call(link, f"{prefix}experts.{what}", c.layer, c.stage))
    return Plan(step, step.phase, tuple(calls), chips)


# ---- Sharding --------------------------------------------------------------------------------

# GEMM name endings by Megatron-LM role (GPT-2 and Llama names of models.gemms).
_COLUMN = ("attn.c_attn", "q_proj", "mlp.c_fc", "gate_proj", "up_proj")
_KV = ("k_proj", "v_proj")
_ROW = ("attn.c_proj", "o_proj", "mlp.c_proj", "down_proj")
_ATTENTION = ("attn.qk", "attn.pv")
_CACHES = ("k_cache.quantize", "v_cache.quantize")  # an int KV cache's quantization


def _heads(config: Any) -> tuple[int, int]:
    if hasattr(config, "n_head"):
        return config.n_head, config.n_head
    return config.num_attention_heads, config.num_key_value_heads


def check_tensor_parallel(config: Any, tp: int) -> None:
    """Refuse a tensor-parallel degree the model's heads or widths do not split into."""
    heads, kv = _heads(config)
    inner = getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) \
        or 4 * getattr(config, "n_embd", 0)
    if heads % tp:
        raise ValueError(f"tensor_parallel={tp} must divide {config.name}'s {heads} attention "
                         "heads (Megatron-LM splits heads across chips)")
    if kv % tp and tp % kv:
        raise ValueError(f"tensor_parallel={tp} must divide {config.name}'s {kv} key/value heads "
                         "or be a multiple of them (then each chip holds one, replicated)")
    if inner % tp:
        raise ValueError(f"tensor_parallel={tp} must divide {config.name}'s MLP width {inner}")


def shard_gemm(name: str, batch: int, m: int, n: int, k: int, config: Any,
               tp: int) -> tuple[tuple[int, int, int, int], str | None]:
    """One chip's share of a GEMM under tensor parallelism ``tp``, and the collective after it.

    Column-parallel (QKV, Q, up, gate, GPT-2's c_attn and c_fc): N / tp. Key/value
    projections: N / tp while tp divides the key/value heads, else one head per chip
    (replicated). Row-parallel (attention output, down, GPT-2's c_proj): K / tp, followed by
    an all-reduce of the ``[m, n]`` output. Attention: heads / tp per chip (query heads of a
    group split when tp exceeds the key/value heads). The head (``lm_head``): the vocabulary
    split, ceil(N / tp) per chip, followed by an all-gather of the logits.

    Returns ``((batch, m, n, k), collective)`` with collective None, "all_reduce" or
    "all_gather".
    """
    if tp == 1:
        return (batch, m, n, k), None
    heads, kv = _heads(config)
    if name.endswith(_ATTENTION):
        if heads == kv:  # GPT-2 and MHA: batch = heads
            return (batch // tp, m, n, k), None
        # Llama: batch = key/value heads, rows = query heads per group x tokens.
        group = heads // kv
        kv_here = max(1, kv // tp)
        q_here = heads // tp
        rows = m // group * (q_here // kv_here)
        return (batch // kv * kv_here, rows, n, k), None
    if name.endswith(_KV):
        head_dim = n // kv
        return (batch, m, head_dim * max(1, kv // tp), k), None
    if name.endswith(_COLUMN):
        return (batch, m, n // tp, k), None
    if name.endswith(_ROW):
        return (batch, m, n, k // tp), "all_reduce"
    if name == "lm_head":
        return (batch, m, -(-n // tp), k), "all_gather"
    raise ValueError(f"no Megatron-LM sharding rule for GEMM {name!r}")


def shard_vector(name: str, op: str, shape: tuple[int, ...], operand: int, config: Any,
                 tp: int, gemm_k: dict[str, int] | None = None
                 ) -> tuple[tuple[int, ...], int]:
    """One chip's share of a vector call under tensor parallelism ``tp``: its shape and
    second operand's elements.

    Split by heads (the chip's query or key/value heads, as :func:`shard_gemm` splits
    attention): the KV-cache writes and an int cache's quantization, rotary embeddings, the
    attention scale and soft-capping, masked scores and softmax. Split by the MLP width:
    SiLU and SwiGLU's product. The activation quantized before a row-parallel GEMM: that
    GEMM's K on the chip (``gemm_k``, by GEMM name, padded as the GEMM is). Every other call
    (embedding, norms, residual adds, masks, positions, quantization before the other
    GEMMs) runs whole on every chip.
    """
    if tp == 1:
        return shape, operand
    heads, kv = _heads(config)
    kv_here, q_here = max(1, kv // tp), heads // tp
    if op == "quantize" and name.endswith(_CACHES):  # (b, rows, kv heads x [scales], ...)
        return (*shape[:2], shape[2] // kv * kv_here, *shape[3:]), operand
    if op == "quantize":
        gemm = name.removesuffix(".quantize")
        if gemm.endswith(_ROW):
            k = (gemm_k or {}).get(gemm, shape[-1] // tp)
            return (*shape[:-1], k), operand
        return shape, operand
    if op == "kv_write":  # (b, kv heads, rows, head dim)
        return (shape[0], kv_here, *shape[2:]), operand
    if op == "rotary":  # (b, rows, heads, head dim): query or key heads
        here = kv_here if name.endswith("k_rotary") and heads != kv else q_here
        return (*shape[:2], here, shape[3]), operand
    if op in ("softmax", "multiply", "add", "tanh") and name.endswith(
            ("attn.scale", "attn.softmax", "attn.masked", "attn.softcap", "attn.softcap.scale")):
        if heads == kv or len(shape) == 4 and shape[1] == heads:  # (b, heads, rows, keys)
            return (shape[0], q_here, *shape[2:]), operand
        group = heads // kv
        if len(shape) == 5:  # (b, kv heads, group, rows, keys)
            return (shape[0], kv_here, q_here // kv_here, *shape[3:]), operand
        # (b, kv heads, group x rows, keys)
        return (shape[0], kv_here, shape[2] // group * (q_here // kv_here), shape[3]), operand
    if name.endswith(("mlp.silu", "mlp.gate_x_up")):
        return (*shape[:-1], shape[-1] // tp), operand // tp if operand > 1 else operand
    return shape, operand


def layer_stages(n_layers: int, stages: int) -> list[int]:
    """The pipeline stage of each decoder layer (:func:`stage_layers`)."""
    return [s for s, layers in enumerate(stage_layers(n_layers, stages)) for _ in layers]


def stage_layers(n_layers: int, stages: int) -> list[range]:
    """Consecutive layers per pipeline stage, the first stages taking one more when the
    layers do not split evenly."""
    if stages > n_layers:
        raise ValueError(f"pipeline_parallel={stages} exceeds the model's {n_layers} layers")
    base, extra = divmod(n_layers, stages)
    starts = [s * base + min(s, extra) for s in range(stages + 1)]
    return [range(a, b) for a, b in zip(starts, starts[1:])]
