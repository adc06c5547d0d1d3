"""Test helpers for the ledger and profiling tests: models built for tenet, and the IR's matmuls."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.sym import Analyzer

import tenet_byoc
from tenet_byoc.models.mlp import PARAM_SHAPES, mlp_module

_MATMUL = tvm.ir.Op.get("relax.matmul")


def mlp_params(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: (0.1 * rng.standard_normal(s)).astype("float32") for k, s in PARAM_SHAPES.items()}


def mlp_executable(hardware: str = "os16"):
    """The FashionMNIST MLP with random weights bound: ``main(x [batch, 784])``, built for
    ``hardware`` (a preset name: with each call's default tiles, as the references here walk
    them; or an Accelerator as it is)."""
    from tenet_byoc.accelerators import preset

    mod = mlp_module(mlp_params())
    acc = preset(hardware, mapping="default") if isinstance(hardware, str) else hardware
    return mod, tenet_byoc.build(mod, accelerator=acc)


def ir_matmul_shapes(mod: tvm.IRModule, func_name: str, sym: dict[str, int]) -> list[tuple]:
    """``(batch, m, n, k)`` of every ``R.matmul`` of a function, read from the IR's shapes.

    Symbolic dims named in ``sym`` are bound to those values; ``batch`` is the product of the
    output's leading dims (operands broadcast to them), ``k`` the lhs's last dim.
    """
    func = mod[func_name]
    analyzer = Analyzer()
    for param in func.params:
        types = param.ty.fields if isinstance(param.ty, relax.TupleType) else [param.ty]
        for ty in types:
            for dim in getattr(ty, "shape", None) or []:
                if isinstance(dim, tvm.tirx.Var) and dim.name in sym:
                    analyzer.bind(dim, sym[dim.name])
    calls = []

    def visit(expr):
        if isinstance(expr, relax.Call) and expr.op.same_as(_MATMUL):
            calls.append(expr)

    relax.analysis.post_order_visit(func.body, visit)

    def shape(expr):
        return [int(analyzer.simplify(d)) for d in expr.ty.shape]

    out = []
    for call in calls:
        lhs, rhs, res = shape(call.args[0]), shape(call.args[1]), shape(call)
        assert lhs[-1] == rhs[-2], (lhs, rhs)
        out.append((int(np.prod(res[:-2], dtype=np.int64)), res[-2], res[-1], lhs[-1]))
    return out


def memory_reference(e, accelerator):
    """The buffer level and energy of ledger entry ``e``, recomputed through the memory core's
    own entry points (default mapping, analyze_memory, call_energy), not through the charge."""
    from tenet_byoc import cost_model as cm

    acc = accelerator
    widths = {"batch": e.batch, "bits_a": e.bits_a, "bits_b": e.bits_b, "bits_c": e.bits_c}
    rows, cols = acc.dataflow.rows or 1, acc.dataflow.cols or acc.hardware.num_pes
    tiles = cm.default_tile_mapping(e.m, e.n, e.k, acc.memory, rows, cols, **widths)
    mm = cm.analyze_memory(
        cm.GemmCall(
            m=e.m, n=e.n, k=e.k, extra_read_bits=e.extra_read_bits, extra_ops=e.extra_ops,
            a_on_chip=e.a_on_chip, c_on_chip=e.c_on_chip, **widths
        ),
        acc,
        tiles,
    )
    energy = cm.call_energy(mm, acc.memory, acc.precision.lookup(e.bits_a, e.bits_b),
                            e.extra_ops, e.extra_register_bits)
    return mm, energy


def gemm_ledger(obj) -> tenet_byoc.Ledger:
    """``tenet_byoc.ledger(obj)`` with its GEMM (``unit="array"``) entries only: what the
    tests of the GEMM charges compare with the IR's matmuls and the cost model (the vector
    unit's entries have their own tests, tests/relax/test_every_op_charged.py)."""
    book = tenet_byoc.ledger(obj)
    return tenet_byoc.Ledger([e for e in book.entries if e.unit == "array"], book.accelerator,
                             book.dataflow, book.clock_ghz, book._modules)
