"""The MLP: IDX reader, the digits split, numpy trainer, and the Relax module against numpy."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relax

from tenet_byoc.experiments.data import (
    DIGITS_TEST_SIZE,
    load_digits,
    load_fashion_mnist,
    prepare_mlp,
    read_idx,
    train_mlp,
)
from tenet_byoc.models.mlp import (
    PARAM_SHAPES,
    mlp_accuracy,
    mlp_inputs,
    mlp_module,
    mlp_numpy,
    param_shapes,
    random_mlp_params,
)


def _idx_bytes(array: np.ndarray, magic: int | None = None) -> bytes:
    magic = (0x0800 | array.ndim) if magic is None else magic
    header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in array.shape)
    return header + array.astype(np.uint8).tobytes()


def _write(path: Path, data: bytes, gz: bool) -> Path:
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def _write_dataset(folder: Path, gz: bool, n_train: int = 6, n_test: int = 4, seed: int = 0):
    rng = np.random.default_rng(seed)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28)),
        "train-labels-idx1-ubyte": rng.integers(0, 10, n_train),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28)),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, n_test),
    }
    folder.mkdir(parents=True, exist_ok=True)
    for name, array in arrays.items():
        _write(folder / name, _idx_bytes(array), gz)
    return arrays


@pytest.mark.parametrize("gz", [False, True])
def test_read_dataset(tmp_path, gz):
    arrays = _write_dataset(tmp_path, gz)
    data = load_fashion_mnist(tmp_path)
    assert data.name == "FashionMNIST" and data.inputs == 784
    assert data.train_images.shape == (6, 784) and data.train_images.dtype == np.float32
    np.testing.assert_allclose(
        data.train_images, arrays["train-images-idx3-ubyte"].reshape(6, 784) / 255.0, atol=1e-7
    )
    np.testing.assert_array_equal(data.test_labels, arrays["t10k-labels-idx1-ubyte"])
    assert data.test_images.shape == (4, 784) and data.train_labels.dtype == np.int64


def test_read_idx_plain_and_gz_agree(tmp_path):
    array = np.arange(24).reshape(2, 3, 4)
    plain = read_idx(_write(tmp_path / "a", _idx_bytes(array), gz=False))
    # gzip is recognised by content, even under a name without .gz.
    (tmp_path / "b").write_bytes(gzip.compress(_idx_bytes(array)))
    np.testing.assert_array_equal(plain, array)
    np.testing.assert_array_equal(read_idx(tmp_path / "b"), array)


@pytest.mark.parametrize("gz", [False, True])
def test_wrong_magic(tmp_path, gz):
    _write_dataset(tmp_path, gz)
    labels = np.zeros(6, np.uint8)
    bad = _write(tmp_path / "train-labels-idx1-ubyte", _idx_bytes(labels, magic=0x12345678), gz)
    with pytest.raises(ValueError, match=rf"{bad.name}.*magic number 0x12345678"):
        load_fashion_mnist(tmp_path)


def test_labels_file_with_images_magic(tmp_path):
    images = np.zeros((2, 28, 28), np.uint8)
    path = _write(tmp_path / "t10k-labels-idx1-ubyte", _idx_bytes(images), gz=False)
    with pytest.raises(ValueError, match=r"magic number 0x00000803, expected 0x00000801"):
        read_idx(path, expected_magic=0x801)


def test_truncated_and_mismatched_files(tmp_path):
    data = _idx_bytes(np.zeros((3, 28, 28)))
    path = _write(tmp_path / "x", data[:-5], gz=False)
    with pytest.raises(ValueError, match=r"holds 2347 data bytes.*\[3, 28, 28\] = 2352"):
        read_idx(path)
    _write_dataset(tmp_path / "d", gz=False)
    _write(tmp_path / "d" / "t10k-labels-idx1-ubyte", _idx_bytes(np.zeros(5)), gz=False)
    with pytest.raises(ValueError, match="4 images but"):
        load_fashion_mnist(tmp_path / "d")


def test_missing_file(tmp_path):
    _write_dataset(tmp_path, gz=True)
    (tmp_path / "t10k-images-idx3-ubyte.gz").unlink()
    with pytest.raises(FileNotFoundError, match=r"t10k-images-idx3-ubyte\[.gz\]"):
        load_fashion_mnist(tmp_path)


@pytest.fixture(scope="module")
def digits():
    return load_digits(seed=0)


def test_digits_split_is_the_bundled_data_set(digits):
    """The split holds every one of scikit-learn's 1,797 images once, pixels scaled by 1/16."""
    from sklearn.datasets import load_digits as sklearn_digits

    bunch = sklearn_digits()
    assert len(digits.test_labels) == DIGITS_TEST_SIZE == 360
    assert len(digits.train_labels) + len(digits.test_labels) == len(bunch.target) == 1797
    assert digits.name == "digits" and digits.inputs == 64
    images = np.concatenate([digits.train_images, digits.test_images]) * 16
    labels = np.concatenate([digits.train_labels, digits.test_labels])
    # Every image of the split is a row of the bundled set with its label, and none twice.
    rows = {tuple(r): t for r, t in zip(bunch.data.astype(np.float32), bunch.target)}
    assert len(rows) <= 1797
    found = [rows.get(tuple(r)) for r in images]
    assert found == labels.tolist()
    assert not {tuple(r) for r in digits.test_images} & {tuple(r) for r in digits.train_images}
    # Seeded: the same split again, another with another seed.
    again, other = load_digits(seed=0), load_digits(seed=1)
    np.testing.assert_array_equal(again.test_labels, digits.test_labels)
    assert not np.array_equal(other.test_images, digits.test_images)
    with pytest.raises(ValueError, match="test_size=0"):
        load_digits(test_size=0)


def test_trained_digits_mlp_matches_a_logistic_regression(digits):
    """Our numpy trainer against scikit-learn's logistic regression on the same split.

    Logistic regression reaches about 96-97 % on the digits, a small MLP a point or two
    more: the two must land within a few points of each other.
    """
    from sklearn.linear_model import LogisticRegression

    before = mlp_accuracy(digits.test_images, digits.test_labels, random_mlp_params(0, 64))
    result = train_mlp(digits, epochs=60, seed=0)
    reference = LogisticRegression(max_iter=3000).fit(digits.train_images, digits.train_labels)
    ref_accuracy = reference.score(digits.test_images, digits.test_labels)
    assert ref_accuracy > 0.93  # the reference itself works
    assert abs(result.test_accuracy - ref_accuracy) <= 0.03
    assert result.test_accuracy > before + 0.5
    assert {k: v.shape for k, v in result.params.items()} == param_shapes(64)


def test_training_is_seeded(digits):
    first, again = train_mlp(digits, epochs=2, seed=3), train_mlp(digits, epochs=2, seed=3)
    other = train_mlp(digits, epochs=2, seed=4)
    for k in first.params:
        np.testing.assert_array_equal(first.params[k], again.params[k])
    assert not np.array_equal(first.params["w0"], other.params["w0"])


def test_trainer_rejects_bad_arguments(digits):
    with pytest.raises(ValueError, match="epochs=0"):
        train_mlp(digits, epochs=0)
    with pytest.raises(ValueError, match="learning_rate=-0.1"):
        train_mlp(digits, learning_rate=-0.1)


def test_prepare_falls_back_to_digits(tmp_path, digits):
    setup = prepare_mlp(tmp_path, epochs=3)
    assert setup.data.name == "digits" and str(tmp_path) in setup.note
    assert "trained 3 epochs on 1437 digits images" in setup.note
    np.testing.assert_array_equal(setup.data.test_images, digits.test_images)
    assert mlp_inputs(setup.params) == 64
    assert setup.test_accuracy == mlp_accuracy(
        setup.data.test_images, setup.data.test_labels, setup.params)


def test_prepare_trains_on_files(tmp_path):
    _write_dataset(tmp_path, gz=True, n_train=50, n_test=20)
    setup = prepare_mlp(tmp_path, epochs=1)
    assert setup.data.name == "FashionMNIST" and "trained 1 epochs on 50" in setup.note
    assert mlp_inputs(setup.params) == 784
    assert setup.test_accuracy == mlp_accuracy(
        setup.data.test_images, setup.data.test_labels, setup.params
    )


def _numpy_reference(x: np.ndarray, p: dict[str, np.ndarray]) -> np.ndarray:
    x64 = x.astype(np.float64)
    h = np.maximum(x64 @ p["w0"].astype(np.float64).T + p["b0"], 0)
    return h @ p["w1"].astype(np.float64).T + p["b1"]


def _build(mod: tvm.IRModule) -> relax.VirtualMachine:
    target = tvm.target.Target("llvm")
    ex = relax.build(mod, target=target, relax_pipeline=relax.get_default_pipeline(target))
    return relax.VirtualMachine(ex, tvm.cpu())


@pytest.fixture(scope="module")
def mlp_case():
    rng = np.random.default_rng(5)
    params = random_mlp_params(3)
    params["b0"] = rng.standard_normal(128).astype(np.float32) * 0.1
    params["b1"] = rng.standard_normal(10).astype(np.float32)
    return params, rng.uniform(0, 1, (7, 784)).astype(np.float32)


def test_relax_module_has_visible_ops(mlp_case):
    text = mlp_module().script()
    assert text.count("R.matmul(") == 2 and text.count("R.add(") == 2
    assert "R.nn.relu(" in text and text.count("R.permute_dims(") == 2
    assert mlp_module(mlp_case[0])["main"].params[0].name == "x"
    assert len(mlp_module(mlp_case[0])["main"].params) == 1


@pytest.mark.parametrize("batch", [1, 7])
def test_relax_module_with_weight_params_matches_numpy(mlp_case, batch):
    params, x = mlp_case
    vm = _build(mlp_module())
    args = [tvm.runtime.tensor(params[k]) for k in PARAM_SHAPES]
    out = vm["main"](tvm.runtime.tensor(x[:batch]), *args).numpy()
    np.testing.assert_allclose(out, _numpy_reference(x[:batch], params), rtol=0, atol=1e-4)
    np.testing.assert_allclose(out, mlp_numpy(x[:batch], params), rtol=0, atol=1e-4)


def test_relax_module_with_bound_weights_matches_numpy(mlp_case):
    params, x = mlp_case
    vm = _build(mlp_module(params))
    out = vm["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_allclose(out, _numpy_reference(x, params), rtol=0, atol=1e-4)


def test_input_size_follows_the_weights():
    """A 64-input MLP (the digits') builds from its weights alone and matches numpy."""
    rng = np.random.default_rng(2)
    params = random_mlp_params(4, inputs=64)
    params["b0"] = rng.standard_normal(128).astype(np.float32) * 0.1
    x = rng.uniform(0, 1, (5, 64)).astype(np.float32)
    mod = mlp_module(params)
    assert int(mod["main"].params[0].ty.shape[1]) == 64
    out = _build(mod)["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_allclose(out, _numpy_reference(x, params), rtol=0, atol=1e-4)
    unbound = mlp_module(inputs=64)
    assert [int(d) for d in unbound["main"].params[1].ty.shape] == [128, 64]
    with pytest.raises(ValueError, match=r"'w1' has shape \[10, 64\], expected \[10, 128\]"):
        mlp_module({**params, "w1": np.zeros((10, 64), np.float32)})
    with pytest.raises(ValueError, match="MLP inputs=0 must be a positive integer"):
        random_mlp_params(0, inputs=0)


def test_module_rejects_misshaped_params(mlp_case):
    params = dict(mlp_case[0])
    params["w1"] = params["w1"].T
    with pytest.raises(ValueError, match=r"'w1' has shape \[128, 10\], expected \[10, 128\]"):
        mlp_module(params)
    del params["b0"]
    with pytest.raises(KeyError, match="'b0'"):
        mlp_module(params)


def test_broken_gzip_files_name_the_file(tmp_path):
    packed = gzip.compress(_idx_bytes(np.zeros((3, 28, 28))))
    truncated = tmp_path / "cut.gz"
    truncated.write_bytes(packed[:-20])
    with pytest.raises(ValueError, match=r"IDX file '.*cut.gz' is not a valid gzip file"):
        read_idx(truncated)
    bad_crc = bytearray(packed)
    bad_crc[-8] ^= 0xFF  # the trailer's CRC-32
    (tmp_path / "crc.gz").write_bytes(bytes(bad_crc))
    with pytest.raises(ValueError, match=r"IDX file '.*crc.gz' is not a valid gzip file: CRC"):
        read_idx(tmp_path / "crc.gz")


def test_header_dims_whose_product_leaves_int64(tmp_path):
    # 2^22 x 2^21 x 2^21 = 2^64: numpy's int64 product wraps to 0, which matched an empty body.
    dims = (1 << 22, 1 << 21, 1 << 21)
    path = tmp_path / "huge"
    path.write_bytes((0x0803).to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in dims))
    with pytest.raises(ValueError, match=rf"holds 0 data bytes, but its header says "
                                         rf"\[4194304, 2097152, 2097152\] = {2**64}"):
        read_idx(path)
