"""Design-space exploration speed: 10,000 design points x 3 schemes of Llama-3-8B (prompt 512,
16 decode steps, batch 1) with ``tenet_byoc.dse.explore``, beside GenZ's time for a sample of
the same points.

GenZ (``genz-llm`` 0.0.16) models each (point, scheme) as a roofline of its operators: a
``System`` with the point's peak MAC/s and DRAM bandwidth (as benchmarks/llm_peers.py makes
it), one prefill and 16 decode modellings. It is timed on ``--genz-sample`` points and its
time per (point, scheme) is scaled to the whole space; the printed ratio is that over ours.
Both run in this process's machine at the same time of day; the machine line says how
loaded it was. Run: ``python benchmarks/dse_llama.py`` (``--points 1000`` for a short run).
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
import warnings
from pathlib import Path

from machine import describe

from tenet_byoc import dse

SCHEMES = {"none": "f32", "per_token": "int8", "q4f16_1": "int4"}
#: 5 x 5 x 2 x 4 x 5 x 5 x 2 = 10,000 points.
SPACE = {
    "rows": [8, 16, 32, 64, 128], "cols": [8, 16, 32, 64, 128], "dataflows": ["os", "ws"],
    "pe_formats": [["int8", "fp16", "fp32"], ["int4", "int8", "fp16", "fp32"],
                ["fp8_e4m3", "fp16", "fp32"], ["int8", "bf16", "fp32"]],
    "buffer_bytes": [1 << 18, 1 << 20, 1 << 22, 1 << 24, 1 << 26],
    "dram_gbps": [16, 32, 64, 128, 256], "clock_ghz": [0.5, 1.0], "node_nm": 28,
}
RUN = {"prompt_len": 512, "decode_steps": 16, "batch": 1}


def genz_point(model, point: dse.DesignPoint, bits: str) -> float:
    """GenZ's prefill + 16 decode steps on ``point`` in ms."""
    from GenZ import System, decode_moddeling, prefill_moddeling

    clock_hz = point.clock_ghz * 1e9
    macs_per_s = point.rows * point.cols * clock_hz  # one MAC per PE per cycle
    system = System(flops=2 * macs_per_s * System.compute_multiplier[bits] / 1e12,
                    offchip_mem_bw=point.dram_gbps * 1e9 / 2**30,
                    frequency=clock_hz / 1e6, bits=bits, off_chip_mem_size=float("inf"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        total = prefill_moddeling(model=model, batch_size=1, input_tokens=512,
                                  system_name=system, bits=bits)["Latency"]
        for i in range(16):
            total += decode_moddeling(model=model, batch_size=1, input_tokens=512 + i,
                                      output_tokens=0, Bb=1, system_name=system,
                                      bits=bits)["Latency"]
    return float(total)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=10_000,
                        help="explore the first N points of the space (default all 10,000)")
    parser.add_argument("--genz-sample", type=int, default=20,
                        help="points GenZ models (x 3 schemes), default 20; 0 skips GenZ")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    print(describe().line())
    space = dse.DesignSpace.from_dict(SPACE)
    points = space.all_points()
    assert len(points) == 10_000
    if args.points < len(points):
        # the space's first N points: the clock varies fastest, so they share charges as
        # the whole space's points do
        points = points[: args.points]
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        cpu = time.process_time()
        # explore() takes a space, so the sample runs through the chunked evaluator directly
        rows = dse.explore("llama-3-8b", list(SCHEMES), space, executor="local",
                           workers=args.workers, results_file=Path(tmp) / "points.jsonl",
                           **RUN) if args.points >= 10_000 else _subset(points, args)
        ours = time.perf_counter() - start
        parent_cpu = time.process_time() - cpu
        import resource

        workers_cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
        workers_cpu = workers_cpu.ru_utime + workers_cpu.ru_stime
    n = len({r.key for r in rows})
    fronts = sum(1 for r in rows if r.fronts)
    print(f"\nours: {n:,} points x {len(SCHEMES)} schemes of llama-3-8b (prompt 512, 16 decode, "
          f"batch 1) in {ours:.1f} s wall with {args.workers} workers ({n / ours:,.0f} "
          f"points/s; CPU: workers {workers_cpu:.1f} s, parent {parent_cpu:.1f} s, so at "
          f"most {parent_cpu + workers_cpu / args.workers:.1f} s on {args.workers} idle "
          f"cores); {fronts:,} (point, scheme) rows on a front")
    if args.genz_sample == 0:
        print(describe().line())
        return

    from GenZ import ModelConfig

    from tenet_byoc.models.configs import resolve_config

    c = resolve_config("llama-3-8b")
    model = ModelConfig(model="llama-3-8b", hidden_size=c.hidden_size,
                        num_attention_heads=c.num_attention_heads,
                        num_key_value_heads=c.num_key_value_heads, num_ffi=2,
                        intermediate_size=c.intermediate_size,
                        num_decoder_layers=c.num_hidden_layers, vocab_size=c.vocab_size,
                        max_model_len=c.max_position_embeddings, hidden_act="silu")
    sample = random.Random(1).sample(points, args.genz_sample)
    start = time.perf_counter()
    for p in sample:
        for bits in SCHEMES.values():
            genz_point(model, p, bits)
    genz = time.perf_counter() - start
    genz_all = genz / len(sample) * n
    print(f"GenZ 0.0.16: {len(sample)} points x {len(SCHEMES)} schemes in {genz:.1f} s "
          f"({genz / len(sample) / len(SCHEMES) * 1e3:,.0f} ms per point and scheme, one "
          f"process) -> {genz_all:,.0f} s for {n:,} points; GenZ / ours = "
          f"{genz_all / ours:.1f}x")
    print(describe().line())


def _subset(points, args):
    # explore() runs a whole space; a random subset runs through the same evaluator
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    from tenet_byoc.plan import model_config

    config = model_config("llama-3-8b")
    job = dse._job(config, list(SCHEMES), points, RUN["prompt_len"], RUN["decode_steps"],
                   RUN["batch"], 28.0, dse.AreaTable(), None)
    chunks = dse._chunks(points, 64)
    with ProcessPoolExecutor(args.workers, mp_context=mp.get_context("spawn")) as pool:
        out = [r for rs in pool.map(dse._evaluate, [job] * len(chunks), chunks) for r in rs]
    return dse.mark_fronts(out)


if __name__ == "__main__":
    main()
