"""Models for tenet-byoc: GPT-2, Llama-family and Mixtral decoders (prefill and decode), the MLP.

:func:`from_pretrained` is the one way in for a local Hugging Face checkpoint folder.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from tvm.ir import IRModule

from .checkpoint import SINGLE_FILE, read_folder_config
from .configs import config_from_dict
from .gpt2 import GPT2Runner, load_hf_checkpoint
from .llama import LlamaConfig, LlamaRunner, load_checkpoint
from .moe import MoEConfig
from .runner import DecoderRunner

__all__ = ["from_pretrained"]


def from_pretrained(
    folder: str | os.PathLike[str],
    build: Callable[[IRModule], Any] | None = None,
    *,
    bind_params: bool = False,
    device: Any = None,
    batched: bool = False,
) -> DecoderRunner:
    """Load a local Hugging Face checkpoint and build a runner for it.

    The family is picked from ``config.json``'s ``model_type``: ``gpt2``
    (:class:`~tenet_byoc.models.gpt2.GPT2Runner`), ``llama``, ``mistral`` or ``qwen2``
    (:class:`~tenet_byoc.models.llama.LlamaRunner`), ``mixtral``
    (:class:`~tenet_byoc.models.moe_model.MoERunner`, unbatched). The config is checked, then the
    weights' headers against it, before any weight is read or anything is built.
    Nothing is downloaded.

    Parameters
    ----------
    folder : str or PathLike
        Holds ``config.json`` and ``model.safetensors`` (or, for the Llama families, a
        sharded set with ``model.safetensors.index.json``).
    build : callable, optional
        ``IRModule -> executable``, e.g. ``tenet_byoc.build`` to offload every matmul, or
        ``lambda mod: tenet_byoc.build(tenet_byoc.quantize(mod, scheme))`` with
        ``bind_params=True``. By default TVM's own CPU build.
    bind_params : bool
        Bind the weights into the module as constants (needed by ``tenet_byoc.quantize``).
    device : tvm.runtime.Device, optional
        Defaults to ``tvm.cpu()``.
    batched : bool
        Also build the batched functions (``runner.prefill_batch(prompts)``,
        ``runner.decode_batch(ids, cache)``).

    Returns
    -------
    DecoderRunner
        With ``prefill(ids) -> (logits [P, vocab], cache)``,
        ``decode(id, cache) -> (logits [vocab], cache)``, ``generate`` and ``.vm``.

    Raises
    ------
    FileNotFoundError
        If the folder, its ``config.json`` or its weights are missing (naming the file).
    NotADirectoryError
        If ``folder`` is a file (e.g. the ``model.safetensors`` inside the folder).
    ValueError
        For an unknown ``model_type``, a config this code does not implement, a corrupt
        file (naming it) or a tensor of the wrong shape (naming it).
    KeyError
        If tensors the config needs are missing (naming them).
    """
    folder = os.fspath(folder)
    if os.path.isfile(folder):
        raise NotADirectoryError(
            f"{folder!r} is a file; from_pretrained takes the checkpoint folder that holds "
            f"config.json and {SINGLE_FILE} ({os.path.dirname(folder) or '.'!r})"
        )
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"checkpoint folder {folder!r} does not exist")
    config = read_folder_config(folder, config_from_dict)
    if isinstance(config, MoEConfig):
        if batched:
            raise ValueError(
                f"{folder!r}: a mixture-of-experts model ({config.model_type}) runs unbatched "
                "(batched is not supported)"
            )
        from .moe_model import MoERunner
        from .moe_model import load_checkpoint as load_moe_checkpoint

        config, params = load_moe_checkpoint(folder, config)
        return MoERunner(config, params, build=build, device=device, bind_params=bind_params)
    load, runner = ((load_checkpoint, LlamaRunner) if isinstance(config, LlamaConfig)
                    else (load_hf_checkpoint, GPT2Runner))
    config, params = load(folder, config)
    return runner(config, params, build=build, device=device, bind_params=bind_params,
                  batched=batched)
