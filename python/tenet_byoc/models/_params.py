"""Checking a model's weights against the shapes it expects, naming what is wrong."""

from __future__ import annotations

from collections.abc import Mapping

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
