"""The one way in: partition a Relax module for tenet, and build it into a Relax VM executable."""

from __future__ import annotations

import json

import tvm
from tvm import relax
from tvm.relax.dpl import pattern as dpl

from .accelerators import Accelerator, resolve
from .patterns import tenet_patterns
from .quantization import RECIPE_ATTR, SCHEME_ATTR
from .vector_plan import PLAN_ATTR, _callers, insert_charge_calls

#: The function attribute that carries the accelerator (its JSON form) to the codegen.
ACCELERATOR_ATTR = "tenet.accelerator"
#: The function attribute that tells the codegen which of a tenet function's inputs its
#: callers pass from their own inputs and which of its outputs they return (JSON
#: ``{"inputs": [...], "outputs": [...]}``): the operands :func:`operands_on_chip` leaves off
#: chip.
HOST_IO_ATTR = "tenet.host_io"


def operands_on_chip(passed_in: bool, returned: bool) -> dict[str, bool]:
    """The one rule for which operands of a GEMM stay on chip (``GemmCall``'s ``a_on_chip``
    and ``c_on_chip``): A, an activation made on chip (a norm, rotary, softmax, an activation
    or the GEMM before it; the first hidden state is the embedding lookup's), unless the
    caller passed it in from the host; C, kept for the calls that use it (an epilogue, a
    residual add, rotary, a KV-cache write, the next GEMM), unless the caller returns it to
    the host. The cost model decides whether they fit: both together beside the mapping's
    tiles in a one-core buffer, or in the shared level (``Cores.shared_bytes``) of an
    accelerator of cores; what does not fit goes through DRAM as if unflagged.

    A plan applies it to a step, whose caller passes in token ids and gets back the head's
    logits (``tenet_byoc.plan``); a run to its graph (:func:`_host_io`, read by the codegen).
    """
    return {"a_on_chip": not passed_in, "c_on_chip": not returned}


def _tenet_functions(mod: tvm.IRModule) -> dict[relax.GlobalVar, relax.Function]:
    """The functions of ``mod`` the tenet codegen compiles."""
    return {gv: f for gv, f in mod.functions.items() if isinstance(f, relax.Function)
            and f.attrs and str(f.attrs.get("Codegen", "")) == "tenet"}


def _host_io(mod: tvm.IRModule) -> dict[str, dict[str, list[int]]]:
    """Per tenet function called from the module: the indices of the inputs its callers pass
    from their own parameters (or a reshape or transpose of one: the same values), and of the
    outputs they return (or return a reshape of: the same bytes)."""
    tenet = {gv.name_hint for gv in _tenet_functions(mod)}
    found: dict[str, tuple[set[int], set[int]]] = {}

    def source(value, ops: tuple[str, ...]):
        if isinstance(value, relax.Var):
            return value
        if isinstance(value, relax.Call) and str(getattr(value.op, "name", "")) in ops:
            return value.args[0]
        return None

    for _, func in _callers(mod):
        bindings = [b for block in func.body.blocks for b in block.bindings]
        host = set(func.params)
        for b in bindings:
            if source(b.value, ("relax.reshape", "relax.permute_dims")) in host:
                host.add(b.var)
        result = func.body.body
        returned = set(result.fields) if isinstance(result, relax.Tuple) else {result}
        for b in reversed(bindings):
            if b.var in returned:
                value = b.value
                returned.update(value.fields if isinstance(value, relax.Tuple)
                                else [source(value, ("relax.reshape",))])
        calls = {}
        for b in bindings:
            value = b.value
            if isinstance(value, relax.Call) and isinstance(value.op, relax.GlobalVar) and (
                    value.op.name_hint in tenet):
                name = value.op.name_hint
                calls[b.var] = name
                ins, outs = found.setdefault(name, (set(), set()))
                ins.update(i for i, a in enumerate(value.args) if a in host)
                if b.var in returned:
                    outs.add(-1)  # every output
            elif isinstance(value, relax.TupleGetItem) and value.tuple_value in calls and (
                    b.var in returned):
                found[calls[value.tuple_value]][1].add(value.index)
    return {name: {"inputs": sorted(ins), "outputs": sorted(outs)}
            for name, (ins, outs) in found.items()}


def _ops_in(mod: tvm.IRModule) -> set[str]:
    """The names of the operators the Relax functions of ``mod`` call."""
    ops: set[str] = set()

    def visit(expr) -> None:
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
            ops.add(expr.op.name)

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return ops


def _required_ops(pattern) -> set[str]:
    """Operators every match of ``pattern`` calls: those of its calls, not of an
    alternative (``OrPattern``) nor of any pattern kind not walked here."""
    if isinstance(pattern, dpl.CallPattern):
        op = pattern.op
        ops = ({op.expr.name} if isinstance(op, dpl.ExprPattern) and isinstance(op.expr, tvm.ir.Op)
               else _required_ops(op))
        for arg in pattern.args or ():
            ops |= _required_ops(arg)
        return ops
    if isinstance(pattern, dpl.TuplePattern):
        return set().union(*(_required_ops(f) for f in pattern.fields))
    if isinstance(pattern, dpl.AndPattern):
        return _required_ops(pattern.left) | _required_ops(pattern.right)
    if isinstance(pattern, dpl.TupleGetItemPattern):
        return _required_ops(pattern.tuple)
    if isinstance(pattern, (dpl.AttrPattern, dpl.DataTypePattern, dpl.ShapePattern,
                            dpl.TypePattern)):
        return _required_ops(pattern.pattern)
    return set()


def partition_for_tenet(
    mod: tvm.IRModule,
    accelerator: str | Accelerator | None = None,
) -> tvm.IRModule:
    """Group the matmuls the tenet runtime can run into functions for the ``tenet`` codegen.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module.
    accelerator : str, Accelerator or None
        The accelerator the offloaded calls are charged to: a preset name (see
        ``tenet_byoc.accelerators.PRESETS``), an :class:`Accelerator`, or None for the default.

    Returns
    -------
    tvm.IRModule
        The module with every accepted match in a composite function (attr ``Composite``),
        adjacent ones merged into outer functions with attr ``Codegen="tenet"`` that also
        carry the accelerator (attr ``tenet.accelerator``, its JSON form) and the
        quantization scheme and its cost recipe :func:`~tenet_byoc.quantize` stamped on the
        module (attrs ``tenet.quant_scheme``, ``tenet.quant_recipe``), and which of their
        inputs and outputs cross to the caller's host (attr ``tenet.host_io``).
    """
    stamps = {ACCELERATOR_ATTR: resolve(accelerator).to_json()}
    for attr in (SCHEME_ATTR, RECIPE_ATTR):
        if mod.attrs is not None and attr in mod.attrs:
            stamps[attr] = str(mod.attrs[attr])
    # MergeCompositeFunctions groups neighbouring composites into one call, but it only
    # walks a function named "main" and fails when main calls other Relax functions;
    # other modules (GPT-2's prefill and decode) get one tenet function per composite
    # instead. The runtime runs both forms.
    relax_funcs = [gv.name_hint for gv, f in mod.functions.items() if isinstance(f, relax.Function)]
    merge = relax_funcs == ["main"]
    # Only the patterns whose every op the module uses: one that needs an absent op cannot
    # match, and FuseOpsByPattern scans the whole module once per pattern (GPT-2 small: most
    # of a build's time with all 48). The rest keep their order, so their priorities.
    present = _ops_in(mod)
    patterns = [p for p in tenet_patterns() if _required_ops(p.pattern) <= present]
    mod = relax.transform.FuseOpsByPattern(
        patterns, bind_constants=False, annotate_codegen=not merge
    )(mod)
    if merge:
        mod = relax.transform.MergeCompositeFunctions()(mod)
    if _tenet_functions(mod):
        # The operators left on TVM's path are charged to the vector unit by one call per
        # function (vector_plan); its steps reach the runtime through the codegen.
        scheme = stamps.get(SCHEME_ATTR, "unnamed")
        bits = json.loads(stamps[RECIPE_ATTR])["bits"][0] if RECIPE_ATTR in stamps else None
        mod, stamps[PLAN_ATTR] = insert_charge_calls(mod, scheme, bits)
    host_io = _host_io(mod)
    for gv, func in _tenet_functions(mod).items():
        for key, value in stamps.items():
            func = func.with_attr(key, value)
        if gv.name_hint in host_io:
            func = func.with_attr(HOST_IO_ATTR, json.dumps(host_io[gv.name_hint]))
        mod[gv] = func
    return mod


def build(
    mod: tvm.IRModule,
    target: str | dict | tvm.target.Target = "llvm",
    *,
    accelerator: str | Accelerator | None = None,
    offload: bool = True,
) -> tvm.runtime.Executable:
    """Partition, run the tenet codegen and build with ``relax.build``.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module.
    target : str, dict or Target
        The host target for everything left on TVM's path (``"llvm"`` or a dict such as
        ``{"kind": "llvm", "mcpu": "..."}``).
    accelerator : str, Accelerator or None
        The accelerator the offloaded calls are charged to (see :func:`partition_for_tenet`).
    offload : bool
        False builds the same module entirely with TVM (the reference the tests compare to).

    Returns
    -------
    tvm.runtime.Executable
        Load it with ``relax.VirtualMachine(ex, tvm.cpu())``.
    """
    if not isinstance(target, tvm.target.Target):
        target = tvm.target.Target(target)
    if offload:
        mod = partition_for_tenet(mod, accelerator)
        # Every Relax function, private ones too: RunCodegen otherwise only rewrites calls in
        # the public entry points, and a private caller would keep an unlowered call.
        callers = [
            gv.name_hint for gv, f in mod.functions.items()
            if isinstance(f, relax.Function) and not (f.attrs and "Codegen" in f.attrs)
        ]
        mod = relax.transform.RunCodegen(entry_functions=callers)(mod)
    return relax.build(mod, target=target, relax_pipeline=relax.get_default_pipeline(target))
