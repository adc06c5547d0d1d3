"""The ledger a model's run would give, charged from its shapes alone (no weights, no GEMMs).

:func:`estimate` is plan -> charge each distinct call once -> compose -> ledger: each step's
calls come from :func:`tenet_byoc.plan.plan` (the one walk over a model's structure, the list
a real run's ledger follows call for call, with the widths, quantization recipe and K padding
the quantize pass and codegen give each GEMM), each distinct call is charged once with
``cost_model.charge`` / ``charge_vector`` (the C++ rule the runtime applies per call, its
fields from the same table; :class:`Charges`) and the step's time is
``tenet_byoc.compose.compose``'s. On a :class:`~tenet_byoc.system.System` the same calls are
each chip's share, with the collectives as entries of ``unit="link"``.
:func:`estimate_step` does the same for one :class:`~tenet_byoc.plan.Step`.

Thread safety: :func:`estimate` keeps no state between calls; a :class:`Charges` is not
shared between threads. Errors: a bad model, scheme, accelerator or length raises
``ValueError`` (``TypeError`` for a wrong type) naming the argument and what is accepted.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from . import cost_model as cm
from .compose import StepCost, compose
from .accelerators import Accelerator, resolve
from .ledger import Ledger, LedgerColumns, charge_row, tensor_map
from .plan import (LinkCall, Plan, PlannedCall, Step, context_limit, layer_stages, model_config,
                   plan)
from .quantization import QuantScheme, get_scheme

__all__ = ["ESTIMATE_PATTERN", "Charges", "estimate", "estimate_step"]

#: The ``pattern`` of an estimated entry: no composite function was matched, the call is
#: charged from its shape (a real run's entry names its matched pattern instead).
ESTIMATE_PATTERN = "estimate"

class Charges:
    """The charge of each distinct planned call on one accelerator (and a system's links),
    made once, as the runtime's per-shape cost cache makes it: every array and vector call
    on ``accelerator``, link calls across ``link`` (needed only for plans of several chips).
    """

    def __init__(self, accelerator: Accelerator, link: Any = None):
        self.accelerator = accelerator
        self.link = link
        self.schedule = accelerator.vector.schedule
        self._seen: dict[Any, dict[str, Any]] = {}

    def fields(self, pc: PlannedCall) -> dict[str, Any]:
        """The ledger fields of ``pc``'s charge (the cost model's one table,
        ``Charge.ledger_fields``), with its scheme and recipe."""
        found = self._seen.get(pc.key)
        if found is None:
            found = self._seen[pc.key] = self._charge(pc)
        return found

    def cost(self, pc: PlannedCall) -> tuple[float, float]:
        """``compose``'s charge of ``pc``: (cycles, pJ), or (seconds, pJ) for a link call."""
        f = self.fields(pc)
        if pc.unit == "link":
            return f["latency_us"] * 1e-6, f["energy_pj"]
        return f["cycles"], f["energy_pj"]

    def _charge(self, pc: PlannedCall) -> dict[str, Any]:
        acc, call = self.accelerator, pc.call
        if pc.unit == "array":
            acc.check_gemm(call.m, call.n, call.k, f"GEMM {pc.name!r}")
            found = cm.charge(call, acc).ledger_fields()
            found.update(tensors=tensor_map(found["tensors"]), scheme=call.scheme,
                         recipe=call.recipe)
            return found
        if pc.unit == "vector":
            return {**cm.charge_vector(call, acc).ledger_fields(), "scheme": pc.scheme}
        if pc.unit == "attention":
            return self._attention_fields(call)
        return self._link_fields(call)

    def _attention_fields(self, call: Any) -> dict[str, Any]:
        # The kernel's time is the cost model's (cost_model.charge_attention); its energy
        # the MACs at the PEs' rate for its width and its DRAM bits (its on-chip traffic
        # is not modelled: a lower bound).
        acc = self.accelerator
        c = cm.charge_attention(call, acc)
        bits = c.dram_read_bytes * 8 + c.dram_write_bytes * 8
        pj = (c.macs * acc.precision.lookup(call.bits, call.bits).pj_per_mac
              + bits * acc.memory.dram_pj_per_bit)
        return {"unit": "attention", "op": "attention", "cycles": c.cycles,
                "latency_us": c.latency_us, "energy_pj": pj,
                "mapping": f"fused attention: {c.units} tiles in {c.waves} waves",
                "macs": c.macs, "num_pes": c.num_pes,
                "macs_per_pe_per_cycle": c.macs_per_pe_per_cycle,
                "dram_read_bytes": c.dram_read_bytes,
                "dram_write_bytes": c.dram_write_bytes, "scheme": "none"}

    def _link_fields(self, call: LinkCall) -> dict[str, Any]:
        if self.link is None:
            raise ValueError(f"a {call.kind} link call needs a system's link: give Charges "
                             "a link")
        c = cm.charge_link(call, self.link.charged())
        hz = self.accelerator.hardware.clock_ghz * 1e9
        return {"unit": "link", "op": call.kind, "cycles": round(c.seconds * hz),
                "latency_us": c.latency_us, "energy_pj": c.energy_pj,
                "mapping": f"{call.kind} {self.link.topology} x{call.chips}",
                "scheme": "none", "link_bytes": c.link_bytes}


#: The most entries an estimate's ledger makes when read (each a tuple of ~0.6 KB).
MAX_LEDGER_ENTRIES = 5_000_000
#: The most calls an estimate's ledger stores by columns (16 bytes each).
MAX_LEDGER_CALLS = 20_000_000


class _Book:
    """An estimate's ledger columns being written: strings and charges interned (each
    distinct charge once, with whether it is a fused epilogue), each plan's calls appended
    as arrays of charge and name indices."""

    def __init__(self, charges: Charges) -> None:
        self.charges = charges
        self.rows: list[tuple] = []
        self.schemes: list[str] = []
        self._string_ids: dict[str, int] = {}  # in order: the string table
        self._charge_ids: dict[Any, int] = {}
        self._layer_names: dict[tuple, np.ndarray] = {}
        self._parts: dict[str, list] = {k: [] for k in ("charge", "name", "phase", "chip")}

    def string(self, s: str) -> int:
        """The index of ``s`` in the string table."""
        return self._string_ids.setdefault(s, len(self._string_ids))

    def charge(self, pc: PlannedCall) -> int:
        """The index of ``pc``'s charge row (made the first time)."""
        key = (pc.key, bool(pc.fused_with))
        found = self._charge_ids.get(key)
        if found is None:
            f = self.charges.fields(pc)
            found = self._charge_ids[key] = len(self.rows)
            self.rows.append(charge_row({**f, "fused": key[1]}))
            self.schemes.append(f["scheme"])
        return found

    def layers(self, block: list[PlannedCall], p: Plan) -> np.ndarray:
        """Name indices of ``block`` (calls of layer 1) in layers 1 .. layers-1, [layer, call]."""
        names = tuple(c.name for c in block)
        key = (names, p.prefix, p.layers)
        found = self._layer_names.get(key)
        if found is None:
            cut = len(f"{p.prefix}1.")
            found = self._layer_names[key] = np.array(
                [[self.string(f"{p.prefix}{i}." + n[cut:]) for n in names]
                 for i in range(1, p.layers)], dtype=np.int32).reshape(p.layers - 1, len(names))
        return found

    def add(self, p: Plan) -> None:
        """Append plan ``p``'s calls: each on every chip of its stage, for every
        micro-batch, in the plan's order (``Plan.calls``, its layers made here as arrays)."""
        charge_parts, name_parts, stage_parts = [], [], []
        stage_of = (np.array(layer_stages(p.layers, p.pipeline_parallel), dtype=np.int32)
                    if p.layers else None)
        block: list[PlannedCall] = []

        def flush() -> None:
            ids = np.array([self.charge(c) for c in block], dtype=np.int32)
            charge_parts.append(np.tile(ids, p.layers - 1))
            name_parts.append(self.layers(block, p).reshape(-1))
            stage_parts.append(np.repeat(stage_of[1:], len(block)))
            block.clear()

        for c in p.written:
            if p.layers and c.layer == 1:
                block.append(c)
                continue
            if block:
                flush()
            charge_parts.append(np.array([self.charge(c)], dtype=np.int32))
            name_parts.append(np.array([self.string(c.name)], dtype=np.int32))
            stage_parts.append(np.array([c.stage], dtype=np.int32))
        if block:
            flush()
        charge = np.concatenate(charge_parts)
        name = np.concatenate(name_parts)
        chip = np.concatenate(stage_parts)
        tp = p.tensor_parallel
        if tp * p.pipeline_parallel > 1:
            charge, name = np.repeat(charge, tp), np.repeat(name, tp)
            chip = (np.repeat(chip, tp) * tp + np.tile(np.arange(tp, dtype=np.int32),
                                                       len(chip))).astype(np.int32)
        else:
            chip = np.zeros(len(charge), dtype=np.int32)
        if p.micro_batches > 1:
            charge, name, chip = (np.tile(a, p.micro_batches) for a in (charge, name, chip))
        phase = np.full(len(charge), self.string(p.phase), dtype=np.int32)
        for key, part in zip(self._parts, (charge, name, phase, chip), strict=True):
            self._parts[key].append(part)

    def done(self, symbol: str) -> LedgerColumns:
        """The columns of the calls added, ``symbol`` and the estimate's pattern for all."""
        cols = {k: np.concatenate(v).astype(np.int32, copy=False) if v else
                np.zeros(0, dtype=np.int32) for k, v in self._parts.items()}
        schemes = np.array([self.string(s) for s in self.schemes], dtype=np.int32)
        return LedgerColumns(self.rows, list(self._string_ids), **cols, symbol=symbol,
                             pattern=ESTIMATE_PATTERN, scheme=schemes[cols["charge"]])


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
    limit, field = context_limit(config)
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
    routing: Any = None,
    attention: str | None = None,
) -> Ledger:
    """The ledger of a prefill and ``decode_steps`` decode steps, from shapes alone.

    Parameters
    ----------
    model : str, PathLike, GPT2Config or LlamaConfig
        A built-in name (``tenet_byoc.models.configs.BUILTIN``), a ``config.json`` path or a
        checkpoint folder (only its config is read), or a config object.
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
        ``preset(name, mapping="auto")`` charges it), ``"default"`` (the preset's own
        mapping) or None (the accelerator as given); see ``accelerators.resolve``.
    progress : bool
        Show the progress over the steps (the prefill and each decode step) on stderr: a
        bar on a terminal, a line every few seconds into a pipe or a file
        (:func:`tenet_byoc.progress.progress_bar`).
    system : tenet_byoc.system.System, optional
        Several chips (tensor and pipeline parallel, links): every GEMM is sharded as
        Megatron-LM shards it and charged on each chip, collectives are added as entries of
        ``unit="link"``, and a :class:`~tenet_byoc.system.SystemLedger` is returned, its
        ``steps`` the critical path of each step. ``accelerator`` must then be left at its
        default or name the system's accelerator (the system's is charged).
    routing : sequence, optional
        A mixture-of-experts model only: per step (the prefill, then each decode step), per
        mixture layer, the tokens each expert receives, as ``MoERunner.tokens_per_expert()``
        gives a run's, or a ``tenet_byoc.models.moe.ExpertLoad`` (a popularity per expert or
        a Zipf exponent: every step's expected routing under it); default the expected
        uniform routing (``tenet_byoc.plan.plan``).
    attention : {"unfused", "fused"}, optional
        How attention runs (``tenet_byoc.plan.plan``'s ``attention``); None: as the
        accelerator runs it (``Accelerator.attention``: fused on the GPU presets). A real
        run charges it unfused.

    Returns
    -------
    Ledger
        Its entries made when first read. One :class:`LedgerEntry` per call in execution
        order, tagged ``phase`` "prefill"
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
    config = model_config(model)
    context_len = prompt_len if context_len is None else context_len
    _check_lengths(config, prompt_len, context_len, decode_steps, batch)
    quant = get_scheme(scheme)
    charges = _charges(accelerator, mapping, system)
    acc = charges.accelerator
    steps = ([Step.prefill(prompt_len, batch)] if prompt_len else []) + [
        Step.decode(context_len + i, batch) for i in range(decode_steps)]
    if progress:  # a bar on a terminal, a line every few seconds into a pipe or a log
        from .progress import progress_bar

        steps = progress_bar(steps, desc=f"estimate {config.name} {quant.name}", unit="step",
                             leave=False)
    from .models.moe import ExpertLoad

    if isinstance(routing, ExpertLoad):
        routing = [routing] * len(steps)
    if routing is not None:
        routing = list(routing)
        if len(routing) != len(steps):
            raise ValueError(f"routing gives {len(routing)} steps' tokens per expert; the "
                             f"estimate runs {len(steps)} steps (the prefill, then each "
                             "decode step)")
    plans: list[Plan] = []
    times = []
    count = 0
    for i, step in enumerate(steps):
        p = plan(config, step, quant, system, None if routing is None else routing[i],
                 attention=attention or acc.attention)
        for pc in p.written:  # every distinct call charged now: a refusal is raised here
            charges.fields(pc)
        plans.append(p)
        count += p.size * p.micro_batches * (p.tensor_parallel if system is not None else 1)
        if system is not None:
            times.append(_step_time(p, compose(p, charges.cost, charges.schedule,
                                               acc.hardware.clock_ghz)))

    sizes = (f"(batch={batch}, decode_steps={decode_steps}, "
             f"micro_batches={system.micro_batches if system is not None else 1})")

    def columns() -> LedgerColumns:
        if count > MAX_LEDGER_CALLS:  # micro_batches=10**6 ran into MemoryError
            raise ValueError(
                f"the ledger would hold {count:,} calls, over the limit of "
                f"{MAX_LEDGER_CALLS:,} {sizes}: its step times are kept (latency_s); lower "
                "micro_batches or decode_steps for its totals and entries")
        book = _Book(charges)
        for p in plans:
            book.add(p)
        return book.done(config.name)

    limit = (MAX_LEDGER_ENTRIES,  # ~0.6 KB each
             f"the ledger would hold {count:,} entries, over the limit of "
             f"{MAX_LEDGER_ENTRIES:,} {sizes}: its totals, group_by and step times are kept; "
             "lower micro_batches or decode_steps for the entries")
    return _ledger(columns, acc, system, times, count=count, max_entries=limit)


def _ledger(columns: Any, acc: Accelerator, system: Any, times: list, **sizes: Any) -> Ledger:
    """The ledger of an estimate: of ``acc`` alone, or a system's with its step ``times``."""
    if system is None:
        return Ledger(columns, acc.name, acc.dataflow.name, acc.hardware.clock_ghz, [], **sizes)
    from .system import SystemLedger

    return SystemLedger(columns, system, times, **sizes)


def _charges(accelerator: Any, mapping: str | None, system: Any) -> Charges:
    """The charges of the accelerator charged: ``accelerator`` alone, or the system's."""
    if system is None:
        return Charges(resolve(accelerator, mapping=mapping))
    from .system import System

    if not isinstance(system, System):
        raise TypeError(f"system must be a tenet_byoc.system.System, got {type(system).__name__}")
    own = system.accelerator
    if accelerator not in (None, "os16", own.name) and accelerator != own:
        raise ValueError(f"accelerator={getattr(accelerator, 'name', accelerator)!r} differs from "
                         f"the system's {own.name!r}: give it as System(accelerator=...)")
    return Charges(resolve(own, mapping=mapping), system.link)


def _step_time(p: Plan, cost: StepCost) -> Any:
    from .system import StepTime

    seq = p.step.uniform()
    if seq is not None and p.phase != "mixed":  # a later chunk of a prompt: its new tokens
        tokens = seq[0].new_tokens if p.phase == "prefill" else seq[0].context
    else:
        tokens = p.step.tokens
    return StepTime(p.phase, tokens, cost.seconds, cost.bubble_seconds, cost.stage_seconds,
                    cost.p2p_seconds)


def estimate_step(model: Any, step: Step, scheme: str | QuantScheme = "none",
                  accelerator: str | Accelerator | None = "os16", *, system: Any = None,
                  mapping: str | None = None, charges: Charges | None = None,
                  entries: bool = True, attention: str | None = None
                  ) -> tuple[StepCost, Ledger | None]:
    """One step's time, energy and ledger: plan -> charge each distinct call once -> compose.

    ``step`` holds the sequences of the forward pass (any mix of prefills and decodes);
    ``model``, ``scheme``, ``accelerator``, ``system``, ``mapping`` and ``attention`` are as
    :func:`estimate` takes them. ``charges`` are reused across calls (each distinct call is
    charged once per :class:`Charges`: a serving loop keeps one per accelerator) and must be
    of the accelerator charged. Returns the step's critical path (``seconds``) and energy
    over every chip (``energy_pj``), and its entries (a
    :class:`~tenet_byoc.system.SystemLedger` on a system; None with ``entries=False``,
    faster).
    """
    config = model_config(model)
    charges = charges or _charges(accelerator, mapping, system)
    acc = charges.accelerator
    p = plan(config, step, scheme, system, attention=attention or acc.attention)
    cost = compose(p, charges.cost, charges.schedule, acc.hardware.clock_ghz)
    if not entries:
        return cost, None
    writer = _Book(charges)
    writer.add(p)
    return cost, _ledger(writer.done(config.name), acc, system, [_step_time(p, cost)])
