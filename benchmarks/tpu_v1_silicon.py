"""The tpu_v1 preset beside TPU v1 silicon: its MLPs, LSTMs and CNN0 as Jouppi et al. (ISCA 2017) measured.

The paper (Table 1) describes MLP0 as 5 fully connected layers holding 20 M weights run at
batch 200, and MLP1 as 4 layers holding 5 M weights at batch 168; Table 3 gives their measured
TOPS (12.3 and 9.7 of a 92 peak) and splits their cycles into array active, weight stall,
weight shift and non-matrix cycles. The paper gives no layer widths, so the layers are
assumed equal and square (stated in APPLICATIONS): MLP0 2000 x 2000 (5 x 4.0 M weights), MLP1
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

Weights are fetched as whole tiles: the matrix unit takes one 64 KiB 256 x 256 tile at a time
through a weight FIFO four tiles deep (Sec. 2), and Sec. 7 times LSTM1's 600 x 600 matrix as 9
tile steps of about 2 us each (18 us: 9 x 64 KiB at 34 GB/s), padding and all: the preset
charges a layer so (``MemoryHierarchy.whole_stationary_tiles``: K x N rounded up to whole
tiles, ``cm.computed_call``), its ops on its own widths.
Where the paper gives the widths (LSTM1: its 600 x 600 matrices, 94 of them for Table 1's 34 M
weights) they are charged so, a fill of 0.610 that Table 3 confirms
independently (useful MACs over array-active cycles, rows 2 / 1: 6.3 / 10.5 = 0.600). Where
it does not (MLP0, MLP1, LSTM0; CNN0's 2048 x 256 are whole tiles either way), the assumed K is
widened by that measured fill: a fraction of the array's weights, i.e. of the layers' shapes,
not of time, charged with the rule off (the fill counts the padding already: ``charged_k``). The column "whole tiles of the widths assumed" shows what the assumed square
widths alone give (MLP1's 1118 fills 0.763 of its tiles where Table 3 measured 0.887).

For the MLPs the model has no non-matrix work (activation functions, synchronisation): the
paper's non-matrix cycles happen while weights still stream in (both MLPs are weight-bound), so
in the model they are weight stall. The weight-stall share is therefore compared with the
paper's weight stall + non-matrix shares; the paper's own columns are printed beside it. The
split follows the paper's account of weight shift: per tile, Table 3's active + shift + stall
cycles come to at most one tile's fetch at 34 GB/s (1,349 cycles; MLP0 about 1,300, MLP1 about
1,080, taking active = the batch), so the 256-cycle shift hides behind the next tile's fetch
and is part of the weight-bound time, as here; the FIFO lets the fetch run ahead across layers,
which the model's one fill and drain per call (about 1,000 cycles) slightly overstates.

The LSTMs and CNN0 (Table 1: layers, weights, batch; Table 3: measured TOPS) are charged the
same way. Assumed, as the paper gives no widths: LSTM0's 24 fully connected layers equal and
square, holding Table 1's 52 M weights; CNN0's 16 convolutions each one im2col GEMM of M =
2,888 rows (Table 1's 2,888 ops per weight byte is the MACs per int8 weight, i.e. M: batch 8 x
361 output positions), K = 2,048, N = 256 (0.52 M weights a layer, 8.4 M in all against Table
1's 8 M). Activations live in the 24 MiB unified buffer and the sums in the 4 MiB accumulators
(Sec. 2): every layer's input and output are operands kept on chip (``GemmCall(a_on_chip=True,
c_on_chip=True)``), charged no DRAM traffic when they fit beside the layer's tiles, as they do
for all five; the host's PCIe transfers in and out are not charged (Table 3 excludes host
overhead; its row 8 puts the input stalls at 2-9%). The "through DRAM" column charges them as
before, each over its own 34 GB/s channel.

The LSTMs' vector layers (Table 1: LSTM0 34, LSTM1 19) are charged on the preset's vector unit
(``cm.charge_vector``, 256 lanes), each assumed one LSTM cell update (``CELL_UPDATE``: three
multiplies, an add and a tanh over the batch x the layer width), their cycles added to the FC
layers' as compose.py adds vector calls whose operands come from several producers. The
preset's tanh takes 8 cycles an element a lane (vector.h's rational approximation); the paper
gives no rate for its activation unit, and at 1 cycle LSTM1 would be +29% instead of +26%.
Whether the TPU hides them behind the four-tile weight FIFO (5,400 cycles of fetch) the paper
does not say.

The last table holds each application to the roofline Table 1 itself gives (its MACs per
weight byte x 2 ops x 34 GB/s, at most the 92 TOPS peak), and to that roofline for whole tiles
(x the fill). The silicon reaches 85-96% of the whole-tile bound except LSTM1 (71%), the model
86-99% (LSTM1 90%). LSTM1's remaining gap (+26%) is not sized by anything the paper states:
a layer's RAW "delay slot" (Sec. 2) hides behind the weight FIFO in a weight-bound run.
Nothing is fitted to it. (The LSTMs' counters agree with their TOPS only if an active tile
takes twice the batch in cycles, as 16-bit activations at half speed would, Sec. 2; the paper
does not say, and a weight-bound run is not slowed by it.)

The paper gives the weight path two figures: Table 2's 34 GB/s (the preset's) and Figure 1's
30 GiB/s (32.2 GB/s) on the DDR3 interfaces and the weight FIFO. The last column of "all"
charges the weights at the latter, a sensitivity column only: it moves LSTM1 from +26% to +20%
and every other application by at most 6 points, but it cannot be the weight path's exact
ceiling, since MLP1's measured TOPS would then reach 101% of its whole-tile bound (96% at
34 GB/s).

What a fitted factor would give is shown apart, in "a delay per layer, fitted" (nothing of it
enters the other tables or the preset): the matrix unit's wait at each layer boundary for the
previous layer's activations (Sec. 2's "delay slot", Table 3's RAW stalls) as one number of
cycles per layer of Table 1 (vector layers included: LSTM0 58, LSTM1 56), fitted on a named
subset by least squares of log TOPS and reported on the rest. Fitted on the MLPs it is 920
cycles (1.3 us) and leaves LSTM1 at +21%; fitted on LSTM0, 230 cycles and LSTM1 +25%.

Run: python benchmarks/tpu_v1_silicon.py [--out benchmarks/results/tpu_v1_silicon.md]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

import numpy as np

from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import Accelerator, preset


@dataclass(frozen=True)
class Application:
    """One of the paper's applications: layer shapes assumed, and its published measurements."""

    name: str
    batch: int
    layers: tuple[tuple[int, int], ...]  # (inputs, outputs) per layer
    tops: float                 # Table 3, measured TeraOps/s
    array_active: float         # Table 3 shares of cycles, %
    useful: float               # Table 3 row 2: useful MACs in the 64K matrix, % of peak
    weight_stall: float = 0.0
    weight_shift: float = 0.0
    non_matrix: float = 0.0
    rows: int = 0               # M of each layer's GEMM: the batch unless given (CNN0)
    ops_per_weight_byte: int = 0  # Table 1: MACs per weight byte fetched (= M of a layer)
    table_weights: float = 0.0  # Table 1: weights, millions
    widths_given: bool = False  # the layers' widths are the paper's (LSTM1, Sec. 7)
    table_layers: int = 0       # Table 1: layers in all (FC, conv and vector); len(layers) if 0
    vector_layers: int = 0      # Table 1: vector layers, each one LSTM cell update (CELL_UPDATE)

    @property
    def weights(self) -> int:
        return sum(i * o for i, o in self.layers)

    @property
    def fill(self) -> float:
        """Table 3's share of the array's weights that are useful on active cycles (row 2 /
        row 1): a layer's weights over the whole 256 x 256 tiles that hold them."""
        return self.useful / self.array_active


#: Table 1 (layers, weights, batch) and Table 3 (TOPS, cycle shares) of Jouppi et al. 2017.
APPLICATIONS = (
    Application("MLP0", 200, ((2000, 2000),) * 5, tops=12.3, array_active=12.7, useful=12.5,
                weight_stall=53.9, weight_shift=15.9, non_matrix=17.5, ops_per_weight_byte=200,
                table_weights=20),
    Application("MLP1", 168, ((1118, 1118),) * 4, tops=9.7, array_active=10.6, useful=9.4,
                weight_stall=44.2, weight_shift=13.4, non_matrix=31.9, ops_per_weight_byte=168,
                table_weights=5),
)

#: The other applications of Tables 1 and 3, their layers as the module docstring assumes;
#: LSTM1's 600 x 600 matrices are the paper's own (Sec. 7).
OTHERS = (
    Application("LSTM0", 64, ((1472, 1472),) * 24, tops=3.7, array_active=8.2, useful=8.2,
                ops_per_weight_byte=64, table_weights=52, table_layers=58,
                vector_layers=34),
    Application("LSTM1", 96, ((600, 600),) * 94, tops=2.8, array_active=10.5, useful=6.3,
                ops_per_weight_byte=96, table_weights=34, widths_given=True, table_layers=56,
                vector_layers=19),
    Application("CNN0", 8, ((2048, 256),) * 16, tops=86.0, array_active=78.2, useful=78.2,
                rows=2888, ops_per_weight_byte=2888, table_weights=8),
)


def charged_k(app: Application, k: int, measured_fill: bool = True) -> tuple[int, bool]:
    """The K a layer is charged with, and whether the preset's whole-tile rule applies to it.

    The paper's widths (LSTM1) and, with ``measured_fill`` False, the assumed ones are charged
    as they are, fetched in whole 256 x 256 tiles (Sec. 2, 7); otherwise the assumed K is
    widened by Table 3's fill (row 2 / row 1), since the paper gives no widths for those
    layers, and the rule is off (the fill is the tiles' padding).
    """
    if app.widths_given or not measured_fill:
        return k, True
    return round(k / app.fill), False


@dataclass(frozen=True)
class SiliconFigures:
    """The model's figures for one application: TOPS and cycle shares in %."""

    tops: float
    array_active: float
    weight_stall: float
    weight_shift: float
    cycles: int
    mappings: tuple[str, ...]
    vector: float = 0.0         # the vector layers' share


#: One vector layer as assumed: an LSTM cell's update, c = f * c + i * g and h = o * tanh(c),
#: elementwise over the batch x the layer width (the gates' sigmoids and tanh run in the FC
#: layers' Activate, pipelined behind the matrix unit).
CELL_UPDATE = ("multiply", "multiply", "add", "tanh", "multiply")


def model_figures(app: Application, accelerator: Accelerator | None = None,
                  on_chip: bool = True, measured_fill: bool = True) -> SiliconFigures:
    """Charge every layer of ``app`` on ``accelerator`` (default: tpu_v1 with its own
    weight-stationary dataflow and searched tiles) and split its cycles as the module says;
    ``on_chip`` False charges the activations through DRAM, ``measured_fill`` False the
    assumed widths' whole tiles (``charged_k``). Ops count the layers' own widths."""
    acc = accelerator if accelerator is not None else preset("tpu_v1", mapping="auto")
    as_stored = acc.replace(memory=cm.MemoryHierarchy(
        **{**json.loads(acc.to_json())["memory"], "whole_stationary_tiles": False}))
    rows = acc.dataflow.rows
    m = app.rows or app.batch
    cycles = active = shift = ops = 0
    mappings = []
    for k, n in app.layers:
        tk, whole = charged_k(app, k, measured_fill)
        call = cm.GemmCall(m=m, n=n, k=tk, bits_a=8, bits_b=8, bits_c=32, a_on_chip=on_chip,
                           c_on_chip=on_chip)
        charge = cm.charge(call, acc if whole else as_stored)
        folds = charge.array.folds
        cycles += charge.memory.cycles
        active += folds * m
        if charge.memory.dram_stall_cycles > 0:
            shift += folds * rows
        ops += 2 * m * n * k
        mappings.append(charge.memory.mapping)
    # The vector layers wait on the FC layers before them and the next FC layer on them, so
    # their cycles add (the operands come from several producers: compose.py's rule).
    vector = app.vector_layers * sum(
        cm.charge_vector(cm.VectorCall(op, [m, app.layers[0][1]], bits_in=8), acc).cycles
        for op in CELL_UPDATE)
    cycles += vector
    seconds = cycles / (acc.hardware.clock_ghz * 1e9)
    return SiliconFigures(
        tops=ops / seconds / 1e12, array_active=100 * active / cycles,
        weight_stall=100 * (cycles - active - shift - vector) / cycles,
        weight_shift=100 * shift / cycles, cycles=cycles, mappings=tuple(mappings),
        vector=100 * vector / cycles,
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


#: The weight path's bandwidth as the paper's Figure 1 labels it (DDR3 chips, interfaces and
#: weight FIFO: 30 GiB/s), beside Table 2's 34 GB/s that the preset takes.
FIGURE_1_WEIGHT_PATH = 30 * 2**30


def figure_1_weight_path(acc: Accelerator) -> Accelerator:
    """``acc`` with its weight memory at :data:`FIGURE_1_WEIGHT_PATH` bytes/s (a sensitivity
    column only; the preset keeps Table 2's 34 GB/s)."""
    memory = json.loads(acc.to_json())["memory"]
    memory["dram_bandwidth_bits"] = FIGURE_1_WEIGHT_PATH * 8 / (acc.hardware.clock_ghz * 1e9)
    return acc.replace(memory=cm.MemoryHierarchy(**memory))


def others_table() -> str:
    """The markdown comparison of TOPS for every application: the tile fill charged, TOPS with
    activations on chip, with the assumed widths' whole tiles, through DRAM, and with the
    weights at Figure 1's 30 GiB/s."""
    lines = [
        "| app | layers assumed | tile fill charged (/ Table 3) | TOPS on chip / paper (error) "
        "| whole tiles of the widths assumed (error) | through DRAM (error) "
        "| weights at Figure 1's 30 GiB/s (error) |",
        "|---|---|---|---|---|---|---|",
    ]
    acc = preset("tpu_v1", mapping="auto")
    for app in APPLICATIONS + OTHERS:
        f, d = model_figures(app), model_figures(app, on_chip=False)
        w = model_figures(app, measured_fill=False)
        g = model_figures(app, figure_1_weight_path(acc))
        k, n = app.layers[0]
        tiles = cm.computed_call(cm.GemmCall(m=app.batch, n=n, k=k, bits_a=8, bits_b=8), acc)
        fill = (f"{k * n / (tiles.k * tiles.n):.3f} from its widths / {app.fill:.3f}"
                if app.widths_given else f"Table 3's {app.fill:.3f}")
        lines.append(
            f"| {app.name} | {len(app.layers)} x {app.rows or app.batch}x{k}x{n} "
            f"({app.weights / 1e6:.2f} M weights), batch {app.batch} | {fill} "
            f"| {f.tops:.2f} / {app.tops} ({f.tops / app.tops - 1:+.1%}) "
            f"| {w.tops:.2f} ({w.tops / app.tops - 1:+.1%}) "
            f"| {d.tops:.2f} ({d.tops / app.tops - 1:+.1%}) "
            f"| {g.tops:.2f} ({g.tops / app.tops - 1:+.1%}) |"
        )
    return "\n".join(lines)


def bound_table() -> str:
    """Each application against the roofline Table 1 gives it: 2 ops per MAC x its MACs per
    weight byte x the weight memory's bandwidth (the preset's, 34 GB/s), at most the array's
    peak, and that bound for weights fetched as whole tiles (x Table 3's fill); the paper's
    measured TOPS and the model's as shares of the latter."""
    acc = preset("tpu_v1", mapping="auto")
    hz = acc.hardware.clock_ghz * 1e9
    peak = 2 * acc.dataflow.rows * acc.dataflow.cols * hz / 1e12
    weight_bytes_per_s = acc.memory.dram_bandwidth_bits / 8 * hz
    lines = ["| app | MACs per weight byte (Table 1) = M assumed | weights Table 1 / assumed "
             "| bound TOPS | whole tiles | paper / whole-tile bound | model / whole-tile bound "
             "| model error |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for app in APPLICATIONS + OTHERS:
        bound = min(peak, 2 * app.ops_per_weight_byte * weight_bytes_per_s / 1e12)
        tiles = min(peak, bound * app.fill)
        f = model_figures(app)
        lines.append(
            f"| {app.name} | {app.ops_per_weight_byte} = {app.rows or app.batch} "
            f"| {app.table_weights:g} M / {app.weights / 1e6:.2f} M | {bound:.2f} | {tiles:.2f} "
            f"| {app.tops / tiles:.0%} | {f.tops / tiles:.0%} | {f.tops / app.tops - 1:+.1%} |")
    return "\n".join(lines)


#: The subsets a per-layer delay is fitted on, each reported on the rest.
FIT_SUBSETS = (("MLP0", "MLP1"), ("LSTM0",))


def fit_layer_delay(subset: tuple[str, ...]) -> int:
    """The cycles per layer (Table 1's layers, vector ones included) that, added to the model's
    time, minimise the squared log error of TOPS over the applications named in ``subset``
    (searched in steps of 10 cycles up to 20,000)."""
    apps = [a for a in APPLICATIONS + OTHERS if a.name in subset]
    base = [(model_figures(a).cycles, a.table_layers or len(a.layers), a.tops) for a in apps]
    delays = np.arange(0, 20_000, 10)
    # TOPS scale as 1 / time: log(model / paper) = log(t0 / t) + log(model0 / paper)
    cost = sum((np.log(t0 / (t0 + delays * n)) + np.log(model_figures(a).tops / tops)) ** 2
               for a, (t0, n, tops) in zip(apps, base))
    return int(delays[np.argmin(cost)])


def delay_table() -> str:
    """Each application's TOPS error with a per-layer delay (the paper's RAW "delay slot",
    Sec. 2) fitted on each subset of FIT_SUBSETS, the fitted ones marked."""
    apps = APPLICATIONS + OTHERS
    lines = ["| fitted on | delay a layer | " + " | ".join(a.name for a in apps) + " |",
             "|---|---:|" + "---:|" * len(apps)]
    for subset in FIT_SUBSETS:
        delay = fit_layer_delay(subset)
        errors = []
        for a in apps:
            f = model_figures(a)
            cycles = f.cycles + delay * (a.table_layers or len(a.layers))
            error = f"{f.tops * f.cycles / cycles / a.tops - 1:+.1%}"
            errors.append(f"({error} fitted)" if a.name in subset else error)
        lines.append(f"| {', '.join(subset)} | {delay:,} cycles ({delay / 700:.1f} us) | "
                     + " | ".join(errors) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the markdown table to this file")
    args = parser.parse_args()
    text, others, bounds, delays = table(), others_table(), bound_table(), delay_table()
    print(text + "\n\n" + others + "\n\n" + bounds + "\n\n" + delays)
    if args.out:  # the README's table is checked against this file (docs/readme_tables.py)
        from machine import describe

        with open(args.out, "w", encoding="utf-8") as f:
            f.write("# TPU v1 against its silicon (`python benchmarks/tpu_v1_silicon.py --out "
                    "FILE`)\n\nWritten " + describe().line() + ". The model's figures depend "
                    "on the code, not on the machine; the paper's are Jouppi et al., ISCA "
                    "2017, Tables 1 and 3.\n\n## mlp\n\n" + text + "\n\n## all\n\n"
                    "Every application, TOPS (M x K x N per layer):\n\n" + others + "\n\n"
                    "## against Table 1's roofline\n\n" + bounds + "\n\n"
                    "## a delay per layer, fitted\n\n" + delays + "\n")


if __name__ == "__main__":
    main()
