"""partition_for_tenet tries only the patterns whose operators the module uses: the same
partition as FuseOpsByPattern with every registered pattern (the reference)."""

from __future__ import annotations

import json

import pytest
import tvm
from tvm import relax

from tenet_byoc.models.gpt2 import GPT2Config, export_gpt2, random_params
from tenet_byoc.models.mlp import mlp_module, random_mlp_params
from tenet_byoc.partition import _ops_in, _required_ops, partition_for_tenet
from tenet_byoc.patterns import tenet_patterns
from tenet_byoc.quantization import RECIPE_ATTR, SCHEME_ATTR, quantize
from tenet_byoc.vector_plan import insert_charge_calls


def _reference(mod: tvm.IRModule, merge: bool, scheme: str) -> tvm.IRModule:
    """FuseOpsByPattern with all patterns, then the vector unit's charge calls that
    partition_for_tenet appends (the stamps on the composites are compared apart)."""
    out = relax.transform.FuseOpsByPattern(
        tenet_patterns(), bind_constants=False, annotate_codegen=not merge)(mod)
    out = relax.transform.MergeCompositeFunctions()(out) if merge else out
    bits = None
    if mod.attrs is not None and RECIPE_ATTR in mod.attrs:
        bits = json.loads(str(mod.attrs[RECIPE_ATTR]))["bits"][0]
    scheme_name = str(mod.attrs[SCHEME_ATTR]) if mod.attrs is not None and SCHEME_ATTR in \
        mod.attrs else "unnamed"
    return insert_charge_calls(out, scheme_name, bits)[0]


def _without_stamps(mod: tvm.IRModule) -> tvm.IRModule:
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function) and func.attrs and "Codegen" in func.attrs:
            for key in [k for k in func.attrs.keys() if k.startswith("tenet.")]:  # noqa: SIM118 (DictAttrs iterates no keys)
                func = func.without_attr(key)
            mod[gv] = func
    return mod


@pytest.mark.parametrize("scheme", ["none", "w8a8_per_tensor", "w8a16_per_channel",
                                    "w4a16_group32", "mxfp8"])
@pytest.mark.parametrize("model", ["mlp", "gpt2"])
def test_prefiltered_partition_equals_all_patterns(model, scheme):
    if model == "mlp":
        mod, merge = mlp_module(random_mlp_params()), True
    else:
        cfg = GPT2Config.preset("tiny")
        mod, merge = export_gpt2(cfg, random_params(cfg)), False
    mod = quantize(mod, scheme)
    used = _ops_in(mod)
    kept = [p.name for p in tenet_patterns() if _required_ops(p.pattern) <= used]
    assert 0 < len(kept) < len(tenet_patterns())  # the filter keeps some and drops some
    tvm.ir.assert_structural_equal(_without_stamps(partition_for_tenet(mod, "os16")),
                                   _reference(mod, merge, scheme))


def test_required_ops_of_a_pattern():
    by_name = {p.name: p for p in tenet_patterns()}
    plain = _required_ops(by_name["tenet.matmul_transposed"].pattern)
    assert plain == {"relax.matmul", "relax.permute_dims"}
    group = _required_ops(by_name["tenet.dequantize_matmul_group"].pattern)
    assert {"relax.stack", "relax.bitwise_and", "relax.right_shift", "relax.matmul"} <= group
