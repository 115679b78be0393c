"""A tiny MNIST of noise on disk, for the tests that run the examples' scripts."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from minitorch_exp.nn.idx import MNIST_FILES


def write_idx(path: Path, array: np.ndarray) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(d.to_bytes(4, "big") for d in array.shape)
    path.write_bytes(gzip.compress(header + array.tobytes()))


def write_tiny_mnist(root: Path, train: int, test: int) -> Path:
    """``train`` training and ``test`` test images of noise (seed 0) in the MNIST layout."""
    rng = np.random.default_rng(0)
    sizes = {"train": train, "test": test}
    for key, stem in MNIST_FILES.items():
        split, kind = key.split("_")
        shape = (sizes[split], 28, 28) if kind == "images" else (sizes[split],)
        write_idx(root / (stem + ".gz"), rng.integers(0, 256 if kind == "images" else 10, shape,
                                                      dtype=np.uint8))
    return root
