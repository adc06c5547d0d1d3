"""``tenet-byoc estimate``: per-phase figures against hand counts, sweeps, files, errors."""

from __future__ import annotations

import csv

import pytest

import tenet_byoc
from tenet_byoc_cli import main


def exit_code(argv) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


def test_estimate_prints_phases_and_writes_files(tmp_path, capsys):
    argv = ["estimate", "--model", "gpt2", "--schemes", "none,q4f16_1", "--accelerator",
            "os16", "--prompt-len", "16", "--decode-steps", "2", "--batch", "2",
            "--sweep-contexts", "16,64", "--sweep-batches", "1,4", "--out", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    # GPT-2 small by hand: d = 768, 12 layers, MLP 3072, tied head of 50257; 2 sequences.
    d, vocab = 768, 50257
    linear = 12 * 12 * d * d
    prefill = 2 * (16 * linear + 12 * 2 * 16 * 16 * d + 16 * d * vocab)
    decode = 2 * sum(linear + 12 * 2 * (16 + i + 1) * d + d * vocab for i in range(2))
    # The printed table rounds to 4 significant figures with an SI prefix; the CSV is exact.
    assert "| none | prefill | 16 |" in out and f"| {prefill / 1e9:.3f} G |" in out
    assert "| q4f16_1 | decode | 2 |" in out and f"| {decode / 1e6:.1f} M |" in out
    rows = list(csv.DictReader((tmp_path / "estimate.csv").open()))
    assert [(r["scheme"], r["phase"]) for r in rows] == [
        ("none", "prefill"), ("none", "decode"), ("q4f16_1", "prefill"), ("q4f16_1", "decode")]
    assert [int(r["macs"]) for r in rows] == [prefill, decode, prefill, decode]
    # TPOT is the mean decode step of the API's own ledger; tokens/s the batch's rate.
    ledger = tenet_byoc.estimate("gpt2", "q4f16_1", "os16", prompt_len=16, decode_steps=2,
                                 batch=2)
    tpot_ms = ledger.group_by("phase")["decode"].latency_us / 2 / 1e3  # ledger.step_cycles
    assert float(rows[3]["latency_ms"]) == pytest.approx(tpot_ms, rel=1e-12)
    assert float(rows[3]["tokens_per_s"]) == pytest.approx(2 * 1e3 / tpot_ms, rel=1e-12)
    ctx = list(csv.DictReader((tmp_path / "sweep_context.csv").open()))
    assert [(r["scheme"], r["context_len"], r["batch"]) for r in ctx] == [
        ("none", "16", "2"), ("none", "64", "2"), ("q4f16_1", "16", "2"), ("q4f16_1", "64", "2")]
    batch = list(csv.DictReader((tmp_path / "sweep_batch.csv").open()))
    assert [(r["context_len"], r["batch"]) for r in batch] == [("16", "1"), ("16", "4")] * 2
    names = {p.name for p in tmp_path.iterdir()}
    assert {"estimate.csv", "layers_none.csv", "layers_q4f16_1.csv", "estimate_sweep.png"} <= names
    assert (tmp_path / "estimate_sweep.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(("argv", "message"), [
    (["--model", "gpt5"], "'gpt5' is neither a built-in name"),
    (["--prompt-len", "2000"], "--prompt-len 2000 is longer"),
    (["--schemes", "w9"], "unknown scheme 'w9'"),
    (["--batch", "0"], "expected an integer >= 1"),
    (["--batch", str(10**12)], "batch=1000000000000 makes prefill GEMM 'h.0.attn.c_attn'"),
])
def test_bad_input_is_one_line(argv, message, capsys):
    assert exit_code(["estimate", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_out_is_checked_before_the_work(tmp_path, capsys, monkeypatch):
    import sys

    afile = tmp_path / "afile.txt"
    afile.write_text("mine")
    monkeypatch.setattr(sys.modules["tenet_byoc.estimate"], "estimate", lambda *a, **k: pytest.fail("ran"))
    assert exit_code(["estimate", "--out", str(afile)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(afile) in err and "Traceback" not in err
    assert afile.read_text() == "mine"
    assert exit_code(["estimate", "--ledger"]) == 2
    assert "--ledger writes ledger_<scheme>.csv into the --out folder" in capsys.readouterr().err


def test_out_writes_a_layer_summary_and_every_call_only_with_ledger(tmp_path, capsys):
    argv = ["estimate", "--model", "gpt2", "--prompt-len", "8", "--decode-steps", "3"]
    assert main([*argv, "--out", str(tmp_path / "a")]) == 0
    assert main([*argv, "--out", str(tmp_path / "b"), "--ledger"]) == 0
    # Without --ledger: the totals, the per-layer summary and the run's manifest, no ledger.
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [
        "estimate.csv", "layers_none.csv", "manifest.json"]
    assert {"layers_none.csv", "ledger_none.csv"} <= {p.name for p in (tmp_path / "b").iterdir()}
    layers = list(csv.DictReader((tmp_path / "a" / "layers_none.csv").open()))
    calls = list(csv.DictReader((tmp_path / "b" / "ledger_none.csv").open()))
    # Each summary row is the sum of its layer's calls in the full ledger.
    assert sum(int(r["calls"]) for r in layers) == len(calls)
    for row in layers:
        mine = [c for c in calls if (c["phase"], c["name"]) == (row["phase"], row["layer"])]
        assert int(row["calls"]) == len(mine) == (1 if row["phase"] == "prefill" else 3)
        # A vector or link entry has no MACs: its CSV cell is empty.
        assert int(row["macs"]) == sum(int(c["macs"] or 0) for c in mine)
        assert float(row["energy_pj"]) == pytest.approx(sum(float(c["energy_pj"]) for c in mine))
    # GPT-2 small: 12 layers x 6 GEMMs + the head, per phase
    from tenet_byoc.models.configs import resolve_config
    from tenet_byoc.models.gemms import model_gemms

    gemms = {g.name for g in model_gemms(resolve_config("gpt2"), "prefill", 16)}
    assert sum(r["layer"] in gemms for r in layers) == 2 * (12 * 6 + 1)  # and vector rows


def test_estimate_charges_a_mixture_of_experts(tmp_path, capsys):
    argv = ["estimate", "--model", "mixtral-8x7b", "--schemes", "none", "--prompt-len", "16",
            "--decode-steps", "1", "--out", str(tmp_path)]
    assert main(argv) == 0
    rows = list(csv.DictReader((tmp_path / "estimate.csv").open()))
    # Mixtral 8x7B by hand: d = 4096, 32 layers, 32 query / 8 key-value heads of 128, a
    # router of 8 experts, each token's 2 experts of width 14336, head of 32000. A decode
    # step at context 16 attends to 17 keys; its token reaches exactly 2 experts.
    d, layers, inner, vocab = 4096, 32, 14336, 32000
    decode = layers * (2 * d * d + 2 * d * 1024 + 2 * 32 * 17 * 128 + 8 * d
                       + 2 * 3 * d * inner) + d * vocab
    assert [(r["phase"], int(r["macs"])) for r in rows][1] == ("decode", decode)


def test_estimate_says_whether_the_model_fits_the_chips_dram(capsys):
    # Llama-3-70B holds 70.55 B parameters (Meta's model card: 70 B; 80 layers of d = 8192,
    # MLP 28672, 8 kv heads, untied vocabulary of 128256): 282.2 GB at float32.
    params = 80 * (2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192) \
        + 2 * 128256 * 8192 + 8192
    argv = ["estimate", "--model", "llama-3-70b", "--schemes", "none", "--prompt-len", "8",
            "--decode-steps", "1"]
    assert main([*argv, "--accelerator", "tpu_v5e"]) == 0
    out = capsys.readouterr().out
    assert f"weights {params * 4 / 1e9:,.1f} GB" in out and "282.2 GB" in out
    assert "does NOT fit tpu_v5e's 16.0 GB of DRAM" in out
    assert main([*argv, "--accelerator", "h100_sxm", "--tp", "8"]) == 0
    out = capsys.readouterr().out
    assert "fits h100_sxm's 80.0 GB of DRAM" in out and "NOT" not in out
