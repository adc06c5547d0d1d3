"""Rotary position embeddings' frequencies, plain or scaled as ``config.json`` asks.

Hugging Face writes the scaling as ``rope_scaling`` (transformers 4) or ``rope_parameters``
(transformers 5), an object with a ``rope_type``: ``default`` (plain RoPE), ``linear``
(every frequency divided by ``factor``), ``dynamic`` (NTK-aware: the base grows only past
``max_position_embeddings``, so inside the context it is plain RoPE), ``llama3`` (Llama 3.1+:
long wavelengths divided by ``factor``, short ones kept, a smooth blend between) and ``yarn``
(a per-frequency ramp between interpolated and kept frequencies, with cos and sin scaled by
an attention factor). The formulas follow the papers and Meta's Llama 3.1 release; every
type's frequencies are checked against transformers' runs in ``tests/models``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._params import check_positive_numbers

__all__ = ["ROPE_TYPES", "RopeScaling", "rope_from_config"]

#: The ``rope_type`` values this package implements.
ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn")

# The fields each type needs (beyond rope_theta), then the ones it may have.
_NEEDS = {
    "default": (),
    "linear": ("factor",),
    "dynamic": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor",
               "original_max_position_embeddings"),
    "yarn": ("original_max_position_embeddings",),
}
_OPTIONAL = {"yarn": ("factor", "attention_factor", "mscale", "mscale_all_dim", "beta_fast",
                      "beta_slow", "truncate")}


@dataclass(frozen=True)
class RopeScaling:
    """How the rotary embedding's frequencies are computed.

    Parameters
    ----------
    rope_type : str
        One of :data:`ROPE_TYPES`.
    factor : float
        How much longer the context is made (``linear``, ``dynamic``, ``llama3``, ``yarn``).
    low_freq_factor, high_freq_factor : float
        ``llama3``: wavelengths above ``original / low_freq_factor`` are divided by
        ``factor``, those below ``original / high_freq_factor`` kept, those between blended.
    original_max_position_embeddings : int or None
        The context the model was pretrained for (``llama3``, ``yarn``).
    attention_factor : float or None
        ``yarn``: the scale of cos and sin; None derives it from ``factor`` (and ``mscale``
        / ``mscale_all_dim`` when both are given) as the YaRN paper does.
    mscale, mscale_all_dim : float or None
        ``yarn`` as DeepSeek writes it.
    beta_fast, beta_slow : float
        ``yarn``: the rotation counts that bound the ramp between kept and interpolated.
    truncate : bool
        ``yarn``: round the ramp's ends to whole dimensions.
    """

    rope_type: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int | None = None
    attention_factor: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    truncate: bool = True

    def __post_init__(self) -> None:
        if self.rope_type not in ROPE_TYPES:
            raise ValueError(
                f"RopeScaling.rope_type={self.rope_type!r} is not supported; known: {ROPE_TYPES}"
            )
        check_positive_numbers(
            self, ("factor", "low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow"),
            ("attention_factor", "mscale", "mscale_all_dim"))
        if self.rope_type in ("linear", "dynamic", "llama3") and self.factor < 1:
            raise ValueError(f"RopeScaling.factor={self.factor} must be >= 1")
        if self.rope_type == "llama3" and not self.high_freq_factor > self.low_freq_factor:
            raise ValueError(
                f"RopeScaling.high_freq_factor={self.high_freq_factor} must exceed "
                f"low_freq_factor={self.low_freq_factor}"
            )
        original = self.original_max_position_embeddings
        if original is not None and (isinstance(original, bool) or not isinstance(original, int)
                                     or original < 1):
            raise ValueError(
                f"RopeScaling.original_max_position_embeddings={original!r} must be a "
                "positive integer"
            )
        if self.rope_type in ("llama3", "yarn") and original is None:
            raise ValueError(
                f"RopeScaling ({self.rope_type}) needs original_max_position_embeddings"
            )
        if not isinstance(self.truncate, bool):
            raise TypeError(f"RopeScaling.truncate={self.truncate!r} must be a bool")

    def attention_scale(self) -> float:
        """The factor cos and sin are multiplied by: 1 but for ``yarn``."""
        if self.rope_type != "yarn":
            return 1.0
        if self.attention_factor is not None:
            return float(self.attention_factor)

        def mscale(scale: float, m: float = 1.0) -> float:
            return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

        if self.mscale and self.mscale_all_dim:
            return mscale(self.factor, self.mscale) / mscale(self.factor, self.mscale_all_dim)
        return mscale(self.factor)

    def inv_freq(self, head_dim: int, theta: float) -> np.ndarray:
        """The ``head_dim / 2`` angular frequencies (radians per position), float64, of the
        rotated width ``head_dim`` (even) and the base ``theta`` (``rope_theta``)."""
        plain = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
        kind = self.rope_type
        if kind in ("default", "dynamic"):
            # dynamic NTK changes the base only past max_position_embeddings, which no run
            # here reaches (positions beyond the context are refused).
            return plain
        if kind == "linear":
            return plain / self.factor
        original = float(self.original_max_position_embeddings or 0)
        if kind == "llama3":
            wavelength = 2 * math.pi / plain
            long_limit = original / self.low_freq_factor
            short_limit = original / self.high_freq_factor
            blend = (original / wavelength - self.low_freq_factor) / (
                self.high_freq_factor - self.low_freq_factor)
            mid = (1 - blend) * plain / self.factor + blend * plain
            out = np.where(wavelength > long_limit, plain / self.factor, plain)
            return np.where((wavelength >= short_limit) & (wavelength <= long_limit), mid, out)
        # yarn: dimension d turns original * f_d / (2 pi) times over the original context;
        # those turning more than beta_fast times keep f_d, fewer than beta_slow get f_d /
        # factor, a linear ramp over the dimensions between.
        def dimension(turns: float) -> float:
            return head_dim * math.log(original / (turns * 2 * math.pi)) / (2 * math.log(theta))

        low, high = dimension(self.beta_fast), dimension(self.beta_slow)
        if self.truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, head_dim - 1)
        if low == high:
            high += 0.001
        ramp = np.clip((np.arange(head_dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
        keep = 1 - ramp
        return plain / self.factor * (1 - keep) + plain * keep


def rope_from_config(values: Mapping[str, Any]) -> tuple[float, RopeScaling | None]:
    """``(rope_theta, scaling)`` from a ``config.json``; scaling None for plain RoPE.

    Reads ``rope_parameters`` (transformers 5, which also holds ``rope_theta``) or the
    older top-level ``rope_theta`` and ``rope_scaling`` (``type`` is accepted for
    ``rope_type``, as older files write it).

    Raises
    ------
    ValueError
        Naming the field: an unknown ``rope_type`` (listing the known ones), a missing or
        non-numeric parameter, or a ``partial_rotary_factor`` other than 1.
    TypeError
        If ``rope_parameters`` / ``rope_scaling`` is not an object.
    """
    factor = values.get("partial_rotary_factor", 1.0)
    if factor != 1.0:
        raise ValueError(f"config.json partial_rotary_factor={factor!r} is not supported (only 1)")
    theta = values.get("rope_theta", 10000.0)
    scaling = None
    for field in ("rope_scaling", "rope_parameters"):  # the newer one wins
        rope = values.get(field)
        if rope is None:
            continue
        if not isinstance(rope, Mapping):
            raise TypeError(f"config.json {field}={rope!r} must be an object")
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind not in ROPE_TYPES:
            from .._names import did_you_mean

            raise ValueError(
                f"config.json {field}.rope_type={kind!r} is not supported"
                f"{did_you_mean(str(kind), ROPE_TYPES)}; known: {list(ROPE_TYPES)}"
            )
        partial = rope.get("partial_rotary_factor", 1.0)
        if partial != 1.0:
            raise ValueError(
                f"config.json {field}.partial_rotary_factor={partial!r} is not supported (only 1)"
            )
        if "rope_theta" in rope:
            theta = rope["rope_theta"]
        missing = [k for k in _NEEDS[kind] if rope.get(k) is None]
        if missing:
            raise ValueError(f"config.json {field} (rope_type {kind!r}) lacks {missing}")
        kwargs: dict[str, Any] = {}
        for key in (*_NEEDS[kind], *_OPTIONAL.get(kind, ())):
            value = rope.get(key)
            if value is None:
                continue
            if key == "truncate":
                if not isinstance(value, bool):
                    raise ValueError(f"config.json {field}.truncate={value!r} must be a bool")
            elif key == "original_max_position_embeddings":
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ValueError(f"config.json {field}.{key}={value!r} must be an integer")
            elif isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"config.json {field}.{key}={value!r} must be a number")
            kwargs[key] = value
        if kind == "yarn" and "factor" not in kwargs:
            # DeepSeek's files may leave the factor to the ratio of the two contexts.
            context = values.get("max_position_embeddings")
            if not isinstance(context, int) or isinstance(context, bool):
                raise ValueError(f"config.json {field} (yarn) lacks 'factor'")
            kwargs["factor"] = context / kwargs["original_max_position_embeddings"]
        try:
            scaling = None if kind == "default" else RopeScaling(rope_type=kind, **kwargs)
        except (TypeError, ValueError) as err:
            raise ValueError(f"config.json {field}: {err}") from None
    return theta, scaling
