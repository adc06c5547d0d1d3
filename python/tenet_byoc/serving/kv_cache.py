"""The paged KV cache a serving engine allocates from: blocks of ``block_size`` tokens, how many fit in a chip's memory after the weights, and prompt prefixes shared between requests.

Sizing (per scheme, at the stored widths and with side data):

* weights: every linear layer's ``[K, N]`` weight of :func:`tenet_byoc.models.gemms.model_gemms`
  (K padded as ``quantize`` pads it) at the scheme's weight bits, plus its scales (and zero
  points for ``uint`` weights) at ``scale_dtype``: one per tensor, per output channel, or per
  group of K; the embedding table at 16 bits (32 for a float32 scheme, ``none``), a tied head
  counted once with it unless the scheme quantizes weights. Norm
  weights and biases (under 0.1% of a 7B model) are left out;
* a token's KV: keys and values of every layer and KV head at ``kv_bits`` (32 without a
  ``+kvN`` modifier), plus the fp16 scales of a quantized cache (one per token and layer for
  keys and for values, per head, or per group of a head's channels);
* blocks = floor((memory x utilization - weights) / (block_size x KV bytes per token)).

Allocation (:class:`PagedKVCache`) counts blocks, not addresses: a sequence holding ``t``
tokens owns ``ceil((t - shared) / block_size)`` blocks, where ``shared`` tokens lie in the
full blocks of a prefix it references. A prefix's blocks are published by the first sequence
that computes them (the prefix's owner) as it fills them, and kept while any sequence
references them (counted references; no cache of freed prefixes is kept).

Thread safety: a :class:`PagedKVCache` is mutable and not thread-safe (one per simulation).
Errors: bad sizes raise ``ValueError`` naming the field; taking more blocks than are free
raises ``RuntimeError`` (a scheduler bug, never a user error).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["CacheSizing", "PagedKVCache", "cache_sizing", "chip_share", "kv_bytes_per_token",
           "weight_bytes"]


def _layers_heads_dim(config: Any) -> tuple[int, int, int]:
    """Decoder layers, KV heads and head width of a GPT-2, Llama or (grouped-query)
    mixture-of-experts config."""
    if hasattr(config, "experts"):  # a MoEConfig: its attention is a LlamaConfig's
        if config.latent is not None:
            raise ValueError(f"{config.name}: serving's KV cache of multi-head latent "
                             "attention (one compressed latent a token) is not modelled")
        config = config.attention
    if hasattr(config, "n_layer"):
        return config.n_layer, config.n_head, config.n_embd // config.n_head
    head_dim = config.head_dim or config.hidden_size // config.num_attention_heads
    return config.num_hidden_layers, config.num_key_value_heads, head_dim


def kv_bytes_per_token(config: Any, scheme: Any) -> float:
    """Bytes one token's keys and values take in the cache under ``scheme`` (codes and
    scales over all layers)."""
    from ..quantization import SCALE_DTYPES, get_scheme

    s = get_scheme(scheme)
    layers, heads, dim = _layers_heads_dim(config)
    codes = 2 * layers * heads * dim * s.kv_bits
    scales = 0
    if s.kv_bits < 16:
        per_layer = {"token": 1, "head": heads,
                     "group": heads * dim // max(1, s.kv_group)}[s.kv_granularity]
        scales = 2 * layers * per_layer * SCALE_DTYPES["fp16"]
    return (codes + scales) / 8


def _weight_parts(config: Any, scheme: Any) -> tuple[float, float]:
    """Bytes of the decoder layers' weights and of those outside them (head, embedding)."""
    from ..models.gemms import model_gemms
    from ..quantization import SCALE_DTYPES, get_scheme

    s = get_scheme(scheme)
    if hasattr(config, "experts"):  # mixture of experts: every weight, by the footprint's count
        from ..models.footprint import footprint

        whole = footprint(config, s, 0, 0, step_tokens=0).weights
        outside = config.vocab_size * config.hidden_size * (4 + s.weight_bits / 8)
        return whole - outside, outside  # the embedding (float32) and the head apart
    bits = [0, 0]
    multiple = s.k_multiple()
    scale_bits = SCALE_DTYPES[s.scale_dtype] + (s.weight_bits if s.weight_format == "uint" else 0)
    # A tied head reads the embedding table unless its weights are quantized (then a
    # quantized copy sits beside the 16-bit table).
    tied = getattr(config, "tie_word_embeddings", not hasattr(config, "hidden_size"))
    for g in model_gemms(config, "decode", 1):
        if g.weight is None or (g.name == "lm_head" and tied and s.weight_bits >= 16):
            continue
        k = -(-g.k // multiple) * multiple
        scales = {"none": 0, "tensor": 1, "channel": g.n,
                  "group": g.n * (k // max(1, s.group_size))}[s.weight_granularity]
        bits[g.name == "lm_head"] += g.batch * k * g.n * s.weight_bits + g.batch * scales * scale_bits
    vocab = config.vocab_size
    hidden = getattr(config, "n_embd", None) or config.hidden_size
    bits[1] += vocab * hidden * (32 if s.weight_bits == 32 else 16)
    return bits[0] / 8, bits[1] / 8


def weight_bytes(config: Any, scheme: Any) -> float:
    """Bytes the model's weights take stored under ``scheme`` (see the module's sizing)."""
    return sum(_weight_parts(config, scheme))


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


def chip_share(config: Any, scheme: Any, tensor_parallel: int = 1,
               pipeline_parallel: int = 1) -> tuple[float, float]:
    """The weight bytes and KV bytes per token the fullest chip of a Megatron-LM sharded
    system holds: the layers' weights and KV split over ``tensor_parallel`` chips (by
    columns, rows and heads) and ``pipeline_parallel`` stages (the largest stage's layers,
    :func:`tenet_byoc.plan.stage_layers`), the embedding and the head split by vocabulary
    rows over the ``tensor_parallel`` chips of a stage, both counted on the fullest stage
    (an upper bound: with several stages the first holds the embedding, the last the head; a
    tied head reads the embedding table, one table).
    ``(1, 1)``: :func:`weight_bytes` and :func:`kv_bytes_per_token`."""
    from ..plan import stage_layers

    layers, _, _ = _layers_heads_dim(config)
    most = max(len(r) for r in stage_layers(layers, pipeline_parallel))
    in_layers, outside = _weight_parts(config, scheme)
    weights = (in_layers * most / layers + outside) / tensor_parallel
    kv = kv_bytes_per_token(config, scheme) * most / layers / tensor_parallel
    return weights, kv


def cache_sizing(config: Any, scheme: Any, memory_bytes: float, block_size: int = 16,
                 utilization: float = 0.9, system: Any = None) -> CacheSizing:
    """The KV blocks that fit on a chip of ``memory_bytes`` under ``scheme``; with a
    ``system`` (a :class:`tenet_byoc.system.System`), on its fullest chip after that chip's
    share of the weights (:func:`chip_share`): a block then holds ``block_size`` tokens of
    that chip's heads and layers, and every chip holds as many blocks.

    Raises
    ------
    ValueError
        For a bad size, or when the weights alone do not fit (naming both sizes).
    """
    if not memory_bytes > 0:
        raise ValueError(f"memory_bytes={memory_bytes!r} must be > 0")
    if not 0 < utilization <= 1:
        raise ValueError(f"utilization={utilization!r} must be in (0, 1]")
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size={block_size!r} must be an integer >= 1")
    if system is None:
        weights = weight_bytes(config, scheme)
        per_token = kv_bytes_per_token(config, scheme)
    else:
        weights, per_token = chip_share(config, scheme, system.tensor_parallel,
                                        system.pipeline_parallel)
    left = memory_bytes * utilization - weights
    if left < block_size * per_token:
        raise ValueError(
            f"{config.name}'s weights under {getattr(scheme, 'name', scheme)} take "
            f"{weights / 1e9:.2f} GB of the {memory_bytes * utilization / 1e9:.2f} GB usable "
            f"({utilization:.0%} of {memory_bytes / 1e9:.2f} GB): no room for one KV block")
    return CacheSizing(float(memory_bytes), float(utilization), weights, per_token, block_size,
                       int(left // (block_size * per_token)))


class _Prefix:
    __slots__ = ("owner", "ready", "refs")

    def __init__(self, owner: object):
        self.owner = owner  # the sequence that publishes its blocks, or None
        self.ready = 0  # full blocks published
        self.refs = 0


class PagedKVCache:
    """Blocks of a paged KV cache: taken and given back by count, prefixes counted by
    reference (see the module's allocation)."""

    def __init__(self, blocks: int, block_size: int):
        for name, value in (("blocks", blocks), ("block_size", block_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"PagedKVCache.{name}={value!r} must be an integer >= 1")
        self.blocks = blocks
        self.block_size = block_size
        self.used = 0
        self._prefixes: dict[str, _Prefix] = {}

    @property
    def free(self) -> int:
        """Blocks not in use."""
        return self.blocks - self.used

    def blocks_for(self, tokens: int) -> int:
        """Blocks that hold ``tokens`` tokens."""
        return -(-tokens // self.block_size)

    def take(self, n: int) -> None:
        """Use ``n`` more blocks."""
        if n > self.blocks - self.used:
            raise RuntimeError(f"PagedKVCache: {n} blocks asked for, {self.free} free")
        self.used += n

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
        usable = min(entry.ready, limit // self.block_size)
        return usable * self.block_size

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
