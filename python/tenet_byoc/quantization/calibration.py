"""Calibration: the input range of every linear layer over sample inputs, for static scales.

:func:`calibrate` runs the float module on TVM's own build, probed so that each function also
returns its linear layers' per-hidden-channel max-abs (:class:`_LinearQuantizer` in probe
mode), and gathers them, checked, into the ranges by layer that the rewrite pass reads.
Nothing is kept between calls: the ranges live in the value returned.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tvm
from tvm import relax

from .rewrite import _LinearQuantizer, _run_pass
from .scheme import SCHEMES


def _sample_inputs(calibration: object) -> list[tuple[np.ndarray, ...]]:
    """The calibration inputs as argument tuples of numpy arrays, checked."""
    accepted = ("a list of sample inputs, each a tuple of the entry function's arguments or "
                "one array (e.g. calibration=[x1, x2])")
    if isinstance(calibration, str | bytes) or not isinstance(calibration, Sequence):
        raise TypeError(f"quantize: calibration={calibration!r:.60} "
                        f"({type(calibration).__name__}); expected {accepted}, or None")
    if len(calibration) == 0:
        raise ValueError("quantize: calibration is an empty list; pass sample inputs or None")
    samples = []
    for i, item in enumerate(calibration):
        args = item if isinstance(item, tuple | list) else (item,)
        arrays = []
        for j, a in enumerate(args):
            what = f"calibration[{i}]" + (f"[{j}]" if isinstance(item, tuple | list) else "")
            try:
                arr = np.asarray(a)
            except (TypeError, ValueError) as err:
                raise TypeError(f"quantize: {what} is not an array ({err}); expected "
                                f"{accepted}") from None
            if arr.dtype.kind not in "biuf":
                raise TypeError(f"quantize: {what} has dtype {arr.dtype} "
                                f"({type(a).__name__}); expected numeric arrays: {accepted}")
            bad = np.argwhere(~np.isfinite(arr)) if arr.dtype.kind == "f" else ()
            if len(bad):
                at = tuple(int(v) for v in bad[0])
                raise ValueError(
                    f"quantize: {what} has {len(bad)} non-finite value(s), the first "
                    f"{arr[at]} at {list(at)}; calibration inputs must be finite (a NaN or "
                    "inf would make every static scale, and so every output, NaN)"
                )
            arrays.append(arr)
        samples.append(tuple(arrays))
    return samples


def calibrate(mod: tvm.IRModule, calibration: Sequence,
              entry: str = "main") -> dict[int, np.ndarray]:
    """Per-hidden-channel max-abs of every linear layer's input over the calibration inputs.

    Each item of ``calibration`` is the arguments of ``entry`` (a tuple, or one array). The
    float module runs on TVM's own build, each function also returning its linear layers'
    input ranges: a float32 ``[K]`` array by layer index (in the order the quantize pass
    meets linear layers). A non-finite range (NaN or inf reached the layer) is refused, and
    so is a layer whose input was all zeros (its static scale would be 0, and every later
    input would quantize to 0).

    Raises
    ------
    TypeError
        If ``calibration`` is not a list of numeric arrays (or tuples of them).
    ValueError
        For an empty list, an input with NaN or inf, an unknown ``entry``, or a layer whose
        input range is non-finite or all zero (each named).
    """
    samples = _sample_inputs(calibration)
    names = [gv.name_hint for gv in mod.functions]
    if entry not in names:
        raise ValueError(f"quantize: entry={entry!r} is not a function of the module; it has "
                         f"{', '.join(sorted(names))}")
    prober = _LinearQuantizer(mod, SCHEMES["none"], probe=True)
    probe = _run_pass(mod, prober)
    if not relax.analysis.check_well_formed(probe):
        raise ValueError("quantize: calibration needs the linear layers of each function at "
                         "its top level (not inside a branch or a nested function)")
    probed = prober.probed.get(entry, [])
    amax: dict[int, np.ndarray] = {}
    if not probed:  # no linear layer in entry: nothing to observe
        return amax
    vm = relax.VirtualMachine(relax.build(probe, "llvm"), tvm.cpu())
    for args in samples:
        _, ranges = vm[entry](*[tvm.runtime.tensor(a) for a in args])
        for (layer, _), seen in zip(probed, ranges, strict=True):
            a = seen.numpy()
            amax[layer] = np.maximum(amax[layer], a) if layer in amax else a
    for layer, where in probed:
        a = amax[layer]
        if not np.all(np.isfinite(a)):
            raise ValueError(
                f"quantize: calibration: the input of {where} reached non-finite values "
                f"(max |x| {float(np.max(a))}) on the calibration inputs of {entry!r}; "
                "static scales need finite activations"
            )
        if a.size and float(a.max()) == 0.0:
            raise ValueError(
                f"quantize: calibration: the input of {where} is all zeros on every "
                f"calibration input of {entry!r}: its static scale would be 0 and every "
                "other input would quantize to 0; calibrate on representative (nonzero) "
                "inputs"
            )
    return amax
