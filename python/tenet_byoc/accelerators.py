"""Accelerators the runtime charges calls to: shipped presets and custom TENET configurations.

An :class:`Accelerator` is a named pair of a :class:`~tenet_byoc.cost_model.Hardware` (PE array,
interconnect, bandwidth, latency, clock, MAC rates by operand width) and a
:class:`~tenet_byoc.cost_model.Dataflow` (space and time maps). It is chosen at build time
and travels inside the runtime module in the cost model's one JSON form
(:meth:`Accelerator.to_json`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from . import cost_model as cm
from ._names import did_you_mean
from .area import accelerator_area, mac_figure
from .documents import read_text
from .mapping import check_objective

#: What ``preset``, ``resolve`` (and so ``estimate`` and the CLI) accept as ``mapping``:
#: None keeps the accelerator's own, "default" each call's default tiles (no search), "auto"
#: searches each distinct call: the accelerator's own ``mapping`` values ("default",
#: "auto", or a TileMapping, which no choice replaces).
MAPPING_CHOICES = (None, "default", "auto")


class Accelerator(cm.Accelerator):
    """The one accelerator value (``cost_model.Accelerator``, bound from C++), with presets'
    constructors and build-time checks. Immutable, compared and hashed by its JSON form.

    Parameters
    ----------
    name : str
        The accelerator's one name: ledgers, reports and sweeps show it.
    hardware : cost_model.Hardware
        The PE array, interconnect, clock and MACs per PE per cycle (an int, or a dict by
        operand width such as ``{16: 2, 8: 4, 4: 8}``: see ``cost_model.Hardware``).
    dataflow : cost_model.Dataflow
        Space and time maps of a GEMM ``S[i,j,k]`` (``C[i,j] += A[i,k] * B[k,j]``).
    memory : cost_model.MemoryHierarchy, optional
        DRAM -> global buffer -> array -> per-PE registers. None: what TENET's ``.p`` line
        says (``cost_model.memory_from_tenet``: ``l1_bytes`` -> ``register_bytes``,
        ``l2_bytes`` -> ``buffer_bytes``, ``bandwidth_bits`` -> ``dram_bandwidth_bits``).
        The value holds the hierarchy filled in; it is the one memory figure charged.
    precision : cost_model.PrecisionTable, optional
        The PEs' MAC units: operand widths they take (others are refused) and pJ per MAC.
        None: ``PrecisionTable.horowitz_45nm()``. Their MACs per cycle are always the
        hardware's ``macs_per_pe_per_cycle`` (the one rate setting).
    mapping : cost_model.TileMapping, "default" or "auto", optional
        How every call is cut into buffer tiles: "default" (None) is
        ``cost_model.default_tile_mapping`` of each call with ``dataflow``; a TileMapping is
        used for all; "auto" searches each distinct call once (cached per accelerator) for
        the dataflow, buffer tiles and tile-loop order minimising ``objective``: os, ws and
        is on the array (each also with its streamed dimension tiled) when ``dataflow`` is
        a preset, ``dataflow`` alone when it is the user's own relations (TENET files).
    objective : {"latency", "energy", "edp"}, optional
        What ``mapping="auto"`` minimises; None there means "latency". Only with "auto".
    supported_dataflows : sequence of {"os", "ws", "is"}, optional
        The dataflows the array can run: what ``mapping="auto"`` chooses among. It must
        include ``dataflow``'s own preset (TPU v1's array is weight-stationary only:
        ``("ws",)``). None: os, ws and is for a preset dataflow; ``()`` (that dataflow
        alone) for the user's own relations, the only value they accept.
    vector : cost_model.VectorUnit, optional
        The vector unit non-GEMM operators (norms, softmax, activations, elementwise, ...)
        are charged on. None: ``VectorUnit()`` (16 float32 lanes, Horowitz 45 nm energies).
    edge_dequantizer : cost_model.EdgeDequantizer, optional
        The dequantizer at the array edge that runs weight dequantization
        (``dequant_place="weight"``) beside the array. None: none (it runs on the PEs).

    ``Accelerator(value)`` makes one of a ``cost_model.Accelerator`` value.

    Raises
    ------
    ValueError
        When the dataflow cannot run on the hardware: the cost model costs a probe GEMM
        larger than the array (``2 * num_pes + 3`` rows and columns, capped at 259), so a
        space map that leaves the PE domain or a time map with conflicts fails here rather
        than at the first call.
    """

    def replace(self, **changes: Any) -> Accelerator:
        """This accelerator with some of its constructor's arguments changed."""
        unknown = set(changes) - set(_FIELDS)
        if unknown:
            raise TypeError(
                f"Accelerator.replace: unknown field(s) {sorted(unknown)}; fields are "
                f"{', '.join(_FIELDS)}"
            )
        parts = {f: getattr(self, f) for f in _FIELDS}
        if "dataflow" in changes and not changes["dataflow"].preset:
            # The user's own relations run alone: the old array's presets do not carry over.
            parts["supported_dataflows"] = None
        parts.update(changes)
        if parts["mapping"] != "auto" and "objective" not in changes:
            parts["objective"] = None
        return type(self)(**parts)

    @property
    def dram_capacity_bytes(self) -> float | None:
        """Bytes of DRAM (HBM) the chip holds: its memory's ``dram_capacity_bytes`` (in its
        JSON; the presets modelled on real chips hold their data sheets',
        :data:`DRAM_CAPACITY_BYTES`), or None where that is 0 (not known: nothing is
        refused for not fitting)."""
        return self.memory.dram_capacity_bytes or None

    @property
    def attention(self) -> str:
        """How the chip runs attention by default: ``"fused"`` (one kernel per layer, the
        scores kept on chip: ``cost_model.AttentionCall``) for the presets of
        :data:`FUSED_ATTENTION` by name, else ``"unfused"`` (the products and the vector
        work on the scores, as the Relax graph runs them). ``estimate(attention=)`` chooses
        otherwise for one estimate."""
        return "fused" if self.name in FUSED_ATTENTION else "unfused"

    def with_dram_capacity(self, nbytes: float | None) -> Accelerator:
        """This accelerator holding ``nbytes`` bytes of DRAM (None: the figure of the preset of
        its name, if any). The capacity changes no charge, only whether a model fits.

        Raises
        ------
        ValueError
            For a capacity that is not a positive finite number.
        """
        nbytes = (DRAM_CAPACITY_BYTES.get(self.name, 0.0) if nbytes is None
                  else check_dram_capacity(nbytes))
        fields = json.loads(self.to_json())["memory"]  # the memory's fields, by name
        return self.replace(memory=cm.MemoryHierarchy(**{**fields,
                                                         "dram_capacity_bytes": nbytes}))

    @property
    def mapping_search(self) -> Any:
        """The accelerator's one mapping search (``mapping="auto"``; else None): what
        ``cost_model.charge`` charges through, each distinct call searched once
        (``.searches`` counts them)."""
        return self._mapping_search

    @property
    def fast_path(self) -> bool:
        """Whether every GEMM is costed in closed form, whatever its size (see
        :meth:`check_gemm`)."""
        try:
            cm.analyze(cm.Statement.gemm(2, 2, 2), self.hardware, self.dataflow, method="fast")
        except ValueError:
            return False
        return True

    def check_gemm(self, m: int, n: int, k: int, where: str = "a GEMM") -> None:
        """Refuse, before anything runs, a GEMM the cost model could only cost by enumerating
        too many instances.

        Every GEMM size is costed in closed form (:attr:`fast_path`) for an os/ws/is preset
        dataflow (``Dataflow.preset``, or TENET relations equal to one, such as TENET's
        ``matmul_systolic_os.m`` / ``_ws.m``) on the systolic interconnect
        ``{PE[p,q]->PE[p-1,q]; PE[p,q]->PE[p,q-1]}``. Any other TENET file pair is costed by
        enumerating each call's M x N x K instances, up to
        ``cost_model.MAX_ENUMERATED_INSTANCES``.

        Raises
        ------
        ValueError
            When ``m * n * k`` is over that limit and the fast path does not apply; the
            message names the GEMM and says what to do.
        """
        limit = cm.MAX_ENUMERATED_INSTANCES
        if m * n * k > limit and not self.fast_path:
            raise ValueError(
                f"accelerator {self.name!r}: {where} of {m} x {n} x {k} = {m * n * k:,} "
                f"instances cannot be costed: dataflow {self.dataflow.name!r} is not an "
                f"os/ws/is preset on a systolic array, so each call is enumerated, up to "
                f"{limit:,} instances. Use a preset dataflow (or TENET's matmul_systolic_os.m "
                "/ _ws.m form) for large GEMMs, or smaller shapes"
            )

    def area(self, node_nm: float = 45.0, table: Any = None,
             formats: Mapping[int, str] | None = None) -> dict[str, float]:
        """Area in mm2 by component at ``node_nm`` (``tenet_byoc.area.accelerator_area``):
        MAC datapaths per precision unit, PE registers, buffer, DRAM interface, ``total``.
        ``table`` is an ``area.AreaTable`` or a JSON/YAML file of its fields replacing the
        published figures; ``formats`` names a unit's format by width (``{8: "fp8_e4m3"}``)."""
        return accelerator_area(self, node_nm, table, formats)

    @classmethod
    def from_json(cls, text: str) -> Accelerator:
        """The accelerator :meth:`to_json` wrote.

        Raises
        ------
        ValueError
            For text that is not the accelerator's JSON form (naming the field), is not
            valid Unicode, or is larger than 1 MiB (relations are a few lines).
        """
        return cls(cm.Accelerator._parse_json(text))

    @classmethod
    def from_file(cls, path: str | Path) -> Accelerator:
        """The accelerator a JSON or YAML file holds in the one JSON form (:meth:`to_json`;
        ``tenet-byoc presets --show NAME`` prints a preset's to start from). YAML is read
        by its suffix (``.yaml``/``.yml``) and must hold the same fields.

        Raises
        ------
        ValueError
            For a file that is not JSON/YAML, or not the accelerator's form (the message
            names the file and the field).
        FileNotFoundError
            For a missing file.
        """
        # Each quantity once, every problem in one message: tenet_byoc.design_file.
        from .design_file import read_design

        return read_design(path, cls.from_json, {name: preset(name) for name in PRESETS})

    @classmethod
    def systolic(cls, dataflow: str, rows: int, cols: int, *, name: str | None = None,
                 bandwidth_bits: float = 256.0, avg_latency: float = 16.0,
                 clock_ghz: float = 1.0, l1_bytes: int = 256, l2_bytes: int = 1 << 20,
                 macs_per_pe_per_cycle: int | Mapping[int, int] = 1,
                 **fields_and_tiling: Any) -> Accelerator:
        """An ``rows x cols`` systolic array running preset ``dataflow`` ("os", "ws", "is"),
        its streamed dimension tiled by ``k=`` (os), ``m=`` (ws) or ``n=`` (is).

        The other keywords are :class:`Accelerator`'s (``memory``, ``precision``,
        ``mapping``, ``objective``, ``supported_dataflows``, ``vector``,
        ``edge_dequantizer``, ``cores``; None: from ``l1_bytes``, ``l2_bytes`` and
        ``bandwidth_bits`` as TENET reads them, Horowitz's 45 nm MAC units, the default
        mapping)."""
        name = name or f"{dataflow}{rows}x{cols}"
        fields = {f: fields_and_tiling.pop(f) for f in _FIELDS[3:] if f in fields_and_tiling}
        rate = macs_per_pe_per_cycle
        hw = cm.Hardware.systolic(
            rows, cols, bandwidth_bits=bandwidth_bits, avg_latency=avg_latency,
            clock_ghz=clock_ghz, l1_bytes=l1_bytes, l2_bytes=l2_bytes,
            macs_per_pe_per_cycle=dict(rate) if isinstance(rate, Mapping) else rate, name=name,
        )
        df = cm.Dataflow.preset(dataflow, rows, cols, **fields_and_tiling)
        return cls(name, hw, df, **fields)

    @classmethod
    def from_tenet_files(
        cls, p_file: str | Path, m_file: str | Path, *, name: str | None = None,
        clock_ghz: float = 1.0, mapping: cm.TileMapping | str | None = None,
        objective: str | None = None,
    ) -> Accelerator:
        """A TENET ``.p`` (PE array) and ``.m`` (mapping) file pair, used unchanged.

        The accelerator and its hardware are both called ``name`` (default ``"<p>+<m>"``,
        the two files' stems). The ``.m`` file's dataflow is never replaced: with
        ``mapping="auto"`` only its buffer tiles and tile-loop order are searched.
        """
        texts = [read_text(path, f"TENET {what}") for path, what in (
            (p_file, ".p file (PE array)"), (m_file, ".m file (mapping)"))]
        name = name or f"{Path(p_file).stem}+{Path(m_file).stem}"
        hw = cm.parse_tenet_hardware(texts[0], Path(p_file).stem)
        hw = cm.Hardware(
            pe_domain=hw.pe_domain, interconnect=hw.interconnect,
            bandwidth_bits=hw.bandwidth_bits, avg_latency=hw.avg_latency,
            clock_ghz=clock_ghz, l1_bytes=hw.l1_bytes, l2_bytes=hw.l2_bytes,
            macs_per_pe_per_cycle=hw.macs_per_pe_per_cycle, name=name,
        )
        df = cm.parse_tenet_mapping(texts[1], Path(m_file).stem)
        return cls(name, hw, df, mapping=mapping, objective=objective)


# The constructor's fields; then the units beside the array (src/cost_model/vector.h) and how
# many of the array there are and what they share (src/cost_model/core.h), keywords.
_FIELDS = ("name", "hardware", "dataflow", "memory", "precision", "mapping", "objective",
           "supported_dataflows", "vector", "edge_dequantizer", "cores")


def check_dram_capacity(nbytes: Any) -> float:
    """``nbytes`` as bytes of DRAM; ``ValueError`` naming it unless a positive finite number."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int | float) or not (
            0 < nbytes < float("inf")):
        raise ValueError(f"dram_capacity_bytes={nbytes!r} must be a positive number of bytes")
    return float(nbytes)


def _tenet_paper(dataflow: str) -> Callable[[], Accelerator]:
    # The 8x8 array of TENET's systolic.p: L1 256 B, L2 1 KiB, 64 bits/cycle, latency 16.
    return lambda: Accelerator.systolic(
        dataflow, 8, 8, name=f"tenet_{dataflow}8", bandwidth_bits=64, avg_latency=16,
        l1_bytes=256, l2_bytes=1024, vector=cm.VectorUnit(lanes=8),  # a lane per column
    )


#: The research arrays by edge: (global buffer bytes, DRAM bits per cycle). 16: 1 MiB and 256
#: bits (32 GB/s), the os16 equivalent issue 12 compares against ZigZag 3.9 on. 128: 24 MiB and
#: 2048 bits (256 GB/s at 1 GHz), a TPU-class array and buffer (TPU v1's unified buffer is
#: 24 MiB, Jouppi et al., ISCA 2017).
_RESEARCH_ARRAYS = {16: (1 << 20, 256), 128: (24 << 20, 2048)}


def _research_array(dataflow: str, edge: int, name: str | None = None, **kwargs) -> Accelerator:
    # An edge x edge array at 1 GHz in the hierarchy the peers model for these arrays (issue
    # 12: ZigZag's os16 equivalent): a global buffer of `buffer_bytes`, DRAM of `dram_bits`
    # per cycle, and a buffer that feeds an array edge of A and one of B and takes one of C
    # every cycle at float32 width, (rows + 2 cols) x 32 bits, so the buffer never starves a
    # float32 stream (the figure benchmarks/memory_gpt2.py uses). The rest are
    # MemoryHierarchy's defaults (Horowitz's energies, SRAM energy growing with capacity).
    # Beside the array (issue 20): a vector unit of one float32 lane per array column, so
    # the array's output row is normalised or activated at the rate it leaves the array,
    # pipelined behind it; and an edge dequantizer converting int4 and int8 weight codes at
    # one element per column per cycle, the rate the array takes weights in at its edge.
    # Energies: Horowitz 45 nm (cost_model.VectorUnit).
    buffer_bytes, dram_bits = _RESEARCH_ARRAYS[edge]
    memory = cm.MemoryHierarchy(dram_bandwidth_bits=dram_bits, buffer_bytes=buffer_bytes,
                                buffer_bandwidth_bits=3 * edge * 32, register_bytes=256)
    return Accelerator.systolic(
        dataflow, edge, edge, name=name or f"{dataflow}{edge}", bandwidth_bits=dram_bits,
        l2_bytes=buffer_bytes, memory=memory,
        vector=cm.VectorUnit(lanes=edge, schedule="pipelined"),
        edge_dequantizer=cm.EdgeDequantizer(edge, bits=[4, 8]), **kwargs)


def _tpu_v1() -> Accelerator:
    # Jouppi et al., "In-Datacenter Performance Analysis of a Tensor Processing Unit",
    # ISCA 2017: a 256 x 256 matrix unit of 8-bit MACs (Sec. 2), clock 700 MHz (Table 2),
    # weights staged through a double-buffered weight FIFO / shift registers so the next
    # tile loads while the current one computes (Sec. 2: "double-buffered"), a 24 MiB
    # unified buffer for activations plus 4 MiB of 32-bit accumulators (Sec. 2), and
    # weight memory of 34 GB/s (Table 2 / Sec. 2: 8 GiB DDR3 at 34 GB/s).
    clock_ghz = 0.7
    dram_bits = 34e9 * 8 / (clock_ghz * 1e9)  # 34 GB/s at 700 MHz: ~388.6 bits per cycle
    buffer_bytes = (24 << 20) + (4 << 20)  # the unified buffer and the accumulators
    memory = cm.MemoryHierarchy(
        dram_bandwidth_bits=dram_bits,
        # The 34 GB/s weight memory feeds only the weight FIFO (B); activations come from and
        # go to the on-chip unified buffer and accumulators over their own paths (Sec. 2,
        # Fig. 1), not through it. One shared channel charged the activations and 32-bit
        # sums to the weights' 34 GB/s and missed the paper's MLP0 and MLP1 TOPS by 26% and 33%
        # (benchmarks/tpu_v1_silicon.py); a channel per operand leaves the weights alone on
        # theirs.
        dram_channel_per_operand=True,
        # One buffer holds A, B and C tiles here; the TPU's 24 MiB unified buffer and its
        # 4 MiB accumulators together are what its tiles can occupy: this one field (28 MiB)
        # is both, and hardware.l2_bytes below (TENET's name for it) is the same figure.
        buffer_bytes=buffer_bytes,
        # Per cycle the array edge takes 256 8-bit activations and 256 weights and gives 256
        # 32-bit sums to the accumulators (Sec. 2): 256 x (8 + 8 + 32) bits. The model has
        # one buffer port for all three, so it carries the sum.
        buffer_bandwidth_bits=256 * (8 + 8 + 32),
        buffer_double_buffered=True,
        stationary_double_buffered=True,  # the double-buffered weights (weight FIFO)
        # Per MAC: a double-buffered weight, an activation and a 32-bit partial sum; 16 bytes
        # so the float32 stand-in below fits too (its check counts 4 elements of 4 bytes).
        register_bytes=16,
        psum_bits=32,  # the 32-bit accumulators
        # Weights come in whole 64 KiB 256 x 256 tiles (Sec. 2; Sec. 7: 600 x 600 takes 9).
        whole_stationary_tiles=True,
    )
    # The matrix unit multiplies 8-bit operands (16-bit at half or quarter speed, which one
    # integer rate per width cannot express). Energy: an 8 x 8 multiply with a 32-bit
    # accumulate, Horowitz 45 nm (energy.h IntegerMacPj). The TPU has no float MACs; the
    # float GEMMs a quantized model keeps (attention) are charged as float32 MACs at the
    # same rate and Horowitz's float32 energy (3.7 + 0.9 pJ): an optimistic stand-in that
    # lets a whole model be charged, visible per entry (bits_a, bits_b, mac_pj).
    precision = cm.PrecisionTable([
        cm.MacSpec(8, 8, macs_per_pe_per_cycle=1, pj_per_mac=cm.integer_mac_pj(8, 8, 32)),
        # Horowitz's float32 multiply and add, 3.7 + 0.9 pJ, written as it prints
        cm.MacSpec(32, 32, macs_per_pe_per_cycle=1, pj_per_mac=4.6),
    ])
    # The activation pipeline (Sec. 2: the Activation Unit applies ReLU, sigmoid, ... and
    # pooling to the 256-wide accumulator rows) is 256 lanes wide, one per matrix unit column,
    # pipelined behind the matrix unit. The TPU has no weight dequantizer (its weights are
    # int8): none here, so a narrower weight's dequantization runs on the PEs.
    vector = cm.VectorUnit(lanes=256, schedule="pipelined")
    return Accelerator.systolic(
        "ws", 256, 256, name="tpu_v1", bandwidth_bits=dram_bits, clock_ghz=clock_ghz,
        l1_bytes=16, l2_bytes=buffer_bytes, memory=memory, precision=precision,
        # The matrix unit holds weights stationary and streams activations (Sec. 2): a
        # mapping search may not pick an output- or input-stationary dataflow.
        supported_dataflows=("ws",), vector=vector,
    )


def _chip(dataflow: str, rows: int, cols: int, name: str, *, clock_ghz: float,
          dram_gbps: float, buffer_bytes: int, buffer_bits: float, l2_bytes: int,
          rates: dict[int, int], precision: cm.PrecisionTable, **units: Any) -> Accelerator:
    # A chip from its data sheet: DRAM of `dram_gbps` GB/s at the clock (as bits per cycle),
    # a double-buffered buffer of `buffer_bytes` fed at `buffer_bits` a cycle whose
    # stationary operand is double-buffered too, 256 B of registers per PE, `l2_bytes` the
    # shared level (TENET's L2), MACs per PE per cycle by width; `units` the units beside.
    dram_bits = dram_gbps * 1e9 * 8 / (clock_ghz * 1e9)
    memory = cm.MemoryHierarchy(
        dram_bandwidth_bits=dram_bits, buffer_bytes=buffer_bytes,
        buffer_bandwidth_bits=buffer_bits, register_bytes=256, buffer_double_buffered=True,
        stationary_double_buffered=True)
    return Accelerator.systolic(
        dataflow, rows, cols, name=name, bandwidth_bits=dram_bits, clock_ghz=clock_ghz,
        l1_bytes=256, l2_bytes=l2_bytes, memory=memory, precision=precision,
        macs_per_pe_per_cycle=rates, **units)


def _tpu_v5e() -> Accelerator:
    # One TPU v5e chip from public figures. Sources:
    # [docs] Google Cloud, "TPU v5e" (cloud.google.com/tpu/docs/v5e): one TensorCore per chip
    #   with four matrix-multiply units (MXUs), a vector unit and a scalar unit; 197 TFLOPs
    #   bf16 and 393 TOPs int8 peak per chip; 16 GB HBM2 at 819 GB/s; ICI 400 GB/s
    #   bidirectional per chip over 4 ports, 2-D torus.
    # [arch] Google Cloud, "System architecture" (cloud.google.com/tpu/docs/
    #   system-architecture-tpu-vm): each MXU is a 128 x 128 systolic array.
    # [mlperf] MLCommons inference_results_v4.0 / v4.1, closed/Google, system tpu_v5e_x4:
    #   "accelerator_on-chip_memories: 48 MiB".
    # Assumed (not published): the clock, 1.5 GHz, derived so that 4 MXUs x 128 x 128 MACs
    # x 2 FLOP x clock = 197 TFLOPs (196.6 at exactly 1.5 GHz); the four MXUs as one
    # 128 x 128 array doing 4 bf16 (8 int8) MACs per PE per cycle, so tiles fold at the
    # MXU's 128-wide granularity while the chip's peak is kept; all 48 MiB usable as one
    # tile buffer; a buffer port feeding every MXU edge each cycle; the vector unit 8 x 128
    # lanes (TPU v4's layout); int8 weights widened to bf16 beside the MXUs at one element
    # per MXU column per cycle (an edge dequantizer); weight-stationary MXUs, as every TPU's.
    mxus, edge = 4, 128
    # MACs per PE per cycle by operand width: bf16 4 (one per MXU), int8 8 (393 TOPs is
    # twice 197 TFLOPs). The float32 GEMMs a model keeps (attention's activations) run at
    # the bf16 rate: Saxml and XLA run them in bf16 on the MXUs; a stand-in that lets a
    # whole model be charged, visible per entry (bits_a, bits_b). Energies: Horowitz 45 nm.
    rates = {32: mxus, 16: mxus, 8: 2 * mxus}
    # MAC units by format: [docs] gives bf16 and int8 peaks only, so fp8 / fp4 codes run
    # emulated on the bf16 unit, at its rate (half the int8 one).
    # 819 GB/s at 1.5 GHz: 4,368 bits per cycle. Each cycle every MXU takes a 128-wide edge
    # of A and of B and gives one of C.
    return _chip(
        "ws", edge, edge, "tpu_v5e", clock_ghz=1.5, dram_gbps=819.0, buffer_bytes=48 << 20,
        buffer_bits=mxus * (edge + 2 * edge) * 32, l2_bytes=48 << 20, rates=rates,
        precision=_int8_16_32(rates, pj_32=1.1 + 0.4), supported_dataflows=("ws",),
        vector=cm.VectorUnit(lanes=8 * 128, schedule="pipelined"),
        edge_dequantizer=cm.EdgeDequantizer(mxus * edge, bits=[4, 8]))


def _int8_16_32(rates: Mapping[int, int], pj_32: float = 4.6,
                fp8: bool = False) -> cm.PrecisionTable:
    # MAC units by format: 8-bit integers (an 8 x 8 multiply with a 32-bit accumulate),
    # 16-bit floats (Horowitz's fp16 multiply and add, 1.1 + 0.4 pJ) and 32-bit floats (by
    # default Horowitz's float32 multiply and add, 3.7 + 0.9 pJ, written as it prints) at
    # `rates` MACs per PE per cycle by width; with `fp8` an 8-bit float unit at the int8
    # rate (its energy by area.py's 45 nm float rules). Without it fp8 / fp4 codes run
    # emulated on the 16-bit float unit, at its rate.
    return cm.PrecisionTable([
        cm.MacSpec(8, 8, macs_per_pe_per_cycle=rates[8], pj_per_mac=cm.integer_mac_pj(8, 8, 32),
                   format="int"),
        *([cm.MacSpec(8, 8, macs_per_pe_per_cycle=rates[8],
                      pj_per_mac=mac_figure("fp8_e4m3", key="pj"), format="float")] if fp8 else []),
        cm.MacSpec(16, 16, macs_per_pe_per_cycle=rates[16], pj_per_mac=1.1 + 0.4, format="float"),
        cm.MacSpec(32, 32, macs_per_pe_per_cycle=rates[32], pj_per_mac=pj_32, format="float")])


def hopper(name: str, *, hbm_gbps: float, l2_bytes: int, clock_ghz: float = 1.83,
           launch_us: float = 0.0, l2_bytes_per_clock: int = 5120,
           vector_launch_us: float = 0.0, row_bits_per_cycle: float = 0.0,
           dequant_per_clock: int = 32, rate_8bit: int | None = None) -> Accelerator:
    """An NVIDIA Hopper GPU (GH100 SXM5) as an accelerator of 132 SM cores, the presets
    ``h100_sxm`` and ``h200`` (sources in the code); ``clock_ghz``, ``launch_us`` and
    ``l2_bytes_per_clock`` replace the data sheet's boost clock, the (unpublished, 0) launch
    cost and the assumed L2 bandwidth, ``vector_launch_us`` and ``row_bits_per_cycle`` the
    vector kernels' (unpublished, 0) launch cost and per-row bound, ``dequant_per_clock``
    the int4 weight elements an SM's CUDA cores dequantize per clock (assumed 32), and
    ``rate_8bit`` the 8-bit MACs per PE per clock (the data sheet's 32), e.g. by figures
    measured on one device (``benchmarks/silicon/h200.py --calibrate``,
    ``benchmarks/silicon/h200_ops.py --calibrate``)."""
    # One core per SM. Sources:
    # [wp] NVIDIA, "NVIDIA H100 Tensor Core GPU Architecture" whitepaper (2022), Table 3
    #   (H100 SXM5): 132 SMs, 4 fourth-generation tensor cores per SM (528), 128 FP32 cores
    #   per SM, 50 MB L2, 228 KB shared memory per SM, 256 KB register file per SM; peak
    #   dense FP16/BF16 tensor 989.4 TFLOP/s, FP8 1,978.9, INT8 1,978.9 TOPS, FP32 66.9.
    # [ds] NVIDIA H100 data sheet: H100 SXM 3.35 TB/s HBM3; NVIDIA H200 data sheet: the
    #   same compute figures, 141 GB HBM3e at 4.8 TB/s.
    # Derived: 989.4e12 / (528 tensor cores x 2 x 1.83 GHz) = 512 dense bf16 FMAs per tensor
    # core per clock (1,024 at fp8 / int8): the clock is 1.83 GHz (the boost clock the
    # whitepaper's tensor peaks are given at). A tensor core is taken as 8 x 4 PEs, each a
    # 16-wide bf16 (32-wide 8-bit) dot product (an 8 x 4 x 16 MMA per clock, the shape of
    # the published per-clock figure); an SM's four as one 16 x 8 output-stationary array
    # whose accumulators are double-buffered (the tensor cores' results stay in registers
    # while the next MMAs issue: folds in steady state). float32 GEMMs (TF32 off) run on
    # the 128 CUDA cores per SM: one FMA per PE per clock, 61.8 TFLOP/s at 1.83 GHz (the
    # whitepaper's 66.9 is at 1.98 GHz).
    # Assumed (not published): the L2's bandwidth to the SMs, taken as the A100's 5,120 B
    # per clock (LLMCompass's A100 description); shared memory feeding both array edges
    # at the bf16 rate every clock ((16 + 8) x 16 x 16 bits, plus a row of C); K split at
    # most 16 ways. The launch cost is not published: 0 here (benchmarks/silicon/h200.py
    # --calibrate fits one on a named subset of the measured rows).
    sms, tcs_per_sm, pes_per_tc = 132, 4, 32
    # MACs per PE per cycle by operand width: a tensor core's 512 (1,024) dense FMAs per
    # clock at 16 (8) bits over its PEs, each a dot-product unit; float32 on the SM's 128
    # CUDA cores instead, spread over the same PEs.
    rates = {16: 512 // pes_per_tc, 8: 1024 // pes_per_tc if rate_8bit is None else rate_8bit,
             32: 128 // (tcs_per_sm * pes_per_tc)}
    rows, cols = 8, 16  # 4 tensor cores of 8 x 4 PEs side by side
    cores = cm.Cores(count=sms, shared_bandwidth_bits=l2_bytes_per_clock * 8, shared_bytes=l2_bytes,
                     launch_cycles=round(launch_us * 1e3 * clock_ghz), max_split_k=16)
    return _chip(
        # The SM's buffer: its 228 KB of shared memory (A and B stages) and its 256 KB
        # register file (C's accumulators) [wp].
        "os", rows, cols, name, clock_ghz=clock_ghz, dram_gbps=hbm_gbps,
        buffer_bytes=(228 + 256) * 1024, buffer_bits=(rows + cols) * 16 * 16 + cols * 32,
        l2_bytes=l2_bytes, rates=rates, cores=cores,
        # MAC units by format: [wp] gives FP8 and INT8 the same dense peak (1,978.9): two
        # units of 8 bits at one rate. float32 runs as cuBLAS's SGEMM, whose thread blocks
        # compute 9-32 rows as 32 and 33-64 as 64 (profiled on the H200: silicon/data/h200/
        # kernels.jsonl; the H100 assumed alike, the same die and library).
        precision=cm.PrecisionTable([
            cm.MacSpec(32, 32, u.macs_per_pe_per_cycle, u.pj_per_mac, u.format,
                       row_tiles=[(9, 32), (33, 64)]) if u.bits_a == 32 else u
            for u in _int8_16_32(rates, fp8=True).units]),
        # The CUDA cores: 128 FP32 lanes per SM. Vector kernels as PyTorch's eager CUDA
        # kernels run them (aten/src/ATen/native/cuda: SoftMax.cu's cunn_SoftMaxForward
        # reads a row for its max, its sum and its output; layer_norm_kernel.cu /
        # RMS norm read it for the moments, then to normalize): through global memory
        # (HBM), 3 / 2 reads of the input. Launch cost and per-row bound unpublished: 0.
        vector=cm.VectorUnit(lanes=sms * 128, schedule="serial", streams_from_dram=True,
                             softmax_passes=3, norm_passes=2,
                             launch_cycles=round(vector_launch_us * 1e3 * clock_ghz),
                             row_bits_per_cycle=row_bits_per_cycle),
        # int4 weights are dequantized on each SM's CUDA cores beside its tensor cores (no
        # int4 tensor-core path on Hopper [wp]): assumed 4 lane ops per element (unpack:
        # shift and mask, convert, one FMA with scale and zero) on the 128 lanes = 32
        # elements per SM per clock, overlapping the MMAs.
        edge_dequantizer=cm.EdgeDequantizer(dequant_per_clock, bits=[4]),
    )


def _a100(clock_ghz: float = 1.41, hbm_gbps: float = 2039.0) -> Accelerator:
    # clock_ghz / hbm_gbps: a sustained clock or HBM rate (benchmarks/silicon/a100_ops.py).
    # An NVIDIA A100 (SXM4 40 GB) as LLMCompass describes it (Zhang et al., "LLMCompass:
    # Enabling Efficient Hardware Design for Large Language Model Inference", ISCA 2024, and
    # its repository's configs/GA100.json): 108 SMs x 4 sub-cores x one 16 x 16 fp16 systolic
    # array, 1.41 GHz, 192 KB SRAM per SM, 40 MiB L2 at 5,120 B per cycle, HBM 2,039 GB/s.
    # Here one core per SM, its four arrays side by side as one 16 x 64 output-stationary
    # array with double-buffered accumulators (108 x 4,096 PEs: 312 TFLOP/s fp16, NVIDIA's
    # A100 figure); 8-bit at twice the rate (624 TOPS int8, NVIDIA's A100 data sheet); float32
    # at the fp16 rate (a stand-in: TF32 is half of it, the CUDA cores 1/16). Assumed: the
    # 192 KB as the core's one buffer, fed at both array edges every cycle; K split at most
    # 16 ways; no launch cost.
    sms, rows, cols = 108, 16, 64
    rates = {32: 1, 16: 1, 8: 2}
    cores = cm.Cores(count=sms, shared_bandwidth_bits=5120 * 8, shared_bytes=40 << 20,
                     max_split_k=16)
    return _chip(
        "os", rows, cols, "a100", clock_ghz=clock_ghz, dram_gbps=hbm_gbps,
        buffer_bytes=192 * 1024, buffer_bits=(rows + 2 * cols) * 32, l2_bytes=40 << 20,
        rates=rates, cores=cores,
        # MAC units by format: the data sheet lists INT8 (624 TOPS) and no FP8 (Hopper's
        # tensor cores are the first with it): fp8 / fp4 codes run emulated on the fp16 unit.
        precision=_int8_16_32(rates),
        # 64 FP32 lanes per SM. Vector kernels through global memory (HBM) as LLMCompass
        # models them (software_model/layernorm.py, gelu.py: one read and one write of each
        # element from DRAM; its A100 layer norm and GELU are torch.compile'd, one fused
        # kernel); softmax as PyTorch's eager CUDA kernel (SoftMax.cu: 3 reads of the input).
        # Launch cost unpublished: 0.
        vector=cm.VectorUnit(lanes=sms * 64, schedule="serial", streams_from_dram=True,
                             softmax_passes=3, norm_passes=1),
    )


#: Shipped presets by name. Bandwidth is off-chip bits per cycle at ``clock_ghz``.
PRESETS: dict[str, Callable[[], Accelerator]] = {
    "os16": lambda: _research_array("os", 16),
    "ws16": lambda: _research_array("ws", 16),
    "is16": lambda: _research_array("is", 16),
    # A 16x16 output-stationary array whose PEs are dot-product units that do more MACs per
    # cycle at lower precision (2 at 16 bits, 4 at 8, 8 at 4): compute follows the bits.
    "os16_mp": lambda: _research_array("os", 16, "os16_mp",
                                       macs_per_pe_per_cycle={16: 2, 8: 4, 4: 8}),
    "os128": lambda: _research_array("os", 128),
    "ws128": lambda: _research_array("ws", 128),
    "tpu_v1": _tpu_v1,
    "tpu_v5e": _tpu_v5e,
    "a100": _a100,
    # H100 SXM: 3.35 TB/s, 50 MB L2 [wp, ds]. H200: the same GH100 compute, 4.8 TB/s HBM3e
    # [ds]; its L2 60 MB as the measured device reports it (../shared/silicon/h200/README).
    "h100_sxm": lambda: hopper("h100_sxm", hbm_gbps=3350.0, l2_bytes=50_000_000),
    "h200": lambda: hopper("h200", hbm_gbps=4800.0, l2_bytes=60_000_000),
    "tenet_os8": _tenet_paper("os"),
    "tenet_ws8": _tenet_paper("ws"),
}

DEFAULT_PRESET = "os16"

#: DRAM capacity of the presets modelled on real chips, bytes (vendors' GB as 10^9 bytes).
#: Sources: NVIDIA A100 Tensor Core GPU data sheet: the SXM4 80 GB part is the one of the
#: preset's 2,039 GB/s (the 40 GB part has 1,555 GB/s), and LLMCompass (Zhang et al., ISCA
#: 2024) models its A100 with 80 GB; NVIDIA H100 Tensor Core GPU data sheet (SXM, 80 GB
#: HBM3); NVIDIA H200 Tensor Core GPU data sheet (141 GB HBM3e); Google Cloud, "TPU v5e"
#: (16 GB of HBM2 per chip); Jouppi et al., ISCA 2017 (TPU v1: 8 GiB of DDR3). The
#: research arrays (os16, ws128, tenet_*) state none.
DRAM_CAPACITY_BYTES: dict[str, float] = {
    "a100": 80e9,
    "h100_sxm": 80e9,
    "h200": 141e9,
    "tpu_v5e": 16e9,
    "tpu_v1": float(8 * 2**30),
}

#: Presets whose chips run attention fused by default (:attr:`Accelerator.attention`): the
#: GPUs, on which serving engines and PyTorch's ``scaled_dot_product_attention`` run
#: FlashAttention-style kernels (cuDNN's or FlashAttention's; ``benchmarks/silicon``'s H200
#: measurements ran cuDNN's).
FUSED_ATTENTION = frozenset({"a100", "h100_sxm", "h200"})


def with_mapping(
    accelerator: Accelerator, mapping: str | None = None, objective: str | None = None
) -> Accelerator:
    """``accelerator`` with its mapping chosen as ``preset`` and ``resolve`` choose it.

    ``mapping`` None keeps the accelerator's own; "default" drops a search ("auto" becomes
    the default mapping); "auto" searches each distinct call minimising ``objective`` (None:
    the accelerator's own objective, else "latency"). A user-given TileMapping is never
    replaced (and a TENET-file dataflow never is: "auto" searches only its tiles).

    Raises
    ------
    ValueError
        ``mapping`` not in None / "default" / "auto", ``objective`` not in
        latency / energy / edp, or an objective without a search to apply it to.
    """
    if mapping not in MAPPING_CHOICES:
        raise ValueError(f"mapping must be one of None, 'default' or 'auto', got {mapping!r}")
    if objective is not None:
        check_objective(objective)
    if isinstance(accelerator.mapping, cm.TileMapping):
        return accelerator  # the user's own tiles win
    searched = mapping == "auto" or (mapping is None and accelerator.mapping == "auto")
    if objective is not None and not searched:
        raise ValueError(
            f"objective={objective!r} applies only with mapping='auto' (accelerator "
            f"{accelerator.name!r} has mapping {accelerator.mapping!r}, mapping={mapping!r})"
        )
    if mapping == "default":
        return accelerator.replace(mapping="default", objective=None)
    if searched:
        objective = objective or accelerator.objective or "latency"
        if (accelerator.mapping, accelerator.objective) == ("auto", objective):
            return accelerator
        return accelerator.replace(mapping="auto", objective=objective)
    return accelerator


def preset(name: str, mapping: str | None = None, objective: str | None = None) -> Accelerator:
    """The shipped accelerator called ``name`` (see :data:`PRESETS`), its mapping chosen by
    ``mapping``: "auto" (None: the presets' own but TENET's) searches each distinct call
    minimising ``objective`` (default "latency"); "default" uses each call's default tiles,
    no search (up to 3x slower than the search: ``benchmarks/results/default_vs_auto.md``).
    TENET's 8x8 arrays (``tenet_os8``, ``tenet_ws8``) keep their paper's dataflow and the
    default tiles: in their 1 KiB buffer no searched mapping fits most calls. See
    :func:`with_mapping`, which checks ``mapping`` and ``objective``."""
    if not isinstance(name, str):
        raise TypeError(
            f"preset name must be a str, one of {', '.join(sorted(PRESETS))}; got "
            f"{type(name).__name__} {name!r}"
        )
    if name not in PRESETS:
        raise ValueError(
            f"unknown accelerator preset {name!r}{did_you_mean(name, PRESETS)}; available: "
            f"{', '.join(sorted(PRESETS))}"
        )
    if mapping is None and not name.startswith("tenet_"):
        mapping = "auto"
    acc = PRESETS[name]()
    if name in DRAM_CAPACITY_BYTES:
        acc = acc.with_dram_capacity(DRAM_CAPACITY_BYTES[name])
    return with_mapping(acc, mapping, objective)


def resolve(
    accelerator: str | Accelerator | None,
    mapping: str | None = None,
    objective: str | None = None,
) -> Accelerator:
    """An :class:`Accelerator` from a preset name, an Accelerator, or None (the default),
    with its mapping chosen by ``mapping`` in None / "default" / "auto" and ``objective``
    (see :func:`with_mapping`, which checks them)."""
    if accelerator is None:
        return preset(DEFAULT_PRESET, mapping, objective)
    if isinstance(accelerator, str):
        return preset(accelerator, mapping, objective)
    if isinstance(accelerator, cm.Accelerator):
        if not isinstance(accelerator, Accelerator):
            accelerator = Accelerator(accelerator)
        return with_mapping(accelerator, mapping, objective)
    raise TypeError(
        f"accelerator must be a preset name or a tenet_byoc.Accelerator, got {type(accelerator)}"
    )


__all__ = [
    "DEFAULT_PRESET",
    "DRAM_CAPACITY_BYTES",
    "MAPPING_CHOICES",
    "PRESETS",
    "Accelerator",
    "hopper",
    "preset",
    "resolve",
    "with_mapping",
]
