"""A checkpoint's config.json goes through the guarded reader (tenet_byoc.documents): a FIFO,
a folder, an oversized or latin-1 file, a key written twice or a NaN is refused naming the
file and the problem, not blocked on, read as missing, or read as the last value."""

from __future__ import annotations

import json
import os

import pytest
from gpt2_testing import TINY_HF_CONFIG

import tenet_byoc
from tenet_byoc.models.checkpoint import MAX_CONFIG_BYTES, CheckpointError
from tenet_byoc.models.configs import resolve_config


def _folder(tmp_path, text: str | bytes | None):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    if text is not None:
        path = folder / "config.json"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return folder


def test_a_good_config_reads_as_written(tmp_path):
    # the reference: the values json.dumps wrote
    folder = _folder(tmp_path, json.dumps(TINY_HF_CONFIG))
    config = resolve_config(str(folder / "config.json"))
    assert (config.n_layer, config.n_embd, config.n_head) == (
        TINY_HF_CONFIG["n_layer"], TINY_HF_CONFIG["n_embd"], TINY_HF_CONFIG["n_head"])


def test_a_key_written_twice_is_refused_not_the_last_kept(tmp_path):
    text = json.dumps(TINY_HF_CONFIG)[:-1] + ', "n_layer": 1000}'
    folder = _folder(tmp_path, text)
    with pytest.raises(CheckpointError, match=r"config.json' is not a JSON object we read: "
                                              r"key 'n_layer' appears twice"):
        tenet_byoc.estimate(str(folder / "config.json"))


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_a_non_finite_number_is_refused(tmp_path, constant):
    folder = _folder(tmp_path, json.dumps(TINY_HF_CONFIG)[:-1] + f', "layer_norm_epsilon": '
                               f"{constant}}}")
    with pytest.raises(CheckpointError, match=rf"config.json'.*{constant} is not a number"):
        resolve_config(str(folder / "config.json"))


def test_an_oversized_config_is_refused_before_it_is_read(tmp_path):
    text = json.dumps(TINY_HF_CONFIG) + " " * MAX_CONFIG_BYTES
    folder = _folder(tmp_path, text)
    with pytest.raises(CheckpointError, match=rf"config.json' is {len(text):,} bytes; at most "
                                              rf"{MAX_CONFIG_BYTES:,}"):
        resolve_config(str(folder / "config.json"))


def test_latin1_config_names_the_byte(tmp_path):
    folder = _folder(tmp_path, '{"model_type": "gpt2", "name": "caf\xe9"}'.encode("latin-1"))
    with pytest.raises(CheckpointError, match=r"config.json' is not UTF-8 text \(byte 0xe9 at "
                                              r"offset 35\)"):
        resolve_config(str(folder))


def test_a_fifo_config_is_refused_not_read(tmp_path):
    folder = _folder(tmp_path, None)
    os.mkfifo(folder / "config.json")  # a reader would block for ever; it was "not found"
    with pytest.raises(CheckpointError, match=r"config.json' is a FIFO \(named pipe\), not a "
                                              r"regular file"):
        resolve_config(str(folder))


def test_a_folder_named_config_json_is_refused_as_such(tmp_path):
    folder = _folder(tmp_path, None)
    (folder / "config.json").mkdir()
    with pytest.raises(CheckpointError, match=r"config.json' is a directory, not a file"):
        resolve_config(str(folder))
