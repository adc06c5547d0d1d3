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


@dataclass
class ScaleSimMemoryResult:
    cycles_incl_prefetch: int  # COMPUTE_REPORT "Total Cycles (incl. prefetch)"
    compute_cycles: int        # COMPUTE_REPORT "Total Cycles" (the last cycle's index)
    stall_cycles: int
    ifmap_dram_reads: int      # DETAILED_ACCESS_REPORT: request-line slots, empty ones included
    filter_dram_reads: int
    ofmap_dram_writes: int
    ifmap_words_fetched: int   # addresses really requested from DRAM (its DRAM trace)
    filter_words_fetched: int


@contextlib.contextmanager
def _numpy2_max():
    """SCALE-Sim 3.0.0's memory modules call the builtin max() on numpy arrays, which numpy 2
    refuses to turn into a scalar (DESIGN.md). Shadow it in those modules only, for the call."""
    import builtins

    import numpy as np
    from scalesim.memory import double_buffered_scratchpad_mem, read_buffer, write_buffer

    def patched(*args, **kwargs):
        if len(args) == 1 and not kwargs:
            return np.max(np.asarray(args[0]))
        return builtins.max(*(np.max(a) if isinstance(a, np.ndarray) else a for a in args),
                            **kwargs)

    mods = (double_buffered_scratchpad_mem, read_buffer, write_buffer)
    try:
        for mod in mods:
            mod.max = patched
        yield
    finally:
        for mod in mods:
            if "max" in vars(mod):
                del mod.max


def run_gemm_memory(m: int, n: int, k: int, rows: int, cols: int, dataflow: str,
                    ifmap_kb: int, filter_kb: int, ofmap_kb: int,
                    bandwidth_words: int) -> ScaleSimMemoryResult:
    """SCALE-Sim 3.0.0's whole single-layer simulation (compute + double-buffered SRAMs with
    USER interface bandwidth) of a GEMM, as its reports would print it."""
    import numpy as np
    from scalesim.layout_utils import layouts
    from scalesim.scale_config import scale_config
    from scalesim.single_layer_sim import single_layer_sim
    from scalesim.topology_utils import topologies

    cfg = scale_config()
    cfg.set_arr_dims(rows, cols)
    cfg.set_dataflow(dataflow)
    cfg.set_buffer_sizes_kb(ifmap_kb, filter_kb, ofmap_kb)
    cfg.use_user_bandwidth = True
    cfg.bandwidths = [bandwidth_words]
    # In USER mode 3.0.0 takes the ifmap/filter interface bandwidth from the layout section's
    # SRAM bank bandwidth (the ofmap one from Bandwidth): set both to the same value, one bank.
    cfg.ifmap_sram_bank_bandwidth = cfg.filter_sram_bank_bandwidth = bandwidth_words
    cfg.ifmap_sram_bank_num = cfg.filter_sram_bank_num = 1
    cfg.force_valid()
    topo = topologies()
    topo.load_layer_params_from_list("gemm", ["gemm", m, k, 1, k, 1, n, 1, 1, 1, 1])
    topo.topo_calc_hyperparams()
    sim = single_layer_sim()
    with _numpy2_max(), contextlib.redirect_stderr(io.StringIO()), \
            contextlib.redirect_stdout(io.StringIO()):
        sim.set_params(layer_id=0, config_obj=cfg, topology_obj=topo, layout_obj=layouts(),
                       verbose=False)
        sim.run()
        overall, total, stall = sim.get_compute_report_items()[:3]
        detail = sim.get_detail_report_items()
        ifmap_trace = sim.memory_system.ifmap_buf.get_trace_matrix()
        filter_trace = sim.memory_system.filter_buf.get_trace_matrix()

    def fetched(trace):
        return int(np.count_nonzero(trace[:, 1:] != -1))

    return ScaleSimMemoryResult(int(overall), int(total), int(stall), int(detail[11]),
                                int(detail[14]), int(detail[17]), fetched(ifmap_trace),
                                fetched(filter_trace))
