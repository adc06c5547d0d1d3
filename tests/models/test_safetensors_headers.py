"""Hostile safetensors headers: each refused naming the file and the tensor (safetensors'
own format rules: integer shapes and offsets, no negative dimension, no two tensors on the
same bytes), where they were read as 2.0 -> 2, "8" -> 8, true -> 1 or aliased weights."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from tenet_byoc.models.checkpoint import CheckpointError, _read_header


def _file(tmp_path, header: dict, data: bytes = bytes(64)) -> str:
    text = json.dumps(header).encode()
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return str(path)


def _entry(shape, offsets, dtype="F32"):
    return {"dtype": dtype, "shape": shape, "data_offsets": offsets}


@pytest.mark.parametrize(("entry", "message"), [
    (_entry([2.0], [0, 8]), r"shape \[2.0\] and data_offsets \[0, 8\] must be integers"),
    (_entry([True, True], [0, 4]), r"shape \[True, True\] .* must be integers"),
    (_entry([2], ["0", "8"]), r"data_offsets \['0', '8'\] must be integers"),
    (_entry([-2], [0, 8]), r"tensor 'w' has a negative dimension in its shape \[-2\]"),
    (_entry([2], [-8, 0]), r"spans bytes \[-8, 0\), which is not its size 8"),
], ids=["float", "bool", "text", "negative_dim", "negative_offset"])
def test_a_malformed_entry_is_refused_naming_the_tensor(tmp_path, entry, message):
    path = _file(tmp_path, {"w": entry})
    with pytest.raises(CheckpointError, match=message) as err:
        _read_header(path)
    assert path in str(err.value)


def test_two_tensors_on_the_same_bytes_are_refused(tmp_path):
    path = _file(tmp_path, {"a": _entry([2], [0, 8]), "b": _entry([2], [4, 12])})
    with pytest.raises(CheckpointError, match=r"tensors 'a' \[0, 8\) and 'b' \[4, 12\) overlap"):
        _read_header(path)


def test_a_file_safetensors_writes_is_read_as_it_reads_it(tmp_path):
    # the reference: safetensors' own reader on a file it wrote (an empty tensor included)
    tensors = {"a": np.arange(6, dtype=np.float32).reshape(2, 3),
               "b": np.ones((4,), dtype=np.float16), "empty": np.zeros((0, 3), np.float32)}
    path = str(tmp_path / "w.safetensors")
    save_file(tensors, path)
    infos = _read_header(path)
    ref = load_file(path)
    raw = open(path, "rb").read()
    for name, info in infos.items():
        assert info.shape == ref[name].shape
        got = np.frombuffer(raw[info.begin:info.end], dtype=ref[name].dtype).reshape(info.shape)
        assert np.array_equal(got, ref[name])
