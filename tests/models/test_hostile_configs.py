"""Configs and checkpoints a user gets wrong, or an attacker writes: each refused with a message
naming the file and the field or tensor (issue 24's catalogue for models), never a
RecursionError, a hang or a silently wrong model."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from gpt2_testing import TINY_HF_CONFIG
from llama_testing import TINY_LLAMA, make_llama_weights, numpy_llama_logits, write_checkpoint
from safetensors.numpy import save_file

import tenet_byoc
from tenet_byoc_cli import main
from tenet_byoc.models import from_pretrained
from tenet_byoc.models.checkpoint import CheckpointError
from tenet_byoc.models.configs import resolve_config
from tenet_byoc.models.gpt2 import GPT2Config
from tenet_byoc.models.llama import MAX_LAYERS, LlamaConfig, load_checkpoint

DEEP = 100_000  # nesting depth of the hostile JSON documents


def _config_file(tmp_path, values) -> str:
    path = tmp_path / "config.json"
    path.write_text(values if isinstance(values, str) else json.dumps(values))
    return str(path)


def _not_built(mod):
    pytest.fail("a model was built")


def test_zero_key_value_heads_is_refused_not_read_as_absent(tmp_path):
    # Absent means one key/value head per query head; 0 is a mistake, named as such.
    assert LlamaConfig.from_hf_dict({**TINY_LLAMA, "num_key_value_heads": None}
                                    ).num_key_value_heads == TINY_LLAMA["num_attention_heads"]
    path = _config_file(tmp_path, {**TINY_LLAMA, "num_key_value_heads": 0})
    with pytest.raises(ValueError, match=r"config.json': LlamaConfig.num_key_value_heads=0 must "
                                         r"be in \[1, 16777216\]"):
        resolve_config(path)


def test_layer_count_above_the_bound_is_refused_when_the_config_is_read(tmp_path):
    path = _config_file(tmp_path, {**TINY_LLAMA, "num_hidden_layers": 2**24})
    message = (rf"config.json': LlamaConfig.num_hidden_layers=16777216 is above the limit "
               rf"{MAX_LAYERS}")
    with pytest.raises(ValueError, match=message):
        resolve_config(path)
    with pytest.raises(ValueError, match=message):
        tenet_byoc.estimate(path)  # before a single GEMM is listed
    # The bound itself is accepted.
    bound = LlamaConfig.from_hf_dict({**TINY_LLAMA, "num_hidden_layers": MAX_LAYERS})
    assert bound.num_hidden_layers == MAX_LAYERS
    # GPT-2 has the same rule, for a config.json and a config made in Python.
    with pytest.raises(ValueError, match=r"GPT2Config.n_layer=16777216 is above the limit 1024"):
        GPT2Config(n_layer=2**24, n_embd=64, n_head=4)
    path = _config_file(tmp_path, {**TINY_HF_CONFIG, "n_layer": 2**24})
    with pytest.raises(ValueError, match=r"config.json': config.json n_layer=16777216 is above "
                                         r"the limit 1024"):
        tenet_byoc.estimate(path)


def test_deeply_nested_config_names_the_file(tmp_path):
    path = _config_file(tmp_path, '{"a":' * DEEP + "1" + "}" * DEEP)
    with pytest.raises(CheckpointError, match=r"config.json' is nested too deeply"):
        resolve_config(path)
    with pytest.raises(CheckpointError, match=r"config.json' is nested too deeply"):
        from_pretrained(tmp_path, build=_not_built)


def test_deeply_nested_safetensors_header_names_the_file(tmp_path):
    folder = write_checkpoint(tmp_path / "ckpt", TINY_LLAMA, {})
    header = ("[" * DEEP + "]" * DEEP).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    with pytest.raises(CheckpointError, match=r"model.safetensors' has a corrupt safetensors "
                                              r"header: it is nested too deeply"):
        from_pretrained(folder, build=_not_built)


@pytest.mark.parametrize(
    ("values", "field"),
    [({**TINY_LLAMA, "hidden_size": "96"}, r"config.json hidden_size='96' must be an integer"),
     ({**TINY_HF_CONFIG, "n_embd": "64"}, r"GPT2Config.n_embd='64' must be a positive integer")],
    ids=["llama", "gpt2"],
)
def test_a_count_written_as_a_string_names_field_and_file(tmp_path, capsys, values, field):
    path = _config_file(tmp_path, values)
    with pytest.raises(ValueError, match=rf"config.json': {field}"):
        resolve_config(path)
    with pytest.raises(ValueError, match=rf"config.json': {field}"):
        from_pretrained(tmp_path, build=_not_built)
    # The estimate command: one line and exit code 2, not a TypeError traceback.
    with pytest.raises(SystemExit) as exc:
        main(["estimate", "--model", path])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "config.json'" in err and field.split("=")[0].split(" ")[-1] in err
    assert "Traceback" not in err


def test_weights_file_instead_of_the_folder_says_to_pass_the_folder(tmp_path):
    folder = write_checkpoint(tmp_path / "ckpt", TINY_LLAMA, make_llama_weights(TINY_LLAMA))
    weights = folder / "model.safetensors"
    with pytest.raises(NotADirectoryError, match=r"model.safetensors' is a file; from_pretrained "
                                                 r"takes the checkpoint folder"):
        from_pretrained(weights, build=_not_built)
    with pytest.raises(CheckpointError, match=r"model.safetensors' is a weights file; pass the "
                                              r"checkpoint folder"):
        resolve_config(weights)


def test_float64_checkpoint_is_narrowed_to_float32(tmp_path):
    weights = make_llama_weights(TINY_LLAMA)
    wide = {name: (value.astype(np.float64) * (1 + 1e-12)) for name, value in weights.items()}
    folder = write_checkpoint(tmp_path / "f64", TINY_LLAMA, {})
    save_file(wide, str(folder / "model.safetensors"))
    _, params = load_checkpoint(folder)
    for name, value in wide.items():
        key = name.removeprefix("model.")
        assert params[key].dtype == np.float32
        np.testing.assert_array_equal(params[key], value.astype(np.float32))
    runner = from_pretrained(folder)
    expected = numpy_llama_logits(weights, TINY_LLAMA, [3, 1, 4])
    np.testing.assert_allclose(runner.prefill([3, 1, 4])[0], expected, rtol=0, atol=1e-4)


def test_missing_head_is_named_as_hugging_face_writes_it(tmp_path):
    weights = make_llama_weights(TINY_LLAMA)
    assert "lm_head.weight" in weights  # untied: HF writes it without the "model." prefix
    del weights["lm_head.weight"]
    folder = write_checkpoint(tmp_path / "ckpt", TINY_LLAMA, weights)
    with pytest.raises(KeyError, match=r"lacks tensor\(s\) 'lm_head.weight' \(expected shape "
                                       r"\[101, 64\]\)") as err:
        from_pretrained(folder, build=_not_built)
    assert "model.lm_head" not in str(err.value)


@pytest.mark.parametrize(("typed", "meant"),
                         [("llama3-8b", "llama-3-8b"), ("GPT2-XL", "gpt2-xl"),
                          ("mistral7b", "mistral-7b")])
def test_unknown_model_name_suggests_the_near_one(typed, meant):
    with pytest.raises(ValueError, match=rf"model '{typed}' is neither .* \(did you mean "
                                         rf"'{meant}'\?\)"):
        resolve_config(typed)


def test_unknown_model_type_suggests_the_near_one(tmp_path):
    path = _config_file(tmp_path, {**TINY_LLAMA, "model_type": "Qwen-2"})
    with pytest.raises(ValueError, match=r"config.json': model_type='Qwen-2' is not supported "
                                         r"\(did you mean 'qwen2'\?\); known: \['gpt2', "):
        resolve_config(path)
