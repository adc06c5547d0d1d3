"""The one way in: partition a Relax module for tenet, and build it into a Relax VM executable."""

from __future__ import annotations

import tvm
from tvm import relax

from .patterns import tenet_patterns


def partition_for_tenet(mod: tvm.IRModule) -> tvm.IRModule:
    """Group the matmuls the tenet runtime can run into functions for the ``tenet`` codegen.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module.

    Returns
    -------
    tvm.IRModule
        The module with every accepted match in a composite function (attr ``Composite``),
        adjacent ones merged into outer functions with attr ``Codegen="tenet"``.
    """
    mod = relax.transform.FuseOpsByPattern(
        tenet_patterns(), bind_constants=False, annotate_codegen=False
    )(mod)
    return relax.transform.MergeCompositeFunctions()(mod)


def build(
    mod: tvm.IRModule,
    target: str | dict | tvm.target.Target = "llvm",
    *,
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
        mod = partition_for_tenet(mod)
        mod = relax.transform.RunCodegen()(mod)
    return relax.build(mod, target=target, relax_pipeline=relax.get_default_pipeline(target))
