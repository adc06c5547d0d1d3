"""The sweep on the tiny GPT-2 and the MLP: MACs against analytical counts, phases, errors, files."""

from __future__ import annotations

import csv
import gzip
import json
import math

import numpy as np
import pytest

from tenet_byoc.accelerators import preset
from tenet_byoc.experiments.cases import gpt2_case, mlp_case
from tenet_byoc.experiments.plots import (
    plot_cost_vs_error,
    plot_layer_breakdown,
    plot_prefill_decode,
    save_plots,
)
from tenet_byoc.experiments.sweep import sweep
from tenet_byoc.models.gemms import total_macs
from tenet_byoc.models.gemms import gpt2_matmuls
from tenet_byoc.models.gpt2 import GPT2Config
from tenet_byoc.models.mlp import HIDDEN, OUTPUT
from tenet_byoc.quantization import SCHEMES

TINY = GPT2Config.preset("tiny")
P, L = 8, 12  # different, so the decode step's cache comes from an extra uncharged prefill
SCHEMES_SWEPT = ["none", "w8a8_per_channel_per_token", "w4a16_group128"]
# Each call's default tiles: with the presets' searched mapping os16 and ws16 (one array, one
# memory, the same dataflows to search) cost the same, and this sweep compares dataflows.
NAMES = ["os16", "ws16"]
HARDWARE = [preset(name, mapping="default") for name in NAMES]
DIGITS_IN, DIGITS_TEST = 64, 360  # scikit-learn's 8 x 8 digits, 360 held out


@pytest.fixture(scope="module")
def result():
    cases = [gpt2_case("tiny", prompt_len=P, context_len=L), mlp_case()]
    return sweep(cases, SCHEMES_SWEPT, HARDWARE, progress=False)


def padded(k: int, scheme: str) -> int:
    """K as the scheme runs it: group-wise schemes pad K to a multiple of the group size."""
    g = SCHEMES[scheme].group_size
    return -(-k // g) * g if g else k


def gpt2_expected_macs(scheme: str, phase: str) -> int:
    """gpt2_matmuls' shapes, with the linear layers' K padded as the scheme pads it."""
    total = 0
    for mm in gpt2_matmuls(TINY, P if phase == "prefill" else L, phase):
        linear = not mm.name.endswith(("attn.qk", "attn.pv"))
        k = padded(mm.k, scheme) if linear else mm.k
        total += mm.batch * mm.m * mm.n * k
    return total


def test_rows_cover_every_run_and_phase(result):
    keys = [(r.model, r.scheme, r.accelerator, r.phase) for r in result.rows]
    expected = [("gpt2", s, h, ph) for s in SCHEMES_SWEPT for h in NAMES
                for ph in ("prefill", "decode")]
    expected += [("mlp", s, h, "inference") for s in SCHEMES_SWEPT for h in NAMES]
    assert keys == expected
    for r in result.rows:
        assert r.tokens == {"prefill": P, "decode": L, "inference": DIGITS_TEST}[r.phase]
        if r.model == "gpt2":
            assert r.calls == 6 * TINY.n_layer + 1  # every matmul offloaded, once per phase
        assert r.build_s > 0 and r.wall_s > 0


def test_gpt2_macs_equal_the_analytical_count(result):
    for r in (r for r in result.rows if r.model == "gpt2"):
        if SCHEMES[r.scheme].group_size in (0, 32, 64):  # tiny's K (64, 256) is not padded
            assert r.macs == total_macs(TINY, r.phase, r.tokens), r
        assert r.macs == gpt2_expected_macs(r.scheme, r.phase), r


def test_mlp_macs_equal_the_analytical_count(result):
    for r in (r for r in result.rows if r.model == "mlp"):
        k0, k1 = padded(DIGITS_IN, r.scheme), padded(HIDDEN, r.scheme)
        assert r.macs == r.tokens * (HIDDEN * k0 + OUTPUT * k1), r
        if r.scheme != "w4a16_group128":
            assert r.macs == DIGITS_TEST * (DIGITS_IN * HIDDEN + HIDDEN * OUTPUT)


def test_layers_are_named_and_tagged_with_their_phase(result):
    for phase, tokens in (("prefill", P), ("decode", L)):
        calls = [c for c in result.layers
                 if (c.model, c.scheme, c.accelerator, c.phase) == ("gpt2", "none", "os16", phase)]
        want = gpt2_matmuls(TINY, tokens, phase)
        assert [c.layer for c in calls] == [m.name for m in want]
        assert [(c.batch, c.m, c.n, c.k) for c in calls] == [(m.batch, m.m, m.n, m.k)
                                                             for m in want]
    mlp = [c for c in result.layers if (c.model, c.scheme, c.accelerator) == ("mlp", "none", "ws16")]
    assert [c.layer for c in mlp] == ["fc0", "fc1"] and {c.phase for c in mlp} == {"inference"}
    # Per-row sums of the per-call costs are the row's totals.
    for r in result.rows:
        calls = [c for c in result.layers
                 if (c.model, c.scheme, c.accelerator, c.phase) ==
                 (r.model, r.scheme, r.accelerator, r.phase)]
        assert sum(c.macs for c in calls) == r.macs
        assert sum(c.cycles for c in calls) == r.cycles
        assert sum(c.energy_pj for c in calls) == pytest.approx(r.energy_pj)
        assert sum(c.roofline_cycles for c in calls) == r.roofline_cycles <= r.cycles
        assert math.isclose(sum(c.weight_bytes for c in calls), r.weight_bytes)


def test_float_weight_bytes_are_the_hand_count(result):
    d, inner, v = TINY.n_embd, TINY.inner_dim, TINY.vocab_size
    gpt2 = 4 * (TINY.n_layer * (3 * d * d + d * d + inner * d + d * inner) + v * d)
    mlp = 4 * (DIGITS_IN * HIDDEN + HIDDEN * OUTPUT)
    for r in result.rows:
        if r.scheme == "none":
            assert r.weight_bytes == (gpt2 if r.model == "gpt2" else mlp), r
        else:
            assert r.weight_bytes < (gpt2 if r.model == "gpt2" else mlp) / 3, r


def test_float_scheme_error_is_zero_and_quantized_is_small(result):
    for r in result.rows:
        if r.scheme == "none":
            assert r.max_abs_error < 1e-6 and r.top1_agreement == 1.0, r
        else:
            assert 0 < r.rel_error < 0.5, r
        assert (r.accuracy is None) == (r.model == "gpt2")  # the MLP's digits have labels


def test_digits_accuracy_per_scheme(result):
    """The offloaded float32 run predicts what the numpy forward of the same weights does;
    the int8 scheme stays within 2 points of it."""
    from tenet_byoc.models.mlp import mlp_numpy

    case = mlp_case()
    data = case.setup.data
    numpy_pred = np.argmax(mlp_numpy(data.test_images, case.setup.params), axis=1)
    want = float(np.mean(numpy_pred == data.test_labels))
    rows = {(r.scheme, r.accelerator): r for r in result.rows if r.model == "mlp"}
    assert want == case.setup.test_accuracy > 0.93
    for hw in NAMES:
        assert rows["none", hw].accuracy == want
        assert abs(rows["w8a8_per_channel_per_token", hw].accuracy - want) <= 0.02
        assert rows["w4a16_group128", hw].accuracy > 0.9


def test_accelerators_change_cost_not_work(result):
    by = {(r.model, r.scheme, r.accelerator, r.phase): r for r in result.rows}
    for (model, scheme, hw, phase), r in by.items():
        if hw == "os16":
            other = by[(model, scheme, "ws16", phase)]
            assert r.macs == other.macs and r.max_abs_error == other.max_abs_error
    assert any(r.cycles != by[(r.model, r.scheme, "ws16", r.phase)].cycles
               for r in result.rows if r.accelerator == "os16")


def test_reference_without_the_float_scheme():
    res = sweep([gpt2_case("tiny", prompt_len=4, context_len=4)], ["w8a16_per_channel"],
                ["tenet_os8"], progress=False)
    assert [(r.scheme, r.accelerator, r.phase) for r in res.rows] == [
        ("w8a16_per_channel", "tenet_os8", "prefill"), ("w8a16_per_channel", "tenet_os8",
                                                        "decode")]
    assert all(0 < r.rel_error < 0.1 for r in res.rows)


def test_csv_and_json(result, tmp_path):
    paths = result.save(tmp_path)
    assert [p.name for p in paths] == ["sweep.csv", "sweep.json", "layers.csv"]
    with open(tmp_path / "sweep.csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(result.rows)
    assert int(table[0]["macs"]) == result.rows[0].macs and table[0]["accuracy"] == ""
    assert float(table[-1]["accuracy"]) == result.rows[-1].accuracy  # the MLP's
    doc = json.loads((tmp_path / "sweep.json").read_text())
    assert len(doc["rows"]) == len(result.rows) and doc["notes"] == result.notes
    assert doc["rows"][-1]["cycles"] == result.rows[-1].cycles
    with open(tmp_path / "layers.csv") as f:
        assert len(list(csv.DictReader(f))) == len(result.layers)
    assert "| gpt2 | w4a16_group128 | ws16 | decode |" in result.table("gpt2")


def _png(path) -> None:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, path


def test_plots_are_written(result, tmp_path):
    paths = save_plots(result, tmp_path)
    names = sorted(p.name for p in paths)
    assert names == sorted([
        "layers_gpt2_prefill_none_os16.png", "layers_gpt2_decode_none_os16.png",
        "layers_mlp_inference_none_os16.png", "prefill_vs_decode.png", "cost_vs_error.png",
        "energy_vs_error.png"])
    for p in paths:
        _png(p)
    one_run = [c for c in result.layers if (c.scheme, c.accelerator, c.phase) ==
               ("w4a16_group128", "ws16", "decode")]
    _png(plot_layer_breakdown(one_run, tmp_path / "a.png", metric="offchip_bytes"))
    _png(plot_prefill_decode(result.rows, tmp_path / "b.png", metric="cycles"))
    _png(plot_cost_vs_error(result.rows, tmp_path / "c.png", error="max_abs_error"))
    with pytest.raises(ValueError, match="one run"):
        plot_layer_breakdown(result.layers, tmp_path / "d.png")


def test_bad_input_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="unknown GPT-2 preset 'huge'"):
        gpt2_case("huge")
    with pytest.raises(ValueError, match="prompt_len=33"):
        gpt2_case("tiny", prompt_len=33)
    with pytest.raises(ValueError, match="context_len=32"):
        gpt2_case("tiny", prompt_len=4, context_len=32)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        gpt2_case(checkpoint=tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        mlp_case(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte"):
        mlp_case(tmp_path)
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(
        gzip.compress(b"\x00\x00\x08\x01" + b"\x00" * 12))
    with pytest.raises(ValueError, match="magic number 0x00000801"):
        mlp_case(tmp_path)
    case = gpt2_case("tiny", prompt_len=4, context_len=4)
    with pytest.raises(ValueError, match="unknown quantization scheme 'w2'"):
        sweep([case], ["w2"], ["os16"], progress=False)
    with pytest.raises(ValueError, match="unknown accelerator preset 'tpu'"):
        sweep([case], ["none"], ["tpu"], progress=False)
    with pytest.raises(ValueError, match="distinct"):
        sweep([case], ["none"], ["os16", "os16"], progress=False)
    assert np.asarray(case.ids).max() < TINY.vocab_size


def _write_idx(path, magic: int, array: np.ndarray) -> None:
    head = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in array.shape)
    path.write_bytes(gzip.compress(head + array.astype(np.uint8).tobytes()))


def test_mlp_accuracy_with_fashion_mnist_files(tmp_path):
    """IDX files in FashionMNIST's layout (made-up, learnable images) give an accuracy."""
    rng = np.random.default_rng(1)
    for split, n in (("train", 600), ("t10k", 100)):
        labels = rng.integers(0, 10, n)
        images = rng.integers(0, 60, (n, 28, 28))
        for c in range(10):  # a bright row per class: easy to learn
            images[labels == c, 2 * c + 4, :] = 250
        _write_idx(tmp_path / f"{split}-images-idx3-ubyte.gz", 0x803, images)
        _write_idx(tmp_path / f"{split}-labels-idx1-ubyte.gz", 0x801, labels)
    case = mlp_case(tmp_path, epochs=3)
    assert case.setup.data.name == "FashionMNIST" and case.setup.data.inputs == 784
    res = sweep([case], ["none", "w8a8_per_tensor"], ["os16"], progress=False)
    float_row, int8_row = res.rows
    assert float_row.tokens == 100 and float_row.accuracy == pytest.approx(
        case.setup.test_accuracy)  # the tenet build's accuracy is numpy's
    assert float_row.accuracy > 0.9 and int8_row.accuracy > 0.85


def test_decode_on_the_prefill_phases_cache_equals_a_fresh_prefills():
    # With prompt_len == context_len the decode phase takes the prefill phase's cache; the
    # reference is the decode step on a cache made by a separate, uncharged prefill.
    import tvm
    from tvm import relax

    from tenet_byoc.experiments.cases import run_case
    from tenet_byoc.partition import build

    case = gpt2_case("tiny", prompt_len=6, context_len=6)
    vm = relax.VirtualMachine(build(case.module(), accelerator="os16"), tvm.cpu())
    reused = run_case(case, vm)["decode"].output
    func, args = case.inputs(vm, "decode")  # no earlier phases: a fresh prefill
    fresh = case.output("decode", vm[func](*args))
    np.testing.assert_array_equal(reused, fresh)
