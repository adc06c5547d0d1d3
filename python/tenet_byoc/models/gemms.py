"""Every GEMM one prefill or decode call performs, from a model's config alone.

No weights are allocated and nothing is built, so the list is as cheap for Llama-3-70B as for
GPT-2 tiny; it is the same list, in the same order, as the ledger of a real offloaded run
(the tests check both against the exported module and a run's ledger).
"""

from __future__ import annotations

from typing import Any

from .decoder import PHASES, MatmulShape
from .vector_ops import decoder_calls

__all__ = ["PHASES", "Gemm", "gpt2_matmuls", "llama_matmuls", "model_gemms", "total_macs"]

#: One GEMM of a call: a :class:`~tenet_byoc.models.decoder.MatmulShape` (its ``weight``
#: says which operand is a weight).
Gemm = MatmulShape


def model_gemms(config: Any, phase: str, tokens: int) -> list[Gemm]:
    """List the GEMMs of one call, in execution order.

    Parameters
    ----------
    config : GPT2Config or LlamaConfig
        The model's shape (e.g. from :func:`tenet_byoc.models.configs.resolve_config`).
    phase : str
        ``"prefill"`` or ``"decode"``.
    tokens : int
        For ``prefill`` the prompt length P; for ``decode`` the context length L, the
        tokens already in the cache (the new token attends to L + 1 keys).

    Returns
    -------
    list of Gemm
        Linear layers with their weight as the rhs ``[k, n]`` (stored ``[n, k]``), the
        attention GEMMs with ``weight=None`` (for Llama: batch = key/value heads, rows =
        query heads per group x tokens), and the head last.
    """
    return decoder_calls(config, phase, tokens).gemms


def total_macs(config: Any, phase: str, tokens: int) -> int:
    """Multiply-accumulates of all GEMMs of one call (see :func:`model_gemms`)."""
    return sum(g.macs for g in model_gemms(config, phase, tokens))


def gpt2_matmuls(config: Any, seq_len: int, phase: str = "prefill") -> list[Gemm]:
    """:func:`model_gemms` with the arguments in the models' order: the GEMMs of one prefill
    of a prompt of ``seq_len`` tokens, or of one decode step after ``seq_len`` cached ones;
    per layer GPT-2's ``c_attn``, ``attn.qk``, ``attn.pv``, ``attn.c_proj``, ``mlp.c_fc``,
    ``mlp.c_proj`` (Llama's ``q_proj``, ``k_proj``, ``v_proj``, ``attn.qk``, ``attn.pv``,
    ``o_proj``, ``gate_proj``, ``up_proj``, ``down_proj``), then ``lm_head``."""
    return model_gemms(config, phase, seq_len)


#: The same list for a Llama-family config.
llama_matmuls = gpt2_matmuls
