"""Data for the experiments: FashionMNIST's IDX files, scikit-learn's handwritten digits when
they are absent, and a numpy trainer for the MLP."""

from __future__ import annotations

import gzip
import importlib.util
import math
import os
import time
import zlib
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..models.mlp import OUTPUT, mlp_accuracy, random_mlp_params

__all__ = [
    "DIGITS_TEST_SIZE",
    "ImageDataset",
    "TrainResult",
    "load_digits",
    "load_fashion_mnist",
    "prepare_mlp",
    "read_idx",
    "train_mlp",
]

IMAGE_SHAPE = (28, 28)
#: Test images held out of scikit-learn's 1,797 digits (20 %), by a seeded permutation.
DIGITS_TEST_SIZE = 360
#: Training epochs by data set when none are given: the digits' 1,437 training images need
#: more passes than FashionMNIST's 60,000 for the same number of steps.
DEFAULT_EPOCHS = {"FashionMNIST": 5, "digits": 60}


# ----------------------------------------------------------------------------------------
# FashionMNIST IDX files
# ----------------------------------------------------------------------------------------

# IDX magic: two zero bytes, a type code (0x08 = unsigned byte), the number of dimensions.
_IMAGES_MAGIC = 0x00000803
_LABELS_MAGIC = 0x00000801
_FILES = {
    "train_images": ("train-images-idx3-ubyte", _IMAGES_MAGIC),
    "train_labels": ("train-labels-idx1-ubyte", _LABELS_MAGIC),
    "test_images": ("t10k-images-idx3-ubyte", _IMAGES_MAGIC),
    "test_labels": ("t10k-labels-idx1-ubyte", _LABELS_MAGIC),
}


def read_idx(path: str | os.PathLike[str], expected_magic: int | None = None) -> np.ndarray:
    """An IDX file of unsigned bytes, gzipped or not (gzip is recognised by its content, not
    its name), as a uint8 array of the shape its header gives. ``expected_magic``: ``0x803``
    for images, ``0x801`` for labels; by default any unsigned-byte IDX.

    Raises
    ------
    ValueError
        If the magic number is wrong (the message names the file and the magic found) or
        the data is shorter or longer than the header's dimensions say.
    """
    path = os.fspath(path)
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as err:  # truncated, bad CRC, corrupt stream
            raise ValueError(f"IDX file {path!r} is not a valid gzip file: {err}") from None
    if len(raw) < 4:
        raise ValueError(f"IDX file {path!r} is too short for a header ({len(raw)} bytes)")
    magic = int.from_bytes(raw[:4], "big")
    ndim = magic & 0xFF
    valid = magic >> 8 == 0x08 and 1 <= ndim <= 4
    if not valid or (expected_magic is not None and magic != expected_magic):
        want = f"0x{expected_magic:08x}" if expected_magic is not None else "0x000008NN"
        raise ValueError(
            f"IDX file {path!r} has magic number 0x{magic:08x}, expected {want} "
            "(is it a FashionMNIST file?)"
        )
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"IDX file {path!r} is truncated inside its header")
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    size = math.prod(shape)  # Python integers: numpy's int64 product can wrap to 0
    if len(raw) - header != size:
        raise ValueError(
            f"IDX file {path!r} holds {len(raw) - header} data bytes, "
            f"but its header says {list(shape)} = {size}"
        )
    return np.frombuffer(raw, np.uint8, offset=header).reshape(shape)


@dataclass(frozen=True)
class ImageDataset:
    """Images (float32 in [0, 1], flattened) and labels (int64, 0..9) of both splits.

    ``name`` is ``"FashionMNIST"`` (784 pixels) or ``"digits"`` (scikit-learn's 8 x 8
    handwritten digits, 64 pixels).
    """

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    name: str = "FashionMNIST"

    @property
    def inputs(self) -> int:
        """Pixels per image: the MLP's input size."""
        return int(self.train_images.shape[1])


def _find(folder: str, base: str) -> str | None:
    paths = (os.path.join(folder, name) for name in (base, base + ".gz"))
    return next(filter(os.path.isfile, paths), None)


def load_fashion_mnist(folder: str | os.PathLike[str]) -> ImageDataset:
    """Read the four standard FashionMNIST IDX files from a local folder.

    Each file may be plain or gzipped (``train-images-idx3-ubyte`` or
    ``train-images-idx3-ubyte.gz``, and likewise ``train-labels-idx1-ubyte``,
    ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``).

    Raises
    ------
    FileNotFoundError
        If a file is missing (the message names it).
    ValueError
        If a file has a wrong magic number or size, images are not 28 x 28, a label is
        not in 0..9, or images and labels differ in count.
    """
    folder = os.fspath(folder)
    arrays = {}
    for key, (base, magic) in _FILES.items():
        path = _find(folder, base)
        if path is None:
            raise FileNotFoundError(f"FashionMNIST file {base}[.gz] not found in {folder!r}")
        arrays[key] = (path, read_idx(path, magic))
    for split in ("train", "test"):
        (ipath, images), (lpath, labels) = arrays[f"{split}_images"], arrays[f"{split}_labels"]
        if images.shape[1:] != IMAGE_SHAPE:
            raise ValueError(f"{ipath!r} holds images of {list(images.shape[1:])}, not 28 x 28")
        if len(images) != len(labels):
            raise ValueError(f"{ipath!r} has {len(images)} images but {lpath!r} {len(labels)}")
        if labels.size and labels.max() >= OUTPUT:
            raise ValueError(f"{lpath!r} has label {int(labels.max())}, expected 0..9")
    # images flattened, pixels scaled to [0, 1]; labels as int64
    return ImageDataset(**{
        key: (a.reshape(len(a), -1) / np.float32(255)).astype(np.float32)
        if key.endswith("images") else a.astype(np.int64) for key, (_, a) in arrays.items()})


def _digits_table() -> tuple[np.ndarray, np.ndarray]:
    """The digits' pixels [1797, 64] (float64, 0..16) and labels, as scikit-learn has them.

    Read straight from the CSV bundled in scikit-learn's package, as its ``load_digits``
    reads it: importing ``sklearn.datasets`` (and SciPy with it) costs seconds of the main
    job, the file a few milliseconds. scikit-learn's own loader is the fallback.
    """
    spec = importlib.util.find_spec("sklearn")  # locates the package without importing it
    for folder in (spec.submodule_search_locations or []) if spec else []:
        csv = Path(folder) / "datasets" / "data" / "digits.csv.gz"
        if csv.is_file():
            table = np.loadtxt(csv, delimiter=",")
            return table[:, :-1], table[:, -1].astype(int)
    try:
        from sklearn.datasets import load_digits as sklearn_digits
    except ImportError as err:
        raise ImportError(
            "the MLP's default data set is scikit-learn's handwritten digits: install "
            "scikit-learn, or give a FashionMNIST folder"
        ) from err
    bunch = sklearn_digits()
    return bunch.data, bunch.target


def load_digits(seed: int = 0, test_size: int = DIGITS_TEST_SIZE) -> ImageDataset:
    """scikit-learn's handwritten digits (1,797 8 x 8 images, bundled, nothing downloaded),
    split into train and test sets by a seeded permutation.

    Pixels (0..16 in the data set) are scaled to [0, 1] as FashionMNIST's are. ``seed`` seeds
    the permutation (the same split on every machine); ``test_size`` images (360, 20 %, by
    default) are held out for testing.

    Raises
    ------
    ImportError
        If scikit-learn is not installed (it is a dependency of tenet-byoc).
    ValueError
        If ``test_size`` leaves no training or no test image.
    """
    pixels, target = _digits_table()
    images = (pixels / np.float32(16)).astype(np.float32)
    labels = target.astype(np.int64)
    if isinstance(test_size, bool) or not isinstance(test_size, int) or not (
        0 < test_size < len(labels)
    ):
        raise ValueError(f"load_digits test_size={test_size!r} must be an integer in "
                         f"[1, {len(labels) - 1}]")
    order = np.random.default_rng(seed).permutation(len(labels))
    test, train = order[:test_size], order[test_size:]
    return ImageDataset(images[train], labels[train], images[test], labels[test], name="digits")


# ----------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainResult:
    """Trained weights, the data they were trained on, their numpy test accuracy, and how
    long training took (``note``: the training in words, set by :func:`prepare_mlp`)."""

    params: dict[str, np.ndarray]
    data: ImageDataset
    test_accuracy: float
    epochs: int
    seconds: float
    note: str = ""


def train_mlp(
    data: ImageDataset,
    epochs: int = 5,
    batch_size: int = 128,
    learning_rate: float = 1e-3,
    seed: int = 0,
) -> TrainResult:
    """Train the MLP with minibatch Adam on softmax cross-entropy, in numpy.

    Five epochs over 60,000 images take about 11 s on two cores; a 784-128-10 MLP
    trained so typically reaches 85-88 % FashionMNIST test accuracy. The MLP's input size
    is the data's.

    ``epochs``: passes over the training set; ``batch_size``: images per step;
    ``learning_rate``: Adam's step size; ``seed`` seeds the initial weights and the shuffling.
    """
    for field, value in (("epochs", epochs), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"train_mlp {field}={value!r} must be a positive integer")
    if not learning_rate > 0:
        raise ValueError(f"train_mlp learning_rate={learning_rate!r} must be > 0")
    from threadpoolctl import threadpool_limits  # scikit-learn's dependency, as ours

    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    params = random_mlp_params(seed, inputs=data.inputs)
    moments = {k: (np.zeros_like(v), np.zeros_like(v)) for k, v in params.items()}
    x_all, y_all = data.train_images, data.train_labels
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    n = len(x_all)
    step = 0
    # A training step's GEMMs are tiny (128 x 784 x 128 at most); OpenBLAS's threads cost
    # more than they save there, and on a busy 2-core machine their spinning made training
    # 20x slower (10.5 CPU s against 0.4 s for 60 epochs on the digits). One thread also
    # makes the trained weights the same on every machine, whatever its core count.
    with threadpool_limits(limits=1, user_api="blas"):
        for _ in range(epochs):
            order = rng.permutation(n)
            for first in range(0, n, batch_size):
                idx = order[first : first + batch_size]
                x, y = x_all[idx], y_all[idx]
                pre = x @ params["w0"].T + params["b0"]
                h = np.maximum(pre, 0)
                logits = h @ params["w1"].T + params["b1"]
                logits -= logits.max(axis=1, keepdims=True)
                prob = np.exp(logits)
                prob /= prob.sum(axis=1, keepdims=True)
                prob[np.arange(len(y)), y] -= 1  # d(mean cross-entropy)/d(logits) * batch
                dlogits = prob / np.float32(len(y))
                dh = (dlogits @ params["w1"]) * (pre > 0)
                grads = {
                    "w1": dlogits.T @ h,
                    "b1": dlogits.sum(axis=0),
                    "w0": dh.T @ x,
                    "b0": dh.sum(axis=0),
                }
                step += 1
                lr = float(learning_rate * np.sqrt(1 - beta2**step) / (1 - beta1**step))
                for k, g in grads.items():
                    m, v = moments[k]
                    m *= beta1
                    m += (1 - beta1) * g
                    v *= beta2
                    v += (1 - beta2) * g * g
                    params[k] -= (lr * m / (np.sqrt(v) + eps)).astype(np.float32)
    accuracy = mlp_accuracy(data.test_images, data.test_labels, params)
    return TrainResult(params, data, accuracy, epochs, time.perf_counter() - start)


def prepare_mlp(folder: str | os.PathLike[str] | ImageDataset | None,
                epochs: int | None = None, seed: int = 0) -> TrainResult:
    """Train the MLP on FashionMNIST from ``folder``, or on scikit-learn's digits without it.

    ``folder``: a folder with the four IDX files, or a data set already loaded; ``None`` or a
    folder without the files selects the digits (784 -> 128 -> 10 on FashionMNIST, 64 -> 128
    -> 10 on the digits); a folder with broken files raises (see :func:`load_fashion_mnist`).
    ``epochs``: by default 5 on FashionMNIST and 60 on the digits. ``seed`` seeds the initial
    weights, the shuffling and the digits' train/test split.
    """
    have_files = isinstance(folder, (str, os.PathLike)) and all(
        _find(os.fspath(folder), base) for base, _ in _FILES.values()
    )
    if isinstance(folder, ImageDataset) or have_files:
        data = folder if isinstance(folder, ImageDataset) else load_fashion_mnist(folder)
        where = ""
    else:
        data = load_digits(seed=seed)
        where = ("no FashionMNIST folder given" if folder is None
                 else f"no FashionMNIST files in {os.fspath(folder)!r}")
        where = f" ({where}; seeded split {seed})"
    epochs = DEFAULT_EPOCHS.get(data.name, 5) if epochs is None else epochs
    result = train_mlp(data, epochs=epochs, seed=seed)
    return replace(result, note=f"trained {epochs} epochs on {len(data.train_labels)} "
                   f"{data.name} images{where} in {result.seconds:.1f} s")
