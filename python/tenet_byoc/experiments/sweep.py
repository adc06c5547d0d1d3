"""The scheme x accelerator sweep: quantize, build, run and cost GPT-2 (prefill, decode) and the MLP.

A case (:mod:`tenet_byoc.experiments.cases`) is a model with its weights and inputs;
:func:`sweep` runs every case under every quantization scheme on every accelerator and
returns one :class:`SweepRow` per (case, scheme, accelerator, phase), plus the cost of every
offloaded call (:class:`LayerCost`) for per-layer breakdowns. Each scheme is quantized,
built and run once per case: the GEMMs and their outputs are the same on every accelerator,
only their charge differs, so the run's ledger is charged on each further accelerator with
:meth:`~tenet_byoc.ledger.Ledger.charged_on` (entry for entry what a run built for it
records). Output error is measured against the float32 build (scheme ``none``) of the same
case on the same inputs.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import math
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import numpy as np
import tvm
from tvm import relax
from tvm.ir import IRModule

from ..accelerators import Accelerator, resolve
from ..ledger import LedgerEntry, ledger, totals
from ..partition import build
from ..quantization import CLASSIC_SCHEMES, get_scheme
from .cases import Case, PhaseOutput, run_case
from .results import LayerCost, SweepResult, SweepRow

__all__ = ["DEFAULT_ACCELERATORS", "QUICK", "QuickSettings", "sweep"]

#: Accelerators of the default sweep.
DEFAULT_ACCELERATORS: tuple[str, ...] = ("os16", "ws16")


@dataclass(frozen=True)
class QuickSettings:
    """What ``--quick`` changes: a shorter prompt and context, three schemes, one array."""

    prompt_len: int = 32
    context_len: int = 32
    schemes: tuple[str, ...] = ("none", "w8a8_per_channel_per_token", "w4a16_group128")
    accelerators: tuple[str, ...] = ("os16",)


QUICK = QuickSettings()


def _compare(output: np.ndarray, reference: np.ndarray) -> tuple[float, float, float]:
    # In place: one float64 temporary (GPT-2 small's prefill logits: 51 MB), not three.
    diff = output.astype(np.float64)
    diff -= reference
    err = float(np.abs(diff, out=diff).max())
    del diff
    scale = float(np.abs(reference).max())
    top1 = float(np.mean(np.argmax(output, axis=-1) == np.argmax(reference, axis=-1)))
    return err, err / scale if scale else math.inf if err else 0.0, top1


def sweep(
    cases: Sequence[Case],
    schemes: Sequence[str] | None = None,
    accelerators: Sequence[str | Accelerator] = DEFAULT_ACCELERATORS,
    *,
    repeats: int = 1,
    progress: bool = True,
) -> SweepResult:
    """Run every case under every scheme on every accelerator.

    ``cases`` come from :func:`gpt2_case` and :func:`mlp_case`; ``schemes`` are names from
    :data:`tenet_byoc.quantization.SCHEMES` or spec strings, the classic seven
    (:data:`~tenet_byoc.quantization.CLASSIC_SCHEMES`) by default; ``accelerators`` preset
    names (:data:`tenet_byoc.accelerators.PRESETS`) or accelerators. ``repeats``: timed runs
    per phase (one charged, the rest not), ``wall_s`` their median; one by default, as each
    further run of GPT-2 small's prefill only refines a CPU time the charged run already
    measures, and costs the main job about 0.3 s per build. ``progress``: show progress on
    stderr over the builds and runs (``tenet_byoc.progress``).

    Returns
    -------
    SweepResult
        Rows in the order case, scheme, accelerator, phase. The rows of one (case, scheme)
        share its one build and run: the same ``build_s``, ``wall_s`` and errors on every
        accelerator; their cost columns are each accelerator's own. A build runs while the
        (case, scheme) before it runs, so ``build_s`` (wall time) includes what that run
        took of the cores.
    """
    from ..progress import progress_bar

    start = time.perf_counter()
    names = list(CLASSIC_SCHEMES) if schemes is None else list(dict.fromkeys(schemes))
    for s in names:
        get_scheme(s)
    if not names:
        raise ValueError("the sweep needs at least one scheme")
    accs = [resolve(a) for a in accelerators]
    if not accs:
        raise ValueError("the sweep needs at least one accelerator")
    if len({a.name for a in accs}) != len(accs):
        raise ValueError(f"accelerator names must be distinct, got {[a.name for a in accs]}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats={repeats!r} must be a positive integer")
    result = SweepResult(notes=[c.describe() for c in cases])
    # The float32 build goes first: its outputs are the reference for the other schemes.
    order = ["none"] + [s for s in names if s != "none"]
    jobs = [(case, scheme) for case in cases for scheme in order]
    # a bar on a terminal, a line every few seconds into a pipe or a log file
    bar = progress_bar(total=len(jobs), enabled=progress, unit="run", desc="sweep",
                       dynamic_ncols=True)
    # A pipeline on two threads. The worker builds and loads (case, scheme) k + 1 while the
    # main thread runs k and then quantizes k + 2 (TVM's passes, LLVM, numpy's large
    # operations and the weights' drawing release the GIL, so a 2-core machine does both at
    # once): alive at most are the build running, the one being built and the one being
    # quantized. The float32 build runs alone (nothing built beside it, and the scheme after
    # it is quantized only once it is dropped): it holds the case's float32 weights (GPT-2
    # small: 0.5 GB), where the quantized ones are made from weights drawn again (see
    # GPT2Case.quantized).
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tenet-sweep-build")
    pending = None  # the build of the (case, scheme) at hand
    try:
        if jobs:
            pending = pool.submit(_build, _take(None, jobs[0]), accs[0])
        following = None  # the next (case, scheme), quantized and not yet building
        reference: dict[str, np.ndarray] = {}
        for i, (case, scheme) in enumerate(jobs):
            bar.set_description(f"{case.model} {scheme}")
            vm, build_s = pending.result()
            pending = None
            upcoming = jobs[i + 1] if i + 1 < len(jobs) else None
            alone = scheme == "none"
            if upcoming and not alone:
                pending = pool.submit(_build, _take(following, upcoming), accs[0])
                following = None
            outputs = run_case(case, vm, repeats if scheme in names else 1)
            if scheme == "none":
                reference = {p: o.output for p, o in outputs.items()}
            if scheme in names:
                errors = {p: _compare(o.output, reference[p]) for p, o in outputs.items()}
                book = ledger(vm)
                for acc in accs:
                    entries = (book if acc is accs[0] else book.charged_on(acc)).entries
                    _collect(result, case, scheme, acc, entries, outputs, errors, build_s)
            # The quantize pass leaves reference cycles that hold a scheme's weights (about
            # 0.13 GB for GPT-2 small); collected here rather than whenever Python would.
            del vm
            gc.collect()
            # The VM's pooled allocator keeps every buffer a run freed (GPT-2 small's
            # prefill: 0.1 GB) for later runs; the next (case, scheme) is another build
            # with other sizes, so they would only sit on the peak.
            _clear_pool()
            if upcoming and pending is None:
                pending = pool.submit(_build, _take(following, upcoming), accs[0])
                following = None
            after = jobs[i + 2] if i + 2 < len(jobs) else None
            if after and upcoming[1] != "none":
                following = _take(None, after)  # while the worker builds the next
            bar.update()
    finally:
        if pending is not None:
            pending.cancel()
        pool.shutdown(wait=True)
        bar.close()
    result.wall_s = time.perf_counter() - start
    return result


def _clear_pool() -> None:
    """Free the VM's pooled buffers, and hand freed heap memory back to the system."""
    tvm.get_global_func("vm.builtin.memory_manager.clear")()
    # glibc keeps what the threads freed in their own arenas (a scheme's quantize
    # temporaries, a build's IR): 0.05-0.1 GB that would otherwise sit on the next peak.
    # Elsewhere (no glibc) nothing to do.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _take(ready: IRModule | None, job: tuple[Case, str]) -> IRModule:
    """``job``'s module: ``ready`` if it was quantized ahead, else quantized now."""
    return ready if ready is not None else job[0].quantized(job[1])


def _build(mod: IRModule, acc: Accelerator) -> tuple[relax.VirtualMachine, float]:
    """``mod`` built for ``acc`` and loaded; and the build's time.

    Built for the first accelerator only: the others are charged from its ledger (the
    partition and the GEMMs do not depend on the accelerator).
    """
    t0 = time.perf_counter()
    ex = build(mod, accelerator=acc)
    build_s = time.perf_counter() - t0
    del mod
    return relax.VirtualMachine(ex, tvm.cpu()), build_s


#: The columns of a LayerCost that its GEMM entry has under the same name.
_OF_ENTRY = ("pattern", "batch", "m", "n", "k", "macs", "cycles", "roofline_cycles",
             "latency_us", "pe_utilization", "offchip_bytes", "dram_bytes", "energy_pj",
             "mapping")


def _collect(result: SweepResult, case: Case, scheme: str, acc: Accelerator,
             entries: list[LedgerEntry], outputs: dict[str, PhaseOutput],
             errors: dict[str, tuple[float, float, float]], build_s: float) -> None:
    for phase in case.phases:
        # The sweep's tables are the GEMMs' (the vector unit's entries are in the run's
        # ledger, tenet_byoc.ledger / group_by("unit"), not yet in these tables).
        mine = [e for e in entries if e.phase == phase and e.unit == "array"]
        layers = case.layer_names(phase, mine)
        weight_bytes = 0.0
        for e, layer in zip(mine, layers):
            wb = e.weight_bytes if case.is_weight(layer) else 0.0
            weight_bytes += wb
            result.layers.append(LayerCost(
                model=case.model, scheme=scheme, accelerator=acc.name, phase=phase, layer=layer,
                call_scheme=e.scheme, weight_bytes=wb, **{f: getattr(e, f) for f in _OF_ENTRY}))
        out = outputs[phase]
        err, rel, top1 = errors[phase]
        result.rows.append(SweepRow(
            model=case.model, scheme=scheme, accelerator=acc.name, phase=phase,
            tokens=case.tokens(phase), weight_bytes=weight_bytes, **asdict(totals(mine)),
            max_abs_error=err, rel_error=rel, top1_agreement=top1,
            accuracy=case.accuracy(phase, out.output), build_s=build_s, wall_s=out.wall_s,
        ))
