"""tenet_byoc.estimate beside a plain roofline and GenZ on the same models and hardware.

For each model, accelerator and scheme, a prefill of ``--prompt`` tokens and one decode step
after as many cached tokens are estimated three ways:

* ours: ``tenet_byoc.estimate`` (the per-call TENET + buffer-level model the runtime charges);
* roofline: per call max(MACs / peak MAC rate, compulsory bytes / DRAM bandwidth), summed,
  where compulsory bytes read A and B and write C once at the call's element widths;
* GenZ (``genz-llm`` 0.0.16): ``prefill_moddeling`` / ``decode_moddeling`` on a ``System``
  made equivalent: the same peak MAC/s (GenZ divides by ``compute_multiplier[bits]``, so its
  flops are scaled by it), the same DRAM bandwidth (GenZ's GB/s are 2^30 B/s), the same
  clock, unbounded memory; one ``bits`` for all tensors (f32, int8, int4 for the three
  schemes). GenZ's prefill adds an embedding lookup costed as a GEMM
  (tokens x d x vocab); it is shown, and removed for the ratio.

Then Llama-3-70B at tensor-parallel degrees 2, 4 and 8 (``estimate(..., system=...)``, a
100 GB/s ring) beside GenZ's ``tensor_parallel`` on the same chips and link. Then the issue's
case is timed: Llama-3-70B, a 2048-token prompt and 128 decode steps on
os128 for three schemes, against GenZ's own time for the same 3 x 129 calls. Prints markdown
(and writes it with ``--out``); asserts nothing.

Run: python benchmarks/llm_peers.py [--prompt 512] [--out benchmarks/results/llm_peers.md]
"""

from __future__ import annotations

import argparse
import datetime
import os
import warnings

import tenet_byoc
from tenet_byoc.accelerators import preset
from tenet_byoc.models.configs import resolve_config
from tenet_byoc.models.gpt2 import GPT2Config

MODELS = ("gpt2", "llama-3-8b", "llama-3-70b")
ACCELERATORS = ("os16", "os128")
#: Our scheme -> the one GenZ ``bits`` closest to it (GenZ takes one width for all tensors).
SCHEMES = {"none": "f32", "per_token": "int8", "q4f16_1": "int4"}


#: Why the columns differ; structural, so it holds for any --prompt (see the tables).
EXPLANATION = """\
What the ratios say:

- Ours is never below the roofline (ours / roofline >= 1 on every row): each call's latency
  is its tile loop nest with DRAM transfers overlapped, which cannot beat either limit. Both
  columns include the vector unit's unfused steps (at their own roofline in the second).
- Prefill (1.00-1.16x the roofline): large GEMMs run near peak; the gap is the buffer level
  (tiles that refetch A or B when they do not fit, the pipeline's first fetch and last
  write-back), array folds that do not fill the 16x16 / 128x128 array (GQA's 1024-wide
  k/v projections, the 64- and 128-wide attention heads) and, float32, DRAM stalls. GPT-2
  on os128 is the extreme: its 768-wide GEMMs are memory-bound there, and GenZ keeps
  activations on chip (``intermediate_on_chip=True``) so it reads only weights and lands
  below a roofline that charges A and C to DRAM too.
- GenZ's prefill adds an embedding lookup costed as a tokens x d x vocab GEMM (its
  ``embeddings`` row: as costly as the head); without it GenZ equals its own per-operator
  roofline, so ours / GenZ tracks ours / roofline.
- Float32 decode is bound by reading the weights (1.00-1.06x): all three agree.
- Quantized decode (1.8-4.2x): one token is an M = 1 GEMV, and an output-stationary array
  maps M to its rows, so 16 of 256 (os16) or 128 of 16,384 (os128) PEs work: the call is
  compute-bound on those PEs, which a roofline and GenZ (peak MAC rate for any shape)
  do not see. int8/int4 weights shrink the DRAM time below that compute time, so ours
  stops at that floor: int8 and int4 decode take about the same time (the mapping search,
  benchmarks/mapper.py, and os16_mp's packed MACs are what recover it).
- GenZ's one ``bits`` also narrows activations and the KV cache (int8, int4) where our
  schemes keep attention float32 and q4f16_1's activations float16: its int8/int4 decode
  moves fewer bytes than our roofline does.
"""


def genz_system(accelerator: str, bits: str):
    """A GenZ System with the accelerator's peak MAC/s, DRAM bandwidth and clock."""
    from GenZ import System

    acc = preset(accelerator)
    hw, clock_hz = acc.hardware, acc.hardware.clock_ghz * 1e9
    width = {"f32": 32, "int8": 8, "int4": 4}[bits]
    macs_per_s = hw.num_pes * hw.macs_per_pe_per_cycle_at(width) * clock_hz
    # GenZ: compute time = ops * compute_multiplier[bits] / (flops / 2).
    flops = 2 * macs_per_s * System.compute_multiplier[bits]
    bandwidth = acc.memory.dram_bandwidth_bits / 8 * clock_hz
    return System(flops=flops / 1e12, offchip_mem_bw=bandwidth / 2**30,
                  frequency=clock_hz / 1e6, bits=bits, off_chip_mem_size=float("inf"))


def genz_model(name: str):
    """The model as a GenZ ModelConfig, with our config's shapes."""
    from GenZ import ModelConfig

    c = resolve_config(name)
    if isinstance(c, GPT2Config):
        return ModelConfig(model=name, hidden_size=c.n_embd, num_attention_heads=c.n_head,
                           num_ffi=1, intermediate_size=c.n_inner or 4 * c.n_embd,
                           num_decoder_layers=c.n_layer, vocab_size=c.vocab_size,
                           max_model_len=c.n_positions, hidden_act="gelu_new")
    return ModelConfig(model=name, hidden_size=c.hidden_size,
                       num_attention_heads=c.num_attention_heads,
                       num_key_value_heads=c.num_key_value_heads, num_ffi=2,
                       intermediate_size=c.intermediate_size,
                       num_decoder_layers=c.num_hidden_layers, vocab_size=c.vocab_size,
                       max_model_len=c.max_position_embeddings, hidden_act="silu")


def genz_ms(model, accelerator: str, bits: str, tokens: int, phase: str) -> tuple[float, float]:
    """GenZ's latency of one phase in ms, and the part its embedding GEMM adds."""
    from GenZ import decode_moddeling, prefill_moddeling

    system = genz_system(accelerator, bits)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if phase == "prefill":
            out = prefill_moddeling(model=model, batch_size=1, input_tokens=tokens,
                                    system_name=system, bits=bits)
        else:
            out = decode_moddeling(model=model, batch_size=1, input_tokens=tokens,
                                   output_tokens=0, Bb=1, system_name=system, bits=bits)
    df = out["model_df"]
    embedding = df.loc[df["Layer Name"] == "embeddings", "Latency (msec)"].sum()
    return float(out["Latency"]), float(embedding)


def roofline_ms(ledger, phase: str, accelerator: str) -> float:
    """Sum over the phase's GEMMs of max(MACs / peak, compulsory bytes / bandwidth), plus the
    vector unit's unfused steps at their own roofline (ours charges them too)."""
    acc = preset(accelerator)
    hw, clock_hz = acc.hardware, acc.hardware.clock_ghz * 1e9
    bandwidth = acc.memory.dram_bandwidth_bits / 8 * clock_hz
    total = 0.0
    for e in ledger:
        if e.phase != phase:
            continue
        if e.unit != "array":
            # A vector-unit step (no MACs, its m/n/k not a GEMM's) at its own per-op roofline;
            # a fused one overlaps its GEMM and adds nothing to the phase, here as in ours.
            total += 0.0 if e.fused else e.roofline_cycles / clock_hz
            continue
        peak = hw.num_pes * hw.macs_per_pe_per_cycle_at(max(e.bits_a, e.bits_b)) * clock_hz
        moved = e.batch * (e.m * e.k * e.bits_a + e.k * e.n * e.bits_b + e.m * e.n * e.bits_c) / 8
        total += max(e.macs / peak, moved / bandwidth)
    return total * 1e3


def comparison(prompt: int) -> list[str]:
    lines = [
        ("| model | accelerator | scheme (GenZ bits) | phase | ours (ms) | roofline (ms) | "
         "ours / roofline | GenZ (ms) | GenZ embedding (ms) | ours / GenZ w/o embedding |"),
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in MODELS:
        model = genz_model(name)
        for accelerator in ACCELERATORS:
            for scheme, bits in SCHEMES.items():
                ledger = tenet_byoc.estimate(name, scheme, accelerator, prompt_len=prompt,
                                             decode_steps=1)
                for phase in ("prefill", "decode"):
                    ours = ledger.group_by("phase")[phase].latency_us / 1e3
                    roof = roofline_ms(ledger, phase, accelerator)
                    genz, embedding = genz_ms(model, accelerator, bits, prompt, phase)
                    lines.append(
                        f"| {name} | {accelerator} | {scheme} ({bits}) | {phase} | {ours:,.3f} | "
                        f"{roof:,.3f} | {ours / roof:.2f}x | {genz:,.3f} | {embedding:,.3f} | "
                        f"{ours / (genz - embedding):.2f}x |")
                    print(lines[-1], flush=True)
    return lines


#: The tensor-parallel case: Llama-3-70B float32 on os128 chips joined by a 100 GB/s ring
#: with 1 us per hop (ours in 10^9 B/s; GenZ's GB/s are 2^30 B/s, so it is given 100e9 / 2^30).
TP_DEGREES = (2, 4, 8)
TP_LINK_GBPS, TP_LINK_US = 100.0, 1.0

TP_EXPLANATION = """\
Tensor parallel (Llama-3-70B, float32, os128 chips, 100 GB/s ring, 1 us a hop):

- Both shard as Megatron-LM does (column-parallel QKV and up/gate, row-parallel out and down,
  an all-reduce after each of the last two, the vocabulary split), so each chip's GEMMs are
  1/T of the layer's in both and the GEMM part of the ratio is the single-chip one above.
- All-reduce: both charge the ring's 2 (T-1)/T x bytes / bandwidth; GenZ adds more latency per
  step than our 2 (T-1) x 1 us (its column minus the bandwidth term), visible only at decode,
  where the [1, 8192] result is 32 KB and the latency dominates.
- GenZ gathers the logits after the head as we do (its classifier_AG row) and keeps its
  embedding GEMM and its all-reduce (Emb_AR), which we do not charge (an embedding is a lookup).
"""


def genz_tp_system(tp: int, bits: str = "f32"):
    """genz_system("os128", bits) on ``tp`` chips with the ring link of this case."""
    from GenZ import System

    acc = preset("os128")
    hw, clock_hz = acc.hardware, acc.hardware.clock_ghz * 1e9
    flops = 2 * hw.num_pes * hw.macs_per_pe_per_cycle_at(32) * clock_hz
    bandwidth = acc.memory.dram_bandwidth_bits / 8 * clock_hz
    return System(flops=flops * System.compute_multiplier[bits] / 1e12,
                  offchip_mem_bw=bandwidth / 2**30, frequency=clock_hz / 1e6, bits=bits,
                  off_chip_mem_size=float("inf"), interchip_link_bw=TP_LINK_GBPS * 1e9 / 2**30,
                  interchip_link_latency=TP_LINK_US, num_nodes=tp, topology="Ring")


def tensor_parallel(prompt: int) -> list[str]:
    """Llama-3-70B at TP = 2, 4, 8: our critical path beside GenZ's latency, per phase."""
    from GenZ import decode_moddeling, prefill_moddeling

    from tenet_byoc.system import Link, System

    model = genz_model("llama-3-70b")
    lines = [
        ("| TP | phase | ours (ms) | GenZ (ms) | GenZ w/o embedding + Emb_AR (ms) | ours / GenZ "
         "w/o | ours all-reduce / layer (ms) | GenZ all-reduce / layer (ms) |"),
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for tp in TP_DEGREES:
        system = System(preset("os128"), chips=tp, tensor_parallel=tp,
                        link=Link(TP_LINK_GBPS, TP_LINK_US, "ring"))
        book = tenet_byoc.estimate("llama-3-70b", "none", prompt_len=prompt, decode_steps=1,
                                   system=system)
        for phase in ("prefill", "decode"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                kw = {"model": model, "batch_size": 1, "input_tokens": prompt,
                      "system_name": genz_tp_system(tp), "bits": "f32", "tensor_parallel": tp}
                out = (prefill_moddeling(**kw) if phase == "prefill"
                       else decode_moddeling(output_tokens=0, Bb=1, **kw))
            df = out["model_df"]
            rows = df.set_index("Layer Name")["Latency (msec)"]
            extra = float(rows.get("embeddings", 0.0)) + float(rows.get("Emb_AR", 0.0))
            genz, ours = float(out["Latency"]), book.latency_s(phase) * 1e3
            ar_ours = [e.latency_us / 1e3 for e in book if e.chip == 0 and e.phase == phase
                       and e.name == "layers.0.self_attn.o_proj.all_reduce"]
            ar_genz = float(rows.get("MHA AR", 0.0)) + float(rows.get("FFN AR", 0.0))
            lines.append(
                f"| {tp} | {phase} | {ours:,.3f} | {genz:,.3f} | {genz - extra:,.3f} | "
                f"{ours / (genz - extra):.2f}x | {2 * ar_ours[0]:.4f} | {ar_genz:.4f} |")
            print(lines[-1], flush=True)
    return lines


def timing() -> list[str]:
    """The issue's case, 70B, prompt 2048, 128 decode steps, os128, per scheme against
    GenZ's time for the same 129 calls: ``benchmarks/estimate_speed.py``'s table."""
    from estimate_speed import timing as speed

    return speed()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", type=int, default=512,
                        help="prefill tokens; the decode step runs after as many (default 512)")
    parser.add_argument("--out", help="also write the tables to this markdown file")
    parser.add_argument("--timing-only", action="store_true",
                        help="only the Llama-3-70B timing against GenZ")
    args = parser.parse_args()
    info = tenet_byoc.cpu_info()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    head = (f"{date}, CPU {info.model}, ISA {info.isa} ({info.threads} threads), load average {load}; "
            f"estimates do not depend on it, wall times do. Prompt "
            f"{args.prompt}, one decode step at context {args.prompt}, batch 1. Every "
            "preset's mapping is searched (the presets' default since issue 31).")
    if args.timing_only:
        head = head[:head.index("Prompt ")].rstrip()
    print(head + "\n")
    if args.timing_only:
        timed = timing()
        print("\n".join(timed))
        if args.out:
            with open(args.out, "w") as f:
                # The heading names the table README.md takes (docs/readme_tables.py).
                f.write("# estimate's speed beside GenZ\n\n" + head + "\n\n## speed\n\n"
                        + "\n".join(timed) + "\n")
        return
    lines = comparison(args.prompt)
    print()
    tp_lines = tensor_parallel(args.prompt)
    print("\n" + TP_EXPLANATION)
    timed = timing()
    print("\n".join(timed))
    print("\n" + EXPLANATION)
    if args.out:
        with open(args.out, "w") as f:
            # The headings name the tables README.md takes (docs/readme_tables.py).
            f.write("# Estimates beside a roofline and GenZ\n\n" + head + "\n\n")
            f.write("## single-chip\n\n" + "\n".join(lines) + "\n\n" + EXPLANATION
                    + "\n## tensor-parallel\n\n" + "\n".join(tp_lines) + "\n\n"
                    + TP_EXPLANATION + "\n## speed\n\n" + "\n".join(timed) + "\n")


if __name__ == "__main__":
    main()
