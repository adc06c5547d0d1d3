"""The scheme language: :class:`QuantScheme`, its presets, spec strings and KV modifiers.

A :class:`QuantScheme` says, per operand, how a linear layer's weights (B) and activations
(A) are stored: bits, format (symmetric int, asymmetric int with zero points, fp8 e4m3 /
e5m2, fp4 e2m1, MX blocks), granularity of the scales, dynamic or calibrated activation
scales, and the scale dtype. :data:`SCHEMES` names the presets; a spec string
(:func:`parse_spec`) composes any other; a KV-cache modifier (``+kv16``, ``+kv8``, ``+kv4``,
optionally ``/head`` or ``/groupG``; :data:`KV_HELP`) adds the cache's width. Every value is
checked where it is made, so :func:`tenet_byoc.quantize` and ``estimate`` accept and refuse
the same schemes. This module knows no TVM: it is plain values.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import numbers
import re
from dataclasses import dataclass

from .._names import did_you_mean
from ..cost_model import QuantRecipe

#: The module attribute naming the scheme :func:`quantize` applied; the partition step
#: carries it to the codegen, which records it on every quantized call.
SCHEME_ATTR = "tenet.quant_scheme"
#: The module attribute holding the scheme's widths and cost recipe (the text of a
#: :class:`RecipeStamp`), carried like :data:`SCHEME_ATTR`; the codegen copies it into each
#: quantized step.
RECIPE_ATTR = "tenet.quant_recipe"

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


_FORMAT_BITS = {"e4m3": 8, "e5m2": 8, "e2m1": 4}

#: The largest group of weights or activations (``group_size``, ``activation_group``): a
#: group longer than a layer's K only pads K with zeros (``w=int4/group1000000000`` would pad
#: GPT-2's 768 to 10^9 channels); one scale per whole row is ``channel`` granularity.
MAX_GROUP = 4096
#: The largest KV group (``kv_group``): a group lies within one head, and 256 is the widest
#: head of the models here. KV groups are powers of two, so that one divides every head
#: dimension that is a multiple of it (64, 80, 96, 128, ...): ``estimate``, which sees no head
#: dimension, then refuses what :func:`tenet_byoc.quantize` would.
MAX_KV_GROUP = 256

#: Each field type of :class:`QuantScheme`: the values it takes, what a message says of it
#: and what a value becomes (a numpy int a plain int).
_FIELD_TYPES = {"int": (numbers.Integral, "an int", int), "str": (str, "a str", str),
                "bool": (bool, "True or False", bool),
                "float": (numbers.Real, "a number in [0, 1]", float)}


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
        self._check_types()
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
        for field, gran, what, bound in (
                ("group_size", self.weight_granularity, "weights", MAX_GROUP),
                ("activation_group", self.activation_granularity, "activations", MAX_GROUP),
                ("kv_group", self.kv_granularity, "KV scales", MAX_KV_GROUP)):
            size = getattr(self, field)  # exactly with group granularity, 1 to the bound
            if (gran == "group") != (size > 0):
                raise ValueError(f"QuantScheme.{field}={size} must be > 0 "
                                 f"exactly for group-wise {what}")
            if size < 0:
                raise ValueError(f"QuantScheme.{field}={size}; expected 0 "
                                 f"(no groups) or a group of 1 to {bound} channels")
            if size > bound:
                why = ("a KV group lies within one head's channels" if field == "kv_group" else
                       "a group beyond K only pads K with zeros (one scale per row is "
                       "'channel' granularity)")
                raise ValueError(
                    f"QuantScheme {self.name!r}: {field}={size} is above the "
                    f"largest group, {bound}; {why}"
                )
        quantized = [g for g, q in ((self.weight_granularity, True),
                                    (self.activation_granularity, self.activation_bits < 16))
                     if q]
        for broken, message in (  # in order: the first that applies is refused
            (self.kv_group & (self.kv_group - 1),
             f"QuantScheme {self.name!r}: kv_group={self.kv_group}; KV groups are powers of "
             f"two (1, 2, 4, ..., {MAX_KV_GROUP}) so that a group divides a head's channels"),
            (self.kernel == "dequant_group" and self.group_size % 2,
             f"QuantScheme.group_size={self.group_size} must be even: int4 values are "
             "packed two to a byte"),
            (self.activation_static
             and self.activation_granularity not in ("tensor", "embedding"),
             f"QuantScheme.activation_static=True with activation_granularity="
             f"{self.activation_granularity!r}; static scales are per tensor or embedding"),
            (not 0.0 <= self.smoothing <= 1.0 or (self.smoothing and (
                self.activation_format != "int" or self.weight_format != "int")),
             f"QuantScheme.smoothing={self.smoothing}; expected 0 (none) or alpha in "
             "(0, 1] with int weights and int activations"),
            (self.activation_granularity == "embedding" and self.smoothing,
             "QuantScheme: per-embedding activation scales already absorb outlier "
             "channels; use smoothing with per-tensor or per-token activations"),
            (self.scale_dtype == "e8m0" and (any(g != "group" for g in quantized)
                                             or self.weight_format == "uint"),
             f"QuantScheme {self.name!r}: scale_dtype='e8m0' (MX) needs symmetric, "
             "group-wise (block) scales on every quantized operand"),
        ):
            if broken:
                raise ValueError(message)

    def _check_types(self) -> None:
        """Refuse a field of the wrong type (``weight_bits=8.0``, ``activation_static=1``)
        before the checks of values, which would let ``8.0 == 8`` through."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            kind, expected, plain = _FIELD_TYPES[f.type]
            if isinstance(value, bool) != (kind is bool) or not isinstance(value, kind):
                raise TypeError(f"QuantScheme.{f.name}={value!r} ({type(value).__name__}); "
                                f"expected {expected}")
            object.__setattr__(self, f.name, plain(value))

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

    def recipe(self, operand: str = "weight") -> QuantRecipe:
        """The cost recipe: the cost model's ``QuantRecipe`` value (``src/cost_model/charge.h``
        writes its fields once).

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
        return QuantRecipe(
            place=self.dequant_place(),
            weight=weight,
            weight_group=self.group_size,
            activation=act,
            activation_group=self.activation_group,
            activation_static=self.activation_static,
            k_group=self.k_group(),
            scale_bits=SCALE_DTYPES[self.scale_dtype],
            zero_point_bits=self.weight_bits if self.weight_format == "uint" else 0,
            accumulator_bits=32,
            # A KV cache is one tensor per batch element (head): scales and dequantization
            # are counted per head.
            weight_batched=self.attention and self.weight_granularity != "none",
            # fp8 / fp4 codes need a float MAC unit (an int8 one does not take them)
            float_codes=bool({self.weight_format, self.activation_format} & _FORMAT_BITS.keys()),
        )

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


#: The named schemes (``tenet-byoc presets`` lists them with their definitions). The first
#: seven are the original names, with their original numbers.
SCHEMES: dict[str, QuantScheme] = {
    s.name: s
    for s in [
        QuantScheme("none"),
        QuantScheme("w8a8_per_tensor", 8, "tensor", 8, "tensor"),
        QuantScheme("w8a8_per_channel_per_token", 8, "channel", 8, "token"),
        QuantScheme("w8a16_per_channel", 8, "channel", 16, "none"),
        *[QuantScheme(f"w4a16_group{g}", 4, "group", 16, "none", g) for g in (32, 64, 128)],
        # The four granularities of the question, W8A8 int.
        QuantScheme("per_tensor", 8, "tensor", 8, "tensor"),
        QuantScheme("per_token", 8, "channel", 8, "token"),
        QuantScheme("per_embedding", 8, "channel", 8, "embedding", activation_static=True),
        *[QuantScheme(f"group{g}", 8, "group", 8, "group", g, activation_group=g)
          for g in (32, 64, 128)],
        # MLC-LLM's formats (q4f16_0 and q4f16_1 differ only in MLC's memory layout).
        QuantScheme("q0f32"),
        QuantScheme("q0f16", 16, "none", 16, "none"),
        *[QuantScheme(f"q4f16_{v}", 4, "group", 16, "none", 32) for v in (0, 1)],
        QuantScheme("q4f16_ft", 4, "channel", 16, "none"),
        QuantScheme("q4f16_awq", 4, "group", 16, "none", 128, weight_format="uint"),
        QuantScheme("e4m3_e4m3_f16", 8, "tensor", 8, "tensor", weight_format="e4m3",
                    activation_format="e4m3", scale_dtype="fp32"),
        # Outlier handling and mixed precision.
        QuantScheme("smoothquant", 8, "channel", 8, "tensor", activation_static=True,
                    smoothing=0.5),
        QuantScheme("w4a8", 4, "channel", 8, "token"),
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


_INT_FORMAT = re.compile(r"(u?int)([0-9]+)")


def _parse_operand(text: str, role: str) -> tuple[int, str, str, int]:
    fmt_text, slash, gran = text.partition("/")
    int_format = _INT_FORMAT.fullmatch(fmt_text)
    if fmt_text in ("f32", "f16"):
        bits, fmt = int(fmt_text[1:]), "float"
    elif fmt_text in _FORMAT_BITS:
        bits, fmt = _FORMAT_BITS[fmt_text], fmt_text
    elif int_format:
        fmt, bits = int_format.group(1), int(int_format.group(2))
    else:
        raise ValueError(f"spec {role}={text!r}: unknown format {fmt_text!r}; {SPEC_HELP}")
    if slash and not gran:
        raise ValueError(f"spec {role}={text!r}: nothing after '/'; name a granularity "
                         "(tensor, channel, token, embedding or groupG) or drop the '/'")
    gran, group = _group(gran, f"spec {role}={text!r}")
    if gran == "":
        gran = "none" if fmt == "float" else "tensor"
    return bits, fmt, gran, group


def _group(granularity: str, where: str) -> tuple[str, int]:
    """``("group", G)`` for ``groupG``, else the granularity as given and 0."""
    if not granularity.startswith("group"):
        return granularity, 0
    if not granularity[5:].isdigit() or int(granularity[5:]) < 1:
        raise ValueError(f"{where}: groupG needs a positive integer G")
    return "group", int(granularity[5:])


def parse_spec(spec: str) -> QuantScheme:
    """A scheme from a spec string (its name is the string itself), e.g.
    ``"w=int4/group32,a=f16"`` (q4f16_1), ``"w=e2m1/group32,a=e2m1/group32,scale=e8m0"``
    (mxfp4), ``"w=int8/channel,a=int8/embedding,static"``; a ``ValueError`` names the part
    that is wrong and what is accepted (:data:`SPEC_HELP`)."""
    if not isinstance(spec, str):
        raise TypeError(f"parse_spec: spec={spec!r} ({type(spec).__name__}); expected a str "
                        f"such as 'w=int4/group32,a=f16'")
    fields: dict = {}
    seen: dict[str, str] = {}
    for part in (p.strip() for p in spec.split(",")):
        key, eq, value = part.partition("=")
        what = key if eq else part
        if what in seen:
            raise ValueError(f"spec {spec!r}: {part!r} repeats {seen[what]!r}; give each part "
                             "once")
        seen[what] = part
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
    gran, group = _group(gran, f"quantization scheme {scheme!r}: +{text}")
    if gran not in ("", "token", "head", "group"):
        raise ValueError(f"quantization scheme {scheme!r}: +{text}: unknown KV granularity "
                         f"{gran!r}; {KV_HELP}")
    return {"kv_bits": bits, "kv_granularity": gran or "token", "kv_group": group}


def get_scheme(scheme: str | QuantScheme) -> QuantScheme:
    """A scheme by preset name (see :data:`SCHEMES`) or spec string, or the scheme itself,
    with an optional KV-cache modifier (``per_token+kv8``; see :data:`KV_HELP`)."""
    if isinstance(scheme, QuantScheme):
        return scheme
    if not isinstance(scheme, str):
        raise TypeError(f"scheme={scheme!r} ({type(scheme).__name__}); expected a preset name "
                        "(tenet_byoc.quantization.SCHEMES), a spec string such as "
                        "'w=int4/group32,a=f16', or a QuantScheme")
    return _named_scheme(scheme)


@functools.lru_cache(maxsize=256)
def _named_scheme(scheme: str) -> QuantScheme:
    """:func:`get_scheme` of a name or spec (schemes are immutable: each made once)."""
    if scheme in SCHEMES:
        return SCHEMES[scheme]
    if "+" in scheme:
        base, _, modifier = scheme.partition("+")
        if "+" in modifier:
            raise ValueError(f"quantization scheme {scheme!r} has more than one KV modifier "
                             f"(+{modifier.replace('+', ', +')}); give one. {KV_HELP}")
        return dataclasses.replace(get_scheme(base), name=scheme,
                                   **_parse_kv(modifier, scheme))
    if "=" in scheme or "," in scheme:
        return parse_spec(scheme)
    raise ValueError(
        f"unknown quantization scheme {scheme!r}{did_you_mean(scheme, SCHEMES)}; it is neither "
        f"one of the {len(SCHEMES)} presets available (tenet_byoc.quantization.SCHEMES; "
        f"`tenet-byoc presets` lists them) nor a spec string: {SPEC_HELP}"
    )


def attention_scheme(scheme: str | QuantScheme) -> QuantScheme:
    """What the attention GEMMs of a model quantized with ``scheme`` are charged with.

    Attention multiplies activations: ``Q K^T`` and ``P V``. Q and P stay float32 (the
    quantize pass does not touch them); the B operand, K^T or V, is the KV cache at the
    scheme's KV width. The returned scheme's "weight" is that cache: ``bits()`` gives the
    widths (A, B, C) and ``recipe("key")`` / ``recipe("value")`` the cost recipe of
    ``Q K^T`` / ``P V`` (scales per key token, per value token, or per group of a token's
    channels, counted per head: ``weight_batched``). Without a KV modifier this is float32
    (``bits() == (32, 32, 32)``, no side data), as attention has always been charged. The
    result has ``attention=True`` and is named as ``scheme`` (a preset, spec string or
    scheme, with or without ``+kvB[/GRANULARITY]``).
    """
    s = get_scheme(scheme)
    fields: dict = {"weight_bits": s.kv_bits}
    if s.kv_bits < 16:
        fields.update(weight_format="int", scale_dtype="fp16",
                      weight_granularity="group" if s.kv_granularity == "group" else "channel",
                      group_size=s.kv_group)
    return QuantScheme(s.name, **fields, kv_bits=s.kv_bits, kv_granularity=s.kv_granularity,
                       kv_group=s.kv_group, attention=True)


@dataclass(frozen=True)
class RecipeStamp:
    """What :func:`~tenet_byoc.quantize` stamps on a module for the codegen (the text of
    :data:`RECIPE_ATTR`): the linear layers' widths and recipe and, under a scheme that
    quantizes the KV cache, attention's per role (``"key"``: ``Q K^T``, ``"value"``:
    ``P V``). :meth:`text` writes it and :meth:`read` reads it, each recipe by the cost
    model's one JSON form (``QuantRecipe.as_dict`` / ``QuantRecipe.from_dict``)."""

    bits: tuple[int, int, int]
    recipe: QuantRecipe
    attention: dict[str, tuple[tuple[int, int, int], QuantRecipe]] | None = None

    @classmethod
    def of(cls, s: QuantScheme) -> RecipeStamp:
        """The stamp of a module quantized by ``s``."""
        attention = None
        if s.quantizes_kv:
            att = attention_scheme(s)
            attention = {role: (tuple(att.bits()), att.recipe(role)) for role in ("key", "value")}
        return cls(tuple(s.bits()), s.recipe(), attention)

    def text(self) -> str:
        stamp: dict = {"bits": list(self.bits), "recipe": self.recipe.as_dict()}
        if self.attention is not None:
            stamp["attention"] = {role: {"bits": list(bits), "recipe": recipe.as_dict()}
                                  for role, (bits, recipe) in self.attention.items()}
        return json.dumps(stamp)

    @classmethod
    def read(cls, text: str) -> RecipeStamp:
        stamp = json.loads(text)
        attention = stamp.get("attention")
        return cls(tuple(stamp["bits"]), QuantRecipe.from_dict(stamp["recipe"]),
                   None if attention is None else {
                       role: (tuple(v["bits"]), QuantRecipe.from_dict(v["recipe"]))
                       for role, v in attention.items()})


