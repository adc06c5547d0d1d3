"""Reading a local Hugging Face checkpoint folder: ``config.json`` and safetensors weights.

A folder holds ``config.json`` and either ``model.safetensors`` or a sharded set named by
``model.safetensors.index.json``. Headers are read and checked first (every tensor's dtype,
shape and byte range against its file's size), so a model's expected shapes can be checked
against what the files hold before anything is built or loaded; tensors are then read one
at a time and converted to float32 (float16 and bfloat16 widened exactly). Nothing is
downloaded. Errors name the file, and the tensor where there is one.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "TensorInfo",
    "read_config",
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


def read_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Return the contents of a ``config.json``: the file itself, or the one in a folder.

    Raises
    ------
    FileNotFoundError
        If the path, or the folder's ``config.json``, does not exist.
    CheckpointError
        If the file is not JSON, or not a JSON object.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, CONFIG_FILE)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path!r} not found: a checkpoint folder needs a config.json")
    elif not os.path.isfile(path):
        raise FileNotFoundError(f"checkpoint folder or config file {path!r} does not exist")
    try:
        with open(path, encoding="utf-8") as f:
            values = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path!r} is not valid JSON: {err}") from None
    if not isinstance(values, dict):
        raise CheckpointError(f"{path!r} must hold a JSON object, got {type(values).__name__}")
    return values


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
    try:
        header = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path!r} has a corrupt safetensors header: {err}") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path!r} has a corrupt safetensors header (not a JSON object)")
    data_start = 8 + n
    out: dict[str, TensorInfo] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
            shape = tuple(int(d) for d in shape)
            begin, end = int(begin), int(end)
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{path!r}: header entry of {name!r} is malformed") from None
        if not isinstance(dtype, str) or dtype not in _ITEMSIZE:
            raise CheckpointError(f"{path!r}: tensor {name!r} has unknown dtype {dtype!r}")
        nbytes = math.prod(shape) * _ITEMSIZE[dtype]
        if min(shape, default=0) < 0 or begin < 0 or end - begin != nbytes:
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
    return out


class Checkpoint:
    """The safetensors weights of a checkpoint folder, headers read, data not yet.

    Parameters
    ----------
    folder : str or PathLike
        Holds ``model.safetensors``, or ``model.safetensors.index.json`` and its shards.

    Attributes
    ----------
    tensors : dict of str to TensorInfo
        Every stored tensor by its name in the checkpoint.

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
            self.tensors = self._read_sharded(index)
        elif os.path.isfile(single):
            self.tensors = _read_header(single)
        else:
            raise FileNotFoundError(
                f"checkpoint folder {self.folder!r} has neither {SINGLE_FILE} nor {INDEX_FILE}"
            )

    def _read_sharded(self, index: str) -> dict[str, TensorInfo]:
        try:
            with open(index, encoding="utf-8") as f:
                weight_map = json.load(f)["weight_map"]
            files = {str(name): str(file) for name, file in weight_map.items()}
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AttributeError):
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
                missing.append(name)
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
                + ", ".join(repr(m) for m in missing)
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

    def read_all(self, names: Iterable[str]) -> dict[str, np.ndarray]:
        """Read the named tensors, in that order, as float32 arrays."""
        return {name: self.read(name) for name in names}
