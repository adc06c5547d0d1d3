"""GPT-2 in ``tvm.relax.frontend.nn`` with prefill/decode phases, weight loading and a runner."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op

from ._params import check_named_arrays
from .checkpoint import Layout, load_family
from .decoder import (
    Attention,
    BatchLayout,
    Block,
    DecoderLM,
    MatmulShape,
    build_with_tvm,
    export_decoder,
    take_rows,
)
from .runner import DecoderRunner, KVCache, cache_length, check_cache_tensors, check_ids

__all__ = [
    "PRESETS",
    "GPT2Config",
    "GPT2LMHeadModel",
    "GPT2Runner",
    "KVCache",
    "MatmulShape",
    "RandomWeights",
    "build_with_tvm",
    "check_kv_cache",
    "check_params",
    "check_token_ids",
    "export_gpt2",
    "load_hf_checkpoint",
    "param_shapes",
    "random_params",
]


@dataclass(frozen=True)
class GPT2Config:
    """Shape of a GPT-2 model, with the field names of Hugging Face's ``config.json``.

    Parameters
    ----------
    n_layer, n_embd, n_head, vocab_size : int
        Transformer blocks, model width d, attention heads (dividing ``n_embd``), tokens.
    n_positions : int
        Context length: the largest number of positions (prompt plus generated tokens).
    n_inner : int or None
        Width of the MLP's hidden layer; ``None`` means ``4 * n_embd``.
    layer_norm_epsilon : float
        Epsilon of every LayerNorm.
    name : str
        A label for reports.
    """

    n_layer: int
    n_embd: int
    n_head: int
    vocab_size: int = 50257
    n_positions: int = 1024
    n_inner: int | None = None
    layer_norm_epsilon: float = 1e-5
    name: str = "custom"

    def __post_init__(self) -> None:
        for field in ("n_layer", "n_embd", "n_head", "vocab_size", "n_positions"):
            _check_positive_int(field, getattr(self, field))
        if self.n_inner is not None:
            _check_positive_int("n_inner", self.n_inner)
        # As for config.json: a model this deep costs estimate time and memory in proportion.
        if self.n_layer > _HF_LIMITS["n_layer"]:
            raise ValueError(
                f"GPT2Config.n_layer={self.n_layer} is above the limit {_HF_LIMITS['n_layer']}"
            )
        if self.n_embd % self.n_head != 0:
            raise ValueError(f"GPT2Config.n_head={self.n_head} must divide n_embd={self.n_embd}")
        eps = self.layer_norm_epsilon
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < 1:
            raise ValueError(f"GPT2Config.layer_norm_epsilon={eps!r} must be a float in (0, 1)")
        if not isinstance(self.name, str):
            raise TypeError(f"GPT2Config.name={self.name!r} must be a string")

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.n_embd // self.n_head

    @property
    def inner_dim(self) -> int:
        """Width of the MLP's hidden layer."""
        return 4 * self.n_embd if self.n_inner is None else self.n_inner

    @classmethod
    def preset(cls, name: str) -> GPT2Config:
        """Return the configuration named ``tiny``, ``small``, ``medium``, ``large`` or ``xl``."""
        if name not in PRESETS:
            raise ValueError(f"unknown GPT-2 preset {name!r}; known: {sorted(PRESETS)}")
        return PRESETS[name]

    @classmethod
    def from_hf_dict(cls, values: Mapping[str, Any], name: str = "custom") -> GPT2Config:
        """Build a configuration from the contents of a Hugging Face ``config.json``.

        Unknown keys are ignored; an activation other than GPT-2's tanh GELU, or an
        attention-scaling option GPT-2 does not use, is refused.
        """
        activation = values.get("activation_function", "gelu_new")
        if activation not in ("gelu_new", "gelu_pytorch_tanh"):
            raise ValueError(
                f"config.json activation_function={activation!r} is not supported; "
                "this GPT-2 implements the tanh GELU ('gelu_new')"
            )
        # Attention-scaling variants of later GPT-2-style models change the numerics.
        for key, supported in (
            ("scale_attn_weights", True),
            ("scale_attn_by_inverse_layer_idx", False),
            ("reorder_and_upcast_attn", False),
        ):
            if values.get(key, supported) != supported:
                raise ValueError(
                    f"config.json {key}={values[key]!r} is not supported (only {supported})"
                )
        missing = [k for k in ("n_layer", "n_embd", "n_head") if k not in values]
        if missing:
            raise ValueError(f"config.json lacks {', '.join(map(repr, missing))} (GPT-2 needs "
                             "n_layer, n_embd and n_head)")
        # Limits far above any GPT-2 (xl: 48 layers, width 1600), checked before a model of
        # that size is built: a typo such as n_layer=1000000000 would otherwise hang.
        for key, limit in _HF_LIMITS.items():
            value = values.get(key)
            is_int = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
            if is_int and value > limit:
                raise ValueError(f"config.json {key}={value} is above the limit {limit}")
        names = {f.name for f in fields(cls)} - {"name"}
        return cls(name=name, **{k: values[k] for k in names if k in values})


_HF_LIMITS = {"n_layer": 1024, "n_embd": 1 << 16, "n_head": 1 << 12, "n_inner": 1 << 18,
              "vocab_size": 1 << 22, "n_positions": 1 << 20}


def _check_positive_int(field: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"GPT2Config.{field}={value!r} must be a positive integer")


PRESETS: dict[str, GPT2Config] = {
    "tiny": GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=97, n_positions=32, name="tiny"),
    "small": GPT2Config(n_layer=12, n_embd=768, n_head=12, name="small"),
    "medium": GPT2Config(n_layer=24, n_embd=1024, n_head=16, name="medium"),
    "large": GPT2Config(n_layer=36, n_embd=1280, n_head=20, name="large"),
    "xl": GPT2Config(n_layer=48, n_embd=1600, n_head=25, name="xl"),
}


# ----------------------------------------------------------------------------------------
# The model
# ----------------------------------------------------------------------------------------


class GPT2MLP(nn.Module):
    """The block's feed-forward part: ``c_fc``, tanh GELU, ``c_proj``."""

    def __init__(self, config: GPT2Config) -> None:
        self.c_fc = nn.Linear(config.n_embd, config.inner_dim)
        self.c_proj = nn.Linear(config.inner_dim, config.n_embd)

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        """Apply the MLP."""
        return self.c_proj(op.gelu(self.c_fc(x), approximate="tanh"))


class GPT2Block(Block):
    """A pre-LayerNorm block; the attention's q, k and v are one fused ``c_attn`` GEMM."""

    parts = ("ln_1", "attn", "ln_2", "mlp", None, None)

    def __init__(self, config: GPT2Config) -> None:
        d, eps, h, hd = config.n_embd, config.layer_norm_epsilon, config.n_head, config.head_dim
        self.ln_1 = nn.LayerNorm(d, eps=eps)
        self.attn = Attention(d, h, h, hd, scale=1.0 / math.sqrt(hd), fused=True)
        self.ln_2 = nn.LayerNorm(d, eps=eps)
        self.mlp = GPT2MLP(config)


class GPT2LMHeadModel(DecoderLM):
    """GPT-2 with learned positions and a tied head on :class:`DecoderLM`'s entry points.

    Parameter names are those of Hugging Face's checkpoints without the ``transformer.``
    prefix (``wte.weight``, ``h.0.attn.c_attn.weight``, ...); linear weights are stored
    ``[out, in]`` as in ``torch.nn.Linear``.
    """

    parts = ("wte", "h", "ln_f")
    fields = ("n_layer", "n_head", "head_dim", "n_positions")

    def __init__(self, config: GPT2Config) -> None:
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        self.h = nn.ModuleList([GPT2Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)

    def _embed(self, ids: nn.Tensor, begin: Any, batch: BatchLayout | None
               ) -> tuple[nn.Tensor, list[None]]:
        if batch is not None:
            pos = take_rows(self.wpe.weight, batch.positions)
        else:
            # Rows [begin, end) of wpe; begin/end may be symbolic, which op.take cannot
            # express. assume_inbound keeps the shape exact (end - begin rather than a min()
            # with n_positions); the runner checks the positions before calling the VM.
            rows = relax.op.strided_slice(self.wpe.weight._expr, axes=[0], begin=[begin],
                                          end=[begin + ids.shape[1]], assume_inbound=True)
            pos = op.wrap_nested(rows, name="wpe_rows")
        return take_rows(self.wte.weight, ids) + pos, [None] * self.config.n_layer


def export_gpt2(
    config: GPT2Config, params: Mapping[str, np.ndarray | tvm.runtime.Tensor] | None = None,
    batched: bool = False,
) -> IRModule:
    """Export GPT-2 to a Relax IRModule with the functions ``prefill`` and ``decode``.

    Every matmul stays an ``R.matmul``: the linear layers as
    ``R.matmul(x, R.permute_dims(W))`` + ``R.add(b)``, attention as 4-D
    ``R.matmul(Q, R.permute_dims(K))`` and ``R.matmul(P, V)``, the tied head as
    ``R.matmul(x, R.permute_dims(wte))``. The functions' inputs and outputs are
    :func:`tenet_byoc.models.decoder.export_decoder`'s (cache tensors ``[1, n_head,
    past_len, head_dim]``; the new token's position is ``past_len``); ``params`` (float32
    tensors bound as they are, not copied) binds the weights as constants, otherwise they
    follow the inputs in :func:`param_shapes` order; ``batched`` adds ``prefill_batch``
    and ``decode_batch``.
    """
    checked = None if params is None else check_params(config, params)
    return export_decoder(GPT2LMHeadModel(config), checked, batched=batched)


def check_params(config: GPT2Config, params: Mapping[str, np.ndarray | tvm.runtime.Tensor]
                 ) -> dict[str, np.ndarray | tvm.runtime.Tensor]:
    """The weights as contiguous float32 in :func:`param_shapes` order (a float32
    ``tvm.runtime.Tensor`` as it is), after checking them.

    A missing weight raises KeyError, a misshaped one ValueError, each naming it.
    """
    return check_named_arrays("GPT-2", param_shapes(config), params)


def param_shapes(config: GPT2Config) -> dict[str, tuple[int, ...]]:
    """Return each weight's name and shape, in the order the exported functions take them."""
    model = GPT2LMHeadModel(config)
    return {name: tuple(int(d) for d in param.shape) for name, param in model.named_parameters()}


def random_params(config: GPT2Config, seed: int = 0, *,
                  tensors: bool = False) -> dict[str, np.ndarray] | dict[str, tvm.runtime.Tensor]:
    """Return seeded random weights initialised as GPT-2 was trained from.

    Linear and embedding weights are N(0, 0.02), the residual projections (``c_proj``)
    N(0, 0.02 / sqrt(2 * n_layer)), biases zero, LayerNorm scale one and shift zero.

    ``seed`` seeds numpy's generator. With ``tensors`` the weights are
    ``tvm.runtime.Tensor`` (CPU), each drawn straight into its tensor: the same values, but
    :func:`export_gpt2` binds them as they are, so a model's weights never exist twice
    (GPT-2 small: 0.5 GB) while it is exported. float32, keyed and ordered as
    :func:`param_shapes`.
    """
    return RandomWeights(config, seed).draw_all(tensors=tensors)


class RandomWeights:
    """GPT-2's seeded random weights (:func:`random_params`), any one of them drawn again.

    :meth:`draw_all` draws every weight in order from one generator, as
    :func:`random_params` does, and records the generator's state before each; a weight
    asked for again (:meth:`draw`) is drawn from its recorded state: the same values, one
    weight at a time. A sweep quantizes each scheme from weights drawn again instead of
    keeping the float32 model (GPT-2 small: 0.5 GB) beside every build.
    """

    def __init__(self, config: GPT2Config, seed: int = 0) -> None:
        self.config = config
        self.seed = seed
        self.shapes = param_shapes(config)
        self._proj_std = 0.02 / math.sqrt(2 * config.n_layer)
        self._states: dict[str, dict] = {}

    def _fill(self, name: str, value: np.ndarray, rng: np.random.Generator) -> None:
        if name.endswith(".bias") or name.startswith("ln_") or ".ln_" in name:
            value[...] = 0.0 if name.endswith(".bias") else 1.0
            return
        # Drawn into the weight and scaled in place: the values of
        # rng.standard_normal(shape) * std without a second weight-sized array (and its
        # page faults, most of the drawing time for GPT-2 small).
        rng.standard_normal(dtype=np.float32, out=value)
        value *= np.float32(self._proj_std if name.endswith("c_proj.weight") else 0.02)

    def draw_all(self, tensors: bool = False) -> dict:
        """Every weight, in :func:`param_shapes` order (see :func:`random_params`)."""
        rng = np.random.default_rng(self.seed)
        out: dict = {}
        for name, shape in self.shapes.items():
            if tensors:
                tensor = tvm.runtime.empty(shape, "float32", tvm.cpu())
                value = np.from_dlpack(tensor)
            else:
                tensor = value = np.empty(shape, np.float32)
            self._states[name] = rng.bit_generator.state
            self._fill(name, value, rng)
            out[name] = tensor
        return out

    def draw(self, name: str) -> np.ndarray:
        """The weight ``name`` as :meth:`draw_all` draws it (float32, a fresh array).

        Raises
        ------
        KeyError
            If GPT-2 of this shape has no weight ``name``.
        """
        if name not in self.shapes:
            raise KeyError(f"GPT-2 {self.config.name} has no weight {name!r}; its weights are "
                           f"{list(self.shapes)}")
        if name not in self._states:
            # The states come from one pass over all the weights, in order (each drawn and
            # dropped, so one weight at a time is in memory).
            rng = np.random.default_rng(self.seed)
            for other, shape in self.shapes.items():
                self._states[other] = rng.bit_generator.state
                self._fill(other, np.empty(shape, np.float32), rng)
        rng = np.random.Generator(np.random.PCG64())
        rng.bit_generator.state = self._states[name]
        value = np.empty(self.shapes[name], np.float32)
        self._fill(name, value, rng)
        return value


# ----------------------------------------------------------------------------------------
# Hugging Face checkpoints
# ----------------------------------------------------------------------------------------

#: Where GPT-2's weights sit in a Hugging Face checkpoint. HF's GPT-2 uses Conv1D for the
#: transposed ones: weights stored [in, out], transposed to nn.Linear's [out, in].
HF_LAYOUT = Layout("GPT-2", "transformer.", "h.", "n_layer", transposed=(
    "attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"))


def load_hf_checkpoint(
    folder: str | os.PathLike[str], config: GPT2Config | None = None
) -> tuple[GPT2Config, dict[str, np.ndarray]]:
    """Read a local Hugging Face GPT-2 checkpoint directory: its config and float32 weights.

    The folder holds ``config.json`` and ``model.safetensors``; ``config`` (optional) is the
    shape to expect instead of ``config.json``'s. Names lose their ``transformer.`` prefix,
    the Conv1D weights are transposed to ``[out, in]``, and the head is tied to ``wte``
    (``lm_head.weight``, if present, is not read). Other tensors (e.g. the ``attn.bias``
    mask buffers of old checkpoints) are ignored. The block count and every shape are
    checked from the file's header before any weight is read
    (:func:`tenet_byoc.models.checkpoint.load_family`). The weights come keyed and
    ordered as :func:`param_shapes`. Nothing is downloaded.

    Raises
    ------
    FileNotFoundError, KeyError, ValueError
        A missing file or weight, a corrupt file, another number of blocks or a weight of
        the wrong shape (each naming it, with both shapes).
    """
    def shapes(config: GPT2Config):
        # Builds the module, so only walked once the block count matches the file.
        yield from param_shapes(config).items()

    return load_family(folder, config, GPT2Config.from_hf_dict, lambda config: HF_LAYOUT, shapes)


# ----------------------------------------------------------------------------------------
# MAC counts
# ----------------------------------------------------------------------------------------


# ----------------------------------------------------------------------------------------
# Running
# ----------------------------------------------------------------------------------------


def check_token_ids(config: GPT2Config, ids: Sequence[int], past_len: int = 0) -> np.ndarray:
    """``ids`` as ``[1, n]`` int32 after :func:`tenet_byoc.models.runner.check_ids` (ids in
    ``[0, vocab_size)``, ``past_len + len(ids)`` at most ``n_positions``; else ValueError)."""
    return check_ids(ids, config.vocab_size, config.n_positions, "n_positions", past_len)


def check_kv_cache(config: GPT2Config, cache: KVCache) -> None:
    """Check a cache against the model before decode reads it.

    The decode function takes the new token's position from the tensors' length, and the
    position table has ``n_positions`` rows; a cache whose ``length`` disagrees with its
    tensors, or that is already full, would make it read past the table: TypeError if
    ``cache`` is not a :class:`KVCache`, ValueError naming the tensor and both shapes, or
    the length and ``n_positions``.
    """
    length = cache_length(cache)
    if length >= config.n_positions:
        raise ValueError(
            f"KVCache.length={length} leaves no position for a new token "
            f"(n_positions={config.n_positions})"
        )
    check_cache_tensors(cache, config.n_layer, (1, config.n_head, length, config.head_dim))


class GPT2Runner(DecoderRunner):
    """Build GPT-2 once and run prefill, decode and greedy generation on the Relax VM.

    See :class:`tenet_byoc.models.runner.DecoderRunner` for the parameters; ``params`` as
    returned by :func:`random_params` or :func:`load_hf_checkpoint`, ``build`` receives
    :func:`export_gpt2`'s module. Calling ``runner.vm`` directly skips the runner's checks
    of token ids, positions and caches: an id outside ``[0, vocab_size)`` then reads the
    nearest row of ``wte`` (take's "clip" mode) and a cache longer than ``n_positions - 1``
    is not refused.
    """

    model = GPT2LMHeadModel
    check_params = staticmethod(check_params)
    export = staticmethod(export_gpt2)
