"""did_you_mean against hand-picked near misses and unrelated names."""

from tenet_byoc._names import did_you_mean

SCHEMES = ["w8a8_per_tensor", "w8a8_per_channel_per_token", "w4a16_group128", "none"]
PRESETS = ["os16", "os128", "tpu_v1", "ws16"]
MODELS = ["gpt2", "llama-3-8b", "llama-3-70b", "llama-2-7b"]


def test_near_misses_are_suggested():
    assert did_you_mean("w8a8_per_chanel_per_token", SCHEMES) == (
        " (did you mean 'w8a8_per_channel_per_token'?)")
    assert did_you_mean("tpuv1", PRESETS) == " (did you mean 'tpu_v1'?)"
    assert did_you_mean("llama3-8b", MODELS) == " (did you mean 'llama-3-8b'?)"
    assert did_you_mean("OS16", PRESETS) == " (did you mean 'os16'?)"


def test_unrelated_names_get_nothing():
    assert did_you_mean("resnet50", MODELS) == ""
    assert did_you_mean(None, MODELS) == ""
    assert did_you_mean(["os16"], PRESETS) == ""
