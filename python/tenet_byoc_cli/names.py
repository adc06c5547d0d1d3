"""The names a user may type on the command line, and near-miss suggestions for them.

The lists copy the registries of :mod:`tenet_byoc` (presets, schemes, model configs, ...) so
that the command line can check a name without loading TVM; tests/cli/test_light_entry.py
checks that each equals its registry. :func:`did_you_mean` is the package's one
implementation (``tenet_byoc._names`` re-exports it).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["BUILTIN_MODELS", "CLASSIC_SCHEMES", "DEFAULT_ACCELERATORS", "DEFAULT_PRESET",
           "DSE_EXECUTORS", "DSE_RESULTS_FILE", "GPT2_CONFIGS", "MAPPING_OBJECTIVES", "PRESETS",
           "QUICK_ACCELERATORS", "QUICK_LENGTH", "QUICK_SCHEMES", "SCHEMES", "TOPOLOGIES",
           "did_you_mean"]

#: Accelerator presets, in ``tenet_byoc.accelerators.PRESETS``'s order.
PRESETS = ("os16", "ws16", "is16", "os16_mp", "os128", "ws128", "tpu_v1", "tpu_v5e", "a100",
           "h100_sxm", "h200", "tenet_os8", "tenet_ws8")
#: ``tenet_byoc.accelerators.DEFAULT_PRESET``.
DEFAULT_PRESET = "os16"
#: Quantization schemes, in ``tenet_byoc.quantization.SCHEMES``'s order.
SCHEMES = ("none", "w8a8_per_tensor", "w8a8_per_channel_per_token", "w8a16_per_channel",
           "w4a16_group32", "w4a16_group64", "w4a16_group128", "per_tensor", "per_token",
           "per_embedding", "group32", "group64", "group128", "q0f32", "q0f16", "q4f16_0",
           "q4f16_1", "q4f16_ft", "q4f16_awq", "e4m3_e4m3_f16", "smoothquant", "w4a8",
           "mxint8", "mxfp8", "mxfp4")
#: ``tenet_byoc.quantization.CLASSIC_SCHEMES``: what sweep and eval run by default.
CLASSIC_SCHEMES = SCHEMES[:7]
#: GPT-2 shapes with seeded random weights (``tenet_byoc.models.gpt2.PRESETS``).
GPT2_CONFIGS = ("tiny", "small", "medium", "large", "xl")
#: Built-in model configs of estimate and dse (``tenet_byoc.models.configs.BUILTIN``).
BUILTIN_MODELS = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "llama-2-7b", "llama-3-8b",
                  "llama-3.1-8b", "llama-3.2-1b", "llama-3-70b", "mistral-7b", "qwen2.5-0.5b",
                  "gpt-j-6b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "gpt-oss-120b",
                  "gpt-oss-20b", "gemma-2-9b", "gemma-3-4b")
#: What ``--mapping auto`` may minimise (``tenet_byoc.mapping.OBJECTIVES``).
MAPPING_OBJECTIVES = ("latency", "energy", "edp")
#: Accelerators of the default sweep (``tenet_byoc.experiments.sweep.DEFAULT_ACCELERATORS``).
DEFAULT_ACCELERATORS = ("os16", "ws16")
#: What ``sweep --quick`` runs (``tenet_byoc.experiments.sweep.QUICK``).
QUICK_SCHEMES = ("none", "w8a8_per_channel_per_token", "w4a16_group128")
QUICK_ACCELERATORS = ("os16",)
QUICK_LENGTH = 32  #: prompt and context length
#: How collectives travel between chips (``tenet_byoc.system.TOPOLOGIES``).
TOPOLOGIES = ("ring", "torus2d", "switch")
#: Where dse runs its points (``tenet_byoc.dse.explore``'s ``executor``).
DSE_EXECUTORS = ("local", "serial", "ray")
#: The file dse appends its points to (``tenet_byoc.experiments.dse_cmd.RESULTS_FILE``).
DSE_RESULTS_FILE = "points.jsonl"


def did_you_mean(value: object, choices: Iterable[str], *, limit: int = 3) -> str:
    """`` (did you mean 'a' or 'b'?)`` for the choices closest to ``value``, else ``""``.

    Case and the separators ``-``, ``_`` and ``.`` are ignored when comparing, so
    ``llama3-8b`` finds ``llama-3-8b`` and ``tpuv1`` finds ``tpu_v1``. A value of four or more
    characters is also compared with the start of each longer choice, so a long name typed in
    part and misspelt (``w8a8_per_chanel``) finds it (``w8a8_per_channel_per_token``). The
    closest come first.
    """
    if not isinstance(value, str):
        return ""

    def folded(s: str) -> str:
        return s.lower().replace("-", "").replace("_", "").replace(".", "")

    by_fold: dict[str, str] = {}
    for c in choices:
        by_fold.setdefault(folded(c), c)
    typed = folded(value)
    exact = by_fold.get(typed)
    if exact is not None:
        return f" (did you mean {exact!r}?)"
    scores: dict[str, tuple[float, float, str]] = {}
    for f, c in by_fold.items():
        whole = difflib.SequenceMatcher(None, typed, f).ratio()
        start = (difflib.SequenceMatcher(None, typed, f[:len(typed)]).ratio()
                 if len(f) > len(typed) >= 4 else 0.0)
        if whole >= 0.75 or start >= 0.85:
            # ties: the whole name's likeness, then the greater string first (as
            # difflib.get_close_matches breaks them)
            scores[c] = (max(whole, start), whole, f)
    close = sorted(scores, key=scores.__getitem__, reverse=True)[:limit]
    if not close:
        return ""
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)"
