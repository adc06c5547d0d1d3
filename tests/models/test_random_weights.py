"""GPT-2's seeded random weights: drawn into tensors, drawn again one at a time, bound uncopied.

The reference is the definition written out with numpy: one generator seeded with the seed,
each weight drawn in ``param_shapes`` order as ``standard_normal(shape) * std``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import tvm
from tvm.ir.expr import GenericConst

from tenet_byoc.models.gpt2 import (
    GPT2Config,
    RandomWeights,
    export_gpt2,
    param_shapes,
    random_params,
)

TINY = GPT2Config.preset("tiny")


def numpy_reference(config: GPT2Config, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in param_shapes(config).items():
        if name.endswith(".bias"):
            out[name] = np.zeros(shape, np.float32)
        elif name.startswith("ln_") or ".ln_" in name:
            out[name] = np.ones(shape, np.float32)
        else:
            std = 0.02 / math.sqrt(2 * config.n_layer) if name.endswith("c_proj.weight") else 0.02
            out[name] = rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
    return out


@pytest.mark.parametrize("seed", [0, 7])
def test_numpy_and_tensor_weights_equal_the_definition(seed):
    want = numpy_reference(TINY, seed)
    arrays = random_params(TINY, seed)
    tensors = random_params(TINY, seed, tensors=True)
    assert list(arrays) == list(tensors) == list(want)
    for name, value in want.items():
        assert isinstance(tensors[name], tvm.runtime.Tensor)
        np.testing.assert_array_equal(arrays[name], value, err_msg=name)
        np.testing.assert_array_equal(tensors[name].numpy(), value, err_msg=name)


def test_a_weight_drawn_again_equals_its_first_draw_in_any_order():
    want = numpy_reference(TINY, 3)
    fresh = RandomWeights(TINY, 3)  # never drew them all: finds the states itself
    for name in reversed(list(want)):
        np.testing.assert_array_equal(fresh.draw(name), want[name], err_msg=name)
    after_all = RandomWeights(TINY, 3)
    after_all.draw_all(tensors=True)
    name = "h.1.mlp.c_proj.weight"
    first, again = after_all.draw(name), after_all.draw(name)
    np.testing.assert_array_equal(first, want[name])
    np.testing.assert_array_equal(again, want[name])
    assert first is not again  # a fresh array each time: the caller may drop it
    with pytest.raises(KeyError, match="no weight 'h.9.attn.c_attn.weight'"):
        fresh.draw("h.9.attn.c_attn.weight")


def test_export_binds_tensors_without_copying_them():
    params = random_params(TINY, 1, tensors=True)
    mod = export_gpt2(TINY, params)
    for gv in ("prefill", "decode"):
        bound = []

        def visit(expr, bound=bound):
            if isinstance(expr, GenericConst) and len(expr.value.shape) > 0:
                bound.append(expr.value.__chandle__())

        tvm.relax.analysis.post_order_visit(mod[gv], visit)
        # Each weight's constant is the very tensor given (the model has no other array
        # constants), so the export holds no second copy.
        assert set(bound) == {t.__chandle__() for t in params.values()}, gv


def test_bad_tensor_weights_are_refused_by_name():
    params = random_params(TINY, 0, tensors=True)
    params["wpe.weight"] = tvm.runtime.tensor(np.zeros((3, 3), np.float32))
    with pytest.raises(ValueError, match="'wpe.weight' has shape \\[3, 3\\]"):
        export_gpt2(TINY, params)
