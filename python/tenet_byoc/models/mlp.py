"""The FashionMNIST MLP (784 -> 128 -> ReLU -> 10) in Relax, and the same network in numpy."""

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
    "mlp_module",
    "mlp_numpy",
    "random_mlp_params",
]

INPUT, HIDDEN, OUTPUT = 784, 128, 10
# Weight names and shapes, in the order ``main`` takes them (as in the MLC course).
PARAM_SHAPES: dict[str, tuple[int, ...]] = {
    "w0": (HIDDEN, INPUT),
    "b0": (HIDDEN,),
    "w1": (OUTPUT, HIDDEN),
    "b1": (OUTPUT,),
}


# ----------------------------------------------------------------------------------------
# The Relax module
# ----------------------------------------------------------------------------------------


def _check_params(params: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return check_named_arrays("MLP", PARAM_SHAPES, params)


def mlp_module(params: Mapping[str, np.ndarray] | None = None) -> IRModule:
    """Build the MLP as a Relax IRModule with one function, ``main``.

    ``main`` computes ``relu(x @ w0.T + b0) @ w1.T + b1`` as ``R.matmul(x, R.permute_dims(w0))``,
    ``R.add``, ``R.nn.relu``, ``R.matmul``, ``R.add``: the same linear-layer form as GPT-2's.

    Parameters
    ----------
    params : mapping of str to numpy.ndarray, optional
        ``w0 [128, 784]``, ``b0 [128]``, ``w1 [10, 128]``, ``b1 [10]``. When given they are
        bound into the module as constants.

    Returns
    -------
    IRModule
        Without params: ``main(x: [batch, 784] float32, w0, b0, w1, b1) -> [batch, 10]``;
        with params: ``main(x: [batch, 784] float32) -> [batch, 10]``. ``batch`` is
        symbolic; the attribute ``num_input`` is 1.
    """
    batch = tvm.tirx.Var("batch", "int64")
    x = relax.Var("x", relax.TensorType([batch, INPUT], "float32"))
    weights = {
        name: relax.Var(name, relax.TensorType(list(shape), "float32"))
        for name, shape in PARAM_SHAPES.items()
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
    if params is not None:
        values = {k: tvm.runtime.tensor(v) for k, v in _check_params(params).items()}
        mod = relax.transform.BindParams("main", values)(mod)
    return mod


def mlp_numpy(x: np.ndarray, params: Mapping[str, np.ndarray]) -> np.ndarray:
    """The MLP's logits ``[batch, 10]`` for images ``x`` ``[batch, 784]``, in numpy."""
    p = _check_params(params)
    h = np.maximum(x @ p["w0"].T + p["b0"], 0)
    return h @ p["w1"].T + p["b1"]


def mlp_accuracy(x: np.ndarray, labels: np.ndarray, params: Mapping[str, np.ndarray]) -> float:
    """Fraction of ``x`` whose argmax logit equals the label."""
    return float(np.mean(np.argmax(mlp_numpy(x, params), axis=1) == labels))


def random_mlp_params(seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded He-initialised weights and zero biases (an untrained MLP)."""
    rng = np.random.default_rng(seed)
    return {
        "w0": (rng.standard_normal((HIDDEN, INPUT)) * np.sqrt(2 / INPUT)).astype(np.float32),
        "b0": np.zeros(HIDDEN, np.float32),
        "w1": (rng.standard_normal((OUTPUT, HIDDEN)) * np.sqrt(2 / HIDDEN)).astype(np.float32),
        "b1": np.zeros(OUTPUT, np.float32),
    }
