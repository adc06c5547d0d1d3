"""SCALE-Sim 3.0.0's compute model (operand_matrix + systolic_compute_os/ws/is) on a GEMM.

Its memory model is not used (it fails under numpy 2). With data always on time, the
compute model's demand matrices have one row per cycle, so their length is the total
cycle count (SCALE-Sim's own report prints the index of the last cycle, one less).
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass


@dataclass
class ScaleSimResult:
    cycles: int        # rows of the demand matrices = total cycles
    ifmap_reads: int   # SRAM reads of A (M x K)
    filter_reads: int  # SRAM reads of B (K x N)
    ofmap_writes: int


def run_gemm(m: int, n: int, k: int, rows: int, cols: int, dataflow: str) -> ScaleSimResult:
    from scalesim.compute.operand_matrix import operand_matrix
    from scalesim.compute.systolic_compute_is import systolic_compute_is
    from scalesim.compute.systolic_compute_os import systolic_compute_os
    from scalesim.compute.systolic_compute_ws import systolic_compute_ws
    from scalesim.layout_utils import layouts
    from scalesim.scale_config import scale_config
    from scalesim.topology_utils import topologies

    cfg = scale_config()
    cfg.set_arr_dims(rows, cols)
    cfg.set_dataflow(dataflow)
    cfg.force_valid()  # its set_offsets() mixes up the ifmap and ofmap offsets
    topo = topologies()
    # GEMM mode's own layer entry: ifmap M x K, filter 1 x K with K channels... as
    # load_arrays_gemm writes it: [name, M, K, 1, K, 1, N, stride 1, 1, sparsity 1:1].
    topo.load_layer_params_from_list("gemm", ["gemm", m, k, 1, k, 1, n, 1, 1, 1, 1])
    topo.topo_calc_hyperparams()
    op = operand_matrix()
    op.set_params(config_obj=cfg, topoutil_obj=topo, layoututil_obj=layouts(), layer_id=0)
    op.create_operand_matrices()
    _, ifmap = op.get_ifmap_matrix()
    _, filt = op.get_filter_matrix()
    _, ofmap = op.get_ofmap_matrix()
    compute = {"os": systolic_compute_os, "ws": systolic_compute_ws,
               "is": systolic_compute_is}[dataflow]()
    compute.set_params(config_obj=cfg, ifmap_op_mat=ifmap, ofmap_op_mat=ofmap,
                       filter_op_mat=filt)
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        compute.create_prefetch_matrices()
        compute.create_demand_matrices()
    ifmap_demand, _, _ = compute.get_demand_matrices()
    return ScaleSimResult(int(ifmap_demand.shape[0]), int(compute.get_ifmap_requests()),
                          int(compute.get_filter_requests()), int(compute.get_ofmap_requests()))
