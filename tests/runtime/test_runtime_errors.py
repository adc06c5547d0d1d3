"""Bad arguments reaching the tenet runtime raise exceptions naming the symbol and the problem."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax

import tenet_byoc
from relax_testing import matmul_module
from tenet_byoc.codegen import DESCRIPTOR_FIELDS, DESCRIPTOR_VERSION, FLOAT_RECIPE
from tenet_byoc.accelerators import preset


@pytest.fixture(scope="module")
def linear():
    """The runtime module of one ``x[4,8] @ w[3,8]^T + b`` function, and its symbol."""
    ex = tenet_byoc.build(matmul_module((4, 8), (3, 8), transposed=True, bias=True))
    module = next(m for m in ex.mod.imports if m.kind == "tenet")
    desc = json.loads(module.inspect_source())
    (func,) = desc["functions"]
    (step,) = func["steps"]
    # The outer function's parameter order is MergeCompositeFunctions' choice; the
    # descriptor says which input is which.
    order = [step["lhs"], step["rhs"], step["bias"]]

    def call(x, w, b, out=None, *extra):
        args = [None] * 3
        for role, value in zip(order, (x, w, b)):
            args[role] = value
        args = args + ([out] if out is not None else []) + list(extra)
        return module[func["symbol"]](*args)

    return ex, call, func["symbol"]


def _t(shape, dtype="float32"):
    return tvm.runtime.tensor(np.ones(shape, dtype))


def test_correct_call_works(linear):
    _, call, _ = linear
    out = _t((4, 3))
    call(_t((4, 8)), _t((3, 8)), _t((3,)), out)
    np.testing.assert_array_equal(out.numpy(), np.full((4, 3), 9.0, "float32"))


@pytest.mark.parametrize(
    "args,exc,message",
    [
        (lambda: [_t((4, 8), "float64"), _t((3, 8)), _t((3,)), _t((4, 3))], TypeError,
         "has dtype float64; expected float32"),
        (lambda: [_t((4, 9)), _t((3, 8)), _t((3,)), _t((4, 3))], ValueError,
         "disagree on the reduction length (9 vs 8)"),
        (lambda: [_t((4, 8)), _t((3, 8)), _t((3,)), _t((4, 5))], ValueError,
         "output 0 has shape [4, 5]"),
        (lambda: [_t((4, 8)), _t((3, 8)), _t((5,)), _t((4, 3))], ValueError,
         "bias shape [5] is not a vector of the 3 output columns"),
        (lambda: [_t((4, 8)), _t((3, 8)), _t((3,))], ValueError,
         "expected 4 arguments (3 inputs, 1 outputs), got 3"),
        (lambda: [_t((4, 8)), _t((3, 8)), _t((3,)), 7], TypeError, "output 0 is not a tensor"),
        (lambda: [_t((4, 8)), _t((1, 3, 8)), _t((3,)), _t((4, 3))], ValueError,
         "has rank 3; expected 2"),
        (lambda: [tvm_ffi.from_dlpack(np.ones((4, 16), "float32")[:, ::2]), _t((3, 8)),
                  _t((3,)), _t((4, 3))], ValueError, "is not compact row-major"),
    ],
    ids=["dtype", "reduction", "out-shape", "bias", "missing", "not-tensor", "rank", "strided"],
)
def test_bad_argument_message(linear, args, exc, message):
    _, call, symbol = linear
    with pytest.raises(exc) as info:
        call(*args())
    assert symbol in str(info.value)
    assert message in str(info.value)


def test_wrong_dtype_through_the_vm_is_an_exception(linear):
    ex, _, _ = linear
    vm = relax.VirtualMachine(ex, tvm.cpu())
    with pytest.raises(Exception, match="float64|dtype"):
        vm["main"](_t((4, 8), "float64"), _t((3, 8)), _t((3,)))


def _descriptor(**overrides) -> str:
    step = {"pattern": "p", "name": "n", "kind": "float", "scheme": "none", "lhs": 0, "rhs": 1,
            "bias": None, "scale_a": None, "scale_b": None, "zero_point": None,
            "rhs_transposed": False,
            "epilogue": "none", "out_ndim": 2, "bits": [32, 32, 32],
            "quant": FLOAT_RECIPE.as_dict()}
    step.update(overrides.pop("step", {}))
    func = {"symbol": "f", "inputs": [{"dtype": "float32", "ndim": 2}] * 2, "steps": [step],
            "outputs": [{"dtype": "float32", "ndim": 2, "source": -1}]}
    for key in ("inputs", "outputs"):
        if key in overrides:
            func[key] = overrides.pop(key)
    doc = {"version": DESCRIPTOR_VERSION, "functions": [func], "accelerator": json.loads(preset("os16").to_json())}
    rate = overrides.pop("macs_per_pe_per_cycle", None)
    if rate is not None:
        doc["accelerator"]["hardware"]["macs_per_pe_per_cycle"] = rate
    doc.update(overrides)
    return json.dumps(doc)


@pytest.mark.parametrize(
    "text,message",
    [
        (lambda: "{", "invalid JSON"),
        # json.loads keeps the last of two equal keys; the runtime refuses the ambiguity.
        (lambda: _descriptor()[:-1] + ', "version": 1}', "the descriptor has the key 'version' twice"),
        (lambda: _descriptor(version=99), "version 99 is not supported"),
        (lambda: json.dumps({"version": DESCRIPTOR_VERSION}), "has no field"),
        (lambda: _descriptor(step={"lhs": 3}), "refers to value 3"),
        (lambda: _descriptor(step={"rhs": -1}), "refers to value -1"),
        (lambda: _descriptor(step={"epilogue": "swish"}), "unknown epilogue 'swish'"),
        (lambda: _descriptor(step={"kind": "fp8"}), "unknown step kind 'fp8'"),
        (lambda: _descriptor(step={"kind": "int8"}), "has the wrong scales"),
        (lambda: _descriptor(step={"weight_layout": "nk"}),
         "function 'f' step 0 has an unknown field 'weight_layout'"),
        (lambda: _descriptor(step={"bits": [8, 0, 8]}), "bits must be integers in [1, 64]"),
        (lambda: _descriptor(step={"quant": {**FLOAT_RECIPE.as_dict(), "place": "k_group"}}),
         "QuantRecipe.k_group = 0; expected > 0 exactly when partial sums are rescaled"),
        (lambda: _descriptor(step={"quant": {**FLOAT_RECIPE.as_dict(), "weight": "row"}}),
         "unknown quantization granularity 'row'"),
        (lambda: _descriptor(accelerator={"name": "x"}), "accelerator has no field 'hardware'"),
        (lambda: _descriptor(accelerator=preset("os16").to_json()),
         "field 'accelerator' of the descriptor has the wrong type"),
        (lambda: _descriptor(macs_per_pe_per_cycle={"8": 0}),
         "Hardware.macs_per_pe_per_cycle[8] must be a positive integer"),
        (lambda: _descriptor(macs_per_pe_per_cycle={"eight": 2}),
         "key 'eight' is not an operand width"),
        (lambda: _descriptor(macs_per_pe_per_cycle={"32": 64}),
         "32 bits x 64 MACs per cycle = 2048 bits per packed element; at most 1024"),
        # Ranks: a 0-D or 1-D matmul operand used to crash or read past the shape buffer.
        (lambda: _descriptor(inputs=[{"dtype": "float32", "ndim": 0}] * 2),
         "step 0 has lhs rank 0 and rhs rank 0 for out_ndim 2; both must be in [2, out_ndim]"),
        (lambda: _descriptor(inputs=[{"dtype": "float32", "ndim": 2},
                                     {"dtype": "float32", "ndim": 1}]),
         "has lhs rank 2 and rhs rank 1"),
        (lambda: _descriptor(step={"out_ndim": 2**31}),
         "out_ndim is 2147483648; expected an integer in [2, 32]"),
        (lambda: _descriptor(step={"out_ndim": 1}), "out_ndim is 1; expected"),
        (lambda: _descriptor(inputs=[{"dtype": "float32", "ndim": -1}] * 2),
         "input ndim is -1; expected an integer in [0, 32]"),
        (lambda: _descriptor(outputs=[{"dtype": "int8", "ndim": 2, "source": -1}]),
         "is declared int8 of rank 2 but its step writes float32 of rank 2"),
        (lambda: _descriptor(outputs=[{"dtype": "float32", "ndim": 3, "source": -1}]),
         "is declared float32 of rank 3 but its step writes float32 of rank 2"),
        (lambda: _descriptor(inputs=[{"dtype": "float32", "ndim": 2}, {"dtype": "int8", "ndim": 3},
                                     {"dtype": "float32", "ndim": 1}],
                             step={"kind": "dequant_channel", "scale_b": 2, "out_ndim": 3,
                                   "rhs_transposed": True}),
         "of kind dequant_channel needs a 2-D weight input (dequant_float: 3-D codes"),
    ],
    ids=["json", "duplicate-key", "version", "fields", "forward-ref", "self-ref", "epilogue", "kind", "scales",
         "unknown-step-key",
         "bits", "recipe", "granularity", "accelerator", "nested-text", "rates", "rate-key",
         "rate-width", "ndim0", "ndim1", "out-ndim-huge", "out-ndim-1", "ndim-negative",
         "output-dtype", "output-rank", "dequant-3d"],
)
def test_malformed_descriptor(text, message):
    create = tvm.get_global_func("tenet_byoc.runtime.create_module")
    with pytest.raises(ValueError) as info:
        create(text())
    assert message in str(info.value)


def test_value_returned_twice_fills_both_outputs(rng):
    """A function returning one GEMM's result twice gets it in both output buffers."""
    doc = json.loads(_descriptor())
    func = doc["functions"][0]
    func["outputs"] = func["outputs"] * 2
    module = tvm.get_global_func("tenet_byoc.runtime.create_module")(json.dumps(doc))
    a = rng.standard_normal((3, 5)).astype("float32")
    b = rng.standard_normal((5, 4)).astype("float32")
    outs = [tvm.runtime.tensor(np.full((3, 4), np.nan, "float32")) for _ in range(2)]
    module["f"](tvm.runtime.tensor(a), tvm.runtime.tensor(b), *outs)
    for out in outs:
        np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-5, atol=1e-6)


def test_the_codegen_writes_the_version_the_runtime_reads():
    # program.h's kDescriptorVersion is the one place the number is written: the codegen
    # reads it from the runtime, and a descriptor one version off is refused, naming both
    import re
    from pathlib import Path

    header = (Path(__file__).parents[2] / "src/runtime/program.h").read_text()
    (written,) = re.findall(r"kDescriptorVersion = (\d+);", header)
    assert DESCRIPTOR_VERSION == int(written)
    create = tvm.get_global_func("tenet_byoc.runtime.create_module")
    create(_descriptor())  # the codegen's version is accepted
    for version in (DESCRIPTOR_VERSION - 1, DESCRIPTOR_VERSION + 1):
        with pytest.raises(ValueError, match=f"version {version} is not supported by this "
                           f"runtime \\(it reads version {DESCRIPTOR_VERSION}\\)"):
            create(_descriptor(version=version))


def _objects(doc: dict) -> dict[str, list[dict]]:
    """Every object of a descriptor, by the runtime's name for its kind."""
    functions, vector_functions = doc["functions"], doc.get("vector_functions", [])
    return {"descriptor": [doc], "function": functions,
            "step": [s for f in functions for s in f["steps"]],
            "vector_function": vector_functions,
            "vector_step": [s for f in vector_functions for s in f["steps"]]}


def _softmax_descriptor() -> str:
    """A built module's descriptor with a GEMM step and a vector step (the softmax)."""
    bb = relax.BlockBuilder()
    x, w = relax.Var("x", relax.TensorType((4, 8), "float32")), relax.Var(
        "w", relax.TensorType((3, 8), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit(relax.op.matmul(x, bb.emit(relax.op.permute_dims(w))))
            out = bb.emit_output(relax.op.nn.softmax(y))
        bb.emit_func_output(out)
    ex = tenet_byoc.build(bb.get())
    return next(m for m in ex.mod.imports if m.kind == "tenet").inspect_source()


def test_the_codegen_writes_the_objects_the_runtime_reads():
    # program.cc's DescriptorObjects is the one list of each object's keys: the codegen
    # writes exactly its keys, in its order, for every object of a built module; dropping a
    # required key is refused by the runtime naming it, and so is a key outside the list.
    from tenet_byoc.codegen import TenetCodegenError, _fields

    assert set(DESCRIPTOR_FIELDS) == {"descriptor", "function", "step", "vector_function",
                                      "vector_step"}
    text = _softmax_descriptor()
    objects = _objects(json.loads(text))
    create = tvm.get_global_func("tenet_byoc.runtime.create_module")
    for kind, fields in DESCRIPTOR_FIELDS.items():
        assert objects[kind], kind  # the module has one of each
        for obj in objects[kind]:
            assert list(obj) == list(fields), kind
        for key, required in fields.items():
            doc = json.loads(text)
            del _objects(doc)[kind][0][key]
            if required:
                with pytest.raises(ValueError, match=f"has no field '{key}'"):
                    create(json.dumps(doc))
            else:
                create(json.dumps(doc))
        doc = json.loads(text)
        _objects(doc)[kind][0]["colour"] = 1
        with pytest.raises(ValueError, match="has an unknown field 'colour'"):
            create(json.dumps(doc))
    step = objects["step"][0]
    with pytest.raises(TenetCodegenError, match=r"a step has fields the runtime does not "
                       r"read \(\['tile'\]\)"):
        _fields("step", "f", {**step, "tile": 4})
    with pytest.raises(TenetCodegenError, match=r"requires \(\['out_ndim'\]\)"):
        _fields("step", "f", {k: v for k, v in step.items() if k != "out_ndim"})
