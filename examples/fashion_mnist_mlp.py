"""The FashionMNIST MLP of the MLC course (784 -> 128 -> ReLU -> 10), offloaded to tenet.

Reads the standard IDX files from ``--data`` when they are there and trains the MLP on them
with numpy first; otherwise trains it (64 -> 128 -> 10) on scikit-learn's bundled 8 x 8
handwritten digits and says so.
Prints the prediction, the agreement with TVM's own build, a vm.profile-style report of the
run with the accelerator cost of each tenet call, and the ledger totals.
"""

from __future__ import annotations

import argparse

import numpy as np
import tvm
from tvm import relax

import tenet_byoc
from tenet_byoc.experiments.data import prepare_mlp
from tenet_byoc.accelerators import PRESETS
from tenet_byoc.models.mlp import mlp_module

CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
           "Sneaker", "Bag", "Ankle boot"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", help="folder with the FashionMNIST IDX files (.gz or not)")
    parser.add_argument("--accelerator", default="os16", choices=sorted(PRESETS))
    parser.add_argument("--epochs", type=int,
                        help="default: 5 on FashionMNIST, 60 on the digits")
    parser.add_argument("--index", type=int, default=0, help="which test image to classify")
    args = parser.parse_args()

    setup = prepare_mlp(args.data, epochs=args.epochs)
    print(setup.note)
    print(f"numpy test accuracy: {100 * setup.test_accuracy:.2f}%")
    classes = CLASSES if setup.data.name == "FashionMNIST" else [str(d) for d in range(10)]
    image = setup.data.test_images[args.index : args.index + 1]
    label = int(setup.data.test_labels[args.index])

    mod = mlp_module(setup.params)  # weights bound as constants: main(x)
    ex = tenet_byoc.build(mod, accelerator=args.accelerator)
    vm = tenet_byoc.VirtualMachine(ex, tvm.cpu(), profile=True)
    logits = vm["main"](tvm.runtime.tensor(image)).numpy()
    reference = relax.VirtualMachine(tenet_byoc.build(mod, offload=False), tvm.cpu())
    expected = reference["main"](tvm.runtime.tensor(image)).numpy()

    pred = int(np.argmax(logits))
    print(f"image {args.index}: predicted {classes[pred]!r}, label {classes[label]!r}")
    print(f"max |tenet - TVM| = {np.abs(logits - expected).max():.3g}")
    print()
    print(vm.profile("main", tvm.runtime.tensor(image)))
    book = tenet_byoc.ledger(vm)  # the classification above, the warmup and the timed run
    print(book)
    for pattern, t in book.group_by("pattern").items():
        print(f"  {pattern}: {t.calls} calls, {t.macs:,} MACs, {t.cycles:,} cycles, "
              f"{t.latency_us:,.2f} us, PE util {100 * t.pe_utilization:.1f}%")


if __name__ == "__main__":
    main()
