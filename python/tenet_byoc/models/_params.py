"""Checking a model's weights against the shapes it expects, and a config's numbers, naming what is wrong."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import tvm


def check_named_arrays(
    model: str, expected: Mapping[str, tuple[int, ...]],
    params: Mapping[str, np.ndarray | tvm.runtime.Tensor],
) -> dict[str, np.ndarray | tvm.runtime.Tensor]:
    """Contiguous float32 copies of ``params`` in the order of ``expected``.

    A float32 ``tvm.runtime.Tensor`` is taken as it is (not copied): it is already what an
    export binds.

    Raises
    ------
    KeyError
        If a weight is missing; the message names it and its expected shape.
    ValueError
        If a weight has the wrong shape; the message names it and both shapes.
    """
    out = {}
    for name, shape in expected.items():
        if name not in params:
            raise KeyError(f"{model} params lack {name!r} (expected shape {list(shape)})")
        value = params[name]
        tensor = isinstance(value, tvm.runtime.Tensor) and value.dtype == "float32"
        if not tensor:
            value = np.asarray(value)
        if tuple(value.shape) != tuple(shape):
            raise ValueError(
                f"{model} param {name!r} has shape {list(value.shape)}, expected {list(shape)}"
            )
        out[name] = value if tensor else np.ascontiguousarray(value, dtype=np.float32)
    return out


def check_positive_numbers(obj: Any, fields: Iterable[str], optional: tuple[str, ...] = ()
                           ) -> None:
    """Refuse the first of ``fields``, then ``optional`` (None passes there), of ``obj``
    that is not a finite number above 0 (a bool is not one): ValueError naming
    ``Type.field`` and the value."""
    for field in (*fields, *optional):
        value = getattr(obj, field)
        if value is None and field in optional:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                0 < value < math.inf):
            raise ValueError(f"{type(obj).__name__}.{field}={value!r} must be a positive number")
