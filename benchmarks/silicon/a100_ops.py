"""The cost model's softmax, layer norm, GELU and GPT-3 175B layer times against LLMCompass's A100.

Reads LLMCompass's measurements (``data/llmcompass_a100/``, beside this file, copied with
its licence: that folder's README) and charges each row on the ``a100`` preset
(LLMCompass's own description of the A100, as 108 SM cores); prints ours, measured and the
relative error row by row and one line of JSON per part: the median and 90th percentile of
the absolute relative errors and the row count.

* ``softmax_A100.csv``, ``layernorm_A100.csv`` (M, N, G elements/s: ``M x N / time``):
  one fp16 ``softmax`` / ``layer_norm`` :class:`VectorCall` on ``[M, N]``;
  ``gelu_A100.csv`` (elements, G elements/s): one fp16 ``gelu_erf`` on ``[elements]``
  (PyTorch's default GELU, which LLMCompass's GPU run calls).
* ``transformer_A100.csv`` / ``transformerAR_A100.csv``: one GPT-3 175B layer (d 12,288, 96
  heads of 128) at batch 8, sequence 2,048, on 4 A100s with Megatron-LM tensor parallelism,
  prefill and one decode step with 3,072 keys (LLMCompass's ``ae/figure5/ijkl``), twelve
  measured seconds in the order of its categories (Q_K_V, Q_mul_K, A_mul_V, Wo_proj,
  W1_proj, W2_proj, Softmax, LayerNorm_MHA, LayerNorm_FFN, GeLU, AllReduce_MHA,
  AllReduce_FFN). Each category is charged on one chip's share in fp16 (the products with
  ``cost_model.charge``, batch ``8 x 96 / 4`` for attention's two; the vector operators with
  ``charge_vector``) and the two all-reduces of ``8 x tokens x 12,288`` fp16 by
  ``tenet_byoc.system.collective_seconds`` on a :class:`System` of 4 ``a100`` chips, TP = 4,
  joined by NVLink as LLMCompass describes it (12 links x 25 GB/s per direction, 8.92 us
  per link, all four GPUs connected to each other: ``Link(300, 8.92, "switch")``). By
  default the HBM and NVLink rates are what an A100 sustains by public measurements
  (:data:`SUSTAINED_HBM_GBPS`, :data:`SUSTAINED_NVLINK`, sources there); ``--nominal`` keeps
  the data sheet's 2,039 GB/s and the links' 300 GB/s line rate.

Nothing is fitted. The preset's vector unit works through HBM (one read of the input for
layer norm and GELU, three for softmax: ``accelerators.py``); LLMCompass timed each operator
from the host (``time.time()`` around the call and ``torch.cuda.synchronize()``), so each
measured row carries the harness's fixed cost, which LLMCompass's own model adds as the
constants of its ``ae/figure5`` test scripts (:data:`HARNESS_US`: softmax 12 us, layer norm
and GELU 45 us, torch.compile'd); it is added here to the vector rows and categories.

``--calibrate`` replaces the a100 preset's boost clock (1.41 GHz) by the clock at which it
matches LLMCompass's largest measured product (``matmul_A100.csv``'s 32,768 x 12,288 x 12,288
row, 279 TFLOP/s: the fitted row, from another file than the layer's), as
``benchmarks/silicon/h200.py --calibrate`` fits the H200's clock on its 8192^3 product: the
sustained clock of a long tensor-core run. Nothing else is fitted.

Usage::

    python benchmarks/silicon/a100_ops.py [--accelerator NAME] [--calibrate] [--nominal]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tenet_byoc import cost_model as cm
from tenet_byoc.accelerators import PRESETS, _a100, preset, with_mapping
from tenet_byoc.system import Link, System, collective_seconds

sys.path.insert(0, str(Path(__file__).resolve().parent))
from h200 import run_main, summary  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "llmcompass_a100"
CATEGORIES = ("Q_K_V", "Q_mul_K", "A_mul_V", "Wo_proj", "W1_proj", "W2_proj", "Softmax",
              "LayerNorm_MHA", "LayerNorm_FFN", "GeLU", "AllReduce_MHA", "AllReduce_FFN")
#: LLMCompass's NVLink among 4 A100s (hardware_model/interconnect.py: NVLinkV3, 25 GB/s per
#: direction and 8.92 us per link, 12 links per GPU, fully connected).
NVLINK = Link(bandwidth_gbps=12 * 25.0, latency_us=8.92, topology="switch")
#: What an A100 sustains, from public measurements (none from LLMCompass's files), used in
#: place of the nominal figures unless ``--nominal``:
#: * HBM 1,800 GB/s: a read kernel on an A100 80GB SXM reaches 1.80 TB/s, 88% of the data
#:   sheet's 2,039 by Nsight Compute's count (NVIDIA Developer Forums, "Trouble to Reach Peak
#:   Bandwidth of A100", 2025; the thread cites a GTC talk whose best kernel reached ~90%);
#: * NVLink 230 GB/s: NCCL's all-reduce bus bandwidth on an A100 as NCCL's maintainer states
#:   it (NVIDIA/nccl-tests issue #149, 2023-07-05: 12 NVLinks x 25 GB/s line rate, ~20 GB/s
#:   each at the SMs' 128 B payloads, 240 GB/s, ~230 reached). nccl-tests' bus bandwidth is
#:   2 (n - 1) / n x S / t (its doc/PERFORMANCE.md), the rate a "switch" all-reduce charges.
SUSTAINED_HBM_GBPS = 1800.0
SUSTAINED_NVLINK = Link(bandwidth_gbps=230.0, latency_us=8.92, topology="switch")


def _numbers(path: Path, width: int) -> list[list[float]]:
    """The comma-separated numbers of each non-empty line (``width`` per line).

    Raises
    ------
    ValueError
        A line of another width, a non-number or a non-positive value (naming the file and
        the line).
    """
    rows = []
    for line_no, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            vals = [float(p) for p in line.split(",")]
            if len(vals) != width or min(vals) <= 0:
                raise ValueError(f"expected {width} positive numbers")
        except ValueError as err:
            raise ValueError(f"{path}:{line_no}: {err}: {line!r}") from None
        rows.append(vals)
    return rows


#: LLMCompass's per-call host cost on its A100 by operator, microseconds: its
#: hardware_model/compute_module.py ``overhead_dict["A100"]`` (matmul 2.1e-5, softmax 1.2e-5,
#: layernorm and gelu 4.5e-5 s), which its transformer model adds to every operator call and
#: its ae/figure5 scripts to every simulated row (ab/test_matmul.py + 2.1e-5,
#: cf/test_softmax.py 12e-6, de/test_layernorm.py and g/test_gelu.py + 4.5e-5).
HARNESS_US = {"matmul": 21.0, "softmax": 12.0, "layer_norm": 45.0, "gelu_erf": 45.0}


def vec_us(acc: cm.Accelerator, op: str, shape: list[int]) -> float:
    """One fp16 vector kernel's time as LLMCompass timed it (with :data:`HARNESS_US`),
    microseconds."""
    return cm.charge_vector(cm.VectorCall(op, shape, bits_in=16, bits_out=16),
                            acc).ledger_fields()["latency_us"] + HARNESS_US[op]


def gemm_us(acc: cm.Accelerator, m: int, n: int, k: int, batch: int = 1) -> float:
    """One fp16 (batched) GEMM's time as LLMCompass's layer timed it (with
    :data:`HARNESS_US`), microseconds."""
    call = cm.GemmCall(m=m, n=n, k=k, batch=batch, bits_a=16, bits_b=16, bits_c=16)
    return cm.charge(call, acc).ledger_fields()["latency_us"] + HARNESS_US["matmul"]


def vector_files(acc: cm.Accelerator) -> dict[str, list[float]]:
    """Softmax, layer norm and GELU rows; returns {op: [errors]}."""
    errors: dict[str, list[float]] = {}
    print(f"{'op':<10} {'shape':<14} {'ours us':>10} {'meas us':>10} {'error':>8} "
          f"{'meas Gel/s':>10}")
    for op, name, width in (("softmax", "softmax_A100.csv", 3),
                            ("layer_norm", "layernorm_A100.csv", 3),
                            ("gelu_erf", "gelu_A100.csv", 2)):
        for vals in _numbers(DATA / name, width):
            shape = [int(v) for v in vals[:-1]]
            elements = shape[0] * (shape[1] if len(shape) > 1 else 1)
            meas = elements / (vals[-1] * 1e9) * 1e6
            ours = vec_us(acc, op, shape)
            errors.setdefault(op, []).append(ours / meas - 1)
            print(f"{op:<10} {'x'.join(map(str, shape)):<14} {ours:>10.2f} {meas:>10.2f} "
                  f"{errors[op][-1]:>+8.1%} {vals[-1]:>10.1f}")
    return errors


def layer_us(system: System, phase: str, batch: int = 8, seq: int = 2048,
             keys: int = 3072, d: int = 12288, heads: int = 96) -> dict[str, float]:
    """Ours per category for one GPT-3 layer on one chip of ``system`` (microseconds)."""
    acc, tp = system.accelerator, system.tensor_parallel
    rows = batch * (seq if phase == "prefill" else 1)
    s, ctx, hd, h = (seq, seq, d // heads, heads // tp) if phase == "prefill" else (
        1, keys, d // heads, heads // tp)
    ar = collective_seconds("all_reduce", rows * d * 2, tp, system.link) * 1e6
    return {
        # Three products, as LLMCompass's layer runs them (software_model/transformer.py:
        # qkv_latency = 3 x Q_proj).
        "Q_K_V": 3 * gemm_us(acc, rows, d // tp, d),
        "Q_mul_K": gemm_us(acc, s, ctx, hd, batch * h),
        "A_mul_V": gemm_us(acc, s, hd, ctx, batch * h),
        "Wo_proj": gemm_us(acc, rows, d, d // tp),
        "W1_proj": gemm_us(acc, rows, 4 * d // tp, d),
        "W2_proj": gemm_us(acc, rows, d, 4 * d // tp),
        "Softmax": vec_us(acc, "softmax", [batch * h, s, ctx]),
        "LayerNorm_MHA": vec_us(acc, "layer_norm", [rows, d]),
        "LayerNorm_FFN": vec_us(acc, "layer_norm", [rows, d]),
        "GeLU": vec_us(acc, "gelu_erf", [rows, 4 * d // tp]),
        "AllReduce_MHA": ar,
        "AllReduce_FFN": ar,
    }


def layer(system: System) -> dict[str, list[float]]:
    """GPT-3 175B layer, prefill and decode; returns {"<phase> total": [error]} and the
    categories' errors under "<phase> categories"."""
    errors: dict[str, list[float]] = {}
    for phase, name in (("prefill", "transformer_A100.csv"), ("decode", "transformerAR_A100.csv")):
        measured = [v[0] for v in _numbers(DATA / name, 1)]
        if len(measured) != len(CATEGORIES):
            raise ValueError(f"{DATA / name}: {len(measured)} values, expected "
                             f"{len(CATEGORIES)} ({', '.join(CATEGORIES)})")
        ours = layer_us(system, phase)
        print(f"GPT-3 175B layer, TP = 4, batch 8, {phase}:")
        cats = []
        for cat, meas_s in zip(CATEGORIES, measured):
            err = ours[cat] / (meas_s * 1e6) - 1
            cats.append(err)
            print(f"  {cat:<14} ours {ours[cat]:>10.1f} us  measured {meas_s * 1e6:>10.1f} us"
                  f"  {err:>+8.1%}")
        total_ours, total_meas = sum(ours.values()), sum(measured) * 1e6
        print(f"  {'total':<14} ours {total_ours:>10.1f} us  measured {total_meas:>10.1f} us"
              f"  {total_ours / total_meas - 1:>+8.1%}")
        errors[f"{phase} total"] = [total_ours / total_meas - 1]
        errors[f"{phase} categories"] = cats
    return errors


#: The row ``--calibrate`` fits the clock on (M, N, K, measured us): matmul_A100.csv's largest.
CALIBRATION_ROW = (32768, 12288, 12288, 35440.7)


def calibrated_a100(hbm_gbps: float = 2039.0) -> cm.Accelerator:
    """The a100 preset (at ``hbm_gbps``) at the clock where it takes :data:`CALIBRATION_ROW`'s
    measured time (a compute-bound product: its time goes as 1 / clock; the harness's 21 us
    left out)."""
    m, n, k, meas = CALIBRATION_ROW
    ours = gemm_us(a100(hbm_gbps=hbm_gbps), m, n, k) - HARNESS_US["matmul"]
    clock = 1.41 * ours / (meas - HARNESS_US["matmul"])
    print(f"calibrated: clock {clock:.3f} GHz from matmul_A100.csv's {m} x {n} x {k} row "
          f"({meas:.1f} us; ours at 1.41 GHz {ours:.1f} us)")
    return a100(clock, hbm_gbps)


def a100(clock_ghz: float = 1.41, hbm_gbps: float = 2039.0) -> cm.Accelerator:
    """The ``a100`` preset (its mapping searched, as ``preset("a100")``) at another clock or
    HBM rate."""
    return with_mapping(_a100(clock_ghz, hbm_gbps), "auto")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--accelerator", default="a100", choices=sorted(PRESETS))
    ap.add_argument("--calibrate", action="store_true",
                    help="the a100's clock fitted on matmul_A100.csv's largest row")
    ap.add_argument("--nominal", action="store_true",
                    help="the a100's data-sheet HBM and NVLink's line rate, not the sustained "
                         "SUSTAINED_HBM_GBPS and SUSTAINED_NVLINK")
    args = ap.parse_args(argv)
    if args.calibrate and args.accelerator != "a100":
        ap.error("--calibrate fits the a100 preset only")
    sustained = args.accelerator == "a100" and not args.nominal
    hbm = SUSTAINED_HBM_GBPS if sustained else 2039.0
    print(f"a100: HBM {hbm:.0f} GB/s, NVLink {'sustained' if sustained else 'nominal'}")
    acc = (calibrated_a100(hbm) if args.calibrate else
           a100(hbm_gbps=hbm) if args.accelerator == "a100" else preset(args.accelerator))
    print(json.dumps({"vector": summary(vector_files(acc))}))
    system = System(acc, chips=4, tensor_parallel=4,
                    link=SUSTAINED_NVLINK if sustained else NVLINK)
    print(json.dumps({"layer": summary(layer(system))}))
    return 0


if __name__ == "__main__":
    run_main(main, __file__)
