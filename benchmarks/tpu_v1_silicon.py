"""The tpu_v1 preset beside TPU v1 silicon: its MLPs, LSTMs and CNN0 as Jouppi et al. (ISCA 2017) measured.

The paper (Table 1) describes MLP0 as 5 fully connected layers holding 20 M weights run at
batch 200, and MLP1 as 4 layers holding 5 M weights at batch 168; Table 3 gives their measured
TOPS (12.3 and 9.7 of a 92 peak) and splits their cycles into array active, weight stall,
weight shift and non-matrix cycles. The paper gives no layer widths, so the layers are
assumed equal and square (stated in LAYERS): MLP0 2000 x 2000 (5 x 4.0 M weights), MLP1
1118 x 1118 (4 x 1.25 M), int8 weights and activations, 32-bit sums. Each layer is charged on
``preset("tpu_v1", mapping="auto")``: the preset's own array, whose supported dataflows are
weight-stationary only, with buffer tiles searched per layer.

The cycle split, from the model's charge of each layer (``m`` batch rows, ``folds`` weight
tiles of ``rows x cols`` on the array):

* array active = folds x m: each weight tile streams the batch's m rows through the array;
* weight shift = folds x rows when the call waits on weight memory (``dram_stall_cycles`` >
  0): a tile takes ``rows`` cycles to shift in (Sec. 2, "to hide the 256 cycles it takes to
  shift a tile in"), and a tile that arrives only after the previous one has finished has
  nothing to hide behind; 0 otherwise (the double buffer hides it);
* weight stall = the rest of the layer's cycles (waiting for weights at 34 GB/s).

The model has no non-matrix work (activation functions, host synchronisation): the paper's
non-matrix cycles happen while weights still stream in (both MLPs are weight-bound: their
measured TOPS are 85-90 % of 34 GB/s x ops per weight byte), so in the model they are weight
stall. The weight-stall share is therefore compared with the paper's weight stall + non-matrix
shares; the paper's own columns are printed beside it.

The LSTMs and CNN0 (Table 1: layers, weights, batch; Table 3: measured TOPS) are charged the
same way, their fully connected or convolution layers only (the paper's vector layers are
non-matrix work the model leaves out). Assumed, as the paper gives no widths: LSTM0's 24 and
LSTM1's 37 fully connected layers equal and square, holding Table 1's 52 M and 34 M weights;
CNN0's 16 convolutions each one im2col GEMM of M = 2,888 rows (Table 1's 2,888 ops per weight
byte is the MACs per int8 weight, i.e. M: batch 8 x 361 output positions), K = 2,048, N = 256
(0.52 M weights a layer, 8.4 M in all against Table 1's 8 M). Activations live in the 24 MiB
unified buffer and the sums in the 4 MiB accumulators (Sec. 2): every layer's input and output
are operands kept on chip (``GemmCall(a_on_chip=True, c_on_chip=True)``), charged no DRAM
traffic when they fit beside the layer's tiles, as they do for all five; the host's PCIe
transfers in and out are not charged. The "through DRAM" column charges them as before, each
over its own 34 GB/s channel.

The last table holds each application to the roofline Table 1 itself gives (its MACs per
weight byte x 2 ops x 34 GB/s, at most the 92 TOPS peak): the layers assumed have exactly
Table 1's MACs per weight byte (M = the batch; CNN0 8 x 361) and, within 0.5 M, its weights, so
no shape or batch the paper allows moves a weight-bound application's model below that bound.
LSTM1 measured 43% of it where the others reach 85-94%: the rest is work the model leaves out
(vector layers, non-matrix and RAW-stall cycles), and nothing is fitted to it.

Run: python benchmarks/tpu_v1_silicon.py [--out benchmarks/results/tpu_v1_silicon.md]
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import Accelerator, preset


@dataclass(frozen=True)
class Application:
    """One of the paper's MLPs: layer shapes assumed, and its published measurements."""

    name: str
    batch: int
    layers: tuple[tuple[int, int], ...]  # (inputs, outputs) per layer
    tops: float                 # Table 3, measured TeraOps/s
    array_active: float = 0.0   # Table 3 shares of cycles, % (MLPs only)
    weight_stall: float = 0.0
    weight_shift: float = 0.0
    non_matrix: float = 0.0
    rows: int = 0               # M of each layer's GEMM: the batch unless given (CNN0)
    ops_per_weight_byte: int = 0  # Table 1: MACs per weight byte fetched (= M of a layer)
    table_weights: float = 0.0  # Table 1: weights, millions

    @property
    def weights(self) -> int:
        return sum(i * o for i, o in self.layers)


#: Table 1 (layers, weights, batch) and Table 3 (TOPS, cycle shares) of Jouppi et al. 2017.
APPLICATIONS = (
    Application("MLP0", 200, ((2000, 2000),) * 5, tops=12.3, array_active=12.7,
                weight_stall=53.9, weight_shift=15.9, non_matrix=17.5, ops_per_weight_byte=200,
                table_weights=20),
    Application("MLP1", 168, ((1118, 1118),) * 4, tops=9.7, array_active=10.6,
                weight_stall=44.2, weight_shift=13.4, non_matrix=31.9, ops_per_weight_byte=168,
                table_weights=5),
)

#: The other applications of Tables 1 and 3, their layers as the module docstring assumes.
OTHERS = (
    Application("LSTM0", 64, ((1472, 1472),) * 24, tops=3.7, ops_per_weight_byte=64,
                table_weights=52),
    Application("LSTM1", 96, ((959, 959),) * 37, tops=2.8, ops_per_weight_byte=96,
                table_weights=34),
    Application("CNN0", 8, ((2048, 256),) * 16, tops=86.0, rows=2888, ops_per_weight_byte=2888,
                table_weights=8),
)


@dataclass(frozen=True)
class SiliconFigures:
    """The model's figures for one application: TOPS and cycle shares in %."""

    tops: float
    array_active: float
    weight_stall: float
    weight_shift: float
    cycles: int
    mappings: tuple[str, ...]


def model_figures(app: Application, accelerator: Accelerator | None = None,
                  on_chip: bool = True) -> SiliconFigures:
    """Charge every layer of ``app`` on ``accelerator`` (default: tpu_v1 with its own
    weight-stationary dataflow and searched tiles) and split its cycles as the module says;
    ``on_chip`` False charges the activations through DRAM."""
    acc = accelerator if accelerator is not None else preset("tpu_v1", mapping="auto")
    rows = acc.dataflow.rows
    m = app.rows or app.batch
    cycles = active = shift = ops = 0
    mappings = []
    for k, n in app.layers:
        call = cm.GemmCall(m=m, n=n, k=k, bits_a=8, bits_b=8, bits_c=32, a_on_chip=on_chip,
                           c_on_chip=on_chip)
        charge = cm.charge(call, acc)
        folds = charge.array.folds
        cycles += charge.memory.cycles
        active += folds * m
        if charge.memory.dram_stall_cycles > 0:
            shift += folds * rows
        ops += 2 * m * n * k
        mappings.append(charge.memory.mapping)
    seconds = cycles / (acc.hardware.clock_ghz * 1e9)
    return SiliconFigures(
        tops=ops / seconds / 1e12, array_active=100 * active / cycles,
        weight_stall=100 * (cycles - active - shift) / cycles,
        weight_shift=100 * shift / cycles, cycles=cycles, mappings=tuple(mappings),
    )


def table() -> str:
    """The markdown comparison, one row per application."""
    lines = [
        ("| app | layers assumed | TOPS model / paper (error) | array active model / paper "
        "| weight stall model / paper stall + non-matrix (paper stall alone) "
        "| weight shift model / paper |"),
        "|---|---|---|---|---|---|",
    ]
    for app in APPLICATIONS:
        f = model_figures(app)
        k, n = app.layers[0]
        lines.append(
            f"| {app.name} | {len(app.layers)} x {k}x{n} ({app.weights / 1e6:.2f} M weights), "
            f"batch {app.batch} | {f.tops:.2f} / {app.tops} ({f.tops / app.tops - 1:+.1%}) "
            f"| {f.array_active:.1f}% / {app.array_active}% "
            f"| {f.weight_stall:.1f}% / {app.weight_stall + app.non_matrix:.1f}% "
            f"({app.weight_stall}%) | {f.weight_shift:.1f}% / {app.weight_shift}% |"
        )
    mlp0 = model_figures(APPLICATIONS[0])
    lines += ["", f"Mapping of an MLP0 layer: `{mlp0.mappings[0]}`."]
    return "\n".join(lines)


def others_table() -> str:
    """The markdown comparison of TOPS for every application, activations on chip and
    through DRAM."""
    lines = [
        "| app | layers assumed | TOPS on chip / paper (error) | through DRAM (error) |",
        "|---|---|---|---|",
    ]
    for app in APPLICATIONS + OTHERS:
        f, d = model_figures(app), model_figures(app, on_chip=False)
        k, n = app.layers[0]
        lines.append(
            f"| {app.name} | {len(app.layers)} x {app.rows or app.batch}x{k}x{n} "
            f"({app.weights / 1e6:.2f} M weights), batch {app.batch} "
            f"| {f.tops:.2f} / {app.tops} ({f.tops / app.tops - 1:+.1%}) "
            f"| {d.tops:.2f} ({d.tops / app.tops - 1:+.1%}) |"
        )
    return "\n".join(lines)


def bound_table() -> str:
    """Each application against the roofline Table 1 gives it: 2 ops per MAC x its MACs per
    weight byte x the weight memory's bandwidth (the preset's, 34 GB/s), at most the array's
    peak; the paper's measured TOPS and the model's as shares of it."""
    acc = preset("tpu_v1", mapping="auto")
    hz = acc.hardware.clock_ghz * 1e9
    peak = 2 * acc.dataflow.rows * acc.dataflow.cols * hz / 1e12
    weight_bytes_per_s = acc.memory.dram_bandwidth_bits / 8 * hz
    lines = ["| app | MACs per weight byte (Table 1) = M assumed | weights Table 1 / assumed "
             "| bound TOPS | paper / bound | model / bound | model error |",
             "|---|---|---|---:|---:|---:|---:|"]
    for app in APPLICATIONS + OTHERS:
        bound = min(peak, 2 * app.ops_per_weight_byte * weight_bytes_per_s / 1e12)
        f = model_figures(app)
        lines.append(
            f"| {app.name} | {app.ops_per_weight_byte} = {app.rows or app.batch} "
            f"| {app.table_weights:g} M / {app.weights / 1e6:.2f} M | {bound:.2f} "
            f"| {app.tops / bound:.0%} | {f.tops / bound:.0%} | {f.tops / app.tops - 1:+.1%} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the markdown table to this file")
    args = parser.parse_args()
    text, others, bounds = table(), others_table(), bound_table()
    print(text + "\n\n" + others + "\n\n" + bounds)
    if args.out:  # the README's table is checked against this file (docs/readme_tables.py)
        from machine import describe

        with open(args.out, "w", encoding="utf-8") as f:
            f.write("# TPU v1 against its silicon (`python benchmarks/tpu_v1_silicon.py --out "
                    "FILE`)\n\nWritten " + describe().line() + ". The model's figures depend "
                    "on the code, not on the machine; the paper's are Jouppi et al., ISCA "
                    "2017, Tables 1 and 3.\n\n## mlp\n\n" + text + "\n\n## all\n\n"
                    "Every application, TOPS (M x K x N per layer):\n\n" + others + "\n\n"
                    "## against Table 1's roofline\n\n" + bounds + "\n")


if __name__ == "__main__":
    main()
