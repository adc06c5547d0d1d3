"""Quantization schemes as a Relax pass: linear layers rewritten to the scheme's stored form.

A :class:`QuantScheme` says, per operand, how a linear layer's weights (B) and activations
(A) are stored: bits, format (symmetric int, asymmetric int with zero points, fp8 e4m3 /
e5m2, fp4 e2m1, MX blocks), granularity of the scales, dynamic or calibrated activation
scales, and the scale dtype. :func:`quantize` rewrites every linear layer of a module
(``R.matmul(x, R.permute_dims(W))`` with ``W`` a constant) into one of the forms the
``tenet.*`` quantized patterns offload whole, and stamps the scheme's cost recipe on the
module; the module stays a normal Relax module that TVM's own build also runs (the tests'
reference).

Common schemes run on real integer kernels (int8 x int8 with int32 accumulation, int8 or
packed int4 weight-only); the others are computed by exact emulation: their values are
rounded exactly as the format defines (``ml_dtypes`` at compile time, the same arithmetic
in the graph for activations), held in float32, and multiplied by the offloaded float GEMM.
:data:`SCHEMES` names the presets; a spec string (:func:`parse_spec`) composes any other.

A KV-cache modifier (``+kv16``, ``+kv8``, ``+kv4``, optionally ``/head`` or ``/groupG``;
:data:`KV_HELP`) rounds the keys and values of new tokens where they are written to the
cache, so that attention in prefill and decode and the cache the model keeps all hold the
stored values (exact emulation: codes times fp16 scales, kept in float32); attention's
GEMMs are charged with the cache operand at the KV width (:func:`attention_scheme`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import tvm
import tvm_ffi
from tvm import relax
from tvm.ir.expr import GenericConst

#: The module attribute naming the scheme :func:`quantize` applied; the partition step
#: carries it to the codegen, which records it on every quantized call.
SCHEME_ATTR = "tenet.quant_scheme"
#: The module attribute holding the scheme's cost recipe (JSON of :meth:`QuantScheme.recipe`),
#: carried like :data:`SCHEME_ATTR`; the codegen copies it into each quantized step.
RECIPE_ATTR = "tenet.quant_recipe"

_MATMUL = tvm.ir.Op.get("relax.matmul")
_PERMUTE = tvm.ir.Op.get("relax.permute_dims")
_CONCAT = tvm.ir.Op.get("relax.concat")

#: Element formats. ``int`` is symmetric; ``uint`` is asymmetric (codes in [0, 2^b - 1]
#: with a zero point per scale); the float formats are OCP's fp8 / fp4 element types.
WEIGHT_FORMATS = ("float", "int", "uint", "e4m3", "e5m2", "e2m1")
ACTIVATION_FORMATS = ("float", "int", "e4m3", "e5m2", "e2m1")
WEIGHT_GRANULARITIES = ("none", "tensor", "channel", "group")
#: Scales of the KV cache, all written with the token: ``token`` one per token (its keys or
#: values over all heads), ``head`` one per token and head, ``group`` one per G consecutive
#: channels of a token's head.
KV_GRANULARITIES = ("none", "token", "head", "group")
ACTIVATION_GRANULARITIES = ("none", "tensor", "token", "embedding", "group")
SCALE_DTYPES = {"fp16": 16, "fp32": 32, "e8m0": 8}


@dataclass(frozen=True)
class FloatFormat:
    """A small float element format: its ml_dtypes type, largest value, mantissa bits,
    smallest normal exponent and largest exponent (the MX spec's emax_elem)."""

    dtype: type
    max_value: float
    mantissa_bits: int
    min_exponent: int
    max_exponent: int


FLOAT_FORMATS = {
    "e4m3": FloatFormat(ml_dtypes.float8_e4m3fn, 448.0, 3, -6, 8),
    "e5m2": FloatFormat(ml_dtypes.float8_e5m2, 57344.0, 2, -14, 15),
    "e2m1": FloatFormat(ml_dtypes.float4_e2m1fn, 6.0, 1, 0, 2),
}
_FORMAT_BITS = {"e4m3": 8, "e5m2": 8, "e2m1": 4}


def int_range(bits: int, symmetric: bool = True) -> tuple[int, int]:
    """The codes of a ``bits``-bit integer format: symmetric int8 uses [-127, 127] (so
    -128 never meets the int8 kernels), narrower symmetric ints the two's-complement range
    (int4: [-8, 7], as MLC-LLM's q4 formats); asymmetric ones [0, 2^bits - 1]."""
    if not symmetric:
        return 0, 2**bits - 1
    qmax = 2 ** (bits - 1) - 1
    return (-qmax if bits == 8 else -qmax - 1), qmax


def _choice(field: str, value, accepted) -> None:
    if value not in accepted:
        raise ValueError(f"QuantScheme.{field}={value!r}; expected one of {tuple(accepted)}")


@dataclass(frozen=True)
class QuantScheme:
    """How weights (B) and activations (A) of a linear layer are stored and computed.

    Attributes
    ----------
    name : str
        The scheme's name, shown in ledgers and reports.
    weight_bits : int
        32 or 16 (float), 8, 4, 3 or 2.
    weight_granularity : str
        ``"none"`` (float), ``"tensor"`` (one scale), ``"channel"`` (one per output channel)
        or ``"group"`` (one per ``group_size`` input channels of each output channel).
    activation_bits : int
        32 (float32), 16 (float16 on the accelerator), 8 or 4.
    activation_granularity : str
        ``"none"`` (float), ``"tensor"``, ``"token"`` (one scale per row), ``"embedding"``
        (one per hidden channel, multiplied into the dequantized weights) or ``"group"`` (one per
        ``activation_group`` hidden channels of a row, partial sums rescaled per group).
    group_size : int
        G of group-wise weights. When a group does not divide K, :func:`quantize` pads K
        with zeros to the next multiple (the activation in the graph, the weight at compile
        time); :func:`quantize_weight` alone refuses such a weight.
    weight_format, activation_format : str
        ``"int"`` (symmetric), ``"uint"`` (weights: asymmetric with zero points), ``"e4m3"``,
        ``"e5m2"``, ``"e2m1"``, or ``"float"``; empty means float for 32 / 16 bits, else int.
    activation_group : int
        G of group-wise activations (MX blocks along K).
    activation_static : bool
        Activation scales calibrated once (``quantize(..., calibration=...)``) rather than
        computed per call; per tensor or per embedding only.
    smoothing : float
        SmoothQuant's migration strength alpha (0: none): per hidden channel, activations
        are divided and weights multiplied by ``amax_x^alpha / amax_w^(1 - alpha)``.
    scale_dtype : str
        ``"fp16"``, ``"fp32"`` or ``"e8m0"`` (MX: powers of two, one per block of both
        operands). Stored scales are rounded to it; dynamic activation scales computed on
        chip stay float32 except MX's.
    kv_bits : int
        The KV cache: 32 (float32, not quantized), 16 (float16), 8 or 4 (symmetric int,
        codes in [-127, 127] or [-8, 7], fp16 scales). Keys and values are quantized when
        they are written to the cache; attention reads them at this width.
    kv_granularity : str
        ``"none"`` (float cache), ``"token"``, ``"head"`` or ``"group"`` (see
        :data:`KV_GRANULARITIES`).
    kv_group : int
        G of group-wise KV scales (channels of one head).
    attention : bool
        True for the scheme of attention's GEMMs (:func:`attention_scheme`): the "weight"
        is then the K or V cache, and :meth:`recipe` takes ``"key"`` or ``"value"``.
    """

    name: str
    weight_bits: int = 32
    weight_granularity: str = "none"
    activation_bits: int = 32
    activation_granularity: str = "none"
    group_size: int = 0
    weight_format: str = ""
    activation_format: str = ""
    activation_group: int = 0
    activation_static: bool = False
    smoothing: float = 0.0
    scale_dtype: str = "fp16"
    kv_bits: int = 32
    kv_granularity: str = "none"
    kv_group: int = 0
    attention: bool = False

    def __post_init__(self) -> None:
        default = {True: "float", False: "int"}
        if not self.weight_format:
            object.__setattr__(self, "weight_format", default[self.weight_bits >= 16])
        if not self.activation_format:
            object.__setattr__(self, "activation_format", default[self.activation_bits >= 16])
        _choice("weight_bits", self.weight_bits, (32, 16, 8, 4, 3, 2))
        _choice("activation_bits", self.activation_bits, (32, 16, 8, 4))
        _choice("weight_format", self.weight_format, WEIGHT_FORMATS)
        _choice("activation_format", self.activation_format, ACTIVATION_FORMATS)
        _choice("weight_granularity", self.weight_granularity, WEIGHT_GRANULARITIES)
        _choice("activation_granularity", self.activation_granularity, ACTIVATION_GRANULARITIES)
        _choice("scale_dtype", self.scale_dtype, tuple(SCALE_DTYPES))
        _choice("kv_bits", self.kv_bits, (32, 16, 8, 4))
        _choice("kv_granularity", self.kv_granularity, KV_GRANULARITIES)
        if (self.kv_bits < 16) != (self.kv_granularity != "none"):
            raise ValueError(
                f"QuantScheme {self.name!r}: kv_granularity={self.kv_granularity!r} with "
                f"kv_bits={self.kv_bits}; 'none' exactly for a float (32 or 16 bit) cache"
            )
        if (self.kv_granularity == "group") != (self.kv_group > 0):
            raise ValueError(
                f"QuantScheme.kv_group={self.kv_group} must be > 0 exactly for group-wise "
                "KV scales"
            )
        for op, fmt, bits, gran in (
            ("weight", self.weight_format, self.weight_bits, self.weight_granularity),
            ("activation", self.activation_format, self.activation_bits,
             self.activation_granularity),
        ):
            if (fmt == "float") != (bits >= 16):
                raise ValueError(
                    f"QuantScheme {self.name!r}: {op}_format={fmt!r} with {op}_bits={bits}; "
                    "float formats are 32 or 16 bits, quantized ones 8 bits or fewer"
                )
            if fmt in _FORMAT_BITS and bits != _FORMAT_BITS[fmt]:
                raise ValueError(
                    f"QuantScheme {self.name!r}: {op}_format={fmt!r} has "
                    f"{_FORMAT_BITS[fmt]} bits, not {op}_bits={bits}"
                )
            if (fmt == "float") != (gran == "none"):
                raise ValueError(
                    f"QuantScheme {self.name!r}: {op}_granularity={gran!r} with a "
                    f"{fmt} {op}; 'none' exactly for float {op}s"
                )
        if (self.weight_granularity == "group") != (self.group_size > 0):
            raise ValueError(
                f"QuantScheme.group_size={self.group_size} must be > 0 exactly for group-wise "
                "weights"
            )
        if (self.activation_granularity == "group") != (self.activation_group > 0):
            raise ValueError(
                f"QuantScheme.activation_group={self.activation_group} must be > 0 exactly "
                "for group-wise activations"
            )
        if self.kernel == "dequant_group" and self.group_size % 2:
            raise ValueError(
                f"QuantScheme.group_size={self.group_size} must be even: int4 values are "
                "packed two to a byte"
            )
        if self.activation_static and self.activation_granularity not in ("tensor", "embedding"):
            raise ValueError(
                f"QuantScheme.activation_static=True with activation_granularity="
                f"{self.activation_granularity!r}; static scales are per tensor or embedding"
            )
        if not 0.0 <= self.smoothing <= 1.0 or (
            self.smoothing and (self.activation_format != "int" or self.weight_format != "int")
        ):
            raise ValueError(
                f"QuantScheme.smoothing={self.smoothing}; expected 0 (none) or alpha in "
                "(0, 1] with int weights and int activations"
            )
        if self.activation_granularity == "embedding" and self.smoothing:
            raise ValueError(
                "QuantScheme: per-embedding activation scales already absorb outlier "
                "channels; use smoothing with per-tensor or per-token activations"
            )
        if self.scale_dtype == "e8m0":
            blocks = [g for g, q in ((self.weight_granularity, True),
                                     (self.activation_granularity, self.activation_bits < 16))
                      if q]
            if any(g != "group" for g in blocks) or self.weight_format == "uint":
                raise ValueError(
                    f"QuantScheme {self.name!r}: scale_dtype='e8m0' (MX) needs symmetric, "
                    "group-wise (block) scales on every quantized operand"
                )

    @property
    def quantizes_activations(self) -> bool:
        return self.activation_bits < 16

    @property
    def quantizes_kv(self) -> bool:
        """Whether the KV cache is stored below float32 (``+kv16``, ``+kv8``, ``+kv4``)."""
        return self.kv_bits < 32

    @property
    def kernel(self) -> str:
        """The runtime kernel: ``"float"``, ``"dequant_channel"``, ``"dequant_group"``,
        ``"int8"`` (real integer kernels) or ``"emulated"`` (exact emulation)."""
        wf, wb, wg = self.weight_format, self.weight_bits, self.weight_granularity
        if self.attention:  # the cache is rounded in the graph; the GEMM runs in float
            return "float" if wb == 32 else "emulated"
        if wf == "float":
            return "float" if wb == 32 and self.activation_bits == 32 else "emulated"
        if self.scale_dtype == "e8m0":
            return "emulated"
        if not self.quantizes_activations:
            if wf == "int" and wb == 8 and wg == "channel":
                return "dequant_channel"
            if wf in ("int", "uint") and wb == 4 and wg in ("group", "channel"):
                return "dequant_group"
            return "emulated"
        # Per-embedding scales run along K: they cannot be applied after an integer GEMM,
        # and folding them into the weights before weight quantization would hand the
        # activation outliers to the weights; they rescale the dequantized weights instead.
        if (wf == "int" and wg in ("tensor", "channel") and self.activation_format == "int"
                and self.activation_granularity in ("tensor", "token")
                and (not self.smoothing or self.activation_static)):
            return "int8"
        return "emulated"

    @property
    def emulated(self) -> bool:
        return self.kernel == "emulated"

    def bits(self) -> tuple[int, int, int]:
        """Element widths charged for A, B and C (quantized outputs are 16-bit)."""
        if self.kernel == "float":
            return 32, 32, 32
        return self.activation_bits, self.weight_bits, 16

    def k_multiple(self) -> int:
        """What :func:`quantize` pads a linear layer's K to a multiple of, with zeros: every
        group must divide K, and a per-channel int4 weight packs two nibbles a byte."""
        groups = [g for g in (self.group_size, self.activation_group) if g]
        if self.kernel == "dequant_group" and self.weight_granularity == "channel":
            groups.append(2)
        return math.lcm(*groups) if groups else 1

    def k_group(self) -> int:
        """G of partial sums rescaled per K-group (group-wise activations, MX), else 0."""
        groups = [g for g in (self.activation_group,
                              self.group_size if self.quantizes_activations else 0) if g]
        return math.gcd(*groups) if groups else 0

    def dequant_place(self) -> str:
        """Where stored codes become the values multiplied (charge.h's Dequantization)."""
        if self.weight_format == "float":
            return "none"
        if not self.quantizes_activations:
            return "weight"
        if self.k_group():
            return "k_group"
        if self.activation_granularity == "embedding" or (self.smoothing
                                                          and not self.activation_static):
            return "weight"  # per hidden channel scales multiply the dequantized weights
        return "output"

    def recipe(self, operand: str = "weight") -> dict:
        """The cost recipe (``src/cost_model/charge.h``'s QuantRecipe) as a dict.

        Parameters
        ----------
        operand : str
            What B is: ``"weight"`` (a linear layer's ``W^T``), or, for an attention
            scheme (:func:`attention_scheme`), ``"key"`` (``K^T`` of ``Q K^T``: one row of
            scales per key token is a column of B) or ``"value"`` (``V`` of ``P V``: a
            token is a row of B, K's index).
        """
        _choice("recipe operand", operand, ("key", "value") if self.attention else ("weight",))
        act = {"token": "channel"}.get(self.activation_granularity,
                                        self.activation_granularity)
        if self.smoothing and not self.activation_static:
            act = "embedding"  # the per-call smoothing scales are per hidden channel
        weight = self.weight_granularity
        if operand == "value":  # V[L, d]: per token is per K index; groups run along N
            weight = {"channel": "embedding", "group": "group_n"}.get(weight, weight)
        return {
            "place": self.dequant_place(),
            "weight": weight,
            "weight_group": self.group_size,
            "activation": act,
            "activation_group": self.activation_group,
            "activation_static": self.activation_static,
            "k_group": self.k_group(),
            "scale_bits": SCALE_DTYPES[self.scale_dtype],
            "zero_point_bits": self.weight_bits if self.weight_format == "uint" else 0,
            "accumulator_bits": 32,
            # A KV cache is one tensor per batch element (head): scales and dequantization
            # are counted per head.
            "weight_batched": self.attention and self.weight_granularity != "none",
        }

    def describe(self) -> str:
        """A one-line definition in spec-string terms: ``w=uint4/group128 a=f16 scales=fp16``."""
        def operand(bits, fmt, gran, group):
            g = f"group{group}" if gran == "group" else gran
            name = {"float": "f"}.get(fmt, fmt) + (str(bits) if fmt in ("float", "int", "uint")
                                                  else "")
            return name + ("" if gran == "none" else f"/{g}")

        w = operand(self.weight_bits, self.weight_format, self.weight_granularity,
                    self.group_size)
        a = operand(self.activation_bits, self.activation_format, self.activation_granularity,
                    self.activation_group)
        extra = (" static" if self.activation_static else "") + (
            f" smooth={self.smoothing:g}" if self.smoothing else "")
        if self.quantizes_kv:
            gran = {"group": f"group{self.kv_group}"}.get(self.kv_granularity,
                                                          self.kv_granularity)
            extra += f" kv={'f16' if self.kv_bits == 16 else f'int{self.kv_bits}/{gran}'}"
        return f"w={w} a={a} scales={self.scale_dtype}{extra}"


def _legacy(name, wb, wg, ab, ag, g=0):
    return QuantScheme(name, wb, wg, ab, ag, g)


#: The named schemes (``tenet-byoc presets`` lists them with their definitions). The first
#: seven are the original names, with their original numbers.
SCHEMES: dict[str, QuantScheme] = {
    s.name: s
    for s in [
        QuantScheme("none"),
        _legacy("w8a8_per_tensor", 8, "tensor", 8, "tensor"),
        _legacy("w8a8_per_channel_per_token", 8, "channel", 8, "token"),
        _legacy("w8a16_per_channel", 8, "channel", 16, "none"),
        _legacy("w4a16_group32", 4, "group", 16, "none", 32),
        _legacy("w4a16_group64", 4, "group", 16, "none", 64),
        _legacy("w4a16_group128", 4, "group", 16, "none", 128),
        # The four granularities of the question, W8A8 int.
        _legacy("per_tensor", 8, "tensor", 8, "tensor"),
        _legacy("per_token", 8, "channel", 8, "token"),
        QuantScheme("per_embedding", 8, "channel", 8, "embedding", activation_static=True),
        *[QuantScheme(f"group{g}", 8, "group", 8, "group", g, activation_group=g)
          for g in (32, 64, 128)],
        # MLC-LLM's formats (q4f16_0 and q4f16_1 differ only in MLC's memory layout).
        QuantScheme("q0f32"),
        QuantScheme("q0f16", 16, "none", 16, "none"),
        _legacy("q4f16_0", 4, "group", 16, "none", 32),
        _legacy("q4f16_1", 4, "group", 16, "none", 32),
        _legacy("q4f16_ft", 4, "channel", 16, "none"),
        QuantScheme("q4f16_awq", 4, "group", 16, "none", 128, weight_format="uint"),
        QuantScheme("e4m3_e4m3_f16", 8, "tensor", 8, "tensor", weight_format="e4m3",
                    activation_format="e4m3", scale_dtype="fp32"),
        # Outlier handling and mixed precision.
        QuantScheme("smoothquant", 8, "channel", 8, "tensor", activation_static=True,
                    smoothing=0.5),
        _legacy("w4a8", 4, "channel", 8, "token"),
        # OCP Microscaling: blocks of 32 along K, e8m0 scales, both operands.
        QuantScheme("mxint8", 8, "group", 8, "group", 32, activation_group=32,
                    scale_dtype="e8m0"),
        QuantScheme("mxfp8", 8, "group", 8, "group", 32, weight_format="e4m3",
                    activation_format="e4m3", activation_group=32, scale_dtype="e8m0"),
        QuantScheme("mxfp4", 4, "group", 4, "group", 32, weight_format="e2m1",
                    activation_format="e2m1", activation_group=32, scale_dtype="e8m0"),
    ]
}

#: The original seven names: what sweeps run by default.
CLASSIC_SCHEMES = tuple(list(SCHEMES)[:7])

SPEC_HELP = (
    "a spec is comma-separated parts: w=OPERAND, a=OPERAND, scale=fp16|fp32|e8m0, static, "
    "smooth=ALPHA; OPERAND is FORMAT[/GRANULARITY] with FORMAT f32, f16, int8, int4, int3, "
    "int2, uint8, uint4, uint3, uint2 (asymmetric), e4m3, e5m2 or e2m1 and GRANULARITY "
    "tensor, channel, token, embedding or groupG; e.g. 'w=uint4/group128,a=f16'"
)


def _parse_operand(text: str, role: str) -> tuple[int, str, str, int]:
    fmt_text, _, gran = text.partition("/")
    if fmt_text in ("f32", "f16"):
        bits, fmt = int(fmt_text[1:]), "float"
    elif fmt_text in _FORMAT_BITS:
        bits, fmt = _FORMAT_BITS[fmt_text], fmt_text
    elif fmt_text.startswith(("int", "uint")) and fmt_text.lstrip("uint").isdigit():
        fmt = "uint" if fmt_text.startswith("uint") else "int"
        bits = int(fmt_text[len(fmt):])
    else:
        raise ValueError(f"spec {role}={text!r}: unknown format {fmt_text!r}; {SPEC_HELP}")
    group = 0
    if gran.startswith("group"):
        if not gran[5:].isdigit() or int(gran[5:]) < 1:
            raise ValueError(f"spec {role}={text!r}: groupG needs a positive integer G")
        gran, group = "group", int(gran[5:])
    elif gran == "":
        gran = "none" if fmt == "float" else "tensor"
    return bits, fmt, gran, group


def parse_spec(spec: str) -> QuantScheme:
    """A scheme from a spec string (its name is the string itself).

    Parameters
    ----------
    spec : str
        E.g. ``"w=int4/group32,a=f16"`` (q4f16_1), ``"w=e2m1/group32,a=e2m1/group32,
        scale=e8m0"`` (mxfp4), ``"w=int8/channel,a=int8/embedding,static"``.

    Raises
    ------
    ValueError
        Naming the part that is wrong and what is accepted.
    """
    fields: dict = {}
    for part in (p.strip() for p in spec.split(",")):
        key, eq, value = part.partition("=")
        if part == "static":
            fields["activation_static"] = True
        elif eq and key in ("w", "a"):
            bits, fmt, gran, group = _parse_operand(value, key)
            if key == "w":
                gran = "channel" if gran == "token" else gran
                fields.update(weight_bits=bits, weight_format=fmt, weight_granularity=gran,
                              group_size=group)
            else:
                fields.update(activation_bits=bits, activation_format=fmt,
                              activation_granularity=gran, activation_group=group)
        elif eq and key == "scale":
            fields["scale_dtype"] = value
        elif eq and key == "smooth":
            try:
                fields["smoothing"] = float(value)
            except ValueError:
                raise ValueError(f"spec smooth={value!r} is not a number") from None
        else:
            raise ValueError(f"spec part {part!r} of {spec!r} is not understood; {SPEC_HELP}")
    return QuantScheme(spec, **fields)


KV_HELP = (
    "a KV-cache modifier is +kvB[/GRANULARITY] after a scheme, B 16 (float16), 8 or 4 (int), "
    "GRANULARITY token (default), head or groupG; e.g. 'per_token+kv8', 'q4f16_1+kv4/group32'"
)


def _parse_kv(text: str, scheme: str) -> dict:
    """The KV fields of a modifier ``kvB[/GRANULARITY]`` (the text after ``+``)."""
    bits_text, _, gran = text[2:].partition("/")
    if not text.startswith("kv") or bits_text not in ("16", "8", "4"):
        raise ValueError(f"quantization scheme {scheme!r}: modifier +{text} is not understood; "
                         f"{KV_HELP}")
    bits = int(bits_text)
    if bits == 16:
        if gran:
            raise ValueError(f"quantization scheme {scheme!r}: +kv16 is a float16 cache "
                             "without scales; it takes no granularity")
        return {"kv_bits": 16}
    group = 0
    if gran.startswith("group"):
        if not gran[5:].isdigit() or int(gran[5:]) < 1:
            raise ValueError(f"quantization scheme {scheme!r}: +{text}: groupG needs a "
                             "positive integer G")
        gran, group = "group", int(gran[5:])
    elif gran not in ("", "token", "head"):
        raise ValueError(f"quantization scheme {scheme!r}: +{text}: unknown KV granularity "
                         f"{gran!r}; {KV_HELP}")
    return {"kv_bits": bits, "kv_granularity": gran or "token", "kv_group": group}


def get_scheme(scheme: str | QuantScheme) -> QuantScheme:
    """A scheme by preset name (see :data:`SCHEMES`) or spec string, or the scheme itself,
    with an optional KV-cache modifier (``per_token+kv8``; see :data:`KV_HELP`)."""
    if isinstance(scheme, QuantScheme):
        return scheme
    if scheme in SCHEMES:
        return SCHEMES[scheme]
    if "+" in scheme:
        base, _, modifier = scheme.rpartition("+")
        return dataclasses.replace(get_scheme(base), name=scheme,
                                   **_parse_kv(modifier, scheme))
    if "=" in scheme:
        return parse_spec(scheme)
    raise ValueError(
        f"unknown quantization scheme {scheme!r}; available: {', '.join(SCHEMES)}; or {SPEC_HELP}"
    )


def attention_scheme(scheme: str | QuantScheme) -> QuantScheme:
    """What the attention GEMMs of a model quantized with ``scheme`` are charged with.

    Attention multiplies activations: ``Q K^T`` and ``P V``. Q and P stay float32 (the
    quantize pass does not touch them); the B operand, K^T or V, is the KV cache at the
    scheme's KV width. The returned scheme's "weight" is that cache: ``bits()`` gives the
    widths (A, B, C) and ``recipe("key")`` / ``recipe("value")`` the cost recipe of
    ``Q K^T`` / ``P V`` (scales per key token, per value token, or per group of a token's
    channels, counted per head: ``weight_batched``). Without a KV modifier this is float32
    (``bits() == (32, 32, 32)``, no side data), as attention has always been charged.

    Parameters
    ----------
    scheme : str or QuantScheme
        A preset, spec string or scheme, with or without ``+kvB[/GRANULARITY]``.

    Returns
    -------
    QuantScheme
        With ``attention=True``, named as ``scheme``.
    """
    s = get_scheme(scheme)
    fields: dict = {"weight_bits": s.kv_bits}
    if s.kv_bits < 16:
        fields.update(weight_format="int", scale_dtype="fp16",
                      weight_granularity="group" if s.kv_granularity == "group" else "channel",
                      group_size=s.kv_group)
    return QuantScheme(s.name, **fields, kv_bits=s.kv_bits, kv_granularity=s.kv_granularity,
                       kv_group=s.kv_group, attention=True)


def _attention_stamp(s: QuantScheme) -> dict:
    """The widths and recipes of ``Q K^T`` and ``P V`` under ``s``, for the codegen."""
    att = attention_scheme(s)
    return {role: {"bits": list(att.bits()), "recipe": att.recipe(role)}
            for role in ("key", "value")}


# ----------------------------------------------------------------------------------------
# Weights, at compile time (numpy).


def _round_scale(scale: np.ndarray, dtype: str) -> np.ndarray:
    """Scales as stored: fp16 rounds to nearest; e8m0 is handled by the MX path."""
    if dtype == "fp16":
        scale = scale.astype(np.float16).astype(np.float32)
    return np.where(scale > 0, scale, np.float32(1.0)).astype(np.float32)


def _pow2_floor_log2(amax: np.ndarray, emax: int) -> np.ndarray:
    """MX's shared scale 2^(floor(log2(amax)) - emax_elem), 1 for an all-zero block."""
    safe = np.where(amax > 0, amax, np.float32(1.0))
    exponent = np.floor(np.log2(safe.astype(np.float64))) - emax
    return np.where(amax > 0, np.exp2(exponent), 1.0).astype(np.float32)


def weight_codes(w: np.ndarray, scheme: QuantScheme,
                 name: str = "weight") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The stored form of a float weight ``w[N, K]`` under ``scheme``.

    A weight with NaN or infinite values is refused (``ValueError`` naming ``name``): its
    scale would be NaN or be replaced by 1.0, and the layer would silently compute zeros
    or garbage where float32 would propagate the NaN.

    Returns
    -------
    codes : numpy.ndarray
        float32 ``[N, K/G, G]`` (G = K per tensor or channel): integer codes (``uint``:
        before the zero point is removed) or the format's values, exact in float32.
    scale : numpy.ndarray
        float32 ``[N, K/G, 1]``, rounded to the scale dtype (1 for float16 weights).
    zero_point : numpy.ndarray
        float32 ``[N, K/G, 1]`` (0 unless the format is ``uint``); the weight is
        ``(codes - zero_point) * scale``.
    """
    n, k = w.shape
    s = scheme
    bad = np.argwhere(~np.isfinite(w))
    if bad.size:
        i, j = (int(v) for v in bad[0])
        raise ValueError(
            f"quantize({s.name}): {name} has {len(bad)} non-finite value(s), the first "
            f"{w[i, j]} at [{i}, {j}]; quantized schemes need finite weights"
        )
    w = w.astype(np.float32)
    g = s.group_size if s.weight_granularity == "group" else k
    if k % g:
        raise ValueError(
            f"scheme {s.name}: group size {g} does not divide K={k} (the input channels of "
            "a [N, K] weight); pad K to a multiple of the group size"
        )
    grouped = w.reshape(n, k // g, g)
    zeros = np.zeros((n, k // g, 1), np.float32)
    if s.weight_format == "float":  # float16 storage: no scale
        return grouped.astype(np.float16).astype(np.float32), np.ones_like(zeros), zeros
    if s.weight_granularity == "tensor":
        amax = np.broadcast_to(np.abs(w).max(), zeros.shape).astype(np.float32)
    else:
        amax = np.abs(grouped).max(axis=2, keepdims=True)
    fmt = FLOAT_FORMATS.get(s.weight_format)
    if s.scale_dtype == "e8m0":
        if fmt is not None:
            scale = _pow2_floor_log2(amax, fmt.max_exponent)
        else:  # MX int: the elements are fixed point 1.(b-2), emax_elem 0
            scale = _pow2_floor_log2(amax, 0) / np.float32(2 ** (s.weight_bits - 2))
    elif fmt is not None:
        scale = _round_scale(amax / np.float32(fmt.max_value), s.scale_dtype)
    elif s.weight_format == "uint":
        per_tensor = s.weight_granularity == "tensor"
        lo = np.broadcast_to(w.min(), zeros.shape) if per_tensor else grouped.min(2, keepdims=True)
        hi = np.broadcast_to(w.max(), zeros.shape) if per_tensor else grouped.max(2, keepdims=True)
        qmin, qmax = int_range(s.weight_bits, symmetric=False)
        scale = _round_scale((hi - lo) / np.float32(qmax), s.scale_dtype)
        zp = np.clip(np.rint(-lo / scale), qmin, qmax).astype(np.float32)
        q = np.clip(np.rint(grouped / scale) + zp, qmin, qmax).astype(np.float32)
        return q, scale, zp
    else:
        _, qmax = int_range(s.weight_bits)
        scale = _round_scale(amax / np.float32(qmax), s.scale_dtype)
    if fmt is not None:
        v = np.clip(grouped / scale, -fmt.max_value, fmt.max_value)
        return v.astype(fmt.dtype).astype(np.float32), scale, zeros
    qmin, qmax = int_range(s.weight_bits)
    return np.clip(np.rint(grouped / scale), qmin, qmax).astype(np.float32), scale, zeros


def quantize_weight(
    w: np.ndarray, scheme: QuantScheme, name: str = "weight"
) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric integer quantization of a float weight ``w[N, K]`` (output channels first).

    Non-finite weights are refused as :func:`weight_codes` refuses them.

    Returns
    -------
    q : numpy.ndarray
        int8 values: ``[N, K]`` per tensor or channel, ``[N, K/G, G]`` per group.
    scale : numpy.ndarray
        float32: ``[]`` per tensor, ``[N]`` per channel, ``[N, K/G, 1]`` per group, such
        that ``q * scale`` approximates ``w``.
    """
    if scheme.weight_format != "int":
        raise ValueError(f"quantize_weight: scheme {scheme.name} has {scheme.weight_format} "
                         "weights; use weight_codes")
    codes, scale, _ = weight_codes(w, scheme, name)
    q = codes.astype(np.int8)
    if scheme.weight_granularity == "group":
        return q, scale
    n, k = w.shape
    q = q.reshape(n, k)
    if scheme.weight_granularity == "channel":
        return q, scale.reshape(n)
    return q, np.asarray(scale.reshape(-1)[0], np.float32)


#: The zero point of packed int4 weights: a nibble u in [0, 15] holds the value u - 8.
INT4_ZERO_POINT = 8


def pack_int4(q: np.ndarray) -> np.ndarray:
    """Pack int4 values ``q[N, ...]`` in [-8, 7] two to a byte: ``uint8[N, K/2]``.

    Element ``2j`` of a row is the low nibble of byte ``j``, element ``2j + 1`` the high
    one; a nibble holds ``value + 8`` (the layout and offset MLC-LLM's q4 formats use).
    """
    n = q.shape[0]
    u = q.reshape(n, -1).astype(np.int16) + INT4_ZERO_POINT
    if u.shape[1] % 2 or u.min(initial=0) < 0 or u.max(initial=0) > 15:
        raise ValueError("pack_int4 needs an even number of values in [-8, 7] per row")
    u = u.astype(np.uint8)
    return (u[:, 0::2] | (u[:, 1::2] << 4)).astype(np.uint8)


def smoothing_factors(x_amax: np.ndarray, w: np.ndarray, alpha: float) -> np.ndarray:
    """SmoothQuant's per-hidden-channel factors ``amax_x^alpha / amax_w^(1 - alpha)``."""
    w_amax = np.abs(w).max(axis=0)
    s = np.power(np.maximum(x_amax, 1e-5), alpha) / np.power(np.maximum(w_amax, 1e-5),
                                                             1 - alpha)
    return np.where(np.isfinite(s) & (s > 0), s, 1.0).astype(np.float32)


# ----------------------------------------------------------------------------------------
# Activations, in the graph (Relax ops, so that TVM's own build computes the same values).


def _const(value, dtype: str) -> GenericConst:
    return relax.const(np.asarray(value, dtype=dtype), dtype)


def _f32(value: float) -> GenericConst:
    return _const(value, "float32")


class _Graph:
    """Emits the elementwise arithmetic of activation quantization."""

    def __init__(self, bb: relax.BlockBuilder):
        self.bb = bb

    def emit(self, expr):
        return self.bb.emit(expr)

    def floor_log2(self, a):
        """floor(log2(a)) for a > 0, exact: log's estimate corrected by exact powers of 2."""
        op = relax.op
        e = self.emit(op.floor(self.emit(op.divide(self.emit(op.log(a)),
                                                   _f32(math.log(2.0))))))
        up = self.emit(op.astype(op.less_equal(self.emit(op.power(_f32(2.0),
                                                                 op.add(e, _f32(1.0)))), a),
                                 "float32"))
        e = self.emit(op.add(e, up))
        down = self.emit(op.astype(op.greater(self.emit(op.power(_f32(2.0), e)), a), "float32"))
        return self.emit(op.subtract(e, down))

    def round_to_format(self, v, fmt: FloatFormat):
        """v (already within +-max) rounded to nearest-even in the format, subnormals too."""
        op = relax.op
        a = self.emit(op.maximum(self.emit(op.abs(v)), _f32(2.0 ** -126)))
        e = self.emit(op.maximum(self.floor_log2(a), _f32(fmt.min_exponent)))
        ulp = self.emit(op.power(_f32(2.0), op.subtract(e, _f32(fmt.mantissa_bits))))
        r = self.emit(op.multiply(self.emit(op.round(self.emit(op.divide(v, ulp)))), ulp))
        return self.emit(op.clip(r, -fmt.max_value, fmt.max_value))


def _fake_quant_activation(bb: relax.BlockBuilder, x, s: QuantScheme, static_scale):
    """x rounded as the scheme stores activations, back in float32 (exact emulation)."""
    op, g = relax.op, _Graph(bb)
    gran = s.activation_granularity
    shape = list(x.ty.shape.values)  # leading dims may be symbolic (a sequence length)
    k = int(shape[-1])
    xs = x
    if gran == "group":
        xs = bb.emit(op.reshape(x, [*shape[:-1], k // s.activation_group, s.activation_group]))
    fmt = FLOAT_FORMATS.get(s.activation_format)
    if static_scale is not None:
        scale = _f32(static_scale)
    else:
        axis = {"tensor": None, "token": -1, "group": -1,
                "embedding": list(range(len(shape) - 1))}[gran]
        amax = bb.emit(op.max(bb.emit(op.abs(xs)), axis=axis, keepdims=gran != "tensor"))
        if s.scale_dtype == "e8m0":
            emax = fmt.max_exponent if fmt else 0
            safe = bb.emit(op.maximum(amax, _f32(2.0 ** -126)))
            exp = bb.emit(op.subtract(g.floor_log2(safe), _f32(emax)))
            scale = bb.emit(op.power(_f32(2.0), exp))
            if fmt is None:
                scale = bb.emit(op.divide(scale, _f32(2.0 ** (s.activation_bits - 2))))
        else:
            top = fmt.max_value if fmt else int_range(s.activation_bits)[1]
            scale = bb.emit(op.divide(bb.emit(op.maximum(amax, _f32(1e-12))), _f32(top)))
    if fmt is not None:
        v = bb.emit(op.clip(bb.emit(op.divide(xs, scale)), -fmt.max_value, fmt.max_value))
        q = g.round_to_format(v, fmt)
    else:
        qmin, qmax = int_range(s.activation_bits)
        q = bb.emit(op.clip(bb.emit(op.round(bb.emit(op.divide(xs, scale)))), qmin, qmax))
    out = bb.emit(op.multiply(q, scale))
    return bb.emit(op.reshape(out, shape)) if gran == "group" else out


def _fake_quant_kv(bb: relax.BlockBuilder, t, s: QuantScheme, output: bool):
    """A cache tensor ``t[..., heads, tokens, head_dim]`` as the cache stores it, in float32.

    int8 / int4: symmetric codes of ``round(t / scale)`` times the scale, the scale the
    max-abs of the token's values (over all heads, one head, or a group of G channels of a
    head) over the largest code, rounded to float16 (1 where it is 0). float16: a cast
    there and back. ``output`` emits the last value as a dataflow block's output.
    """
    op = relax.op
    last = bb.emit_output if output and bb.current_block_is_dataflow() else bb.emit
    if s.kv_bits == 16:
        return last(op.astype(bb.emit(op.astype(t, "float16")), "float32"))
    shape = list(t.ty.shape.values)
    rank, d = len(shape), int(shape[-1])
    xs, axis = t, [-1]
    if s.kv_granularity == "group":
        if d % s.kv_group:
            raise ValueError(f"quantize({s.name}): KV group size {s.kv_group} does not divide "
                             f"the head dimension {d}")
        xs = bb.emit(op.reshape(t, [*shape[:-1], d // s.kv_group, s.kv_group]))
    elif s.kv_granularity == "token":
        axis = [rank - 3, rank - 1]  # the heads and channels of each token
    qmin, qmax = int_range(s.kv_bits)
    amax = bb.emit(op.max(bb.emit(op.abs(xs)), axis=axis, keepdims=True))
    scale = bb.emit(op.astype(bb.emit(op.astype(bb.emit(op.divide(amax, _f32(qmax))),
                                                 "float16")), "float32"))
    scale = bb.emit(op.where(bb.emit(op.greater(scale, _f32(0.0))), scale, _f32(1.0)))
    q = bb.emit(op.clip(bb.emit(op.round(bb.emit(op.divide(xs, scale)))), qmin, qmax))
    if s.kv_granularity == "group":
        return last(op.reshape(bb.emit(op.multiply(q, scale)), shape))
    return last(op.multiply(q, scale))


def is_attention_gemm(lhs_ty, rhs_ty) -> bool:
    """Whether a matmul of operands of these types is one of attention's GEMMs, as the
    models write them: activation x activation on 4-D ``[batch, heads, rows, cols]``
    operands (a linear layer's weight is 2-D). The quantize pass quantizes the cache operand
    of exactly these, and the codegen charges exactly these with the KV recipe."""
    return all(isinstance(t, relax.TensorType) and t.ndim == 4 for t in (lhs_ty, rhs_ty))


def _kv_writes(func: relax.Function) -> set:
    """The bindings whose values enter the KV cache: the keys and values of the new tokens.

    Each 4-D attention matmul's cache operand (the input of ``permute_dims`` for Q K^T, the
    rhs for P V) is either the new tokens' tensor or ``concat([past, new], axis=2)``; the
    new one is quantized once, where it is bound, so that the cache returned and the
    attention that reads it see the same stored values and a past already stored is
    never quantized again.
    """
    values = relax.analysis.get_var2val(func)

    def bound(expr):
        while isinstance(expr, relax.Var) and expr in values:
            if not isinstance(values[expr], relax.Var):
                return expr, values[expr]
            expr = values[expr]
        return expr, None

    writes = set()
    for value in values.values():
        if not (isinstance(value, relax.Call) and value.op.same_as(_MATMUL)):
            continue
        lhs, rhs = value.args
        if not is_attention_gemm(lhs.ty, rhs.ty):
            continue
        cache, cache_value = bound(rhs)
        if (isinstance(cache_value, relax.Call) and cache_value.op.same_as(_PERMUTE)
                and [int(a) for a in cache_value.attrs.axes or []] == [0, 1, 3, 2]):
            cache, cache_value = bound(cache_value.args[0])  # K^T: the keys are its input
        if isinstance(cache_value, relax.Call) and cache_value.op.same_as(_CONCAT):
            parts = cache_value.args[0]
            if isinstance(parts, relax.Var):
                parts = bound(parts)[1]
            if isinstance(parts, relax.Tuple):
                cache, cache_value = bound(parts.fields[-1])
        if cache_value is not None and not isinstance(cache_value, GenericConst):
            writes.add(cache)
    return writes


# ----------------------------------------------------------------------------------------
# The pass.


@relax.expr_functor.mutator
class _LinearQuantizer(relax.PyExprMutator):
    """Rewrites ``matmul(x, permute_dims(W))`` with a constant float32 ``W[N, K]``.

    With ``observe`` set, it instead passes each linear layer's activation through a packed
    function that records its per-hidden-channel max-abs (calibration).
    """

    def __init__(self, mod: tvm.IRModule, scheme: QuantScheme, stats=None, observe=None):
        super().__init__(mod)
        self.scheme = scheme
        self.rewritten = 0
        self.params: set[relax.Var] = set()
        self.stats = stats  # layer index -> per-hidden-channel amax of x (calibration)
        self.observe = observe
        self.func_name = "a function"
        self.where = "weight"  # the layer being rewritten, for error messages
        self.kv_writes: set = set()  # bindings of new keys / values (KV schemes)

    def _binding_of(self, expr: relax.Expr) -> relax.Expr:
        while isinstance(expr, relax.Var):
            bound = self.lookup_binding(expr)
            if bound is None:
                break
            expr = bound
        return expr

    def visit_function_(self, func: relax.Function) -> relax.Expr:
        self.params = set(func.params)
        name = func.attrs.get("global_symbol") if func.attrs is not None else None
        self.func_name = f"function {str(name)!r}" if name is not None else "a function"
        self.kv_writes = _kv_writes(func) if self.scheme.quantizes_kv else set()
        return super().visit_function_(func)

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        super().visit_var_binding_(binding)
        if binding.var in self.kv_writes:
            emitted = self.get_var_remap(binding.var) or binding.var  # None: kept as it was
            stored = _fake_quant_kv(self.builder_, emitted, self.scheme,
                                    output=not isinstance(binding.var, relax.DataflowVar))
            self.set_var_remap(binding.var, stored)

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not call.op.same_as(_MATMUL):
            return call
        x, rhs = call.args
        transpose = self._binding_of(rhs)
        if not (isinstance(transpose, relax.Call) and transpose.op.same_as(_PERMUTE)):
            return call
        weight = transpose.args[0]
        bound = self._binding_of(weight)
        is_linear = isinstance(bound, GenericConst) or weight in self.params
        ty = weight.ty
        if not (is_linear and isinstance(ty, relax.TensorType) and ty.ndim == 2):
            return call  # an activation x activation matmul (attention): left as it is
        if ty.dtype != "float32" or x.ty.dtype != "float32":
            return call
        if self.scheme.kernel == "float" and self.observe is None:
            return call  # float weights (a scheme that only quantizes the KV cache)
        if not isinstance(bound, GenericConst):
            raise ValueError(  # noqa: TRY004 (a constant is what is wrong, not a type)
                f"quantize({self.scheme.name}): the weight {weight.name} of a linear layer is "
                "a function parameter, not a constant; bind the weights first (e.g. "
                "export_gpt2(config, params), mlp_module(params), or relax.transform.BindParams)"
            )
        layer = self.rewritten
        self.rewritten += 1
        shape = [int(d) for d in ty.shape]
        self.where = f"the weight {shape} of linear layer {self.rewritten} of {self.func_name}"
        if isinstance(weight, relax.Var):
            self.where += f" ({weight.name_hint})"
        if self.observe is not None:
            seen = self.builder_.emit(relax.call_pure_packed(
                self.observe, x, _const(layer, "int64"), ty_args=x.ty))
            return relax.op.matmul(seen, rhs)
        return self._rewrite(x, bound.value.numpy(), layer)

    def _pad(self, x, w):
        s, bb = self.scheme, self.builder_
        n, k = w.shape
        pad = (-k) % s.k_multiple()
        if pad:
            # Zero input channels contribute nothing: x @ W^T is unchanged, and the
            # accelerator is charged for the padded K it would really run.
            w = np.concatenate([w, np.zeros((n, pad), w.dtype)], axis=1)
            rank = x.ty.ndim
            x = bb.emit(relax.op.nn.pad(x, [0, 0] * (rank - 1) + [0, pad]))
        return x, w

    def _rewrite(self, x: relax.Expr, w: np.ndarray, layer: int) -> relax.Expr:
        s, bb, op = self.scheme, self.builder_, relax.op
        amax_x = None if self.stats is None else self.stats[layer]
        x, w = self._pad(x, w)
        n, k = w.shape
        if amax_x is not None and amax_x.shape[0] != k:
            amax_x = np.concatenate([amax_x, np.zeros(k - amax_x.shape[0], np.float32)])
        if s.smoothing and amax_x is not None:
            # SmoothQuant: the division of x is folded into the previous layer in a
            # deployment; here it stays an elementwise op on TVM's path.
            f = smoothing_factors(amax_x, w, s.smoothing)
            w = w * f[None, :]
            x = bb.emit(op.divide(x, _f32(f)))
            amax_x = amax_x / f
        kernel = s.kernel
        if s.quantizes_activations and s.activation_static and amax_x is None:
            raise ValueError(f"quantize({s.name}): static activation scales need calibration")
        if kernel == "emulated":
            return self._emulated(x, w, amax_x)
        if kernel == "int8":
            return self._int8(x, w, amax_x)
        if s.activation_bits == 16:
            # float16 activations on the accelerator: round them, compute in float32.
            x = bb.emit(op.astype(bb.emit(op.astype(x, "float16")), "float32"))
        if kernel == "dequant_channel":
            q, scale = quantize_weight(w, s, self.where)
            deq = op.dequantize(_const(q, "int8"), _const(scale, "float32"),
                                _const(0, "int8"), axis=0, out_dtype="float32")
            return op.matmul(x, bb.emit(op.permute_dims(bb.emit(deq))))
        # Packed int4: unpack the nibbles, remove the zero point, scale per group.
        codes, scale, zp = weight_codes(w, s, self.where)
        if s.weight_format == "uint":
            nibbles_of, zero = codes - INT4_ZERO_POINT, _const(zp, "float32")
        else:
            nibbles_of, zero = codes, _const(INT4_ZERO_POINT, "float32")
        packed = _const(pack_int4(nibbles_of.astype(np.int8)), "uint8")
        low = bb.emit(op.bitwise_and(packed, _const(15, "uint8")))
        high = bb.emit(op.right_shift(packed, _const(4, "uint8")))
        nibbles = bb.emit(op.reshape(bb.emit(op.stack([low, high], axis=-1)), codes.shape))
        centred = bb.emit(op.subtract(bb.emit(op.astype(nibbles, "float32")), zero))
        scaled = op.multiply(centred, _const(scale, "float32"))
        deq = op.reshape(bb.emit(scaled), (n, k))
        return op.matmul(x, bb.emit(op.permute_dims(bb.emit(deq))))

    def _emulated(self, x, w, amax_x):
        s, bb, op = self.scheme, self.builder_, relax.op
        n, k = w.shape
        if s.activation_bits == 16:
            x = bb.emit(op.astype(bb.emit(op.astype(x, "float16")), "float32"))
        elif s.quantizes_activations:
            static = None
            if s.activation_granularity == "embedding" or (s.smoothing and amax_x is None):
                # Per hidden channel: each channel's own scale (calibrated, or this call's).
                if amax_x is not None:
                    static = np.maximum(amax_x, 1e-12) / int_range(s.activation_bits)[1]
                    static = static.astype(np.float32)
                x = _fake_quant_activation(
                    bb, x, dataclasses.replace(s, activation_granularity="embedding",
                                               activation_static=False, smoothing=0.0),
                    static)
            else:
                if s.activation_static:
                    top = (FLOAT_FORMATS[s.activation_format].max_value
                           if s.activation_format in FLOAT_FORMATS
                           else int_range(s.activation_bits)[1])
                    static = np.float32(max(float(amax_x.max()), 1e-12) / top)
                x = _fake_quant_activation(bb, x, s, static)
        codes, scale, zp = weight_codes(w, s, self.where)
        stored = codes - zp if s.weight_format == "uint" else codes
        deq = bb.emit(op.multiply(_const(stored, "float32"), _const(scale, "float32")))
        wt = bb.emit(op.permute_dims(bb.emit(op.reshape(deq, (n, k)))))
        return op.matmul(x, wt)

    def _int8(self, x, w, amax_x):
        s, bb, op = self.scheme, self.builder_, relax.op
        qmin, qmax = int_range(s.activation_bits)
        per_token = s.activation_granularity == "token"
        if s.activation_static:
            sa = _f32(max(float(amax_x.max()), 1e-12) / qmax)
        else:
            absmax = bb.emit(op.max(bb.emit(op.abs(x)), axis=-1 if per_token else None,
                                    keepdims=per_token))
            # max() drops NaN, and a NaN cast to int8 is undefined: a non-finite activation
            # would vanish (or differ between builds). `poison` is 0 for a finite row (or
            # tensor) and NaN otherwise; added to the scale it makes that row's (or the
            # whole per-tensor call's) output NaN, as float32 would, in tenet and TVM's
            # build alike. (sum(x * 0) would not do: TVM folds x * 0 to 0.)
            finite = bb.emit(op.min(bb.emit(op.astype(bb.emit(op.isfinite(x)), "float32")),
                                    axis=-1 if per_token else None, keepdims=per_token))
            poison = bb.emit(op.where(bb.emit(op.greater(finite, _f32(0.5))), _f32(0.0),
                                      _f32(np.nan)))
            floor = bb.emit(op.maximum(absmax, _f32(1e-12)))
            sa = bb.emit(op.divide(bb.emit(op.add(floor, poison)), _f32(qmax)))
        rounded = bb.emit(op.round(bb.emit(op.divide(x, sa))))
        xq = bb.emit(op.astype(bb.emit(op.clip(rounded, qmin, qmax)), "int8"))
        q, scale = quantize_weight(w, s, self.where)
        acc = bb.emit(op.matmul(xq, bb.emit(op.permute_dims(_const(q, "int8"))),
                                out_dtype="int32"))
        scaled = bb.emit(op.multiply(bb.emit(op.astype(acc, "float32")), sa))
        return op.multiply(scaled, _const(scale, "float32"))


def _run_pass(mod: tvm.IRModule, quantizer: _LinearQuantizer) -> tvm.IRModule:
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            quantizer.builder_.update_func(gv, quantizer.visit_expr(func))
    return relax.transform.DeadCodeElimination()(quantizer.builder_.get())


_OBSERVER = "tenet_byoc.quantization.observe"
_observed: dict[int, np.ndarray] = {}


@tvm_ffi.register_global_func(_OBSERVER, override=True)
def _observe(x, layer):
    """Record the per-hidden-channel max-abs of a linear layer's input (calibration)."""
    a = x.numpy()
    amax = np.abs(a.reshape(-1, a.shape[-1])).max(axis=0)
    layer = int(layer.numpy())
    _observed[layer] = np.maximum(_observed.get(layer, amax), amax)
    return tvm.runtime.tensor(a)


def calibrate(mod: tvm.IRModule, calibration: Sequence, entry: str = "main") -> dict:
    """Per-hidden-channel max-abs of every linear layer's input over the calibration inputs.

    Each item of ``calibration`` is the arguments of ``entry`` (a tuple, or one array). The
    float module runs on TVM's own build with each linear layer's input observed.
    """
    probe = _run_pass(mod, _LinearQuantizer(mod, SCHEMES["none"], observe=_OBSERVER))
    vm = relax.VirtualMachine(relax.build(probe, "llvm"), tvm.cpu())
    _observed.clear()
    if len(calibration) == 0:
        raise ValueError("quantize: calibration is an empty list; pass sample inputs or None")
    for item in calibration:
        args = item if isinstance(item, tuple | list) else (item,)
        vm[entry](*[tvm.runtime.tensor(np.asarray(a)) for a in args])
    stats = dict(_observed)
    _observed.clear()
    return stats


def quantize(mod: tvm.IRModule, scheme: str | QuantScheme, calibration: Sequence | None = None,
             entry: str = "main") -> tvm.IRModule:
    """Rewrite the linear layers of ``mod`` to ``scheme``.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module whose linear layers are ``R.matmul(x, R.permute_dims(W))`` with
        ``W[N, K]`` a bound float32 constant. Attention's matmuls (4-D activations,
        :func:`is_attention_gemm`) are left float; under a KV modifier the keys and values
        they read are rounded where the function computes them (a new token's, before it
        is concatenated to the past along axis 2; a past passed in is taken as stored).
    scheme : str or QuantScheme
        A name from :data:`SCHEMES`, a spec string (:func:`parse_spec`) or a scheme.
    calibration : sequence or None
        Sample inputs of ``entry`` (each a tuple of arguments, or one array) that set the
        static activation scales of a static scheme. Without them a static scheme computes
        the same scales from each call's own activations (and is charged as dynamic).
    entry : str
        The function the calibration inputs are for.

    Returns
    -------
    tvm.IRModule
        The rewritten module (unchanged for float32), with the scheme's name in the module
        attribute ``tenet.quant_scheme`` and its cost recipe in ``tenet.quant_recipe``.

    Raises
    ------
    TypeError
        If ``mod`` is not an IRModule.
    ValueError
        For an unknown scheme or bad spec, a linear layer whose weight is a function
        parameter rather than a constant, or a weight with NaN or infinite values (named).
    """
    if not isinstance(mod, tvm.IRModule):
        raise TypeError(f"quantize takes a tvm.IRModule, got {type(mod).__name__}")
    s = get_scheme(scheme)
    if s.kernel == "float" and not s.quantizes_kv:
        return mod
    stats = None
    if s.activation_static:
        if calibration is None:
            s = dataclasses.replace(s, activation_static=False)
        else:
            stats = calibrate(mod, calibration, entry)
    out = _run_pass(mod, _LinearQuantizer(mod, s, stats=stats))
    stamp = {"bits": list(s.bits()), **s.recipe()}
    if s.quantizes_kv:
        stamp["attention"] = _attention_stamp(s)
    recipe = json.dumps(stamp)
    return out.with_attr(SCHEME_ATTR, s.name).with_attr(RECIPE_ATTR, recipe)


__all__ = [
    "CLASSIC_SCHEMES",
    "KV_HELP",
    "RECIPE_ATTR",
    "SCHEMES",
    "SCHEME_ATTR",
    "QuantScheme",
    "attention_scheme",
    "calibrate",
    "get_scheme",
    "is_attention_gemm",
    "pack_int4",
    "parse_spec",
    "quantize",
    "quantize_weight",
    "weight_codes",
]
