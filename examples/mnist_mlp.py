"""Train a multi-layer perceptron on MNIST with minitorch_exp.

Defaults (784-256-10, ReLU, SGD with momentum 0.9, lr 0.1, cosine schedule,
batch 128, 10 epochs) reach about 98% test accuracy in well under a minute on
two CPU cores. Every epoch is evaluated on the test set and checkpointed;
``--resume`` continues a run exactly where it stopped.

    python examples/mnist_mlp.py                      # train with the defaults
    python examples/mnist_mlp.py --epochs 3 --optimizer adam --lr 1e-3
    python examples/mnist_mlp.py --resume runs/mnist_mlp/checkpoint.npz --epochs 12
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.nn.idx import load_mnist

MEAN, STD = 0.1307, 0.3081  # pixel statistics of the MNIST training set


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10, help="passes over the training set")
    parser.add_argument("--batch-size", type=int, default=128, help="examples per step")
    parser.add_argument("--lr", type=float, default=0.1, help="initial learning rate")
    parser.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd",
                        help="sgd (momentum 0.9, the default) or adam")
    parser.add_argument("--hidden", type=int, nargs="+", default=[256],
                        help="hidden layer widths, e.g. --hidden 512 256")
    parser.add_argument("--device", default="cpu", help="'cpu' or 'cuda' (needs CuPy)")
    parser.add_argument("--seed", type=int, default=0, help="seed for init and shuffling")
    parser.add_argument("--data-dir", default=None,
                        help="folder with MNIST-format IDX files (default: the repo's data/mnist)")
    parser.add_argument("--out", default="runs/mnist_mlp",
                        help="folder for the checkpoint and the figures")
    parser.add_argument("--resume", default=None,
                        help="checkpoint to continue from (same flags, more --epochs)")
    parser.add_argument("--no-capture", action="store_true",
                        help="run every training step eagerly instead of replaying its "
                             "captured kernels (same numbers, slower; for debugging)")
    return parser.parse_args(argv)


def build_model(hidden: list[int]) -> nn.Module:
    sizes = [784, *hidden, 10]
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(n_in, n_out))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def prepare(images: np.ndarray) -> np.ndarray:
    return ((images.reshape(len(images), -1).astype(np.float32) / 255.0) - MEAN) / STD


def evaluate(model, images, labels, device, batch_size: int = 2000):
    """Mean loss, accuracy and predictions on a whole split, without a graph."""
    model.eval()
    total_loss, predictions = 0.0, []
    with mt.no_grad():
        for start in range(0, len(images), batch_size):
            x = mt.from_numpy(images[start:start + batch_size]).to(device)
            y = labels[start:start + batch_size]
            logits = model(x)
            total_loss += nn.functional.cross_entropy(logits, y, reduction="sum").item()
            predictions.append(logits.argmax(1).numpy())
    model.train()
    predictions = np.concatenate(predictions)
    return total_loss / len(images), float((predictions == labels).mean()), predictions


def make_train_step(model, optimizer, captured: bool = True):
    """One training step on one batch: forward, loss, backward, optimizer step. Returns
    the loss and the number of correct predictions (Nodes, so nothing is read back
    inside the step).

    Captured (the default), the step's kernels are recorded once and then replayed
    without the Python around them (``mt.capture``): the same numbers, faster.
    The optimizer's step runs again eagerly in each replay, so it sees the
    learning rate the schedule sets each epoch.
    """
    def train_step(x, y):
        optimizer.zero_grad()
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, y)
        loss.backward()
        optimizer.step()
        return loss, (logits.argmax(1) == y).sum()

    return mt.capture(train_step) if captured else train_step


def train_epoch(train_step, loader, epoch: int, epochs: int):
    seen, correct, loss_sum = 0, 0, 0.0
    start = time.perf_counter()
    bar = tqdm(loader, desc=f"epoch {epoch + 1}/{epochs}", unit="batch", leave=True,
               dynamic_ncols=True, mininterval=0.5, disable=None)
    for x, y in bar:
        loss, n_correct = train_step(x, y)
        n = y.shape[0]
        seen += n
        loss_sum += loss.item() * n
        correct += n_correct.item()
        bar.set_postfix(loss=f"{loss_sum / seen:.4f}", acc=f"{correct / seen:.2%}",
                        samples_s=f"{seen / (time.perf_counter() - start):,.0f}", refresh=False)
    return loss_sum / seen, correct / seen, seen / (time.perf_counter() - start)


def save_figures(history: dict, images, labels, predictions, out: Path) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = np.arange(1, len(history["train_loss"]) + 1)
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    for split in ("train", "test"):
        ax_loss.plot(epochs, history[f"{split}_loss"], marker="o", label=split)
        ax_acc.plot(epochs, 100 * np.asarray(history[f"{split}_acc"]), marker="o", label=split)
    ax_loss.set(xlabel="epoch", ylabel="cross-entropy", title="loss")
    ax_acc.set(xlabel="epoch", ylabel="accuracy (%)", title="accuracy")
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    curves = out / "curves.png"
    fig.savefig(curves, dpi=100)
    plt.close(fig)

    wrong = np.flatnonzero(predictions != labels)
    shown = np.concatenate([wrong[:12], np.setdiff1d(np.arange(len(labels)), wrong)[:36]])[:36]
    fig, axes = plt.subplots(6, 6, figsize=(8, 8.6))
    for ax, i in zip(axes.flat, np.sort(shown)):
        ax.imshow(images[i], cmap="gray_r")
        ok = predictions[i] == labels[i]
        ax.set_title(f"pred {predictions[i]} / true {labels[i]}", fontsize=8,
                     color="black" if ok else "red", fontweight="normal" if ok else "bold")
        ax.axis("off")
    fig.suptitle("test digits (red: wrong)")
    fig.tight_layout()
    grid = out / "predictions.png"
    fig.savefig(grid, dpi=100)
    plt.close(fig)
    return [curves, grid]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = load_mnist(args.data_dir)
    train_x, test_x = prepare(data.train_images), prepare(data.test_images)
    train_y, test_y = data.train_labels.astype(np.int64), data.test_labels.astype(np.int64)

    mt.manual_seed(args.seed)
    model = build_model(args.hidden).to(args.device)
    if args.optimizer == "sgd":
        optimizer = nn.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    else:
        optimizer = nn.optim.Adam(model.parameters(), lr=args.lr)
    scheduler = nn.optim.CosineAnnealingLR(optimizer, T_max=args.epochs)
    loader = nn.DataLoader(nn.TensorDataset(train_x, train_y), batch_size=args.batch_size,
                           shuffle=True, seed=args.seed, device=args.device)
    history = {k: [] for k in ("train_loss", "train_acc", "test_loss", "test_acc")}
    first_epoch = 0
    if args.resume:
        state = mt.load(args.resume)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        history = {k: [float(v) for v in vals] for k, vals in state["history"].items()}
        first_epoch = loader.epoch = int(state["epoch"])
        print(f"resumed from {args.resume} after epoch {first_epoch}")

    print(f"model: {' -> '.join(str(n) for n in [784, *args.hidden, 10])}, "
          f"{sum(p.numel() for p in model.parameters()):,} parameters, "
          f"{args.optimizer} lr={args.lr}, batch {args.batch_size}, device {args.device}")
    train_step = make_train_step(model, optimizer, captured=not args.no_capture)
    started = time.perf_counter()
    checkpoint = out / "checkpoint.npz"
    predictions = None
    for epoch in range(first_epoch, args.epochs):
        train_loss, train_acc, speed = train_epoch(train_step, loader, epoch, args.epochs)
        scheduler.step()
        test_loss, test_acc, predictions = evaluate(model, test_x, test_y, args.device)
        for key, value in zip(history, (train_loss, train_acc, test_loss, test_acc)):
            history[key].append(value)
        print(f"epoch {epoch + 1}: train loss {train_loss:.4f} acc {train_acc:.2%} | "
              f"test loss {test_loss:.4f} acc {test_acc:.2%} | {speed:,.0f} samples/s")
        mt.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                 "scheduler": scheduler.state_dict(), "history": history, "epoch": epoch + 1,
                 "args": {k: str(v) for k, v in vars(args).items()}}, checkpoint)
    if predictions is None:
        _, _, predictions = evaluate(model, test_x, test_y, args.device)
    figures = save_figures(history, data.test_images, test_y, predictions, out)
    final = history["test_acc"][-1] if history["test_acc"] else float("nan")
    print(f"\ntrained {args.epochs - first_epoch} epochs in {time.perf_counter() - started:.1f} s")
    print(f"checkpoint: {checkpoint}")
    for path in figures:
        print(f"figure: {path}")
    print(f"test accuracy: {100 * final:.2f}%")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("MPLBACKEND", "Agg")
    sys.exit(main())
