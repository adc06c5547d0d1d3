"""Keep README.md's figure tables equal to the files they come from, and write those files
from the runs that measure them.

Each figure-bearing table of README.md sits between two markers::

    <!-- table: docs/tables/llama_70b_os128.md#phases -->
    | scheme | ... |
    |---|...|
    <!-- end table -->

naming a markdown file (under ``docs/`` or ``benchmarks/results/``, which says the machine
and date it was measured on) and a ``## NAME`` heading in it, written as it stands there
(spaces and punctuation included); the first table under that heading is the README's. ``python docs/readme_tables.py`` rewrites every marked table from
its file; ``--check`` only reports the tables that differ (exit 1), as
``tests/test_readme.py`` does.

The source files are written from runs by the subcommands:

- ``estimate DIR``: from ``tenet-byoc estimate --model llama-3-70b --schemes
  none,per_token,q4f16_1 --accelerator os128 --prompt-len 2048 --decode-steps 128
  --sweep-contexts 128,512,2048,8000 --sweep-batches 1,4,16,64 --out DIR``;
- ``sweep DIR``: from ``tenet-byoc sweep --out DIR`` (GPT-2 small and the MLP);
- ``mlp DIR``: from ``tenet-byoc sweep --model mlp --schemes all --accelerator os16
  --repeats 1 --out DIR``;
- ``eval DIR``: from ``tenet-byoc eval --checkpoint tiny-gpt2 --text README.md --window 128
  --max-tokens 1024 --schemes ... --out DIR``.

Summaries of several result files are written by ``cost-model``, ``decode-schemes``,
``gemm`` (``benchmarks/results/gemm_*.md``), ``gpt2-e2e`` (``gpt2_e2e_*.md``) and ``mapper``
into ``docs/tables/``.

Tables that record one-off measurements (the main job's CPU seconds step by step) live in
``benchmarks/results/`` as measured, with their machine and date, and are checked the same
way.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import math
import os
import platform
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

MARKER = re.compile(r"^<!-- table: (?P<path>[^#\s]+)#(?P<name>[^\n]+?) -->\n"
                    r"(?P<body>.*?)^<!-- end table -->$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Marked:
    """One marked table of the README: where its figures come from and what it holds now."""

    path: str  #: the source file, relative to the repository root
    name: str  #: the ``## NAME`` heading in it
    body: str  #: the README's table as written, with its final newline
    span: tuple[int, int]  #: where ``body`` sits in the README text


def marked_tables(readme: str) -> list[Marked]:
    """Every marked table of ``readme``, in order."""
    return [Marked(m["path"], m["name"], m["body"], m.span("body"))
            for m in MARKER.finditer(readme)]


def source_table(path: str, name: str, root: Path = ROOT) -> str:
    """The first markdown table under ``## name`` in ``root / path``.

    Raises
    ------
    ValueError
        When the file does not exist, lies outside ``docs/`` and ``benchmarks/results/``, or
        has no such heading or no table under it.
    """
    if not (path.startswith("docs/") or path.startswith("benchmarks/results/")):
        raise ValueError(f"README table source {path!r}: sources live under docs/ or "
                         "benchmarks/results/")
    file = root / path
    if not file.is_file():
        raise ValueError(f"README table source {path!r} does not exist")
    lines = file.read_text().splitlines()
    try:
        start = lines.index(f"## {name}")
    except ValueError:
        raise ValueError(f"{path} has no heading '## {name}' for a README table") from None
    table = []
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        if line.startswith("|"):
            table.append(line)
        elif table:
            break
    if not table:
        raise ValueError(f"{path}: no table under '## {name}'")
    return "\n".join(table) + "\n"


def regenerate(readme: str, root: Path = ROOT) -> str:
    """``readme`` with every marked table replaced by its source's."""
    out, last = [], 0
    for t in marked_tables(readme):
        out += [readme[last:t.span[0]], source_table(t.path, t.name, root)]
        last = t.span[1]
    return "".join(out) + readme[last:]


def differing(readme: str, root: Path = ROOT) -> list[str]:
    """A line per marked table whose README body differs from its source."""
    return [f"{t.path}#{t.name}" for t in marked_tables(readme)
            if t.body != source_table(t.path, t.name, root)]


# --- writing the source files from runs ------------------------------------------------------


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def sig(x: float, digits: int = 3) -> str:
    """``x`` to ``digits`` significant figures, thousands separated, no exponent."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return f"{x:,.{decimals}f}"


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f
                       if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{date} on {cpu} ({os.cpu_count()} logical CPUs), load average {load}"


def _table(header: list[str], align: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def estimate_source(folder: Path, command: str) -> str:
    """The source file of the README's Llama-3-70B tables, from an ``estimate --out``
    folder (``estimate.csv`` and ``sweep_batch.csv``)."""
    phases = _rows(folder / "estimate.csv")
    by = {(r["scheme"], r["phase"]): r for r in phases}
    schemes = list(dict.fromkeys(r["scheme"] for r in phases))
    prompt = int(by[schemes[0], "prefill"]["tokens"])
    rows = []
    for s in schemes:
        p, d = by[s, "prefill"], by[s, "decode"]
        rows.append([s, f"{float(p['latency_ms']) / 1e3:.2f}", f"{float(p['roofline_ratio']):.2f}x",
                     f"{float(d['latency_ms']):,.0f}", f"{float(d['roofline_ratio']):.2f}x",
                     sig(float(d["energy_per_token_mj"]) / 1e3)])
    phase_table = _table(["scheme", f"TTFT, {prompt:,} tokens (s)", "prefill / roofline",
                          "TPOT (ms)", "decode / roofline", "decode energy / token (J)"],
                         ["---", "---:", "---:", "---:", "---:", "---:"], rows)
    batch = _rows(folder / "sweep_batch.csv")
    context = batch[0]["context_len"]
    shown = [b for b in ("1", "16", "64") if any(r["batch"] == b for r in batch)]
    rows = []
    for s in schemes:
        at = {r["batch"]: r for r in batch if r["scheme"] == s}
        rows.append([s, " / ".join(shown),
                     " / ".join(f"{float(at[b]['tpot_ms']):,.0f}" for b in shown),
                     " / ".join(f"{float(at[b]['tokens_per_s']):,.1f}" for b in shown),
                     " / ".join(sig(float(at[b]["energy_per_token_mj"]) / 1e3) for b in shown)])
    batch_table = _table(["scheme", "batch", f"TPOT at context {int(context):,} (ms)",
                          "tokens/s", "energy / token (J)"],
                         ["---", "---:", "---:", "---:", "---:"], rows)
    return (f"# Llama-3-70B estimated on os128 (README tables)\n\n"
            f"Written by `python docs/readme_tables.py estimate DIR` after `{command}`; "
            f"{_machine()}. Estimates depend on the code, not on the machine.\n\n"
            f"TTFT is the whole prefill; TPOT the mean decode step; both are GEMMs and the "
            f"vector unit (the whole model), batch 1.\n\n"
            f"## phases\n\n{phase_table}\n## batch\n\n{batch_table}")


def sweep_source(folder: Path, command: str) -> str:
    """The source file of the README's main-job tables, from a ``sweep --out`` folder
    (``sweep.csv``)."""
    rows = _rows(folder / "sweep.csv")
    gpt2 = [r for r in rows if r["model"] == "gpt2"]
    main = []
    for r in gpt2:
        if r["accelerator"] != "os16":
            continue
        main.append([r["scheme"], r["phase"], f"{int(r['macs']) / 1e9:.3f} G",
                     f"{int(r['cycles']) / 1e6:.2f} M", f"{float(r['latency_us']) / 1e3:.1f}",
                     f"{100 * float(r['pe_utilization']):.1f}%",
                     f"{float(r['weight_bytes']) / 1e6:,.1f}",
                     f"{float(r['dram_bytes']) / 1e6:,.0f}",
                     f"{float(r['energy_pj']) / 1e9:,.2f}",
                     f"{int(r['cycles']) / int(r['roofline_cycles']):.2f}x",
                     f"{float(r['rel_error']):.3f}", f"{100 * float(r['top1_agreement']):.0f}%"])
    main_table = _table(["scheme", "phase", "MACs", "est. cycles", "est. latency (ms)",
                         "PE util", "weight MB", "DRAM MB", "energy (mJ)", "/ roofline",
                         "rel. error", "top-1"],
                        ["---", "---"] + ["---:"] * 10, main)
    ws = {}
    for r in gpt2:
        if r["accelerator"] == "ws16":
            ws.setdefault(r["scheme"], {})[r["phase"]] = r
    ws_table = _table(["scheme (ws16)", "prefill latency (ms)", "prefill PE util",
                       "decode latency (ms)", "decode PE util"], ["---"] + ["---:"] * 4,
                      [[s, f"{float(p['prefill']['latency_us']) / 1e3:.1f}",
                        f"{100 * float(p['prefill']['pe_utilization']):.1f}%",
                        f"{float(p['decode']['latency_us']) / 1e3:.1f}",
                        f"{100 * float(p['decode']['pe_utilization']):.1f}%"]
                       for s, p in ws.items()])
    mlp = [r for r in rows if r["model"] == "mlp" and r["accelerator"] == "os16"]
    mlp_table = _table(["MLP scheme (os16, 360 digit images)", "est. latency (ms)", "PE util",
                        "weight kB", "energy (uJ)", "rel. error", "test accuracy"],
                       ["---"] + ["---:"] * 6,
                       [[r["scheme"], f"{float(r['latency_us']) / 1e3:.3f}",
                         f"{100 * float(r['pe_utilization']):.1f}%",
                         f"{float(r['weight_bytes']) / 1e3:.1f}",
                         f"{float(r['energy_pj']) / 1e6:.1f}", f"{float(r['rel_error']):.3f}",
                         f"{100 * float(r['accuracy']):.2f}%"] for r in mlp])
    return (f"# The main job, `tenet-byoc sweep` (README tables)\n\n"
            f"Written by `python docs/readme_tables.py sweep DIR` after `{command}`; "
            f"{_machine()}. The cost columns depend on the code, not on the machine; the "
            f"errors on the seeded weights.\n\n"
            f"Latency, cycles and energy are the GEMMs only (the offloaded calls the sweep runs "
            f"and charges), not the vector unit that `estimate` adds.\n\n"
            f"## gpt2-os16\n\n{main_table}\n## gpt2-ws16\n\n{ws_table}\n"
            f"## mlp-os16\n\n{mlp_table}")


def mlp_source(folder: Path, command: str) -> str:
    """The source file of the README's MLP-on-digits table, from a ``sweep --model mlp
    --out`` folder (``sweep.csv``: one row per scheme on one accelerator)."""
    rows = [r for r in _rows(folder / "sweep.csv") if r["model"] == "mlp"]
    accelerators = sorted({r["accelerator"] for r in rows})
    table = _table(["scheme", "test accuracy", "top-1 vs float32", "max abs error", "weight kB",
                    "est. latency (us)", "energy (uJ)"], ["---"] + ["---:"] * 6,
                   [["none (float32)" if r["scheme"] == "none" else r["scheme"],
                     f"{100 * float(r['accuracy']):.2f}%",
                     f"{100 * float(r['top1_agreement']):.1f}%",
                     sig(float(r["max_abs_error"])), f"{float(r['weight_bytes']) / 1e3:.2f}",
                     f"{float(r['latency_us']):.1f}", f"{float(r['energy_pj']) / 1e6:.1f}"]
                    for r in rows])
    return (f"# The MLP on scikit-learn's digits under every scheme (README table)\n\n"
            f"Written by `python docs/readme_tables.py mlp DIR` after `{command}`; "
            f"{_machine()}; accelerator {', '.join(accelerators)}. The cost columns depend on "
            f"the code, the accuracies on the seeded training, not on the machine. Latency and "
            f"energy are the GEMMs only.\n\n## schemes\n\n{table}")


def eval_source(folder: Path, command: str) -> str:
    """The source file of the README's perplexity table, from an ``eval --out`` folder
    (``eval.csv``: one row per scheme)."""
    rows = _rows(folder / "eval.csv")
    table = _table(["scheme", "perplexity", "Δ vs float32", "top-1 vs float32",
                    "est. latency (ms)", "est. energy (mJ)"], ["---"] + ["---:"] * 5,
                   [[_eval_label(r["scheme"]), f"{float(r['perplexity']):.2f}",
                     _delta(float(r["delta_vs_float32"])),
                     f"{100 * float(r['top1_agreement']):.2f}%",
                     f"{float(r['latency_us']) / 1e3:.3f}",
                     f"{float(r['energy_pj']) / 1e9:.3f}"] for r in rows])
    return (f"# Perplexity of the tiny random GPT-2 under each scheme (README table)\n\n"
            f"Written by `python docs/readme_tables.py eval DIR` after `{command}`; "
            f"{_machine()}. `tiny-gpt2` is `examples/tiny_checkpoint.py`'s random model with "
            f"a tokenizer trained on README.md, so the figures move a little with the README."
            f"\n\n## perplexity\n\n{table}")


def _design(r: dict[str, str]) -> str:
    """A dse.csv row's design in a few words: array (with its dataflow unless the mapping is
    searched, which picks os / ws / is per call), the narrow PE formats, buffer, DRAM."""
    units = [f for f in r["pe_formats"].split("+") if f not in ("fp16", "fp32")] or ["fp16"]
    array = f"{r['rows']}x{r['cols']}"
    if r["mapping"] != "auto":
        array = r["dataflow"] + array
    fmts = "+".join("fp8" if f.startswith("fp8") else f for f in units)
    return (f"{array} {fmts}, {int(r['buffer_bytes']) >> 20} MiB, "
            f"{float(r['dram_gbps']):g} GB/s")


def dse_source(folders: list[Path], command: str) -> str:
    """The source file of the README's design-space table, from ``dse --out`` folders (one
    per batch; ``dse.csv``): per batch and scheme the fastest feasible design and the one of
    least energy per token."""
    rows_out = []
    for folder in folders:
        rows = [r for r in _rows(folder / "dse.csv") if r["feasible"] == "True"]
        batch = folder.name.rsplit("b", 1)[-1]
        order = list(dict.fromkeys(r["scheme"] for r in rows))
        run = folder / "dse_run.json"
        if run.is_file():  # the command's order of schemes
            import json

            order = [s for s in json.loads(run.read_text())["schemes"] if s in order]
        for scheme in order:
            mine = [r for r in rows if r["scheme"] == scheme]
            fast = min(mine, key=lambda r: (float(r["tpot_ms"]), float(r["area_mm2"])))
            frugal = min(mine, key=lambda r: (float(r["energy_per_token_mj"]),
                                              float(r["area_mm2"])))
            ppl = fast.get("perplexity", "nan")
            accuracy = ("-" if ppl in ("", "nan") else
                        f"{float(ppl):.1f} / {100 * float(fast['top1_agreement']):.1f}%")
            rows_out.append([batch, scheme, _design(fast), f"{float(fast['area_mm2']):.1f}",
                             f"{float(fast['tpot_ms']):,.1f}", f"{float(fast['ttft_ms']):,.0f}",
                             f"{float(fast['energy_per_token_mj']):,.0f}",
                             f"{float(frugal['energy_per_token_mj']):,.0f} ({_design(frugal)}; "
                             f"{float(frugal['area_mm2']):.1f})", accuracy])
    table = _table(["batch", "scheme", "fastest design", "mm2", "TPOT ms", "TTFT ms",
                    "mJ/token", "least mJ/token (design, mm2)", "tiny ppl / top-1"],
                   ["---", "---", "---", "---:", "---:", "---:", "---:", "---", "---"],
                   rows_out)
    return (f"# Llama-3-8B under 50 mm2 at 28 nm (README table)\n\n"
            f"Written by `python docs/readme_tables.py dse DIR...` (folders named ...-bN for "
            f"batch N) after `{command}`; {_machine()}. The figures depend on the code, not "
            f"on the machine; energy includes the static power (area x the area table's "
            f"W/mm2 over the run).\n\n## designs\n\n{table}")


#: The README's groups of decode_schemes.md's rows: (schemes label, kernel, schemes).
DECODE_GROUPS = (
    ("`w8a8_*`, `per_tensor`, `per_token`, `w4a8`, `per_token+kv8`", "real int8",
     ("w8a8_per_tensor", "w8a8_per_channel_per_token", "per_tensor", "per_token", "w4a8",
      "per_token+kv8")),
    ("`w8a16_per_channel`", "real int8 weight-only", ("w8a16_per_channel",)),
    ("`w4a16_group*`, `q4f16_*`, `q4f16_awq`, `q4f16_1+kv4`", "real packed int4",
     ("w4a16_group32", "w4a16_group64", "w4a16_group128", "q4f16_0", "q4f16_1", "q4f16_ft",
      "q4f16_awq", "q4f16_1+kv4")),
    ("`per_embedding`, `smoothquant` (uncalibrated), `group{32,64,128}`, `q0f16`", "emulated",
     ("per_embedding", "smoothquant", "group32", "group64", "group128", "q0f16")),
    ("`e4m3_e4m3_f16`, `mxint8`, `mxfp8`, `mxfp4`", "emulated",
     ("e4m3_e4m3_f16", "mxint8", "mxfp8", "mxfp4")),
)


def decode_schemes_source(results: Path) -> str:
    """The README's decode-time summary: per group of :data:`DECODE_GROUPS` the range of
    ``/ float32`` in ``benchmarks/results/decode_schemes.md`` (its rows per scheme)."""
    ratio = {}
    for line in results.read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 4 and cells[3].endswith("x") and cells[0] != "scheme":
            ratio[cells[0]] = float(cells[3][:-1])
    rows = []
    for label, kernel, schemes in DECODE_GROUPS:
        missing = [s for s in schemes if s not in ratio]
        if missing:
            raise ValueError(f"{results}: no row for {', '.join(missing)}")
        low, high = min(ratio[s] for s in schemes), max(ratio[s] for s in schemes)
        rows.append([label, kernel, f"{low:.2f}x" if low == high else f"{low:.2f}-{high:.2f}x"])
    table = _table(["schemes", "kernel", "decode step / float32"], ["---", "---", "---:"], rows)
    first = results.read_text().split("\n\n")[1].replace("\n", " ")
    return (f"# GPT-2 small decode step per scheme, grouped (README table)\n\n"
            f"Written by `python docs/readme_tables.py decode-schemes` from "
            f"`{results.relative_to(ROOT) if results.is_relative_to(ROOT) else results}`, "
            f"whose rows it groups (each range the lowest and highest ratio of its schemes). "
            f"That file's machine (CPU, ISA, date, load): {first}\n\n## groups\n\n{table}")


#: The README's GPT-2 end-to-end rows: the machine and ISA as the README names them, and the
#: ``benchmarks/results/`` file each row's figures come from.
GPT2_E2E_ROWS = (
    ("Intel Xeon, `avx512_core_fp16`, int8 `native`", "gpt2_e2e_avx512_vnni.md"),
    ("Intel Xeon, AVX2 kernels on both sides", "gpt2_e2e_avx2_on_avx512.md"),
    ("AVX2-only AMD EPYC, 2026-11-25, load 17-21, code of that day", "gpt2_e2e_epyc_avx2.md"),
)


def gpt2_e2e_source(results: Path, rows: tuple[tuple[str, str], ...] = GPT2_E2E_ROWS) -> str:
    """The README's GPT-2 prefill summary: per file of ``benchmarks/gpt2_e2e.py``'s results,
    tenet's and PyTorch's prefill times, the file's tenet / PyTorch ratio and its GEMM floor.

    Raises
    ------
    ValueError
        When a file lacks the tenet or PyTorch row or the ratio line.
    """
    out, torch_version, stamps = [], None, []
    for label, name in rows:
        path = results / name
        if not path.is_file():
            raise ValueError(f"GPT-2 end-to-end results {path} do not exist")
        text = path.read_text()
        times = {}
        for line in text.splitlines():
            cells = [c.strip() for c in line.strip("|").split("|")]
            if len(cells) >= 3 and cells[0].startswith(("tenet build", "PyTorch")):
                times[cells[0].split()[0]] = float(cells[2].replace(",", ""))
                version = re.match(r"PyTorch (\d+\.\d+)", cells[0])
                torch_version = torch_version or (version and version[1])
        ratio = re.search(r"tenet / PyTorch eager time at \d+ tokens: \*\*([\d.]+)\*\*", text)
        if set(times) != {"tenet", "PyTorch"} or ratio is None:
            raise ValueError(f"{path}: no tenet row, PyTorch row or 'tenet / PyTorch' line")
        floor = re.search(r"\(([\d,.]+) GFLOP/s[^)]*\) they alone take ([\d,.]+) ms", text)
        link = f"benchmarks/results/{name}"
        out.append([f"{label} ([results]({link}))", f"{_half_up(times['tenet']):,}",
                    f"{_half_up(times['PyTorch']):,}", ratio[1],
                    f"{floor[2]} ({floor[1]} GFLOP/s)" if floor else "not measured"])
        stamps.append(f"`{link}`: " + text.split("\n\n")[1].split(";")[0])
    table = _table(["machine, ISA", "tenet prefill (ms)", f"PyTorch {torch_version} eager (ms)",
                    "tenet / PyTorch time", "GEMM floor (ms)"],
                   ["---", "---:", "---:", "---:", "---:"], out)
    return ("# GPT-2 small prefill, end to end, per machine (README table)\n\n"
            "Written by `python docs/readme_tables.py gpt2-e2e` from these files of "
            "`benchmarks/gpt2_e2e.py` (times rounded to the ms; ratio and GEMM floor as each "
            "file states them):\n\n" + "\n".join(f"- {s}" for s in stamps)
            + f"\n\n## prefill\n\n{table}")


#: The README's GEMM summary rows: the machine, ISA and threads as the README names them, the
#: ``benchmarks/results/`` file of ``benchmarks/gemm.py`` they come from, and its link text.
GEMM_ROWS = (
    ("Xeon, AVX2 kernels, 1 thread", "gemm_avx2_on_avx512_1thread.md", "1 thread"),
    ("Xeon, AVX2 kernels, 2 threads", "gemm_avx2_on_avx512.md", "2 threads"),
    ("Xeon, AVX-512 VNNI, 1 thread", "gemm_avx512_vnni_1thread.md", "1 thread"),
    ("Xeon, AVX-512 VNNI, 2 threads", "gemm_avx512_vnni.md", "2 threads"),
    ("AVX2-only AMD EPYC, 2 threads, 2026-11-25, load 19.5-20.2, back to back, code of that day",
     "gemm_epyc_avx2.md", "EPYC"),
    ("AMD EPYC AVX-512 VNNI/BF16, 1 thread, 2026-11-28, load 8-11, CPU time",
     "gemm_epyc_avx512_bf16_1thread.md", "1 thread"),
    ("the same EPYC, oneDNN held to AVX2 (numpy not held), 1 thread, CPU time",
     "gemm_avx2_on_epyc_avx512_bf16_1thread.md", "1 thread"),
    ("the same EPYC, oneDNN and numpy held to AVX2, 1 thread, CPU time",
     "gemm_avx2_both_on_epyc_avx512_bf16_1thread.md", "both AVX2"),
    ("the same EPYC, 2 threads, AVX-512, load 8-13 (contention, not the kernels)",
     "gemm_epyc_avx512_bf16.md", "AVX-512"),
    ("the same EPYC, 2 threads, oneDNN held to AVX2, load 8-13 (contention, not the kernels)",
     "gemm_avx2_on_epyc_avx512_bf16.md", "AVX2"),
)

#: The README's int8-path table: each path, the machine of the ``benchmarks/gemm.py`` file
#: that measured it (the same EPYC, oneDNN held to AVX2 for ``widened``) and that file.
GEMM_INT8_ROWS = (
    ("native", "AMD EPYC, AVX-512 VNNI/BF16, 1 thread", "gemm_epyc_avx512_bf16_1thread.md"),
    ("widened", "the same EPYC, oneDNN held to AVX2, 1 thread",
     "gemm_avx2_on_epyc_avx512_bf16_1thread.md"),
)

_GEOMEAN = re.compile(r"^geometric mean (?P<what>[^:]+): all shapes [\d.]+x; prefill shapes "
                      r"\(M >= 64\) (?P<mean>[\d.]+x), lowest (?P<low>[\d.]+x)$")


def _gemm_cells(path: Path) -> list[str]:
    """``path``'s float32 and int8 prefill cells: geomean (lowest, the shape holding it)."""
    cells, ratios = [], {}
    for line in path.read_text().splitlines():
        row = [c.strip() for c in line.strip("|").split("|")]
        # both tables hold a shape "M x K x N" first and the ratio fourth
        if (line.startswith("|") and len(row) >= 4 and re.fullmatch(r"\d+ x \d+ x \d+", row[0])
                and int(row[0].split(" x ")[0]) >= 64):
            ratios.setdefault(row[3], []).append(row[0].replace(" ", ""))
        found = _GEOMEAN.match(line)
        if found:
            shapes = ratios.get(found["low"], [])
            where = f", {shapes[0]}" if len(shapes) == 1 else ""
            cells.append(f"{found['mean']} ({found['low']}{where})")
            ratios = {}
    if len(cells) != 2:
        raise ValueError(f"{path}: expected a float32 and an int8 'geometric mean' line, found "
                         f"{len(cells)}")
    return cells


def gemm_source(results: Path, rows: tuple[tuple[str, str, str], ...] = GEMM_ROWS,
                int8_rows: tuple[tuple[str, str, str], ...] = GEMM_INT8_ROWS) -> str:
    """The README's GEMM summary: per file of ``benchmarks/gemm.py``'s results, the prefill
    shapes' geometric mean of tenet / numpy (float32) and int8 / numpy float32, each with its
    lowest ratio and the shape that holds it (named when one shape does); and the int8 figure
    of each int8 path (``int8_rows``: path, machine, file).

    Raises
    ------
    ValueError
        When a file does not exist or lacks its two geometric-mean lines.
    """
    out, stamps = [], []
    cells = {}
    for name in dict.fromkeys([r[1] for r in rows] + [r[2] for r in int8_rows]):
        if not (results / name).is_file():
            raise ValueError(f"GEMM results {results / name} do not exist")
        cells[name] = _gemm_cells(results / name)
    for label, name, link_text in rows:
        path = results / name
        link = f"benchmarks/results/{name}"
        out.append([label, *cells[name], f"[{link_text}]({link})"])
        measured = next((p for p in path.read_text().split("\n\n") if p.startswith("Measured")),
                        "")
        stamps.append(f"`{link}`: " + measured.split(";")[0])
    table = _table(["machine, ISA, threads on each side",
                    "float32 / numpy, prefill shapes: geomean (lowest)",
                    "int8 / numpy float32, prefill shapes: geomean (lowest)", "results"],
                   ["---", "---:", "---:", "---"], out)
    return ("# GEMM kernels against numpy, per machine (README table)\n\n"
            "Written by `python docs/readme_tables.py gemm` from these files of "
            "`benchmarks/gemm.py` (each cell the file's geometric mean over the prefill shapes, "
            "M >= 64, and its lowest ratio):\n\n" + "\n".join(f"- {s}" for s in stamps)
            + f"\n\n## summary\n\n{table}\n## int8 paths\n\n"
            + _table(["path", "measured on", "int8 / numpy float32, prefill shapes: geomean "
                      "(lowest)", "results"], ["---", "---", "---:", "---"],
                     [[f"`{path}`", where, cells[name][1],
                       f"[results](benchmarks/results/{name})"]
                      for path, where, name in int8_rows]))


def _section_rows(text: str, heading: str, path: Path) -> list[list[str]]:
    """The cells of the rows of the first table under ``## heading...`` in ``text``."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(f"## {heading}")), None)
    if start is None:
        raise ValueError(f"{path}: no heading '## {heading}'")
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("## ") or (rows and not line.startswith("|")):
            break
        if line.startswith("|") and not line.startswith("|---"):
            rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows[1:]


def mapper_source(results: Path) -> str:
    """The README's mapping-search summary from ``benchmarks/results/mapper.md``: per
    accelerator the phase totals / roofline of the three schemes, and the median seconds of
    the whole search over all three (empty cache) and again (lookups).

    Raises
    ------
    ValueError
        When a section, accelerator, phase or scheme is missing.
    """
    text = results.read_text()
    schemes = ("none", "w8a8_per_channel_per_token", "w4a16_group128")
    accs = ("os16", "tpu_v1")
    ratio = {(r[0], r[1].split()[0], r[2]): r[5] for r in
             _section_rows(text, "Phase totals", results)}
    search = {r[0]: r for r in _section_rows(text, "The whole GPT-2 small search", results)
              if r[1] == "all three"}
    try:
        rows = [[f"{phase} / roofline: " + (", ".join(schemes) if phase == "prefill"
                                            else "same schemes"),
                 *(", ".join(ratio[a, phase, s] for s in schemes) for a in accs)]
                for phase in ("prefill", "decode")]
        calls = search[accs[0]][2]
        # one count, or each accelerator's in column order (tpu_v1's whole weight tiles make
        # some of GPT-2's calls one)
        searched = " / ".join(dict.fromkeys(search[a][3] for a in accs))
        rows.append([f"all {calls} calls of both phases in the three schemes, empty cache "
                     f"({searched} searched)", *(f"{float(search[a][4]):.2f} s" for a in accs)])
        rows.append([f"the same {calls} calls again (lookups)",
                     *(f"{search[a][7]} s" for a in accs)])
    except KeyError as e:
        raise ValueError(f"{results}: no row for {e.args[0]}") from None
    table = _table(["", *(f"{a} auto" for a in accs)], ["---", "---:", "---:"], rows)
    machine = text.split("\n\n")[0].replace("\n", " ").split(";")[0]
    if not machine.startswith("Measured "):
        raise ValueError(f"{results}: its first line names no 'Measured DATE on MACHINE'")
    return ("# Mapping search on GPT-2 small (README table)\n\n"
            "Written by `python docs/readme_tables.py mapper` from "
            "`benchmarks/results/mapper.md` (its phase totals / roofline, and its whole-search "
            f"medians over all three schemes). {machine}.\n\n## search\n\n{table}")


def _half_up(x: float) -> int:
    return math.floor(x + 0.5)


def cost_model_source(results: Path) -> str:
    """The README's cost-model speed summary: per GEMM shape, the range over arrays and
    dataflows of ``benchmarks/results/cost_model.md``'s speed rows (ours C++ in us, isl +
    barvinok in ms, their ratio), and whether every row was identical."""
    text = results.read_text()
    start = text.index("## Speed")
    by: dict[str, list[list[str]]] = {}
    for line in text[start:].splitlines()[1:]:
        if line.startswith("## "):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 8 and cells[0][:1].isdigit():
            by.setdefault(cells[0], []).append(cells)
    if not by:
        raise ValueError(f"{results}: no speed rows under '## Speed'")
    rows = []
    for shape, cells in by.items():
        ours = [float(c[3]) for c in cells]
        isl = [float(c[5]) for c in cells]
        ratio = [float(c[6].rstrip("x").replace(",", "")) for c in cells]
        if any(c[7] != "yes" for c in cells):
            raise ValueError(f"{results}: {shape} has a row whose metrics differ from isl's")
        rows.append([" x ".join(shape.split("x")),
                     f"{_half_up(min(ours))}-{_half_up(max(ours))}",
                     f"{_half_up(min(isl))}-{_half_up(max(isl))}",
                     f"{_half_up(min(ratio)):,}-{_half_up(max(ratio)):,}x"])
    table = _table(["GEMM (M x N x K)", "ours (us)", "isl + barvinok (ms)", "ratio"],
                   ["---", "---:", "---:", "---:"], rows)
    machine = text.split("\n\n")[1].split(". ")[0]
    return (f"# Cost model speed against isl + barvinok, per shape (README table)\n\n"
            f"Written by `python docs/readme_tables.py cost-model` from "
            f"`benchmarks/results/cost_model.md` (each range over its arrays and dataflows). "
            f"That file's machine (CPU, date): {machine}.\n\n## speed\n\n{table}")


def _eval_label(scheme: str) -> str:
    return {"none": "none (float32)", "w4a16_group32": "w4a16_group32 (= q4f16_1)"}.get(
        scheme, scheme)


def _delta(x: float) -> str:
    return "0" if x == 0 else f"{x:+.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what")
    sub.add_parser("check", help="report the README tables that differ from their files")
    sub.add_parser("write", help="rewrite the README's marked tables from their files")
    for name in ("estimate", "sweep", "mlp", "eval"):
        p = sub.add_parser(name, help=f"write the source file from a `{name} --out` folder")
        p.add_argument("folder", type=Path)
        p.add_argument("--command", required=True, help="the command line that made it")
        p.add_argument("--to", type=Path, required=True, help="the source file to write")
    p = sub.add_parser("dse", help="write the source file from `dse --out` folders (-bN)")
    p.add_argument("folders", type=Path, nargs="+")
    p.add_argument("--command", required=True, help="the command line that made them")
    p.add_argument("--to", type=Path, required=True, help="the source file to write")
    p = sub.add_parser("cost-model", help="summarise benchmarks/results/cost_model.md")
    p.add_argument("--to", type=Path, default=ROOT / "docs" / "tables" / "cost_model.md")
    p = sub.add_parser("decode-schemes", help="group benchmarks/results/decode_schemes.md")
    p.add_argument("--to", type=Path, default=ROOT / "docs" / "tables" / "decode_schemes.md")
    p = sub.add_parser("gpt2-e2e", help="summarise benchmarks/results/gpt2_e2e_*.md")
    p.add_argument("--to", type=Path, default=ROOT / "docs" / "tables" / "gpt2_e2e.md")
    p = sub.add_parser("gemm", help="summarise benchmarks/results/gemm_*.md")
    p.add_argument("--to", type=Path, default=ROOT / "docs" / "tables" / "gemm.md")
    p = sub.add_parser("mapper", help="summarise benchmarks/results/mapper.md")
    p.add_argument("--to", type=Path, default=ROOT / "docs" / "tables" / "mapper.md")
    args = parser.parse_args(argv)
    if args.what == "mapper":
        args.to.write_text(mapper_source(ROOT / "benchmarks" / "results" / "mapper.md"))
        print(f"wrote {args.to}")
        return 0
    if args.what == "gemm":
        args.to.write_text(gemm_source(ROOT / "benchmarks" / "results"))
        print(f"wrote {args.to}")
        return 0
    if args.what == "gpt2-e2e":
        args.to.write_text(gpt2_e2e_source(ROOT / "benchmarks" / "results"))
        print(f"wrote {args.to}")
        return 0
    if args.what == "cost-model":
        args.to.write_text(cost_model_source(ROOT / "benchmarks" / "results" / "cost_model.md"))
        print(f"wrote {args.to}")
        return 0
    if args.what == "decode-schemes":
        args.to.write_text(decode_schemes_source(ROOT / "benchmarks" / "results" /
                                                 "decode_schemes.md"))
        print(f"wrote {args.to}")
        return 0
    if args.what == "dse":
        args.to.write_text(dse_source(args.folders, args.command))
        print(f"wrote {args.to}")
        return 0
    if args.what in ("estimate", "sweep", "mlp", "eval"):
        make = {"estimate": estimate_source, "sweep": sweep_source, "mlp": mlp_source,
                "eval": eval_source}[args.what]
        args.to.write_text(make(args.folder, args.command))
        print(f"wrote {args.to}")
        return 0
    text = README.read_text()
    if args.what == "write":
        README.write_text(regenerate(text))
        return 0
    stale = differing(text)
    for line in stale:
        print(f"README table differs from its source: {line}", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
