"""The experiments' cases and their one driver.

A *case* is a model with its weights and inputs (:class:`GPT2Case`, :class:`MLPCase`); it
says which VM function and arguments each of its phases calls (:meth:`Case.inputs`) and
what of the result is its output. :func:`run_phase` is the one place that runs a phase:
warm-up, the charged run tagged with the phase in the ledger, further timed runs. The sweep
and every command of the CLI go through it.
"""

from __future__ import annotations

import os
import statistics
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import tvm
from tvm import relax
from tvm.ir import IRModule

from ..ledger import LedgerEntry, set_charging, set_phase

__all__ = ["Case", "GPT2Case", "MLPCase", "PhaseOutput", "gpt2_case", "mlp_case", "run_case",
           "run_phase"]


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

    def quantized(self, scheme: str) -> IRModule:
        """The module quantized to ``scheme`` (a name or spec), for one build."""
        ...

    def inputs(self, vm: relax.VirtualMachine, phase: str,
               earlier: dict[str, Any] | None = None) -> tuple[str, list]:
        """The VM function a phase calls and its arguments (state such as a KV cache is
        made on ``vm`` with charging off, or taken from ``earlier``: what the phases run
        before on the same ``vm`` returned, by phase)."""
        ...

    def output(self, phase: str, result: Any) -> np.ndarray:
        """The phase's output (logits, class scores) from what its function returned."""
        ...

    def tokens(self, phase: str) -> int: ...

    def layer_names(self, phase: str, entries: list[LedgerEntry]) -> list[str]: ...

    def is_weight(self, layer: str) -> bool: ...

    def accuracy(self, phase: str, output: np.ndarray) -> float | None: ...

    def describe(self) -> str: ...


def run_phase(vm: relax.VirtualMachine, phase: str, func: str, args: list,
              repeats: int = 1) -> tuple[Any, float]:
    """Run ``func`` once uncharged (warm-up), once charged and tagged ``phase`` in the ledger,
    then ``repeats - 1`` more times uncharged; return the charged run's result and the median
    time of the timed runs."""
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


def run_case(case: Case, vm: relax.VirtualMachine, repeats: int = 1) -> dict[str, PhaseOutput]:
    """Every phase of ``case`` on ``vm`` through :func:`run_phase`."""
    outputs, results = {}, {}
    for phase in case.phases:
        func, args = case.inputs(vm, phase, results)
        results[phase], wall = run_phase(vm, phase, func, args, repeats)
        outputs[phase] = PhaseOutput(case.output(phase, results[phase]), wall)
    return outputs


class GPT2Case:
    """GPT-2: a prefill of ``prompt_len`` tokens and one decode step at ``context_len``.

    The decode step attends to a cache of ``context_len`` tokens made by the same build
    (so quantization error accumulates as it would in generation), made by an uncharged
    prefill of ``context_len`` tokens.
    Token ids are seeded random ids in ``[0, vocab_size)``.
    """

    model = "gpt2"
    phases = ("prefill", "decode")

    def __init__(self, config, params, *, prompt_len: int = 128, context_len: int = 128,
                 seed: int = 0, weights: str = "random"):
        from ..models.gpt2 import RandomWeights, check_params

        # Every bad value in one message, so a user fixes them in one go.
        bad = [
            f"{name}={value!r} must be an integer in [1, {top}]"
            for name, value, top in (("prompt_len", prompt_len, config.n_positions),
                                     ("context_len", context_len, config.n_positions - 1))
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top
        ]
        if bad:
            raise ValueError(
                f"{'; '.join(bad)} for GPT-2 {config.name} (n_positions={config.n_positions})"
            )
        self.config = config
        # Random weights are drawn when a module needs them (RandomWeights), so the sweep
        # can quantize each scheme from weights drawn again one at a time instead of
        # keeping the float32 model (GPT-2 small: 0.5 GB) beside every build.
        self._random: RandomWeights | None = params if isinstance(params, RandomWeights) else None
        # Other weights are held until the module is exported; then only the module's
        # constants hold them.
        self._params: dict | None = None if self._random else check_params(config, params)
        self._kept: dict[str, tvm.runtime.Tensor] | None = None
        # The last scheme's stored weights: the next one takes those it stores alike.
        self._reuse: dict = {}
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
        """The float32 module, exported once and kept."""
        if self._module is None:
            from ..models.gpt2 import export_gpt2

            self._module = export_gpt2(self.config, self._params or self._float_params())
            self._params = None
        return self._module

    def quantized(self, scheme: str) -> IRModule:
        """The module under ``scheme``, to build once and drop.

        With random weights and no float32 module kept (:meth:`module` not called), a
        float32 module is exported for the float schemes and not kept, and every other
        scheme quantizes weights drawn again one at a time: the layers' float32 weights are
        never all in memory beside a build. The embedding tables, biases and LayerNorms
        (GPT-2 small: 0.16 GB, ``wte`` also the tied head) are drawn once and shared.
        """
        from ..models.gpt2 import export_gpt2
        from ..quantization import get_scheme, quantize

        s = get_scheme(scheme)
        if self._random is None or self._module is not None:
            return quantize(self.module(), s)
        if s.kernel == "float":  # float weights (a KV modifier rewrites attention only)
            return quantize(export_gpt2(self.config, self._float_params()), s)
        kept = self._kept_params()
        drawn = [n for n in self._random.shapes if n not in kept]
        # The next weights are drawn on helper threads while the pass quantizes this one
        # (numpy's generator releases the GIL; each weight has its own generator state):
        # the drawing, about 1 s of CPU per scheme for GPT-2 small, the slowest part of
        # the pass, then runs beside it. _AHEAD + 1 weights at most (GPT-2 small: 28 MB).
        ahead = ThreadPoolExecutor(max_workers=_AHEAD, thread_name_prefix="tenet-draw")
        futures: dict[str, Future] = {}

        def weight(name: str) -> np.ndarray:
            if name in kept:
                return np.from_dlpack(kept[name])
            future = futures.pop(name, None) or ahead.submit(self._random.draw, name)
            if name in drawn:
                for following in drawn[drawn.index(name) + 1:][:_AHEAD]:
                    if following not in futures:
                        futures[following] = ahead.submit(self._random.draw, following)
            return future.result()

        try:
            mod = quantize(export_gpt2(self.config), s, weights=weight, reuse=self._reuse)
        finally:
            for future in futures.values():
                future.cancel()
            ahead.shutdown(wait=True)
        for gv, func in mod.functions.items():
            if isinstance(func, relax.Function):
                names = {p.name for p in func.params}
                values = {n: t for n, t in kept.items() if n in names}
                if values:
                    mod = relax.transform.BindParams(gv.name_hint, values)(mod)
        return mod

    def _float_params(self) -> dict[str, tvm.runtime.Tensor]:
        """Every weight as a tensor: the kept ones shared, the layers' drawn (again)."""
        if self._kept is None:
            params = self._random.draw_all(tensors=True)  # records each weight's state
            self._kept = {n: t for n, t in params.items() if not _is_block_linear(n, t)}
            return params
        return {n: self._kept[n] if n in self._kept else tvm.runtime.tensor(self._random.draw(n))
                for n in self._random.shapes}

    def _kept_params(self) -> dict[str, tvm.runtime.Tensor]:
        if self._kept is None:
            self._kept = {n: tvm.runtime.tensor(self._random.draw(n)) for n, shape in
                          self._random.shapes.items() if not _is_block_linear(n, shape)}
        return self._kept

    def tokens(self, phase: str) -> int:
        return self.prompt_len if phase == "prefill" else self.context_len

    def inputs(self, vm: relax.VirtualMachine, phase: str,
               earlier: dict[str, Any] | None = None) -> tuple[str, list]:
        def ids(start: int, stop: int) -> tvm.runtime.Tensor:
            return tvm.runtime.tensor(np.ascontiguousarray(self.ids[start:stop]).reshape(1, -1))

        if phase == "prefill":
            return "prefill", [ids(0, self.prompt_len)]
        # The decode step attends to a cache of L tokens made by the same build: the prefill
        # phase's own when it ran on the same L tokens (a prefill of GPT-2 small costs as
        # much as all of a decode phase's runs), else an uncharged prefill of L tokens.
        L = self.context_len
        if earlier and "prefill" in earlier and L == self.prompt_len:
            return "decode", [ids(L, L + 1), list(earlier["prefill"][1])]
        set_charging(vm, False)
        try:
            _, cache = vm["prefill"](ids(0, L))
        finally:
            set_charging(vm, True)
        return "decode", [ids(L, L + 1), list(cache)]

    def output(self, phase: str, result: Any) -> np.ndarray:
        return result[0].numpy()[0]

    def layer_names(self, phase: str, entries: list[LedgerEntry]) -> list[str]:
        """The layer of each call, by execution order checked against GPT-2's matmul list.

        K may exceed the listed K where a group-wise scheme padded it.
        """
        from ..models.gemms import gpt2_matmuls

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


#: Weights drawn ahead of the quantize pass, each on its own thread (see GPT2Case.quantized).
_AHEAD = 2


def _is_block_linear(name: str, value) -> bool:
    """A transformer block's linear weight (2-D, only ever a matmul's right operand)."""
    shape = value if isinstance(value, tuple) else tuple(value.shape)
    return name.startswith("h.") and len(shape) == 2


class MLPCase:
    """The MLP on its data set's whole test set, in one batch (phase ``inference``).

    The data set is FashionMNIST or scikit-learn's digits (see
    :func:`~tenet_byoc.experiments.data.prepare_mlp`); ``accuracy`` is the test accuracy.
    """

    model = "mlp"
    phases = ("inference",)

    def __init__(self, setup):
        self.setup = setup
        self.images = setup.data.test_images
        self.labels = setup.data.test_labels
        self._module: IRModule | None = None

    def describe(self) -> str:
        from ..models.mlp import HIDDEN, OUTPUT

        return (f"MLP {self.setup.data.inputs}-{HIDDEN}-{OUTPUT} on {len(self.labels)} "
                f"{self.setup.data.name} test images ({self.setup.note})")

    def quantized(self, scheme: str) -> IRModule:
        """The module under ``scheme`` (quantized from :meth:`module`)."""
        from ..quantization import quantize

        return quantize(self.module(), scheme)

    def module(self) -> IRModule:
        if self._module is None:
            from ..models.mlp import mlp_module

            self._module = mlp_module(self.setup.params)
        return self._module

    def tokens(self, phase: str) -> int:
        return len(self.labels)

    def inputs(self, vm: relax.VirtualMachine, phase: str,
               earlier: dict[str, Any] | None = None) -> tuple[str, list]:
        return "main", [tvm.runtime.tensor(self.images)]

    def output(self, phase: str, result: Any) -> np.ndarray:
        return result.numpy()

    def layer_names(self, phase: str, entries: list[LedgerEntry]) -> list[str]:
        if len(entries) == 2:
            return ["fc0", "fc1"]
        return [e.name for e in entries]

    def is_weight(self, layer: str) -> bool:
        return True

    def accuracy(self, phase: str, output: np.ndarray) -> float | None:
        return float(np.mean(np.argmax(output, axis=-1) == self.labels))


def gpt2_case(config: str = "small", *, checkpoint: str | os.PathLike | None = None,
              prompt_len: int = 128, context_len: int = 128, seed: int = 0) -> GPT2Case:
    """GPT-2 with seeded random weights of a preset shape, or a local HF checkpoint.

    ``config``: a :data:`tenet_byoc.models.gpt2.PRESETS` name (ignored with ``checkpoint``, a
    Hugging Face GPT-2 folder: ``config.json`` + ``model.safetensors``); ``prompt_len``: P
    tokens of prefill; ``context_len``: the decode step's cache length L; ``seed`` seeds the
    random weights and the token ids.

    Raises
    ------
    ValueError, KeyError, FileNotFoundError
        Unknown preset, lengths out of range, or a missing / broken checkpoint.
    """
    from ..models.gpt2 import GPT2Config, RandomWeights, load_hf_checkpoint

    if checkpoint is not None:
        cfg, params = load_hf_checkpoint(checkpoint)
        weights = f"checkpoint {os.fspath(checkpoint)}"
    else:
        cfg = GPT2Config.preset(config)
        # drawn when a module is made (GPT2Case checks the lengths first)
        params, weights = RandomWeights(cfg, seed), f"random (seed {seed})"
    return GPT2Case(cfg, params, prompt_len=prompt_len, context_len=context_len, seed=seed,
                    weights=weights)


def mlp_case(data: str | os.PathLike | None = None, *, epochs: int | None = None,
             seed: int = 0) -> MLPCase:
    """The MLP trained on FashionMNIST from ``data`` (a folder with the four IDX files), or on
    scikit-learn's digits without it; ``epochs`` and ``seed`` as
    :func:`~tenet_byoc.experiments.data.prepare_mlp` takes them.

    Raises
    ------
    FileNotFoundError
        ``data`` is given but is not a folder, or lacks one of the four IDX files.
    ValueError
        A file is not a FashionMNIST IDX file (wrong magic number, size, labels).
    """
    from .data import load_fashion_mnist, prepare_mlp

    if data is not None and not os.path.isdir(data):
        raise FileNotFoundError(f"FashionMNIST folder {os.fspath(data)!r} does not exist")
    # A folder was named, so a missing file is an error (named by the loader), not a reason
    # to fall back to the digits.
    data = None if data is None else load_fashion_mnist(data)
    return MLPCase(prepare_mlp(data, epochs=epochs, seed=seed))
