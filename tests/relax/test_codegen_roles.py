"""The codegen takes operand roles from the pattern table and the scheme from quantize."""

from __future__ import annotations

import dataclasses

import pytest
from tvm import relax

import tenet_byoc
from relax_testing import matmul_module
from tenet_byoc.codegen import DESCRIPTOR_FIELDS, UNNAMED_SCHEME, describe_function
from tenet_byoc.patterns import PATTERN_INFO
from tenet_byoc.quantization import RECIPE_ATTR, SCHEME_ATTR, SCHEMES, quantize


def _tenet_functions(mod):
    return [f for _, f in mod.functions.items()
            if isinstance(f, relax.Function) and f.attrs and "Codegen" in f.attrs]


@pytest.mark.parametrize("scheme", [n for n, s in SCHEMES.items() if s.kernel != "float"])
def test_quantized_steps_carry_the_stamped_scheme(scheme, rng):
    mod = matmul_module((4, 64), (32, 64), transposed=True)
    w = rng.standard_normal((32, 64)).astype("float32")
    qmod = quantize(relax.transform.BindParams("main", {"w": w})(mod), scheme)
    assert str(qmod.attrs[SCHEME_ATTR]) == scheme
    (func,) = _tenet_functions(tenet_byoc.partition_for_tenet(qmod))
    (step,) = describe_function(func)["steps"]
    assert step["scheme"] == scheme
    # The codegen writes exactly the keys the runtime reads (program.cc DescriptorObjects), in order.
    assert list(step) == list(DESCRIPTOR_FIELDS["step"])
    # The recipe and widths are the ones quantize stamped, not guessed from the pattern.
    # (Static schemes quantized without calibration data compute their scales per call.)
    s = dataclasses.replace(SCHEMES[scheme], activation_static=False)
    assert step["quant"] == s.recipe().as_dict()
    assert step["bits"] == list(s.bits())
    info = PATTERN_INFO[step["pattern"]]
    assert (step["kind"], step["rhs_transposed"], step["epilogue"]) == (
        info.kind, info.rhs_transposed, info.epilogue)
    # Every role the pattern names is a parameter; the rest are absent.
    assert {r for r in ("lhs", "rhs", "bias", "scale_a", "scale_b", "zero_point")
            if step[r] is not None} == set(info.roles)


def test_a_module_quantize_did_not_stamp_is_unnamed(rng):
    mod = matmul_module((4, 64), (32, 64), transposed=True)
    w = rng.standard_normal((32, 64)).astype("float32")
    qmod = quantize(relax.transform.BindParams("main", {"w": w})(mod), "w8a16_per_channel")
    qmod = qmod.without_attr(SCHEME_ATTR).without_attr(RECIPE_ATTR)
    (func,) = _tenet_functions(tenet_byoc.partition_for_tenet(qmod))
    (step,) = describe_function(func)["steps"]
    assert step["scheme"] == UNNAMED_SCHEME
    assert list(step) == list(DESCRIPTOR_FIELDS["step"])
    # A hand-written form is charged as its operands say: int8 weights per channel.
    assert (step["quant"]["weight"], step["quant"]["place"]) == ("channel", "weight")
