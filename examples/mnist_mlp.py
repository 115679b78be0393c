"""Train a multi-layer perceptron on MNIST (temporary stub).

This version only parses the flags and loads the data; the training loop
lands with the nn issue.
"""

from __future__ import annotations

import argparse
import sys

from minitorch_exp.nn.idx import load_mnist


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command-line flags."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5, help="passes over the training set")
    parser.add_argument("--batch-size", type=int, default=128, help="examples per step")
    parser.add_argument("--lr", type=float, default=1e-3, help="learning rate")
    parser.add_argument("--optimizer", choices=["sgd", "adam"], default="adam",
                        help="optimizer to train with")
    parser.add_argument("--hidden", type=int, nargs="+", default=[256],
                        help="hidden layer widths, e.g. --hidden 512 256")
    parser.add_argument("--device", default="cpu", help="'cpu' or 'cuda' (needs cupy)")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument("--data-dir", default=None,
                        help="folder with the MNIST IDX files (default: search the usual places)")
    parser.add_argument("--out", default="runs/mnist_mlp",
                        help="folder for checkpoints, metrics and plots")
    parser.add_argument("--resume", default=None, help="checkpoint file to resume from")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Load MNIST and report its shapes."""
    args = parse_args(argv)
    data = load_mnist(args.data_dir)
    for name, array in data._asdict().items():
        print(f"{name:>12}: shape {array.shape}, dtype {array.dtype}")
    print("Training lands with the nn issue; this script only loads the data for now.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
