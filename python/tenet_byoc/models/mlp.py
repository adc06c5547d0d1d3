"""The image-classifier MLP (inputs -> 128 -> ReLU -> 10) in Relax, and the same network in numpy.

The input size follows the data: 784 for FashionMNIST's 28 x 28 images (the default, as in
the MLC course), 64 for scikit-learn's 8 x 8 handwritten digits.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import tvm
from tvm import relax
from tvm.ir import IRModule

from ._params import check_named_arrays

__all__ = [
    "HIDDEN",
    "INPUT",
    "OUTPUT",
    "mlp_accuracy",
    "mlp_inputs",
    "mlp_module",
    "mlp_numpy",
    "param_shapes",
    "random_mlp_params",
]

INPUT, HIDDEN, OUTPUT = 784, 128, 10


def param_shapes(inputs: int = INPUT) -> dict[str, tuple[int, ...]]:
    """Weight names and shapes for ``inputs`` input features, in the order ``main`` takes them
    (as in the MLC course).

    Raises
    ------
    ValueError
        If ``inputs`` is not a positive integer.
    """
    if isinstance(inputs, bool) or not isinstance(inputs, (int, np.integer)) or inputs < 1:
        raise ValueError(f"MLP inputs={inputs!r} must be a positive integer")
    inputs = int(inputs)
    return {"w0": (HIDDEN, inputs), "b0": (HIDDEN,), "w1": (OUTPUT, HIDDEN), "b1": (OUTPUT,)}


#: The shapes of the FashionMNIST MLP (784 inputs).
PARAM_SHAPES: dict[str, tuple[int, ...]] = param_shapes(INPUT)


# ----------------------------------------------------------------------------------------
# The Relax module
# ----------------------------------------------------------------------------------------


def _check_params(params: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    # The input size is read from w0 (the one weight that holds it), then every shape checked.
    w0 = params.get("w0") if isinstance(params, Mapping) else None
    shape = np.shape(w0) if w0 is not None else ()
    inputs = shape[1] if len(shape) == 2 and shape[1] > 0 else INPUT
    return check_named_arrays("MLP", param_shapes(inputs), params)


def mlp_inputs(params: Mapping[str, np.ndarray]) -> int:
    """The number of input features of checked MLP weights (``w0``'s columns)."""
    return int(_check_params(params)["w0"].shape[1])


def mlp_module(params: Mapping[str, np.ndarray] | None = None, *, inputs: int = INPUT
               ) -> IRModule:
    """Build the MLP as a Relax IRModule with one function, ``main``.

    ``main`` computes ``relu(x @ w0.T + b0) @ w1.T + b1`` as ``R.matmul(x, R.permute_dims(w0))``,
    ``R.add``, ``R.nn.relu``, ``R.matmul``, ``R.add``: the same linear-layer form as GPT-2's.

    ``params`` (``w0 [128, I]``, ``b0 [128]``, ``w1 [10, 128]``, ``b1 [10]``), when given,
    are bound into the module as constants, and ``I`` (w0's columns) is the input size;
    without them it is ``inputs`` (784, FashionMNIST's, by default) and ``main(x: [batch,
    I] float32, w0, b0, w1, b1) -> [batch, 10]`` takes them. ``batch`` is symbolic; the
    attribute ``num_input`` is 1.

    Raises
    ------
    ValueError, KeyError
        A weight of the wrong shape or a missing one (named), or a bad ``inputs``.
    """
    checked = None if params is None else _check_params(params)
    shapes = param_shapes(inputs if checked is None else checked["w0"].shape[1])
    batch = tvm.tirx.Var("batch", "int64")
    x = relax.Var("x", relax.TensorType([batch, shapes["w0"][1]], "float32"))
    weights = {
        name: relax.Var(name, relax.TensorType(list(shape), "float32"))
        for name, shape in shapes.items()
    }
    bb = relax.BlockBuilder()
    with bb.function("main", [x, *weights.values()], attrs={"num_input": 1}):
        with bb.dataflow():
            w0, b0, w1, b1 = weights.values()
            h = bb.emit(relax.op.matmul(x, relax.op.permute_dims(w0)))
            h = bb.emit(relax.op.add(h, b0))
            h = bb.emit(relax.op.nn.relu(h))
            y = bb.emit(relax.op.matmul(h, relax.op.permute_dims(w1)))
            y = bb.emit_output(relax.op.add(y, b1))
        bb.emit_func_output(y)
    mod = bb.finalize()
    if checked is not None:
        values = {k: tvm.runtime.tensor(v) for k, v in checked.items()}
        mod = relax.transform.BindParams("main", values)(mod)
    return mod


def mlp_numpy(x: np.ndarray, params: Mapping[str, np.ndarray]) -> np.ndarray:
    """The MLP's logits ``[batch, 10]`` for images ``x`` ``[batch, I]``, in numpy."""
    p = _check_params(params)
    h = np.maximum(x @ p["w0"].T + p["b0"], 0)
    return h @ p["w1"].T + p["b1"]


def mlp_accuracy(x: np.ndarray, labels: np.ndarray, params: Mapping[str, np.ndarray]) -> float:
    """Fraction of ``x`` whose argmax logit equals the label."""
    return float(np.mean(np.argmax(mlp_numpy(x, params), axis=1) == labels))


def random_mlp_params(seed: int = 0, inputs: int = INPUT) -> dict[str, np.ndarray]:
    """Seeded He-initialised weights and zero biases (an untrained MLP of ``inputs`` inputs)."""
    inputs = param_shapes(inputs)["w0"][1]
    rng = np.random.default_rng(seed)
    return {
        "w0": (rng.standard_normal((HIDDEN, inputs)) * np.sqrt(2 / inputs)).astype(np.float32),
        "b0": np.zeros(HIDDEN, np.float32),
        "w1": (rng.standard_normal((OUTPUT, HIDDEN)) * np.sqrt(2 / HIDDEN)).astype(np.float32),
        "b1": np.zeros(OUTPUT, np.float32),
    }
