"""Quantization schemes as a Relax pass: linear layers rewritten to the scheme's stored form.

:func:`quantize` is the way in: it takes a scheme (:mod:`.scheme`: presets, spec strings,
KV modifiers), calibrates static activation scales on sample inputs when given them
(:mod:`.calibration`), rewrites every linear layer and the KV cache writes (:mod:`.rewrite`,
with the rounding of each format in :mod:`.numerics`), and stamps the scheme's name and cost
recipe on the module; the module stays a normal Relax module that TVM's own build also runs
(the tests' reference). The names other modules use are re-exported here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import tvm

from .calibration import _sample_inputs, calibrate
from .numerics import pack_int4, quantize_weight, weight_codes
from .rewrite import _LinearQuantizer, _run_pass, is_attention_gemm
from .scheme import (
    CLASSIC_SCHEMES,
    KV_HELP,
    MAX_GROUP,
    RECIPE_ATTR,
    SCALE_DTYPES,
    SCHEME_ATTR,
    SCHEMES,
    SPEC_HELP,
    QuantScheme,
    RecipeStamp,
    attention_scheme,
    get_scheme,
    parse_spec,
)


def quantize(mod: tvm.IRModule, scheme: str | QuantScheme, calibration: Sequence | None = None,
             entry: str = "main", *,
             weights: Callable[[str], np.ndarray] | None = None,
             reuse: dict | None = None) -> tvm.IRModule:
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
    weights : callable, optional
        For a module whose linear layers' weights are function parameters (e.g.
        ``export_gpt2(config)`` without params): ``weights(name)`` returns the float32
        weight of the parameter ``name``; it is called once per weight, when its first
        layer is rewritten, and its array is not kept, so the float32 weights need never be
        in memory at once. A parameter read so and no longer used is dropped from its
        function; the other parameters (a weight also used elsewhere, biases) stay for the
        caller to bind (``relax.transform.BindParams``). Not with ``calibration`` (which
        runs the module, so its weights must be bound).
    reuse : dict, optional
        With ``weights``: the stored weights of the previous call given the same dict and
        the same ``weights``; a weight another scheme stored alike (w8a8 and w8a16 per
        channel: the same int8 codes and scales) is taken from it, neither read nor
        quantized again. On return the dict holds this call's stored weights instead.

    Returns
    -------
    tvm.IRModule
        The rewritten module (unchanged for float32), with the scheme's name in the module
        attribute ``tenet.quant_scheme`` and its cost recipe in ``tenet.quant_recipe``.

    Raises
    ------
    ValueError
        For an unknown scheme or bad spec, a module already quantized, a linear layer whose
        weight is a function parameter rather than a constant, a weight with NaN or infinite
        values or whose scales its scale dtype cannot hold (named), or calibration inputs
        with NaN or inf, or that leave a layer's input all zeros.
    TypeError
        For a ``mod`` that is not an IRModule, a ``scheme`` that is not a str or
        QuantScheme, or ``calibration`` that is not a list of arrays (or of tuples of arrays).
    """
    if not isinstance(mod, tvm.IRModule):
        raise TypeError(f"quantize takes a tvm.IRModule, got {type(mod).__name__}")
    s = get_scheme(scheme)
    done = mod.attrs.get(SCHEME_ATTR) if mod.attrs is not None else None
    if done is not None:
        # Its layers already hold the first scheme's values; stamping the second scheme's
        # widths and recipe on them would charge every call for a scheme it does not run.
        raise ValueError(
            f"quantize(mod, {s.name!r}): mod is already quantized with {str(done)!r} (its "
            f"attribute {SCHEME_ATTR}); quantize the float module once with the scheme you "
            "want (a KV modifier composes with any scheme: e.g. 'w4a16_group32+kv8')"
        )
    if calibration is not None:
        _sample_inputs(calibration)  # refused whatever the scheme, not only a static one
    if weights is not None and not callable(weights):
        raise TypeError(f"quantize: weights must be a callable name -> array, got "
                        f"{type(weights).__name__}")
    if weights is not None and calibration is not None:
        raise ValueError("quantize: calibration runs the module, so its weights must be bound; "
                         "pass weights=None with calibration")
    if s.kernel == "float" and not s.quantizes_kv:
        return mod
    ranges = None
    if s.activation_static:
        if calibration is None:
            s = dataclasses.replace(s, activation_static=False)
        else:
            ranges = calibrate(mod, calibration, entry)
    quantizer = _LinearQuantizer(mod, s, ranges=ranges, weights=weights,
                                 reuse=reuse if weights is not None else None)
    out = _run_pass(mod, quantizer)
    if weights is not None and reuse is not None:
        reuse.clear()  # the earlier call's weights are no longer held for the next
        reuse.update(quantizer.stored_streamed())
    return out.with_attr(SCHEME_ATTR, s.name).with_attr(RECIPE_ATTR, RecipeStamp.of(s).text())


__all__ = [
    "CLASSIC_SCHEMES",
    "KV_HELP",
    "MAX_GROUP",
    "RECIPE_ATTR",
    "RecipeStamp",
    "SCALE_DTYPES",
    "SCHEMES",
    "SCHEME_ATTR",
    "SPEC_HELP",
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
