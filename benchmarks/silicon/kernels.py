"""Which kernels a GPU runs for each measured GEMM, and how long each takes (run on the GPU).

``data/h200/gemm.csv`` times each linear layer as a whole; this names the kernels behind the
time (cuBLAS picks a kernel by shape: a GEMV, a small-N kernel, SIMT tiles, a split-K product
and its reduction), with each kernel's launch grid, block, registers and shared memory, so a
cost model's structure can be read from the kernels rather than fitted to the times.

For each layer of ``gemm.csv`` (and of ``data/h200_holdout/gemm.csv``) and each row count, the
script profiles five calls with ``torch.profiler`` (CUDA activity only), zeroing a 256 MB
buffer before every call as ``measure.py`` does (cold L2), and writes one JSON line per call
shape and format: the kernels of the median call in launch order, each with its median
duration over the five calls. It also times the call with ``triton.testing.do_bench`` (the
way ``gemm.csv`` was timed) so the two runs can be compared.

Run on a machine with an NVIDIA GPU and PyTorch with Triton::

    OUT=DIR python3 benchmarks/silicon/kernels.py [--budget-s 300] [--formats fp32,bf16]

writes ``DIR/kernels.jsonl``; ``--dry`` rehearses the code on the CPU with tiny shapes.
``--summary FILE`` (any machine) reads such a file and prints, per fp32 call, the kernel, its
tile (rows x columns of C per thread block), its thread blocks per SM and the rate it reaches
on the rows it computes (M padded to the tile), against ``peaks.csv``'s SGEMM peak beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile
import time

#: (model, layer, K, N): y[M, N] = x[M, K] @ W[N, K]^T, the layers of data/h200/gemm.csv
SHAPES = [
    ("gpt2-small", "qkv", 768, 2304), ("gpt2-small", "attn_out", 768, 768),
    ("gpt2-small", "fc", 768, 3072), ("gpt2-small", "fc_out", 3072, 768),
    ("gpt2-small", "lm_head", 768, 50257),
    ("llama-3-8b", "qkv", 4096, 6144), ("llama-3-8b", "o", 4096, 4096),
    ("llama-3-8b", "gate_up", 4096, 28672), ("llama-3-8b", "down", 14336, 4096),
    ("llama-3-8b", "lm_head", 4096, 128256),
    ("llama-3-70b", "qkv", 8192, 10240), ("llama-3-70b", "o", 8192, 8192),
    ("llama-3-70b", "gate_up", 8192, 57344), ("llama-3-70b", "down", 28672, 8192),
]
#: the layers of data/h200_holdout/gemm.csv
HOLDOUT = [
    ("llama-3.2-1b", "qkv", 2048, 3072), ("llama-3.2-1b", "o", 2048, 2048),
    ("llama-3.2-1b", "gate_up", 2048, 16384), ("llama-3.2-1b", "down", 8192, 2048),
    ("qwen2.5-7b", "qkv", 3584, 4608), ("qwen2.5-7b", "gate_up", 3584, 37888),
    ("qwen2.5-7b", "down", 18944, 3584),
    ("qwen3-30b-a3b", "qkv", 2048, 5120), ("qwen3-30b-a3b", "o", 4096, 2048),
    ("qwen3-30b-a3b", "router", 2048, 128), ("qwen3-30b-a3b", "expert_gate_up", 2048, 1536),
    ("qwen3-30b-a3b", "expert_down", 768, 2048),
    ("deepseek-v3", "q_a", 7168, 1536), ("deepseek-v3", "q_b", 1536, 24576),
    ("deepseek-v3", "kv_a", 7168, 576), ("deepseek-v3", "kv_b", 512, 32768),
    ("deepseek-v3", "expert_gate_up", 7168, 4096), ("deepseek-v3", "expert_down", 2048, 7168),
]
MS = [1, 16, 64, 256, 1024, 4096]
#: the row counts between, for fp32 on the main layers: where cuBLAS changes kernel
SWEEP_MS = [2, 4, 8, 12, 24, 32, 48, 96, 128, 192, 512]


def tile(kernel: str) -> tuple[int, int] | None:
    """The C tile (rows, columns) of an SGEMM kernel's thread block, read from its name
    (``..._tilesize32x128x8_...`` or ``cutlass_80_simt_sgemm_64x64_...``); None for the
    GEMV-like kernels (``gemv*``, ``gemmSN``, ``sgemm_largek``) that have no row tile."""
    got = re.search(r"tilesize(\d+)x(\d+)x", kernel) or re.search(r"simt_sgemm_(\d+)x(\d+)_",
                                                                    kernel)
    return (int(got.group(1)), int(got.group(2))) if got else None


def summary(path: str, sms: int = 132) -> None:
    """Print :data:`MS`'s fp32 calls of ``path`` (a kernels.jsonl): kernel, tile, blocks per
    SM and the rate on the padded rows, as a fraction of the peaks.csv beside it."""
    peaks = os.path.join(os.path.dirname(path), "peaks.csv")
    with open(peaks, encoding="utf-8") as f:
        peak = next(float(line.split(",")[-1]) for line in f if line.startswith("fp32 8192"))
    print(f"SGEMM peak {peak:.1f} TFLOP/s ({peaks})")
    print(f"{'model':<14}{'layer':<15}{'M':>5}{'kernel':>15}{'tile':>9}{'blocks/SM':>10}"
          f"{'us':>9}{'TFLOP/s on tile rows':>22}")
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    for r in rows:
        if r.get("format") != "fp32" or "kernels" not in r or r["M"] not in MS:
            continue
        main_kernel = max(r["kernels"], key=lambda k: k["us"])
        t = tile(main_kernel["name"])
        rows_done = -(-r["M"] // t[0]) * t[0] if t else r["M"]
        blocks = 1
        for g in main_kernel["grid"] or [1]:
            blocks *= g
        us = sum(k["us"] for k in r["kernels"])
        rate = 2 * rows_done * r["N"] * r["K"] / us / 1e6
        name = re.sub(r"^(void |std::enable_if<!\(false\), void>::type )", "", main_kernel["name"])
        print(f"{r['model']:<14}{r['layer']:<15}{r['M']:>5}{name[:14]:>15}"
              f"{(f'{t[0]}x{t[1]}' if t else '-'):>9}{blocks / sms:>10.2f}{us:>9.1f}"
              f"{rate:>12.1f} ({rate / peak:.0%})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--summary", metavar="FILE", help="print a kernels.jsonl's fp32 calls")
    ap.add_argument("--budget-s", type=float, default=300)
    ap.add_argument("--formats", default="fp32,bf16,fp8_tensor")
    ap.add_argument("--dry", action="store_true", help="rehearse on the CPU with tiny shapes")
    args = ap.parse_args()
    if args.summary:
        summary(args.summary)
        return
    import torch  # noqa: PLC0415 (the summary needs no torch)
    import torch.nn.functional as F  # noqa: N812, PLC0415
    dev = "cpu" if args.dry else "cuda"
    out_dir = os.environ.get("OUT", "/tmp/out")
    os.makedirs(out_dir, exist_ok=True)
    log = open(os.path.join(out_dir, "kernels.jsonl"), "a", encoding="utf-8")
    t0 = time.time()

    def emit(**row):
        row["t"] = round(time.time() - t0, 2)
        log.write(json.dumps(row) + "\n")
        log.flush()

    if not args.dry:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,"
                              "power.limit,driver_version", "--format=csv"],
                             capture_output=True, text=True).stdout
        p = torch.cuda.get_device_properties(0)
        emit(section="env", gpu=p.name, sms=p.multi_processor_count, torch=torch.__version__,
             cuda=torch.version.cuda, smi=smi)
        from triton.testing import do_bench
    torch.backends.cuda.matmul.allow_tf32 = False
    flush = torch.empty((2**20 if args.dry else 64 * 2**20), dtype=torch.int32, device=dev)
    activity = (torch.profiler.ProfilerActivity.CPU if args.dry
                else torch.profiler.ProfilerActivity.CUDA)
    kind = "cpu_op" if args.dry else "kernel"

    def trace(fn, reps):
        with torch.profiler.profile(activities=[activity]) as prof:
            for _ in range(reps):
                flush.zero_()
                fn()
            if not args.dry:
                torch.cuda.synchronize()
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            prof.export_chrome_trace(f.name)
            events = json.load(open(f.name, encoding="utf-8"))["traceEvents"]
        return sorted((e for e in events if e.get("cat") == kind), key=lambda e: e["ts"])

    flush_names = {e["name"] for e in trace(lambda: None, 2)}

    def kernels_of(fn, reps=5):
        """The kernels of one call (launch order) with their median durations over reps."""
        fn()
        calls, cur = [], None
        for e in trace(fn, reps):
            if e["name"] in flush_names:
                cur = []
                calls.append(cur)
            elif cur is not None:
                cur.append(e)
        calls = [c for c in calls if c]
        names = [tuple(e["name"] for e in c) for c in calls]
        common = statistics.mode(names)
        same = [c for c, n in zip(calls, names) if n == common]
        out = []
        for i, name in enumerate(common):
            a = same[0][i].get("args", {})
            out.append({"name": name, "us": statistics.median(c[i]["dur"] for c in same),
                        "grid": a.get("grid"), "block": a.get("block"),
                        "regs": a.get("registers per thread"),
                        "smem": a.get("shared memory"), "blocks_per_sm": a.get("blocks per SM")})
        return out, len(same), len(calls)

    shapes = [(s, MS + SWEEP_MS) for s in SHAPES] + [(s, MS) for s in HOLDOUT]
    formats = args.formats.split(",")
    if args.dry:
        shapes, formats = [(("gpt2-small", "qkv", 64, 96), [1, 16])], ["fp32"]
    one = torch.tensor(1.0, device=dev)
    for (model, layer, k, n), ms_list in shapes:
        if time.time() - t0 > args.budget_s:
            emit(section="budget", note=f"stopped before {model} {layer}")
            break
        w = (torch.randn(n, k, device=dev) * 0.02).to(torch.bfloat16)
        w32 = w.float()
        w8 = None if args.dry else w.to(torch.float8_e4m3fn)
        for m in sorted(ms_list):
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            x32 = x.float()
            x8 = None if args.dry else x.to(torch.float8_e4m3fn)
            cases = {"fp32": lambda: F.linear(x32, w32), "bf16": lambda: F.linear(x, w),
                     "fp8_tensor": lambda: torch._scaled_mm(x8, w8.t(), scale_a=one, scale_b=one,
                                                            out_dtype=torch.bfloat16)}
            for fmt in formats:
                if fmt != "fp32" and m in SWEEP_MS:
                    continue
                try:
                    kernels, agree, calls = kernels_of(cases[fmt])
                    ms = None if args.dry else do_bench(cases[fmt], warmup=5, rep=20,
                                                        return_mode="median")
                    emit(section="kernels", model=model, layer=layer, M=m, N=n, K=k, format=fmt,
                         ms=ms, calls_agreeing=agree, calls=calls, kernels=kernels)
                except Exception as err:  # a refused shape is a result, recorded as such
                    emit(section="kernels", model=model, layer=layer, M=m, N=n, K=k, format=fmt,
                         error=repr(err)[:300])
        print(f"{time.time() - t0:6.1f}s {model} {layer}", flush=True)
        w = w32 = w8 = None  # free the layer before the next one
        if not args.dry:
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
