"""The paged KV cache a serving engine allocates from: blocks of ``block_size`` tokens, how many fit in a chip's memory after the weights, and prompt prefixes shared between requests.

Sizing (per scheme, at the stored widths and with side data): the model's weights by
:func:`tenet_byoc.models.footprint.weight_bytes` in a serving engine's convention (every
linear layer's weight with its scales, K padded as ``quantize`` pads it; the embedding table
at 16 bits, 32 under ``none``; a tied head counted once with it unless the scheme quantizes
weights; norms and biases left out), a token's KV by
:func:`tenet_byoc.models.footprint.kv_bytes_per_token` (keys and values at ``kv_bits`` with
the fp16 scales of an int cache);
* blocks = floor((memory x utilization - weights) / (block_size x KV bytes per token)).

Allocation (:class:`PagedKVCache`) counts blocks, not addresses: a sequence holding ``t``
tokens owns ``ceil((t - shared) / block_size)`` blocks, where ``shared`` tokens lie in the
full blocks of a prefix it references. A prefix's blocks are published by the first sequence
that computes them (the prefix's owner) as it fills them, and kept while any sequence
references them (counted references; no cache of freed prefixes is kept).

Thread safety: a :class:`PagedKVCache` is mutable and not thread-safe (one per simulation).
Errors: bad sizes raise ``ValueError`` naming the field; giving back more blocks than are in
use raises ``RuntimeError`` (a scheduler bug, never a user error). The scheduler takes blocks
by adding to :attr:`PagedKVCache.used` after checking they are free (its hot path).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .requests import check_count

__all__ = ["CacheSizing", "PagedKVCache", "cache_sizing", "weight_bytes"]


def _layers_heads_dim(config: Any) -> tuple[int, int, int]:
    """Decoder layers, KV heads and head width of a GPT-2, Llama or (grouped-query)
    mixture-of-experts config."""
    from ..models.footprint import _shape

    s = _shape(config)
    if not s["v_width"]:
        raise ValueError(f"{config.name}: serving's KV cache of multi-head latent "
                         "attention (one compressed latent a token) is not modelled")
    return s["layers"], s["kv"], s["k_width"]


def weight_bytes(config: Any, scheme: Any) -> float:
    """Bytes the model's weights take stored under ``scheme`` (see the module's sizing):
    :func:`tenet_byoc.models.footprint.weight_bytes` in a serving engine's convention."""
    from ..models.footprint import weight_bytes as count

    return count(config, scheme, engine=True)


@dataclass(frozen=True)
class CacheSizing:
    """How a chip's memory is split under one scheme."""

    memory_bytes: float  #: the chip's memory (DRAM / HBM)
    utilization: float  #: the share of it the engine may use
    weight_bytes: float
    kv_bytes_per_token: float
    block_size: int
    blocks: int  #: KV blocks that fit in what the weights leave

    @property
    def tokens(self) -> int:
        """Tokens the cache holds when full."""
        return self.blocks * self.block_size


def cache_sizing(config: Any, scheme: Any, memory_bytes: float, block_size: int = 16,
                 utilization: float = 0.9, system: Any = None) -> CacheSizing:
    """The KV blocks that fit on a chip of ``memory_bytes`` under ``scheme``; with a
    ``system`` (a :class:`tenet_byoc.system.System`), on its fullest chip after that chip's
    share of the weights (Megatron-LM sharded: :func:`tenet_byoc.models.footprint.weight_bytes`
    over its ``tensor_parallel`` chips and ``pipeline_parallel`` stages): a block then
    holds ``block_size`` tokens of that chip's heads and layers, and every chip holds as
    many blocks.

    Raises
    ------
    ValueError
        For a bad size, or when the weights alone do not fit (naming both sizes).
    """
    if not memory_bytes > 0:
        raise ValueError(f"memory_bytes={memory_bytes!r} must be > 0")
    if not 0 < utilization <= 1:
        raise ValueError(f"utilization={utilization!r} must be in (0, 1]")
    check_count("block_size", block_size)
    from ..models.footprint import kv_bytes_per_token
    from ..models.footprint import weight_bytes as count

    tp, pp = (1, 1) if system is None else (system.tensor_parallel, system.pipeline_parallel)
    _layers_heads_dim(config)  # a latent cache is refused
    weights = count(config, scheme, tp, pp, engine=True)
    per_token = kv_bytes_per_token(config, scheme, tp, pp)
    left = memory_bytes * utilization - weights
    if left < block_size * per_token:
        raise ValueError(
            f"{config.name}'s weights under {getattr(scheme, 'name', scheme)} take "
            f"{weights / 1e9:.2f} GB of the {memory_bytes * utilization / 1e9:.2f} GB usable "
            f"({utilization:.0%} of {memory_bytes / 1e9:.2f} GB): no room for one KV block")
    return CacheSizing(float(memory_bytes), float(utilization), weights, per_token, block_size,
                       int(left // (block_size * per_token)))


@dataclass(slots=True)
class _Prefix:
    owner: object  # the sequence that publishes its blocks, or None
    ready: int = 0  # full blocks published
    refs: int = 0


class PagedKVCache:
    """Blocks of a paged KV cache: taken and given back by count, prefixes counted by
    reference (see the module's allocation)."""

    def __init__(self, blocks: int, block_size: int):
        check_count("PagedKVCache.blocks", blocks)
        check_count("PagedKVCache.block_size", block_size)
        self.blocks = blocks
        self.block_size = block_size
        self.used = 0
        self._prefixes: dict[str, _Prefix] = {}

    def blocks_for(self, tokens: int) -> int:
        """Blocks that hold ``tokens`` tokens."""
        return -(-tokens // self.block_size)

    def give(self, n: int) -> None:
        """Return ``n`` blocks."""
        if n > self.used:
            raise RuntimeError(f"PagedKVCache: {n} blocks given back, {self.used} in use")
        self.used -= n

    def attach(self, prefix: str, sequence: object, limit: int) -> int:
        """Reference ``prefix`` for ``sequence``: the tokens of its published full blocks it
        may skip (at most ``limit``, rounded down to whole blocks). The first sequence of a
        prefix not yet held becomes its owner."""
        entry = self._prefixes.get(prefix)
        if entry is None:
            entry = self._prefixes[prefix] = _Prefix(sequence)
        elif entry.owner is None and entry.ready == 0:
            entry.owner = sequence
        entry.refs += 1
        return min(entry.ready, limit // self.block_size) * self.block_size

    def publish(self, prefix: str, sequence: object, shared: int, computed: int,
                prefix_tokens: int) -> int:
        """Move the owner's full blocks inside the prefix to the prefix; return the owner's
        shared tokens after (unchanged for any other sequence). The total in use is
        unchanged: the blocks change hands."""
        entry = self._prefixes[prefix]
        if entry.owner is not sequence or shared != entry.ready * self.block_size:
            return shared
        entry.ready = max(entry.ready, min(computed, prefix_tokens) // self.block_size)
        return entry.ready * self.block_size

    def detach(self, prefix: str, sequence: object) -> None:
        """Drop ``sequence``'s reference; the prefix's blocks are given back with the last."""
        entry = self._prefixes[prefix]
        entry.refs -= 1
        if entry.owner is sequence:
            entry.owner = None
        if entry.refs == 0:
            self.give(entry.ready)
            del self._prefixes[prefix]
