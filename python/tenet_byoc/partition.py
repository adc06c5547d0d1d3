"""The one way in: partition a Relax module for tenet, and build it into a Relax VM executable."""

from __future__ import annotations

import json

import tvm
from tvm import relax

from .hardware import Accelerator, resolve
from .patterns import tenet_patterns

#: The function attribute that carries the accelerator config from partition to codegen.
COST_CONFIG_ATTR = "tenet.cost_config"


def partition_for_tenet(
    mod: tvm.IRModule, hardware: str | Accelerator | None = None
) -> tvm.IRModule:
    """Group the matmuls the tenet runtime can run into functions for the ``tenet`` codegen.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module.
    hardware : str, Accelerator or None
        The accelerator the offloaded calls are charged to: a preset name (see
        ``tenet_byoc.hardware.PRESETS``), an :class:`Accelerator`, or None for the default.

    Returns
    -------
    tvm.IRModule
        The module with every accepted match in a composite function (attr ``Composite``),
        adjacent ones merged into outer functions with attr ``Codegen="tenet"`` that also
        carry the accelerator config (attr ``tenet.cost_config``).
    """
    config = json.dumps(resolve(hardware).descriptor_fields())
    # MergeCompositeFunctions groups neighbouring composites into one call, but it only
    # walks a function named "main" and fails when main calls other Relax functions;
    # other modules (GPT-2's prefill and decode) get one tenet function per composite
    # instead. The runtime runs both forms.
    relax_funcs = [gv.name_hint for gv, f in mod.functions.items() if isinstance(f, relax.Function)]
    merge = relax_funcs == ["main"]
    mod = relax.transform.FuseOpsByPattern(
        tenet_patterns(), bind_constants=False, annotate_codegen=not merge
    )(mod)
    if merge:
        mod = relax.transform.MergeCompositeFunctions()(mod)
    for gv, func in list(mod.functions.items()):
        codegen = func.attrs.get("Codegen") if isinstance(func, relax.Function) and func.attrs else None
        if codegen is not None and str(codegen) == "tenet":
            mod[gv] = func.with_attr(COST_CONFIG_ATTR, config)
    return mod


def build(
    mod: tvm.IRModule,
    target: str | dict | tvm.target.Target = "llvm",
    *,
    hardware: str | Accelerator | None = None,
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
    hardware : str, Accelerator or None
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
        mod = partition_for_tenet(mod, hardware)
        # Every Relax function, private ones too: RunCodegen otherwise only rewrites calls in
        # the public entry points, and a private caller would keep an unlowered call.
        callers = [
            gv.name_hint for gv, f in mod.functions.items()
            if isinstance(f, relax.Function) and not (f.attrs and "Codegen" in f.attrs)
        ]
        mod = relax.transform.RunCodegen(entry_functions=callers)(mod)
    return relax.build(mod, target=target, relax_pipeline=relax.get_default_pipeline(target))
