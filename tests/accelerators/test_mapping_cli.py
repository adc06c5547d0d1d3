"""The command line's accelerator options --mapping and --objective, run in-process.

Reference for the printed mappings: ``cm.search_mapping`` called directly on os16's parts with
the space "auto" declares (os, ws, is; streamed dimension also in 1 and 4 array edges).
"""

from __future__ import annotations

import pytest

from tenet_byoc import cost_model as cm
from tenet_byoc_cli import main
from tenet_byoc.accelerators import preset

TINY = ["--gpt2-config", "tiny", "--prompt-len", "6", "--context-len", "7", "--no-progress",
        "--repeats", "1"]


def _mapping_rows(out: str, title: str) -> list[list[str]]:
    lines = out[out.index(title):].splitlines()[1:]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines
            if line.startswith("|")]
    header, body = rows[0], rows[2:]
    assert header == ["layer", "batch", "M", "N", "K", "mapping", "cycles", "/ roofline"]
    end = next((i for i, r in enumerate(body) if len(r) != len(header)), len(body))
    return body[:end]


def test_run_with_mapping_auto_prints_the_searched_mappings(capsys):
    assert main(["run", *TINY, "--mapping", "auto", "--objective", "latency"]) == 0
    out = capsys.readouterr().out
    rows = _mapping_rows(out, "gpt2 prefill on os16: mappings chosen by the search (latency)")
    assert len(rows) == 6 * 2 + 1  # tiny GPT-2: 2 layers of 6 GEMMs, and the head
    acc = preset("os16")
    for layer, batch, m, n, k, mapping, cycles, _ in rows:
        best = cm.MappingSearch(
            acc.hardware, acc.memory, precision=acc.precision, stream_tiles=(16, 64)
        ).best(
            # Activations stay on chip between calls; the head's logits leave (the plan's rule).
            cm.GemmCall(
                m=int(m), n=int(n), k=int(k), batch=int(batch), bits_a=32, bits_b=32, bits_c=32,
                a_on_chip=True, c_on_chip=layer != "lm_head",
            )
        )
        assert mapping == best.mapping.replace("|", "/"), layer
        assert int(cycles.replace(",", "")) == best.metrics.cycles, layer


def test_run_without_mapping_prints_no_mapping_table(capsys):
    assert main(["run", *TINY]) == 0
    assert "mappings chosen by the search" not in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["run", "--mapping", "default", "--objective", "energy"],
     "objective='energy' applies only with mapping='auto'"),
    (["run", "--mapping", "search"], "invalid choice: 'search'"),
    (["sweep", "--objective", "speed"], "invalid choice: 'speed'"),
])
def test_bad_mapping_options_exit_2_naming_the_problem(argv, message, capsys):
    try:
        code = main([*argv, "--no-progress"])
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
