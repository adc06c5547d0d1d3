"""DRAM traffic of ZigZag 3.9's chosen mapping, expressed as our tiles, equals its own (5%).

ZigZag (zigzag-dse 3.9.1, needs six) searches the mapping of each GEMM on an os16 equivalent
(zigzag_ref.py); we take the loops it placed above the buffer as our TileMapping and compare
DRAM elements per operand. benchmarks/memory_zigzag.py prints the whole GPT-2 small table.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("six", reason="zigzag-dse needs six; pip install zigzag-dse==3.9.1 six")
pytest.importorskip("zigzag", reason="zigzag-dse missing; pip install zigzag-dse==3.9.1 six")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
memory_zigzag = pytest.importorskip("memory_zigzag")


def _check(M, N, K, *config):
    r = memory_zigzag.compare(M, N, K, *config)
    if not r["exact_order"]:
        pytest.skip(f"ZigZag split a dimension's loops around another's ({r['zigzag'].dram_loops}):"
                    " outside our three-loop tile space")
    for key in ("a", "b", "cw", "cr"):
        ours, theirs = r[key]
        assert abs(ours - theirs) <= 0.05 * theirs, (key, ours, theirs, r["mapping"])
    # The comparison means something only if ZigZag moved the compulsory data at least.
    assert r["a"][1] >= M * K and r["b"][1] >= K * N and r["cw"][1] >= M * N


@pytest.mark.parametrize("M,N,K", [(1, 129, 64), (1, 768, 3072)])
def test_traffic_agrees_with_zigzag(M, N, K):
    _check(M, N, K)


@pytest.mark.slow
@pytest.mark.parametrize("name,M,N,K", memory_zigzag.GEMMS, ids=[g[0] for g in memory_zigzag.GEMMS])
def test_traffic_agrees_with_zigzag_gpt2(name, M, N, K):
    _check(M, N, K)


@pytest.mark.slow
@pytest.mark.parametrize("config", list(memory_zigzag.random_configurations(6, seed=2027)),
                         ids=lambda c: "-".join(map(str, c)))
def test_traffic_agrees_with_zigzag_random_configurations(config):
    _check(*config)
