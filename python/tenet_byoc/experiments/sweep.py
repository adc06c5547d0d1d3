"""The scheme x hardware sweep: quantize, build, run and cost GPT-2 (prefill, decode) and the MLP.

A *case* is a model with its weights and inputs (:class:`GPT2Case`, :class:`MLPCase`);
:func:`sweep` runs every case under every quantization scheme on every accelerator and
returns one :class:`SweepRow` per (case, scheme, accelerator, phase), plus the cost of every
offloaded call (:class:`LayerCost`) for per-layer breakdowns. Each scheme is quantized once
per case and built once per accelerator (the accelerator config travels inside the built
module). Output error is measured against the float32 build (scheme ``none``) of the same
case on the same inputs.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Protocol

import numpy as np
import tvm
from tvm import relax
from tvm.ir import IRModule

from .hardware import Accelerator, resolve
from .ledger import LedgerEntry, ledger, set_charging, set_phase, totals
from .partition import build
from .quantization import SCHEMES, get_scheme, quantize

__all__ = [
    "DEFAULT_HARDWARE",
    "QUICK",
    "Case",
    "GPT2Case",
    "LayerCost",
    "MLPCase",
    "PhaseOutput",
    "SweepResult",
    "SweepRow",
    "gpt2_case",
    "markdown_table",
    "mlp_case",
    "sweep",
]

#: Accelerators of the default sweep.
DEFAULT_HARDWARE: tuple[str, ...] = ("os16", "ws16")


@dataclass(frozen=True)
class QuickSettings:
    """What ``--quick`` changes: a shorter prompt and context, three schemes, one array."""

    prompt_len: int = 32
    context_len: int = 32
    schemes: tuple[str, ...] = ("none", "w8a8_per_channel_per_token", "w4a16_group128")
    hardware: tuple[str, ...] = ("os16",)


QUICK = QuickSettings()


# ----------------------------------------------------------------------------------------
# Results
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepRow:
    """What one phase of one case costs under one scheme on one accelerator.

    Cost columns are sums over the phase's offloaded calls (utilisation MAC-weighted,
    bandwidth = off-chip bytes / est. latency). ``weight_bytes`` counts the linear layers'
    weights and their scales once each (attention's K and V are not weights).
    Errors compare the output (logits) with the float32 build's on the same inputs;
    ``accuracy`` is the FashionMNIST test accuracy (None without the real data).
    """

    model: str
    scheme: str
    hardware: str
    phase: str
    tokens: int  #: prefill: prompt length P; decode: context length L; MLP: images
    calls: int
    macs: int
    cycles: int
    latency_us: float
    pe_utilization: float
    weight_bytes: float
    offchip_bytes: float
    bandwidth_gbps: float
    max_abs_error: float
    rel_error: float  #: max_abs_error / max |float32 output|
    top1_agreement: float  #: fraction of positions (images) whose argmax matches float32
    accuracy: float | None
    build_s: float  #: quantize (shared by the scheme's builds) is not included
    wall_s: float  #: median CPU time of the phase's timed runs (after a warm-up run)


@dataclass(frozen=True)
class LayerCost:
    """One offloaded call of one run, named after the model's layer."""

    model: str
    scheme: str
    hardware: str
    phase: str
    layer: str  #: e.g. ``h.3.mlp.c_fc``, ``lm_head``, ``fc0``; the call's name if unknown
    pattern: str
    call_scheme: str  #: the call's own scheme ("none" for attention in quantized runs)
    batch: int
    m: int
    n: int
    k: int
    macs: int
    cycles: int
    latency_us: float
    pe_utilization: float
    offchip_bytes: float
    weight_bytes: float  #: 0 for calls whose B operand is an activation (attention)


ROW_COLUMNS = [f.name for f in fields(SweepRow)]
LAYER_COLUMNS = [f.name for f in fields(LayerCost)]


def _write_csv(columns: list[str], items: Sequence, path: str | Path | None) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(columns)
    for item in items:
        writer.writerow(["" if getattr(item, c) is None else getattr(item, c) for c in columns])
    text = buf.getvalue()
    if path is not None:
        Path(path).write_text(text)
    return text


def _fmt_bytes(value: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value:.0f} B"


def _fmt_count(value: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.2f}{unit}"
    return f"{value:.0f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub markdown table; numbers are right-aligned."""
    def align(col: int) -> str:
        numeric = rows and all(
            isinstance(r[col], (int, float)) or str(r[col]).lstrip("-").replace(".", "", 1)[:1]
            .isdigit() for r in rows
        )
        return "---:" if numeric else "---"

    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join(align(i) for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


@dataclass
class SweepResult:
    """The rows of a sweep, the per-call costs of every run, and notes on the inputs."""

    rows: list[SweepRow] = field(default_factory=list)
    layers: list[LayerCost] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    def to_csv(self, path: str | Path | None = None) -> str:
        """One line per :class:`SweepRow`."""
        return _write_csv(ROW_COLUMNS, self.rows, path)

    def layers_to_csv(self, path: str | Path | None = None) -> str:
        """One line per offloaded call (:class:`LayerCost`) of every run."""
        return _write_csv(LAYER_COLUMNS, self.layers, path)

    def to_json(self, path: str | Path | None = None) -> str:
        """Rows, notes and total wall time (per-call costs are in :meth:`layers_to_csv`)."""
        doc = {
            "wall_s": self.wall_s,
            "notes": self.notes,
            "rows": [asdict(r) for r in self.rows],
        }
        text = json.dumps(doc, indent=1)
        if path is not None:
            Path(path).write_text(text)
        return text

    def save(self, out_dir: str | Path) -> list[Path]:
        """Write ``sweep.csv``, ``sweep.json`` and ``layers.csv`` into ``out_dir``."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = [out / "sweep.csv", out / "sweep.json", out / "layers.csv"]
        self.to_csv(paths[0])
        self.to_json(paths[1])
        self.layers_to_csv(paths[2])
        return paths

    def table(self, model: str | None = None) -> str:
        """The rows (of ``model``, or all) as a markdown table with readable units."""
        header = ["model", "scheme", "hardware", "phase", "tokens", "MACs", "est. cycles",
                  "est. latency (us)", "PE util", "weight bytes", "off-chip bytes",
                  "bandwidth (GB/s)", "max abs err", "top-1 agree", "accuracy", "wall (ms)"]
        rows = []
        for r in self.rows:
            if model is not None and r.model != model:
                continue
            rows.append([
                r.model, r.scheme, r.hardware, r.phase, r.tokens, _fmt_count(r.macs),
                _fmt_count(r.cycles), f"{r.latency_us:,.1f}", f"{100 * r.pe_utilization:.1f}%",
                _fmt_bytes(r.weight_bytes), _fmt_bytes(r.offchip_bytes),
                f"{r.bandwidth_gbps:.1f}", f"{r.max_abs_error:.3g}",
                f"{100 * r.top1_agreement:.1f}%",
                "-" if r.accuracy is None else f"{100 * r.accuracy:.2f}%", f"{1e3 * r.wall_s:.1f}",
            ])
        return markdown_table(header, rows)


# ----------------------------------------------------------------------------------------
# Cases
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PhaseOutput:
    """The output of one phase and the wall time of its charged run."""

    output: np.ndarray
    wall_s: float


class Case(Protocol):
    """A model with bound weights and fixed inputs, run the same way under every scheme."""

    model: str
    phases: tuple[str, ...]

    def module(self) -> IRModule: ...

    def run(self, vm: relax.VirtualMachine, repeats: int) -> dict[str, PhaseOutput]: ...

    def tokens(self, phase: str) -> int: ...

    def layer_names(self, phase: str, entries: list[LedgerEntry]) -> list[str]: ...

    def is_weight(self, layer: str) -> bool: ...

    def accuracy(self, phase: str, output: np.ndarray) -> float | None: ...

    def describe(self) -> str: ...


def _timed_run(vm: relax.VirtualMachine, phase: str, repeats: int, func: str, *args):
    """An uncharged warm-up run, one charged run tagged ``phase``, then ``repeats - 1`` more
    uncharged runs; returns the charged run's output and the median time of all timed runs.
    """
    set_charging(vm, False)
    try:
        vm[func](*args)
        set_phase(vm, phase)
        set_charging(vm, True)
        start = time.perf_counter()
        out = vm[func](*args)
        times = [time.perf_counter() - start]
        set_charging(vm, False)
        for _ in range(repeats - 1):
            start = time.perf_counter()
            vm[func](*args)
            times.append(time.perf_counter() - start)
    finally:
        set_charging(vm, True)
    return out, statistics.median(times)


def _check_lengths(config, prompt_len: int, context_len: int) -> None:
    for name, value, top in (("prompt_len", prompt_len, config.n_positions),
                             ("context_len", context_len, config.n_positions - 1)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
            raise ValueError(
                f"{name}={value!r} must be an integer in [1, {top}] for GPT-2 "
                f"{config.name} (n_positions={config.n_positions})"
            )


class GPT2Case:
    """GPT-2: a prefill of ``prompt_len`` tokens and one decode step at ``context_len``.

    The decode step attends to a cache of ``context_len`` tokens made by the same build
    (so quantization error accumulates as it would in generation); when ``context_len``
    differs from ``prompt_len`` that cache comes from an extra, uncharged prefill.
    Token ids are seeded random ids in ``[0, vocab_size)``.
    """

    model = "gpt2"
    phases = ("prefill", "decode")

    def __init__(self, config, params: dict[str, np.ndarray], *, prompt_len: int = 128,
                 context_len: int = 128, seed: int = 0, weights: str = "random"):
        from .models.gpt2 import check_params

        _check_lengths(config, prompt_len, context_len)
        self.config = config
        self.params = check_params(config, params)
        self.prompt_len = prompt_len
        self.context_len = context_len
        self.weights = weights
        rng = np.random.default_rng(seed)
        length = max(prompt_len, context_len) + 1
        self.ids = rng.integers(0, config.vocab_size, length).astype(np.int32)
        self._module: IRModule | None = None

    def describe(self) -> str:
        c = self.config
        return (f"GPT-2 {c.name} ({c.n_layer} layers, d={c.n_embd}, {self.weights} weights): "
                f"prefill {self.prompt_len} tokens, decode at context {self.context_len}")

    def module(self) -> IRModule:
        if self._module is None:
            from .models.gpt2 import export_gpt2

            self._module = export_gpt2(self.config, self.params)
        return self._module

    def tokens(self, phase: str) -> int:
        return self.prompt_len if phase == "prefill" else self.context_len

    def run(self, vm: relax.VirtualMachine, repeats: int = 1) -> dict[str, PhaseOutput]:
        def ids(values) -> tvm.runtime.Tensor:
            return tvm.runtime.tensor(np.asarray(values, np.int32).reshape(1, -1))

        P, L = self.prompt_len, self.context_len
        (logits, cache), prefill_s = _timed_run(vm, "prefill", repeats, "prefill",
                                                ids(self.ids[:P]))
        prefill = logits.numpy()[0]
        if L != P:
            set_charging(vm, False)
            try:
                _, cache = vm["prefill"](ids(self.ids[:L]))
            finally:
                set_charging(vm, True)
        (step, _), decode_s = _timed_run(vm, "decode", repeats, "decode",
                                         ids(self.ids[L : L + 1]), list(cache))
        return {"prefill": PhaseOutput(prefill, prefill_s),
                "decode": PhaseOutput(step.numpy()[0], decode_s)}

    def layer_names(self, phase: str, entries: list[LedgerEntry]) -> list[str]:
        """The layer of each call, by execution order checked against GPT-2's matmul list.

        K may exceed the listed K where a group-wise scheme padded it.
        """
        from .models.gpt2 import gpt2_matmuls

        expected = gpt2_matmuls(self.config, self.tokens(phase), phase)
        if len(expected) == len(entries) and all(
            (e.batch, e.m, e.n) == (x.batch, x.m, x.n) and e.k >= x.k
            for e, x in zip(entries, expected)
        ):
            return [x.name for x in expected]
        return [e.name for e in entries]

    def is_weight(self, layer: str) -> bool:
        return not layer.endswith(("attn.qk", "attn.pv"))

    def accuracy(self, phase: str, output: np.ndarray) -> float | None:
        return None


class MLPCase:
    """The FashionMNIST MLP on its whole test set, in one batch (phase ``inference``)."""

    model = "mlp"
    phases = ("inference",)

    def __init__(self, setup):
        self.setup = setup
        self.images = setup.data.test_images
        self.labels = setup.data.test_labels
        self._module: IRModule | None = None

    def describe(self) -> str:
        return f"MLP 784-128-10 on {len(self.labels)} test images ({self.setup.note})"

    def module(self) -> IRModule:
        if self._module is None:
            from .models.mlp import mlp_module

            self._module = mlp_module(self.setup.params)
        return self._module

    def tokens(self, phase: str) -> int:
        return len(self.labels)

    def run(self, vm: relax.VirtualMachine, repeats: int = 1) -> dict[str, PhaseOutput]:
        out, wall = _timed_run(vm, "inference", repeats, "main",
                               tvm.runtime.tensor(self.images))
        return {"inference": PhaseOutput(out.numpy(), wall)}

    def layer_names(self, phase: str, entries: list[LedgerEntry]) -> list[str]:
        if len(entries) == 2:
            return ["fc0", "fc1"]
        return [e.name for e in entries]

    def is_weight(self, layer: str) -> bool:
        return True

    def accuracy(self, phase: str, output: np.ndarray) -> float | None:
        if self.setup.synthetic:
            return None
        return float(np.mean(np.argmax(output, axis=-1) == self.labels))


def gpt2_case(config: str = "small", *, checkpoint: str | os.PathLike | None = None,
              prompt_len: int = 128, context_len: int = 128, seed: int = 0) -> GPT2Case:
    """GPT-2 with seeded random weights of a preset shape, or a local HF checkpoint.

    Parameters
    ----------
    config : str
        A :data:`tenet_byoc.models.gpt2.PRESETS` name (ignored with ``checkpoint``).
    checkpoint : path, optional
        A Hugging Face GPT-2 folder (``config.json`` + ``model.safetensors``).
    prompt_len, context_len : int
        P tokens of prefill; the decode step's cache length L.
    seed : int
        Seeds the random weights and the token ids.

    Raises
    ------
    ValueError, KeyError, FileNotFoundError
        Unknown preset, lengths out of range, or a missing / broken checkpoint.
    """
    from .models.gpt2 import GPT2Config, load_hf_checkpoint, random_params

    if checkpoint is not None:
        cfg, params = load_hf_checkpoint(checkpoint)
        weights = f"checkpoint {os.fspath(checkpoint)}"
    else:
        cfg = GPT2Config.preset(config)
        params, weights = None, f"random (seed {seed})"
    _check_lengths(cfg, prompt_len, context_len)  # before the (slow) random weights
    if params is None:
        params = random_params(cfg, seed=seed)
    return GPT2Case(cfg, params, prompt_len=prompt_len, context_len=context_len, seed=seed,
                    weights=weights)


def mlp_case(data: str | os.PathLike | None = None, *, epochs: int = 5,
             seed: int = 0) -> MLPCase:
    """The MLP trained on FashionMNIST from ``data``, or random weights on synthetic images.

    Raises
    ------
    FileNotFoundError
        ``data`` is given but is not a folder, or lacks one of the four IDX files.
    ValueError
        A file is not a FashionMNIST IDX file (wrong magic number, size, labels).
    """
    from .models.mlp import load_fashion_mnist, prepare_mlp

    if data is not None and not os.path.isdir(data):
        raise FileNotFoundError(f"FashionMNIST folder {os.fspath(data)!r} does not exist")
    setup = prepare_mlp(data, epochs=epochs, seed=seed)
    if data is not None and setup.synthetic:
        load_fashion_mnist(data)  # a folder was named, so a missing file is an error: name it
    return MLPCase(setup)


# ----------------------------------------------------------------------------------------
# The sweep
# ----------------------------------------------------------------------------------------


def _accelerators(hardware: Sequence[str | Accelerator]) -> list[Accelerator]:
    accs = [resolve(h) for h in hardware]
    if not accs:
        raise ValueError("the sweep needs at least one accelerator")
    names = [a.name for a in accs]
    if len(set(names)) != len(names):
        raise ValueError(f"accelerator names must be distinct, got {names}")
    return accs


def _compare(output: np.ndarray, reference: np.ndarray) -> tuple[float, float, float]:
    err = float(np.abs(output.astype(np.float64) - reference).max())
    scale = float(np.abs(reference).max())
    top1 = float(np.mean(np.argmax(output, axis=-1) == np.argmax(reference, axis=-1)))
    return err, err / scale if scale else math.inf if err else 0.0, top1


def sweep(
    cases: Sequence[Case],
    schemes: Sequence[str] | None = None,
    hardware: Sequence[str | Accelerator] = DEFAULT_HARDWARE,
    *,
    repeats: int = 3,
    progress: bool = True,
) -> SweepResult:
    """Run every case under every scheme on every accelerator.

    Parameters
    ----------
    cases : sequence of Case
        From :func:`gpt2_case` and :func:`mlp_case`.
    schemes : sequence of str, optional
        Names from :data:`tenet_byoc.quantization.SCHEMES`; all of them by default.
    hardware : sequence of str or Accelerator
        Preset names (:data:`tenet_byoc.hardware.PRESETS`) or accelerators.
    repeats : int
        Timed runs per phase (one charged, the rest not); ``wall_s`` is their median.
    progress : bool
        Show a tqdm progress bar (on stderr) over the builds and runs.

    Returns
    -------
    SweepResult
        Rows in the order case, scheme, accelerator, phase.
    """
    from tqdm.auto import tqdm

    start = time.perf_counter()
    names = list(SCHEMES) if schemes is None else list(dict.fromkeys(schemes))
    for s in names:
        get_scheme(s)
    if not names:
        raise ValueError("the sweep needs at least one scheme")
    accs = _accelerators(hardware)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats={repeats!r} must be a positive integer")
    result = SweepResult(notes=[c.describe() for c in cases])
    # The float32 build goes first: its outputs are the reference for the other schemes.
    order = ["none"] + [s for s in names if s != "none"]
    steps = len(cases) * len(order) * len(accs) - (0 if "none" in names else len(cases) * (
        len(accs) - 1))
    bar = tqdm(total=steps, disable=not progress, unit="run", dynamic_ncols=True)
    try:
        for case in cases:
            reference: dict[str, np.ndarray] = {}
            for scheme in order:
                mod = quantize(case.module(), scheme)
                for acc in accs if scheme in names else accs[:1]:
                    bar.set_description(f"{case.model} {scheme} @ {acc.name}")
                    t0 = time.perf_counter()
                    ex = build(mod, accelerator=acc)
                    build_s = time.perf_counter() - t0
                    vm = relax.VirtualMachine(ex, tvm.cpu())
                    outputs = case.run(vm, repeats if scheme in names else 1)
                    if scheme == "none" and not reference:
                        reference = {p: o.output for p, o in outputs.items()}
                    if scheme in names:
                        _collect(result, case, scheme, acc, ledger(vm).entries, outputs,
                                 reference, build_s)
                    del vm, ex
                    bar.update()
                del mod
    finally:
        bar.close()
    result.wall_s = time.perf_counter() - start
    return result


def _collect(result: SweepResult, case: Case, scheme: str, acc: Accelerator,
             entries: list[LedgerEntry], outputs: dict[str, PhaseOutput],
             reference: dict[str, np.ndarray], build_s: float) -> None:
    for phase in case.phases:
        mine = [e for e in entries if e.phase == phase]
        layers = case.layer_names(phase, mine)
        weight_bytes = 0.0
        for e, layer in zip(mine, layers):
            wb = e.weight_bytes if case.is_weight(layer) else 0.0
            weight_bytes += wb
            result.layers.append(LayerCost(
                model=case.model, scheme=scheme, hardware=acc.name, phase=phase, layer=layer,
                pattern=e.pattern, call_scheme=e.scheme, batch=e.batch, m=e.m, n=e.n, k=e.k,
                macs=e.macs, cycles=e.cycles, latency_us=e.latency_us,
                pe_utilization=e.pe_utilization, offchip_bytes=e.offchip_bytes,
                weight_bytes=wb,
            ))
        t = totals(mine)
        out = outputs[phase]
        err, rel, top1 = _compare(out.output, reference[phase])
        result.rows.append(SweepRow(
            model=case.model, scheme=scheme, hardware=acc.name, phase=phase,
            tokens=case.tokens(phase), calls=t.calls, macs=t.macs, cycles=t.cycles,
            latency_us=t.latency_us, pe_utilization=t.pe_utilization,
            weight_bytes=weight_bytes, offchip_bytes=t.offchip_bytes,
            bandwidth_gbps=t.bandwidth_gbps,
            max_abs_error=err, rel_error=rel, top1_agreement=top1,
            accuracy=case.accuracy(phase, out.output), build_s=build_s, wall_s=out.wall_s,
        ))
