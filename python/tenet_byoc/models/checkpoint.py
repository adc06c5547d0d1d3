"""Reading a local Hugging Face checkpoint folder: ``config.json`` and safetensors weights.

A folder holds ``config.json`` and either ``model.safetensors`` or a sharded set named by
``model.safetensors.index.json``. Headers are read and checked first (every tensor's dtype,
shape and byte range against its file's size), so a model's expected shapes can be checked
against what the files hold before anything is built or loaded; tensors are then read one
at a time and converted to float32 (float16 and bfloat16 widened exactly, float64 narrowed).
Nothing is downloaded. Errors name the file, and the tensor where there is one.

This is the one reader of checkpoints: every family describes where its weights sit
(:class:`Layout`) and calls :func:`load_family`.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "Layout",
    "TensorInfo",
    "load_family",
    "read_config",
    "read_json",
]

CONFIG_FILE = "config.json"
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"

# Bytes per element of every safetensors dtype, to check byte ranges of all tensors.
_ITEMSIZE = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2,
    "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
}
# The dtypes a model weight may have, and how to read each before widening it to float32.
_FLOATS = {"F32": "<f4", "F16": "<f2", "BF16": "<u2", "F64": "<f8"}
# A header larger than this is not a weights file's (safetensors itself caps it at 100 MB).
_MAX_HEADER_BYTES = 100_000_000
#: The largest config.json read (a model's is a few kB).
MAX_CONFIG_BYTES = 1 << 20
#: The largest safetensors index read (DeepSeek-V3's, of about 90,000 tensors, is ~9 MB).
MAX_INDEX_BYTES = 64 << 20


class CheckpointError(ValueError):
    """A checkpoint file is malformed, or does not hold what the model needs."""


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lies: its file, dtype, shape and byte range in that file."""

    file: str
    dtype: str
    shape: tuple[int, ...]
    begin: int  #: absolute byte offset in ``file``
    end: int


def read_json(path: str, what: str = "a JSON object",
              max_bytes: int = MAX_CONFIG_BYTES) -> dict[str, Any]:
    """The JSON object in the file ``path``, read through the guarded reader
    (:func:`tenet_byoc.documents.read_text`: a regular file of at most ``max_bytes``, UTF-8);
    CheckpointError naming the file otherwise.

    A document nested too deeply for Python's parser (a hostile file), a key written twice
    or a NaN / Infinity is refused the same way, not with a RecursionError or the last value.
    """
    from ..documents import read_text

    try:
        text = read_text(path, "checkpoint file", max_bytes)
    except ValueError as err:  # a FIFO, a directory, too large, not UTF-8
        raise CheckpointError(str(err)) from None
    return _json_object(text, path, what)


def _json_object(text: str | bytes, path: str, what: str, label: str = "") -> dict[str, Any]:
    # ``label`` goes between the file's name and the reason ("has a corrupt header: ").
    from ..documents import _json_constant, _json_pairs

    where = f"{path!r} {label}"
    try:
        values = json.loads(text, object_pairs_hook=_json_pairs, parse_constant=_json_constant)
    except json.JSONDecodeError as err:
        raise CheckpointError(
            f"{where}is not valid JSON: {err.msg} at line {err.lineno} column {err.colno}"
        ) from None
    except UnicodeDecodeError as err:
        raise CheckpointError(f"{where}is not UTF-8 text (byte at offset {err.start})") from None
    except RecursionError:
        raise CheckpointError(
            f"{where}is nested too deeply to be {what} (Python's JSON parser gave up)"
        ) from None
    except ValueError as err:  # a key twice, NaN / Infinity (documents' hooks)
        raise CheckpointError(f"{where}is not {what} we read: {err}") from None
    if not isinstance(values, dict):
        raise CheckpointError(f"{where}must hold {what}, got {type(values).__name__}")
    return values


def read_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Return the contents of a ``config.json``: the file itself, or the one in a folder.

    FileNotFoundError if the path, or the folder's ``config.json``, does not exist;
    CheckpointError if the file is not JSON, or not a JSON object, or is a weights file
    (the message says to pass the folder).
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, CONFIG_FILE)
        if not os.path.lexists(path):  # a FIFO or a folder of that name: read_json says so
            raise FileNotFoundError(f"{path!r} not found: a checkpoint folder needs a config.json")
    elif not os.path.lexists(path):
        raise FileNotFoundError(f"checkpoint folder or config file {path!r} does not exist")
    elif path.endswith(".safetensors") or os.path.basename(path) == INDEX_FILE:
        raise CheckpointError(
            f"{path!r} is a weights file; pass the checkpoint folder that holds it and its "
            f"config.json ({os.path.dirname(path) or '.'!r})"
        )
    return read_json(path, "a JSON object")


def read_folder_config(path: str, from_hf_dict: Callable[..., Any],
                       error: type[Exception] | None = None) -> Any:
    """``from_hf_dict(values, name=the folder's name)`` of a folder's ``config.json`` or of
    a config file (:func:`read_config`), its errors (TypeError, ValueError) prefixed with
    the file's path and raised as ``error`` (by default as they are)."""
    values = read_config(path)  # its errors name the file
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    try:
        return from_hf_dict(values, name=os.path.basename(os.path.normpath(folder)) if folder
                            else "custom")
    except (TypeError, ValueError) as err:
        file = os.path.join(path, CONFIG_FILE) if folder == path else path
        raise (error or type(err))(f"{file!r}: {err}") from None


def _read_header(path: str) -> dict[str, TensorInfo]:
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise CheckpointError(f"{path!r} is not a safetensors file: {size} bytes, too short")
        (n,) = struct.unpack("<Q", head)
        if n > min(size - 8, _MAX_HEADER_BYTES):
            raise CheckpointError(
                f"{path!r} is not a safetensors file or is truncated: its header claims "
                f"{n} bytes, the file has {size}"
            )
        raw = f.read(n)
    header = _json_object(raw, path, "a JSON object", "has a corrupt safetensors header: it ")
    data_start = 8 + n
    out: dict[str, TensorInfo] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{path!r}: header entry of {name!r} is malformed") from None
        # JSON integers only, as safetensors writes them: 2.0, "8" or true are not sizes
        if not isinstance(shape, list) or not all(
                isinstance(d, int) and not isinstance(d, bool) for d in (*shape, begin, end)):
            raise CheckpointError(
                f"{path!r}: header entry of {name!r} is malformed: shape {shape!r} and "
                f"data_offsets {[begin, end]!r} must be integers")
        shape = tuple(shape)
        if not isinstance(dtype, str) or dtype not in _ITEMSIZE:
            raise CheckpointError(f"{path!r}: tensor {name!r} has unknown dtype {dtype!r}")
        if min(shape, default=0) < 0:
            raise CheckpointError(f"{path!r}: tensor {name!r} has a negative dimension in its "
                                  f"shape {list(shape)}")
        nbytes = math.prod(shape) * _ITEMSIZE[dtype]
        if begin < 0 or end - begin != nbytes:
            raise CheckpointError(
                f"{path!r}: tensor {name!r} of shape {list(shape)} {dtype} spans bytes "
                f"[{begin}, {end}), which is not its size {nbytes}"
            )
        if data_start + end > size:
            raise CheckpointError(
                f"{path!r} is truncated: tensor {name!r} ends at byte {data_start + end}, "
                f"the file has {size}"
            )
        out[name] = TensorInfo(path, dtype, shape, data_start + begin, data_start + end)
    # two tensors on the same bytes (safetensors' own reader refuses it): one weight would
    # silently be read as part of another
    spans = sorted((t.begin, t.end, n) for n, t in out.items() if t.end > t.begin)
    for (_, end_a, a), (begin_b, _, b) in itertools.pairwise(spans):
        if begin_b < end_a:
            raise CheckpointError(
                f"{path!r}: tensors {a!r} [{out[a].begin - data_start}, "
                f"{end_a - data_start}) and {b!r} [{begin_b - data_start}, "
                f"{out[b].end - data_start}) overlap")
    return out


class Checkpoint:
    """The safetensors weights of a checkpoint folder (``model.safetensors``, or
    ``model.safetensors.index.json`` and its shards), headers read, data not yet:
    ``tensors``, every stored tensor's :class:`TensorInfo` by its name, and ``source``, the
    file the names come from.

    Raises
    ------
    FileNotFoundError
        If neither weights file exists, or a shard the index names is missing.
    CheckpointError
        If a file is malformed or truncated (the message names it), or the index names a
        tensor its shard does not hold.
    """

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = os.fspath(folder)
        index = os.path.join(self.folder, INDEX_FILE)
        single = os.path.join(self.folder, SINGLE_FILE)
        if os.path.isfile(index):
            self.source = index
            self.tensors = self._read_sharded(index)
        elif os.path.isfile(single):
            self.source = single
            self.tensors = _read_header(single)
        else:
            raise FileNotFoundError(
                f"checkpoint folder {self.folder!r} has neither {SINGLE_FILE} nor {INDEX_FILE}"
            )

    def _read_sharded(self, index: str) -> dict[str, TensorInfo]:
        try:
            weight_map = read_json(index, "a safetensors index", MAX_INDEX_BYTES)["weight_map"]
            files = {str(name): str(file) for name, file in weight_map.items()}
        except (CheckpointError, KeyError, TypeError, AttributeError):
            raise CheckpointError(
                f"{index!r} is not a safetensors index (a JSON object with a 'weight_map')"
            ) from None
        headers: dict[str, dict[str, TensorInfo]] = {}
        for file in sorted(set(files.values())):
            path = os.path.join(self.folder, file)
            if os.path.basename(file) != file or not os.path.isfile(path):
                raise FileNotFoundError(f"shard {path!r} named in {index!r} not found")
            headers[file] = _read_header(path)
        out = {}
        for name, file in files.items():
            if name not in headers[file]:
                raise CheckpointError(f"{index!r} puts tensor {name!r} in {file!r}, which lacks it")
            out[name] = headers[file][name]
        return out

    def check_shapes(
        self, model: str, expected: Iterable[tuple[str, tuple[int, ...]]], note: str = ""
    ) -> None:
        """Check that every expected tensor is stored with its shape, before reading any.

        ``expected`` may be a lazy iterable: the check stops at the first wrong shape or the
        fifth missing name, so a config claiming absurd sizes fails fast.

        Raises
        ------
        KeyError
            Naming the (first five) missing tensors, followed by ``note``.
        CheckpointError
            If a tensor's stored shape differs; naming it, its file and both shapes.
        """
        missing: list[str] = []
        for name, shape in expected:
            info = self.tensors.get(name)
            if info is None:
                missing.append(f"{name!r} (expected shape {list(shape)})")
                if len(missing) == 5:
                    break
            elif info.shape != tuple(shape):
                raise CheckpointError(
                    f"{model} checkpoint tensor {name!r} in {info.file!r} has shape "
                    f"{list(info.shape)}, expected {list(shape)}"
                )
            elif info.dtype not in _FLOATS:
                raise CheckpointError(
                    f"{model} checkpoint tensor {name!r} in {info.file!r} has dtype "
                    f"{info.dtype}; readable: {sorted(_FLOATS)} (quantized checkpoints are not)"
                )
        if missing:
            raise KeyError(
                f"{model} checkpoint {self.folder!r} lacks tensor(s) "
                + ", ".join(missing)
                + (" and maybe more" if len(missing) == 5 else "")
                + (f"; {note}" if note else "")
            )

    def read(self, name: str) -> np.ndarray:
        """Read one tensor as a float32 array (float16 and bfloat16 widened exactly)."""
        info = self.tensors[name]
        if info.dtype not in _FLOATS:
            raise CheckpointError(f"{info.file!r}: tensor {name!r} has dtype {info.dtype}")
        count = (info.end - info.begin) // _ITEMSIZE[info.dtype]
        with open(info.file, "rb") as f:
            f.seek(info.begin)
            raw = np.fromfile(f, dtype=_FLOATS[info.dtype], count=count)
        if raw.size != count:
            raise CheckpointError(f"{info.file!r} is truncated inside tensor {name!r}")
        if info.dtype == "BF16":
            # bfloat16 is the top half of a float32.
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        return raw.astype(np.float32, copy=False).reshape(info.shape)


@dataclass(frozen=True)
class Layout:
    """Where a family's weights sit in its Hugging Face checkpoints.

    ``prefix`` is what Hugging Face puts before the model's own parameter names
    (``transformer.``, ``model.``); a checkpoint may also store them without it.
    """

    model: str  #: the family's name in messages (``GPT-2``, ``llama``, ...)
    prefix: str
    layer_prefix: str  #: the parameter names of layer ``i`` begin with ``layer_prefix + f"{i}."``
    layer_field: str  #: the config field that counts the layers, for messages
    transposed: tuple[str, ...] = ()  #: suffixes stored ``[in, out]`` (Conv1D), read transposed
    unprefixed: tuple[str, ...] = ()  #: names written without ``prefix`` (``lm_head.weight``)

    def stored_name(self, name: str, tensors: dict[str, TensorInfo]) -> str:
        """The name ``name`` has in ``tensors``: the one Hugging Face writes if absent."""
        if name in self.unprefixed:
            return name
        full = self.prefix + name
        return name if full not in tensors and name in tensors else full


def load_family(
    folder: str | os.PathLike[str],
    config: Any,
    from_hf_dict: Callable[..., Any],
    layout: Callable[[Any], Layout],
    expected: Callable[[Any], Iterable[tuple[str, tuple[int, ...]]]],
    note: Callable[[Any], str] = lambda config: "",
) -> tuple[Any, dict[str, np.ndarray]]:
    """Read a local Hugging Face checkpoint folder of one family: its config and float32
    weights, the weights checked against the model before any is read.

    Without ``config``, ``from_hf_dict(values, name=folder's name)`` reads ``config.json``
    (its errors prefixed with the file's path). The weights sit where ``where =
    layout(config)`` says: the stored layers must be exactly ``0 .. n - 1`` (``n`` the
    config's ``where.layer_field``), then every tensor of ``expected(config)`` (the model's
    names without ``where.prefix``, and shapes; walked only once the layer count matches
    the files) must be stored with its shape and a float dtype, both checked from the
    headers. Returns the config and the weights by the model's names in ``expected``'s
    order, transposed where ``where.transposed`` says; ``note(config)`` is added to a
    missing-tensor message.

    Raises
    ------
    FileNotFoundError
        If the folder, ``config.json`` (when ``config`` is not given), the weights file or
        a shard is missing (naming it).
    KeyError
        Naming the missing tensors (as Hugging Face names them) and their shapes.
    CheckpointError
        If a file is corrupt or truncated, the layer count differs, or a tensor has the
        wrong shape or dtype (naming it).
    """
    folder = os.fspath(folder)
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"checkpoint folder {folder!r} does not exist")
    if config is None:
        config = read_folder_config(folder, from_hf_dict)
    where = layout(config)
    layers = getattr(config, where.layer_field)
    wanted, said = expected(config), note(config)
    ckpt = Checkpoint(folder)
    # the layer indices the stored names hold, with or without the family's prefix
    rests = (name.removeprefix(where.prefix) for name in ckpt.tensors)
    indices = (rest.removeprefix(where.layer_prefix).split(".", 1)[0] for rest in rests
               if rest.startswith(where.layer_prefix))
    held = {int(index) for index in indices if index.isdigit()}
    if len(held) != layers or (held and max(held) != layers - 1):
        span = f"{where.layer_prefix}0 - {where.layer_prefix}{max(held)}" if held else "none"
        raise CheckpointError(
            f"{ckpt.source!r} holds {len(held)} layers ({span}); the config has "
            f"{where.layer_field}={layers}"
        )

    # The layer count matches the files, so the list is no longer than what they hold.
    wanted = [(name, tuple(shape)) for name, shape in wanted]
    stored = [
        (where.stored_name(name, ckpt.tensors),
         shape[::-1] if where.transposed and name.endswith(where.transposed) else shape)
        for name, shape in wanted
    ]
    held_note = f"the files hold {len(ckpt.tensors)}"
    ckpt.check_shapes(where.model, stored, f"{said}, {held_note}" if said else held_note)
    out = {}
    for (name, _), (stored_name, _) in zip(wanted, stored, strict=True):
        value = ckpt.read(stored_name)
        out[name] = np.ascontiguousarray(value.T) if value.ndim == 2 and (
            where.transposed and name.endswith(where.transposed)) else value
    return config, out
