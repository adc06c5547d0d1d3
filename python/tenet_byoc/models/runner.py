"""One runner for decoder-only models: build once, then prefill, decode and generate on the VM.

A family (GPT-2, Llama) supplies its weight check, its export and its cache layout through
:class:`DecoderRunner`'s hooks; checking token ids and caches, phase tags in the ledger and
greedy generation are written once here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm
from tvm import relax
from tvm.ir import IRModule

from ..ledger import tenet_modules
from .decoder import DecoderLM, build_with_tvm

__all__ = [
    "BatchKVCache",
    "DecoderRunner",
    "KVCache",
    "cache_length",
    "check_cache_tensors",
    "check_ids",
]


def check_ids(
    ids: Sequence[int], vocab_size: int, context: int, context_field: str, past_len: int = 0
) -> np.ndarray:
    """``ids`` as ``[1, len(ids)]`` int32, validated before they reach ``R.take``, which
    does not bound-check.

    Ids must lie in ``[0, vocab_size)``, and ``past_len`` cached tokens plus these at most
    ``context`` (the config field ``context_field``, named in the message); ValueError if
    ``ids`` is empty or not integers, an id is out of range, or the sequence too long.
    """
    arr = np.asarray(ids)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"token ids must be a non-empty 1-D sequence, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"token ids must be integers, got dtype {arr.dtype}")
    bad = np.flatnonzero((arr < 0) | (arr >= vocab_size))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"token id {int(arr[i])} at index {i} is out of range [0, {vocab_size})")
    total = past_len + arr.size
    if total > context:
        raise ValueError(
            f"sequence of {total} tokens ({past_len} cached + {arr.size} new) is longer "
            f"than the context {context_field}={context}"
        )
    return arr.astype(np.int32).reshape(1, -1)


@dataclass(frozen=True)
class KVCache:
    """The key/value cache after some tokens: ``K_0, V_0, K_1, V_1, ...`` on the device.

    Each tensor is ``[1, kv_heads, length, head_dim]`` float32.
    """

    tensors: tuple[Any, ...]
    length: int

    def numpy(self) -> list[np.ndarray]:
        """Copy the tensors to numpy."""
        return [t.numpy() for t in self.tensors]


@dataclass(frozen=True)
class BatchKVCache:
    """The key/value cache of a batch of left-padded sequences, on the device.

    Each tensor is ``[B, kv_heads, slots, head_dim]`` float32. The sequences share slots:
    ``length`` have been written (the longest sequence's tokens; with a sliding window the
    tensors keep only the last ones), and sequence ``b``'s first token is at slot
    ``pad[b]``, so it holds ``length - pad[b]`` tokens.
    """

    tensors: tuple[Any, ...]
    length: int
    pad: tuple[int, ...]

    numpy = KVCache.numpy


def cache_length(cache: KVCache, kind: type = KVCache) -> int:
    """``cache.length`` after checking that ``cache`` is a ``kind`` (:class:`KVCache` or
    :class:`BatchKVCache`) with a positive length."""
    if not isinstance(cache, kind):
        raise TypeError(f"cache must be a {kind.__name__}, got {type(cache).__name__}")
    length = cache.length
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 1:
        raise ValueError(f"{kind.__name__}.length={length!r} must be a positive integer")
    return int(length)


def check_cache_tensors(cache: KVCache, n_layer: int, shape: tuple[int, ...]) -> None:
    """Check that ``cache`` holds ``2 * n_layer`` float32 tensors of ``shape``: TypeError if
    an item is not a tensor, else ValueError naming the tensor (K or V of which block), its
    dtype and shape and the expected ones."""
    if len(cache.tensors) != 2 * n_layer:
        raise ValueError(
            f"KVCache has {len(cache.tensors)} tensors; expected 2 * n_layer = "
            f"{2 * n_layer} (K and V of every block)"
        )
    for i, t in enumerate(cache.tensors):
        if not hasattr(t, "shape") or not hasattr(t, "dtype"):
            raise TypeError(f"KVCache tensor {i} is a {type(t).__name__}, not a tensor")
        got = tuple(int(d) for d in t.shape)
        if got != tuple(shape) or str(t.dtype) != "float32":
            raise ValueError(
                f"KVCache tensor {i} ({'KV'[i % 2]} of block {i // 2}) is {t.dtype}"
                f"{list(got)}; expected float32{list(shape)} for length={cache.length}"
            )


class DecoderRunner:
    """Build a decoder once and run prefill, decode and greedy generation on the Relax VM.

    Subclasses supply the family: its model class (:attr:`model`, whose ``fields`` name
    the config's layer count, key/value heads, head width and context), :meth:`check_params`
    and :meth:`export`.

    Parameters
    ----------
    config
        The model's shape (the family's config type).
    params : mapping of str to numpy.ndarray
        The weights, by the family's parameter names.
    build : callable, optional
        ``IRModule -> executable`` (anything ``relax.VirtualMachine`` accepts); by default
        :func:`build_with_tvm`. It receives the exported module.
    device : tvm.runtime.Device, optional
        Defaults to ``tvm.cpu()``.
    bind_params : bool
        Bind the weights into the module as constants instead of passing them to every
        call (what ``tenet_byoc.quantize`` needs).
    batched : bool
        Also build ``prefill_batch`` and ``decode_batch`` (:meth:`prefill_batch`,
        :meth:`decode_batch`): several sequences at once, left-padded to a common length.

    Attributes
    ----------
    mod : IRModule
        The module handed to ``build``, with functions ``prefill`` and ``decode``.
    vm : relax.VirtualMachine
        The VM running it.

    Notes
    -----
    When the build offloads to tenet, :meth:`prefill` and :meth:`decode` (and so
    :meth:`generate`) tag the calls they charge with the phase, ``"prefill"`` or
    ``"decode"``, so ``tenet_byoc.ledger(runner.vm).group_by("phase")`` splits them. A tag
    set with ``tenet_byoc.set_phase`` before is restored after each of the runner's calls;
    calls made on ``runner.vm`` directly keep the caller's own tag.

    A batch is left-padded (each prompt ends at the last slot, as Hugging Face pads for
    generation): every sequence's next token then goes to the same slot, its tokens stay
    in consecutive slots (so a sliding window needs no per-sequence offset), and one
    number per sequence, its pad, gives both its positions (slot - pad) and the keys it
    must not see (slots before its pad). Each linear layer runs the batch's
    ``B x padded length`` rows as one GEMM, attention ``B x heads`` products: the padded
    shapes ``estimate(prompt_len=longest prompt, batch=B)`` charges.
    """

    def __init__(
        self,
        config: Any,
        params: Mapping[str, np.ndarray],
        build: Callable[[IRModule], Any] | None = None,
        device: Any = None,
        bind_params: bool = False,
        batched: bool = False,
    ) -> None:
        self.config = config
        checked = self.check_params(config, params)
        bound = checked if bind_params else None
        self.batched = bool(batched)
        self.mod = self.export(config, bound, batched=self.batched)
        self.device = tvm.cpu() if device is None else device
        self.executable = (build or build_with_tvm)(self.mod)
        self.vm = relax.VirtualMachine(self.executable, self.device)
        try:
            self._tenet_modules = tenet_modules(self.vm)
        except ValueError:  # TVM's own build: no ledger to tag
            self._tenet_modules = []
        self._weights = (
            [] if bind_params else [tvm.runtime.tensor(v, self.device) for v in checked.values()]
        )

    # -- the family's hooks ------------------------------------------------------------

    #: The family's model (a :class:`~tenet_byoc.models.decoder.DecoderLM` subclass).
    model: type[DecoderLM]
    #: ``(config, params) -> params``: the weights checked against ``config``, float32 in
    #: call order (a staticmethod).
    check_params: Callable[[Any, Mapping[str, np.ndarray]], dict[str, np.ndarray]]
    #: ``(config, params or None, batched=False) -> IRModule``: the module with ``prefill``
    #: and ``decode`` (weights bound when given), with ``batched`` also ``prefill_batch``
    #: and ``decode_batch`` (a staticmethod).
    export: Callable[..., IRModule]

    def _dims(self) -> tuple[int, int, int, int]:
        # The config's layer count, key/value heads, head width and context.
        return tuple(getattr(self.config, f) for f in self.model.fields)

    def _cached(self, tokens: int) -> int:
        # Tokens the cache holds after ``tokens``: all, or a rolling cache's last window.
        window = getattr(self.config, "window", None)
        return tokens if window is None else min(tokens, window)

    def check_ids(self, ids: Sequence[int], past_len: int = 0) -> np.ndarray:
        """``ids`` as ``[1, n]`` int32, checked against the vocabulary and the context
        (see :func:`check_ids`)."""
        return check_ids(ids, self.config.vocab_size, self._dims()[3], self.model.fields[3],
                         past_len)

    def cache_shape(self, length: int) -> tuple[int, ...]:
        """``[1, kv_heads, cached tokens, head_dim]``, each cache tensor's shape after
        ``length`` tokens (a rolling cache holds at most its window)."""
        _, kv_heads, head_dim, _ = self._dims()
        return (1, kv_heads, self._cached(length), head_dim)

    # -- running -------------------------------------------------------------------------

    def check_cache(self, cache: KVCache) -> None:
        """Refuse a cache whose tensors do not match its length and this model.

        The decode function reads the new token's position from the tensors (or, with a
        sliding window, from ``length``); a cache whose ``length`` disagrees with its
        tensors would put the token at the wrong position or read past a table.

        Raises
        ------
        TypeError
            If ``cache`` is not a :class:`KVCache` or holds something that is not a tensor.
        ValueError
            Naming the tensor, its dtype and shape and the expected ones, or the length.
        """
        length = cache_length(cache)
        check_cache_tensors(cache, self._dims()[0], self.cache_shape(length))

    @contextmanager
    def _tagged(self, phase: str) -> Iterator[None]:
        # The tag in force is read back from each module (not remembered here): the user may
        # have set one with tenet_byoc.set_phase since the runner's last call.
        before = [m["__tenet_tag"]() for m in self._tenet_modules]
        for m in self._tenet_modules:
            m["__tenet_set_tag"](phase)
        try:
            yield
        finally:
            for m, tag in zip(self._tenet_modules, before, strict=True):
                m["__tenet_set_tag"](tag)

    def _call(self, phase: str, function: str, *inputs: Any) -> tuple[np.ndarray, tuple]:
        # The VM's ``function`` on ``inputs`` (numpy arrays put on the device) and the
        # weights, its charges tagged ``phase``: the logits in numpy and the cache.
        args = [tvm.runtime.tensor(x, self.device) if isinstance(x, np.ndarray) else x
                for x in inputs]
        with self._tagged(phase):
            logits, cache = self.vm[function](*args, *self._weights)
        return logits.numpy(), tuple(cache)

    def prefill(self, token_ids: Sequence[int]) -> tuple[np.ndarray, KVCache]:
        """Run a prompt; return logits ``[P, vocab]`` and the cache of its P tokens.

        The calls it charges are tagged ``"prefill"`` in the ledger.
        """
        ids = self.check_ids(token_ids)
        logits, cache = self._call("prefill", "prefill", ids)
        return logits[0], KVCache(cache, ids.shape[1])

    def decode(self, token_id: int, cache: KVCache) -> tuple[np.ndarray, KVCache]:
        """Run one token after ``cache``; return its logits ``[vocab]`` and the new cache.

        The calls it charges are tagged ``"decode"`` in the ledger.
        """
        # Ids first (their message is the more useful one), then the cache's tensors.
        ids = self.check_ids([token_id], past_len=cache_length(cache))
        self.check_cache(cache)
        # with a rolling cache (which holds fewer tokens) the new token's position follows
        rolling = getattr(self.config, "window", None) is not None
        position = [tvm.runtime.ShapeTuple([cache.length])] if rolling else []
        logits, new = self._call("decode", "decode", ids, list(cache.tensors), *position)
        return logits[0, 0], KVCache(new, cache.length + 1)

    def generate(self, prompt: Sequence[int], max_new_tokens: int) -> list[int]:
        """Greedily generate ``max_new_tokens`` tokens after ``prompt``; return only those."""
        _check_new_tokens(max_new_tokens)
        self.check_ids(prompt, past_len=max(max_new_tokens - 1, 0))
        if max_new_tokens == 0:
            return []
        logits, cache = self.prefill(prompt)
        out = [int(np.argmax(logits[-1]))]
        while len(out) < max_new_tokens:
            logits_1, cache = self.decode(out[-1], cache)
            out.append(int(np.argmax(logits_1)))
        return out

    # -- batches -------------------------------------------------------------------------

    def _check_batched(self, what: str) -> None:
        if not self.batched:
            raise ValueError(
                f"{what} needs the batched functions: build the runner with batched=True "
                f"(e.g. {type(self).__name__}(config, params, batched=True) or "
                "from_pretrained(folder, batched=True))"
            )

    def prefill_batch(self, prompts: Sequence[Sequence[int]]) -> tuple[np.ndarray, BatchKVCache]:
        """Run B prompts of any lengths at once, left-padded to the longest; return logits
        and cache.

        The logits are ``[B, S, vocab]`` with S the longest prompt: prompt ``b``'s token
        ``i`` is row ``pad[b] + i`` (``pad[b] = S - len(prompts[b])``); rows before
        ``pad[b]`` are meaningless, each sequence's last logits are row ``S - 1``. The
        :class:`BatchKVCache`'s ``length`` is S and its ``pad`` the pads.

        Raises
        ------
        ValueError
            If the runner was not built with ``batched=True``, ``prompts`` is empty, or a
            prompt is refused by :meth:`check_ids` (the message names its index).
        """
        self._check_batched("prefill_batch")
        if isinstance(prompts, str | bytes) or not hasattr(prompts, "__len__"):
            raise TypeError(f"prompts must be a sequence of token-id sequences, got "
                            f"{type(prompts).__name__}")
        if len(prompts) == 0:
            raise ValueError("prompts is empty: a batch needs at least one prompt")
        rows = []
        for i, prompt in enumerate(prompts):
            if np.ndim(prompt) != 1:
                raise ValueError(f"prompts[{i}] must be a 1-D sequence of token ids, got "
                                 f"shape {np.shape(prompt)} (prompts is a list of prompts)")
            try:
                rows.append(self.check_ids(prompt)[0])
            except ValueError as err:
                raise ValueError(f"prompts[{i}]: {err}") from None
        length = max(r.size for r in rows)
        pad = tuple(length - r.size for r in rows)
        ids = np.zeros((len(rows), length), np.int32)  # id 0 in the pad slots: never seen
        for b, r in enumerate(rows):
            ids[b, pad[b]:] = r
        logits, cache = self._call("prefill", "prefill_batch", ids, np.array(pad, np.int32))
        return logits, BatchKVCache(cache, length, pad)

    def check_batch_cache(self, cache: BatchKVCache) -> None:
        """Refuse a batch cache whose pads, length or tensors do not fit this model.

        Raises
        ------
        TypeError
            If ``cache`` is not a :class:`BatchKVCache` or holds a non-tensor.
        ValueError
            Naming the field, or the tensor with its dtype and shape and the expected ones.
        """
        length = cache_length(cache, BatchKVCache)
        pad = cache.pad
        if (not isinstance(pad, tuple) or not pad
                or not all(isinstance(p, int | np.integer) and 0 <= p < length for p in pad)):
            raise ValueError(f"BatchKVCache.pad={pad!r} must be a non-empty tuple of integers "
                             f"in [0, length={length})")
        check_cache_tensors(cache, self._dims()[0], (len(pad), *self.cache_shape(length)[1:]))

    def decode_batch(self, token_ids: Sequence[int], cache: BatchKVCache
                     ) -> tuple[np.ndarray, BatchKVCache]:
        """Run one token per sequence after a batch's cache; return logits ``[B, vocab]``.

        ``token_ids[b]`` goes to sequence ``b`` at position ``cache.length - cache.pad[b]``.
        The calls it charges are tagged ``"decode"``.

        Raises
        ------
        ValueError
            If there is not one id per sequence, an id is refused by :meth:`check_ids`, a
            sequence would outgrow the context, or the cache is refused by
            :meth:`check_batch_cache`.
        """
        self._check_batched("decode_batch")
        if not isinstance(cache, BatchKVCache):
            raise TypeError(f"cache must be a BatchKVCache, got {type(cache).__name__}")
        ids = np.asarray(token_ids)
        if ids.shape != (len(cache.pad),):
            raise ValueError(f"token_ids must hold one id per sequence ({len(cache.pad)}), "
                             f"got shape {ids.shape}")
        for b, token in enumerate(ids):
            try:
                self.check_ids([token], past_len=int(cache.length) - int(cache.pad[b]))
            except ValueError as err:
                raise ValueError(f"token_ids[{b}]: {err}") from None
        self.check_batch_cache(cache)
        pad = np.array(cache.pad, np.int64)
        # The step attends to the last slots the cache keeps after it (itself included):
        # those before a sequence's pad (if still among them) are hidden.
        key_begin = cache.length + 1 - self._cached(cache.length + 1)
        inputs = (cache.length - pad, np.maximum(pad - key_begin, 0))
        logits, new = self._call("decode", "decode_batch", ids.astype(np.int32).reshape(-1, 1),
                                 list(cache.tensors), *(x.astype(np.int32) for x in inputs))
        return logits[:, 0], BatchKVCache(new, cache.length + 1, cache.pad)

    def generate_batch(self, prompts: Sequence[Sequence[int]], max_new_tokens: int
                       ) -> list[list[int]]:
        """Greedily generate ``max_new_tokens`` tokens after each prompt, all at once."""
        _check_new_tokens(max_new_tokens)
        for i, prompt in enumerate(prompts):
            try:
                self.check_ids(prompt, past_len=max(max_new_tokens - 1, 0))
            except ValueError as err:
                raise ValueError(f"prompts[{i}]: {err}") from None
        if max_new_tokens == 0:
            return [[] for _ in prompts]
        logits, cache = self.prefill_batch(prompts)
        out = [[int(t)] for t in np.argmax(logits[:, -1], axis=-1)]
        while len(out[0]) < max_new_tokens:
            step, cache = self.decode_batch([seq[-1] for seq in out], cache)
            for seq, t in zip(out, np.argmax(step, axis=-1), strict=True):
                seq.append(int(t))
        return out


def _check_new_tokens(max_new_tokens: int) -> None:
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
        raise TypeError(f"max_new_tokens={max_new_tokens!r} must be an integer")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens={max_new_tokens} must be >= 0")
