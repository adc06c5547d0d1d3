"""The ledger a model's run would give, charged from its shapes alone (no weights, no GEMMs).

:func:`estimate` lists every GEMM of a prefill and of each decode step from the model's
config (``tenet_byoc.models.gemms.model_gemms``, the list a real run's ledger follows call for
call), gives each call the widths, quantization recipe and K padding the quantize pass and
codegen would give it, and charges it with ``cost_model.charge``: the same C++ rule the
runtime applies per call, its fields from the same table. Identical calls are charged once (the runtime caches per shape the
same way), so Llama-3-70B with a long decode costs seconds, not hours.

Thread safety: :func:`estimate` keeps no state between calls. Errors: a bad model, scheme,
accelerator or length raises ``ValueError`` (``TypeError`` for a wrong type) naming the
argument and what is accepted.
"""

from __future__ import annotations

import os
from types import MappingProxyType
from typing import Any

from . import cost_model as cm
from .codegen import GemmCharging, gemm_charging
from .hardware import Accelerator, resolve
from .ledger import Ledger, LedgerEntry, TensorTraffic
from .quantization import QuantScheme, get_scheme

__all__ = ["ESTIMATE_PATTERN", "estimate"]

#: The ``pattern`` of an estimated entry: no composite function was matched, the call is
#: charged from its shape (a real run's entry names its matched pattern instead).
ESTIMATE_PATTERN = "estimate"


class _Charges:
    """Charges per distinct call on one accelerator: the C++ model runs once per
    (shape, widths, recipe), as the runtime's per-shape cost cache does."""

    def __init__(self, accelerator: Accelerator, how: GemmCharging):
        self._acc = accelerator
        self.how = how
        self._seen: dict[tuple[int, int, int, int], dict[str, Any]] = {}

    def fields(self, batch: int, m: int, n: int, k: int) -> dict[str, Any]:
        """The ledger fields of ``batch`` products ``[m, k] x [k, n]`` (K as given): the
        cost model's one table (``Charge.ledger_fields``), as the runtime writes them."""
        found = self._seen.get((batch, m, n, k))
        if found is None:
            how = self.how
            call = cm.GemmCall(m=m, n=n, k=k, batch=batch, bits_a=how.bits[0],
                               bits_b=how.bits[1], bits_c=how.bits[2], scheme=how.scheme,
                               recipe=how.recipe)
            found = cm.charge(call, self._acc).ledger_fields()
            found["tensors"] = MappingProxyType(
                {name: TensorTraffic(**t) for name, t in found["tensors"].items()})
            found["scheme"] = how.scheme
            found["recipe"] = call.recipe
            self._seen[(batch, m, n, k)] = found
        return found


# LedgerEntry is a frozen dataclass with neither __post_init__ nor slots: filling its
# __dict__ gives the object __init__ would, about 10x faster, which matters at ~10^5 entries
# a model. Should it gain either, entries are made by __init__ again.
_FILL_DICT = not hasattr(LedgerEntry, "__post_init__") and not hasattr(LedgerEntry, "__slots__")


def _entry(fields: dict[str, Any], **call: Any) -> LedgerEntry:
    if not _FILL_DICT:
        return LedgerEntry(**fields, **call)
    entry = object.__new__(LedgerEntry)
    entry.__dict__.update(fields)
    entry.__dict__.update(call)
    return entry


def _config(model: Any) -> Any:
    # The backend reaches the models' shape tables only here, when asked to estimate one,
    # so importing tenet_byoc still loads no model code (tests/test_layering.py).
    from .models.configs import resolve_config
    from .models.gpt2 import GPT2Config
    from .models.llama import LlamaConfig

    if isinstance(model, GPT2Config | LlamaConfig):
        return model
    if not isinstance(model, str | os.PathLike):
        raise TypeError(
            f"model must be a built-in name, a config.json or checkpoint folder path, or a "
            f"GPT2Config / LlamaConfig; got {type(model).__name__}"
        )
    return resolve_config(model)


def _context(config: Any) -> tuple[int, str]:
    """The most tokens a sequence may hold, and the config field that says so."""
    if hasattr(config, "n_positions"):
        return config.n_positions, "n_positions"
    return config.max_position_embeddings, "max_position_embeddings"


def _check_lengths(config: Any, prompt_len: Any, context_len: Any, decode_steps: Any,
                   batch: Any) -> None:
    for name, value, low in (("prompt_len", prompt_len, 0), ("context_len", context_len, 0),
                             ("decode_steps", decode_steps, 0), ("batch", batch, 1)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name}={value!r} must be an integer")
        if value < low:
            raise ValueError(f"{name}={value} must be >= {low}")
    if prompt_len == 0 and decode_steps == 0:
        raise ValueError("prompt_len=0 and decode_steps=0: nothing to estimate")
    limit, field = _context(config)
    if prompt_len > limit:
        raise ValueError(
            f"prompt_len={prompt_len} is longer than {config.name}'s context {field}={limit}"
        )
    if decode_steps and context_len + decode_steps > limit:
        raise ValueError(
            f"context_len={context_len} + decode_steps={decode_steps} tokens exceed "
            f"{config.name}'s context {field}={limit}: the last step would attend to "
            f"{context_len + decode_steps} keys"
        )


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


def estimate(
    model: str | os.PathLike[str] | Any,
    scheme: str | QuantScheme = "none",
    accelerator: str | Accelerator | None = "os16",
    prompt_len: int = 128,
    context_len: int | None = None,
    decode_steps: int = 1,
    batch: int = 1,
    mapping: str | None = None,
    *,
    progress: bool = False,
    system: Any = None,
) -> Ledger:
    """The ledger of a prefill and ``decode_steps`` decode steps, from shapes alone.

    Parameters
    ----------
    model : str, PathLike, GPT2Config or LlamaConfig
        A built-in name (``tenet_byoc.models.configs.BUILTIN``: gpt2, gpt2-medium,
        gpt2-large, gpt2-xl, llama-2-7b, llama-3-8b, llama-3-70b, mistral-7b,
        qwen2.5-0.5b), a ``config.json`` path or a checkpoint folder (only its config is
        read), or a config object.
    scheme : str or QuantScheme
        The quantization scheme of the linear layers (a name of ``SCHEMES`` or a spec
        string). Static schemes are charged as dynamic, as ``quantize`` without calibration
        data charges them; attention GEMMs are charged as the real run charges them.
    accelerator : str, Accelerator or None
        A preset name or an :class:`Accelerator` (None: the default preset).
    prompt_len : int
        Tokens of the prefill (0: no prefill, decode steps only).
    context_len : int, optional
        Tokens already in the KV cache when the first decode step runs (default
        ``prompt_len``); decode step ``i`` (from 0) attends to ``context_len + i + 1`` keys.
    decode_steps : int
        Decode steps after the prefill (0: prefill only).
    batch : int
        Sequences run together, all at the same lengths: weight GEMMs take
        ``batch x tokens`` rows; attention GEMMs stay per sequence (``batch x heads``), as
        the runners' ``prefill_batch`` / ``decode_batch`` compute them (prompts of unequal
        lengths are left-padded there: charge them at the longest).
    mapping : str, optional
        ``"auto"`` (each distinct call's searched mapping, as a build with
        ``preset(name, mapping="auto")`` charges it), ``"fixed"`` (the preset's own
        mapping) or None (the accelerator as given); see ``hardware.resolve``.
    progress : bool
        Show a progress bar over the decode steps (tqdm, on stderr).
    system : tenet_byoc.system.System, optional
        Several chips (tensor and pipeline parallel, links): every GEMM is sharded as
        Megatron-LM shards it and charged on each chip, collectives are added as entries of
        ``unit="link"``, and a :class:`~tenet_byoc.system.SystemLedger` is returned, its
        ``steps`` the critical path of each step. ``accelerator`` must then be left at its
        default or name the system's accelerator (the system's is charged).

    Returns
    -------
    Ledger
        One :class:`LedgerEntry` per GEMM in execution order, tagged ``phase`` "prefill"
        then "decode", with pattern :data:`ESTIMATE_PATTERN` and the model's name as
        symbol; with ``batch=1`` each entry's charge equals the real run's
        (``tests/estimate``). ``Ledger.reset`` does nothing (no runtime module).

    Raises
    ------
    ValueError
        For an unknown model, scheme or preset, lengths outside the model's context, or a
        call the accelerator cannot cost (as ``tenet_byoc.build`` refuses it).
    TypeError
        For a non-integer length or a model of the wrong type.
    """
    from .models.gemms import model_gemms
    from .models.vector_ops import gemm_epilogues, model_vector_ops

    config = _config(model)
    context_len = prompt_len if context_len is None else context_len
    _check_lengths(config, prompt_len, context_len, decode_steps, batch)
    if system is not None:
        return _estimate_on_system(config, get_scheme(scheme), system, accelerator, mapping,
                                   prompt_len, context_len, decode_steps, batch)
    acc = resolve(accelerator, mapping=mapping)
    quant = get_scheme(scheme)
    # What the codegen charges each class of GEMM with under this scheme (its own rule).
    weights = _Charges(acc, gemm_charging(quant, "weight"))
    attention = {role: _Charges(acc, gemm_charging(quant, role)) for role in ("key", "value")}
    calls = ([("prefill", prompt_len)] if prompt_len else []) + [
        ("decode", context_len + i) for i in range(decode_steps)
    ]

    def charged(phase: str, tokens: int):
        """Each GEMM of one call with its charger, batch, rows and (padded) K."""
        for g in model_gemms(config, phase, tokens):
            if g.weight is None:  # attention: one product per sequence and head
                role = "key" if g.name.endswith("attn.qk") else "value"
                charges, b, m = attention[role], g.batch * batch, g.m
            else:  # a weight GEMM: the batch's rows share the weight
                charges, b, m = weights, g.batch, g.m * batch
            multiple = charges.how.k_multiple
            yield g, charges, b, m, -(-g.k // multiple) * multiple

    # Refuse a call the accelerator cannot cost before charging any, as tenet_byoc.build
    # does at build time; the first and last calls hold the largest shapes.
    for phase, tokens in dict.fromkeys((calls[0], calls[-1])):
        for g, _, b, m, k in charged(phase, tokens):
            _check_sizes(g.name, phase, batch, b, m, g.n, k)
            acc.check_gemm(m, g.n, k, f"GEMM {g.name!r}")
    if progress:
        from tqdm.auto import tqdm

        calls = tqdm(calls, desc=f"estimate {config.name} {quant.name}", unit="call",
                     leave=False)
    vector = _VectorCharges(acc)
    activation_bits = min(32, weights.how.bits[0])
    float_gemm = weights.how.scheme == "none"
    entries: list[LedgerEntry] = []
    for phase, tokens in calls:
        for g, charges, b, m, k in charged(phase, tokens):
            entries.append(_entry(charges.fields(b, m, g.n, k), call_index=len(entries),
                                  symbol=config.name, pattern=ESTIMATE_PATTERN, name=g.name,
                                  phase=phase))
            # The GEMM's fused epilogue, charged by the runtime right after it.
            for op in gemm_epilogues(config, g.name, phase, batch, float_gemm):
                call = cm.VectorCall(op, [b * m, g.n], operand_elements=g.n if op == "add" else None)
                entries.append(_entry(vector.fields(call, "none"), call_index=len(entries),
                                      symbol=config.name, pattern=ESTIMATE_PATTERN,
                                      name=f"{g.name}.{op}", phase=phase, fused=True))
        # The operators left on TVM's path, charged once per call after its GEMMs.
        for v in model_vector_ops(config, phase, tokens, activation_bits,
                                  weights.how.k_multiple, batch, float_gemm):
            call = cm.VectorCall(v.op, list(v.shape), bits_in=32, bits_out=v.bits_out,
                                 operand_elements=v.operand if v.operand else
                                 (None if v.op not in ("add", "multiply", "divide") else 0))
            entries.append(_entry(vector.fields(call, quant.name if v.quantize else "none"),
                                  call_index=len(entries), symbol=config.name,
                                  pattern=ESTIMATE_PATTERN, name=v.name, phase=phase))
    return Ledger(entries, acc.name, acc.dataflow.name, acc.hardware.clock_ghz, [])


class _VectorCharges:
    """Vector charges per distinct call on one accelerator, as the runtime caches them."""

    def __init__(self, accelerator: Accelerator):
        self._acc = accelerator
        self._seen: dict[tuple, dict[str, Any]] = {}

    def fields(self, call: Any, scheme: str) -> dict[str, Any]:
        key = (call, scheme)
        found = self._seen.get(key)
        if found is None:
            found = cm.charge_vector(call, self._acc).ledger_fields()
            found["tensors"] = MappingProxyType({})
            found["scheme"] = scheme
            found["recipe"] = _FLOAT_RECIPE
            self._seen[key] = found
        return found


_FLOAT_RECIPE = cm.QuantRecipe()



def _layer_of(name: str) -> int | None:
    """The decoder layer a GEMM belongs to (``h.3.`` / ``layers.3.``), None for the head."""
    head, _, rest = name.partition(".")
    if head in ("h", "layers"):
        return int(rest.split(".", 1)[0])
    return None


def _estimate_on_system(config: Any, quant: QuantScheme, system: Any, accelerator: Any,
                        mapping: str | None, prompt_len: int, context_len: int,
                        decode_steps: int, batch: int) -> Any:
    """:func:`estimate` on a :class:`~tenet_byoc.system.System` (see its ``system``)."""
    from .models.gemms import model_gemms
    from .system import (
        StepTime,
        System,
        SystemLedger,
        check_tensor_parallel,
        collective_link_bytes,
        collective_seconds,
        pipeline_seconds,
        shard_gemm,
        stage_layers,
    )

    if not isinstance(system, System):
        raise TypeError(f"system must be a tenet_byoc.system.System, got {type(system).__name__}")
    own = system.accelerator
    if accelerator not in (None, "os16", own.name) and accelerator != own:
        raise ValueError(f"accelerator={getattr(accelerator, 'name', accelerator)!r} differs from "
                         f"the system's {own.name!r}: give it as System(accelerator=...)")
    acc = resolve(own, mapping=mapping)
    tp, pp, mu = system.tensor_parallel, system.pipeline_parallel, system.micro_batches
    check_tensor_parallel(config, tp)
    if batch % mu:
        raise ValueError(f"System.micro_batches={mu} must divide batch={batch}")
    micro = batch // mu
    n_layers = getattr(config, "n_layer", None) or config.num_hidden_layers
    stage_of = {}
    for s, layers in enumerate(stage_layers(n_layers, pp)):
        stage_of.update(dict.fromkeys(layers, s))
    weights = _Charges(acc, gemm_charging(quant, "weight"))
    attention = {role: _Charges(acc, gemm_charging(quant, role)) for role in ("key", "value")}
    hidden = getattr(config, "n_embd", None) or config.hidden_size
    link, clock_hz = system.link, acc.hardware.clock_ghz * 1e9
    calls = ([("prefill", prompt_len)] if prompt_len else []) + [
        ("decode", context_len + i) for i in range(decode_steps)]
    entries: list[LedgerEntry] = []
    steps: list[StepTime] = []

    def add(fields: dict[str, Any], name: str, phase: str, stage: int, unit: str = "array",
            link_bytes: float = 0.0) -> None:
        if fields.get("unit") != unit:
            fields = {**fields, "unit": unit}
        for rank in range(tp):
            entries.append(_entry(fields, call_index=len(entries), symbol=config.name,
                                  pattern=ESTIMATE_PATTERN, name=name, phase=phase,
                                  chip=system.chip(stage, rank), link_bytes=link_bytes))

    def link_fields(template: dict[str, Any], kind: str, seconds: float,
                    chips: int) -> dict[str, Any]:
        fields = {k: (0 if isinstance(v, int | float) and not isinstance(v, bool) else v)
                  for k, v in template.items()}
        fields.update(cycles=round(seconds * clock_hz), latency_us=seconds * 1e6,
                      mapping=f"{kind} {link.topology} x{chips}", dequant_place="none",
                      tensors=MappingProxyType({}))
        return fields

    for phase, tokens in calls:
        stage_seconds = [0.0] * pp
        rows = (tokens if phase == "prefill" else 1) * micro
        for mb in range(mu):
            template = None
            for g in model_gemms(config, phase, tokens):
                layer = _layer_of(g.name)
                stage = pp - 1 if layer is None else stage_of[layer]
                (b, m, n, k), collective = shard_gemm(g.name, g.batch, g.m, g.n, g.k, config, tp)
                if g.weight is None:
                    role = "key" if g.name.endswith("attn.qk") else "value"
                    charges, b = attention[role], b * micro
                else:
                    charges, m = weights, m * micro
                multiple = charges.how.k_multiple
                k = -(-k // multiple) * multiple
                acc.check_gemm(m, n, k, f"GEMM {g.name!r}")
                fields = charges.fields(b, m, n, k)
                template = template or fields
                add(fields, g.name, phase, stage)
                if mb == 0:
                    stage_seconds[stage] += fields["cycles"] / clock_hz
                if collective is not None:
                    # The [m, n] result at the call's output width: all-reduced whole, or the
                    # logits gathered whole from each chip's slice of the vocabulary.
                    full_n = g.n if collective == "all_gather" else n
                    size = m * full_n * charges.how.bits[2] / 8
                    seconds = collective_seconds(collective, size, tp, link)
                    add(link_fields(fields, collective, seconds, tp), f"{g.name}.{collective}",
                        phase, stage, "link", collective_link_bytes(collective, size, tp))
                    if mb == 0:
                        stage_seconds[stage] += seconds
            p2p = 0.0
            if pp > 1:
                size = rows * hidden * weights.how.bits[2] / 8
                p2p = collective_seconds("p2p", size, 2, link)
                for s in range(pp - 1):
                    add(link_fields(template, "p2p", p2p, 2), f"stage{s}.p2p", phase, s,
                        "link", collective_link_bytes("p2p", size, 2))
        critical, bubble = pipeline_seconds(stage_seconds, p2p, mu)
        steps.append(StepTime(phase, tokens, critical, bubble, tuple(stage_seconds), p2p))
    return SystemLedger(entries, system, steps)
