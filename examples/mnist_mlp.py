"""Train a multi-layer perceptron on MNIST with minitorch_exp.

Defaults (784-256-10, ReLU, SGD with momentum 0.9, lr 0.1, cosine schedule,
batch 128, 10 epochs) reach about 98% test accuracy in well under a minute on
two CPU cores. Every epoch is evaluated on the test set and checkpointed;
``--resume`` continues a run exactly where it stopped. Ctrl-C stops training
after the current batch, saves a checkpoint of that state and prints the
command that resumes it (a second Ctrl-C stops at once, saving nothing).

    python examples/mnist_mlp.py                      # train with the defaults
    python examples/mnist_mlp.py --epochs 3 --optimizer adam --lr 1e-3
    python examples/mnist_mlp.py --resume runs/mnist_mlp/checkpoint.npz --epochs 12

Data parallel over MPI (``pip install -e '.[dist]'``): the same run, split over
N processes. ``--batch-size`` stays the global batch (each process takes
1/N of it, its shard of every epoch: ``nn.DistributedSampler``), gradients are
averaged in backward (``nn.parallel.DistributedDataParallel``), so the weights
match a one-process run up to float32 summation order. Rank 0 alone prints,
draws and writes the checkpoint; ``--resume`` restores every rank from it.

    mpiexec -n 2 python examples/mnist_mlp.py         # started by mpiexec: detected
    mpiexec -n 2 python examples/mnist_mlp.py --resume runs/mnist_mlp/checkpoint.npz
"""

from __future__ import annotations

import argparse
import itertools
import os
import shlex
import signal
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
    def model_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--hidden", type=int, nargs="+", default=[256],
                            help="hidden layer widths, e.g. --hidden 512 256")

    return argument_parser(__doc__.splitlines()[0], model_arguments, epochs=10, lr=0.1,
                           optimizer="sgd", out="runs/mnist_mlp").parse_args(argv)


def argument_parser(description: str, model_arguments, *, epochs: int, lr: float,
                    optimizer: str, out: str) -> argparse.ArgumentParser:
    """The options of the MNIST examples, with the model's own (``model_arguments(parser)``)
    after the optimizer's and the given defaults (shared with ``mnist_cnn.py``)."""
    parser = argparse.ArgumentParser(description=description,
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--epochs", type=int, default=epochs,
                        help="passes over the training set")
    parser.add_argument("--batch-size", type=int, default=128, help="examples per step")
    parser.add_argument("--lr", type=float, default=lr, help="initial learning rate")
    parser.add_argument("--optimizer", choices=["sgd", "adam"], default=optimizer,
                        help="sgd (with momentum 0.9) or adam")
    model_arguments(parser)
    parser.add_argument("--device", default="cpu", help="'cpu' or 'cuda' (needs CuPy)")
    parser.add_argument("--seed", type=int, default=0, help="seed for init and shuffling")
    parser.add_argument("--data-dir", default=None,
                        help="folder with MNIST-format IDX files; None searches "
                             "$MINITORCH_DATA, then the repo's data/mnist")
    parser.add_argument("--out", default=out,
                        help="folder for the checkpoint and the figures")
    parser.add_argument("--resume", default=None,
                        help="checkpoint to continue from (same flags, or more --epochs)")
    parser.add_argument("--no-capture", action="store_true",
                        help="run every training step eagerly instead of replaying its "
                             "captured kernels (same numbers, slower; for debugging)")
    parser.add_argument("--distributed", action="store_true",
                        help="data parallel over MPI, one process per rank (implied when "
                             "started by mpiexec); --batch-size is the global batch")
    return parser


class Cluster:
    """This process's place in a data-parallel run; one process alone is rank 0 of 1.

    Only rank 0 (``main``) prints, draws and writes; the sums of the epoch's
    statistics and the decision to stop are agreed over MPI.
    """

    #: Ctrl-C is agreed between the ranks every this many batches (one tiny all-reduce).
    STOP_EVERY = 10

    def __init__(self, distributed: bool) -> None:
        self.distributed = distributed
        self.rank, self.size = 0, 1
        if distributed:
            import minitorch_exp.distributed as dist
            self.dist = dist
            self.rank, self.size = dist.init()
        self.main = self.rank == 0

    def print(self, *args, **kwargs) -> None:
        if self.main:
            print(*args, **kwargs)

    def sum(self, values: list[float]) -> list[float]:
        """Each value summed over the ranks."""
        if not self.distributed:
            return list(values)
        buffer = np.asarray(values, dtype=np.float64)
        self.dist.all_reduce(buffer)
        return buffer.tolist()

    def stopper(self, stop: StopRequest):
        """``stop()`` for train_epoch: true on every rank at the same batch once any
        rank was asked to stop (Ctrl-C reaches all of them, not at the same instant)."""
        if not self.distributed:
            return lambda: stop.requested
        calls = itertools.count()

        def agreed() -> bool:
            if next(calls) % self.STOP_EVERY:
                return False
            return self.sum([float(stop.requested)])[0] > 0

        return agreed

    def read(self, path: str) -> str:
        """``path`` as rank 0 sees it, for every rank: the other ranks receive its
        bytes over MPI into a file of their own (no shared file system needed)."""
        if not self.distributed or self.size == 1:
            return path
        data = Path(path).read_bytes() if self.main else None
        data = self.dist.comm().bcast(data, root=0)
        if self.main:
            return path
        import tempfile
        fd, local = tempfile.mkstemp(suffix=".npz")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return local


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


class Interrupted(Exception):
    """Training stopped between two batches; ``progress`` is the epoch's so far."""

    def __init__(self, progress: dict) -> None:
        super().__init__(f"interrupted after {progress['batches']} batches")
        self.progress = progress


class StopRequest:
    """While active, a first Ctrl-C only asks training to stop between two batches
    (so the state it saves is consistent); a second one interrupts at once. A
    process started with SIGINT ignored (e.g. a background job) keeps ignoring it."""

    def __init__(self) -> None:
        self.requested = False

    def __enter__(self) -> StopRequest:
        self.previous = signal.getsignal(signal.SIGINT)
        if self.previous is not signal.SIG_IGN:
            signal.signal(signal.SIGINT, self.handle)
        return self

    def __exit__(self, *exc_info) -> None:
        signal.signal(signal.SIGINT, self.previous)

    def handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True


def train_epoch(train_step, loader, epoch: int, epochs: int, progress: dict | None = None,
                stop=None, cluster: Cluster | None = None):
    """Train one epoch; return its mean loss, accuracy and samples per second.

    ``progress`` (``batches``, ``seen``, ``correct``, ``loss_sum``) continues an
    epoch that stopped after its first ``batches`` batches. When ``stop()`` is
    true before a batch, raises :class:`Interrupted` with the progress so far.
    With a distributed ``cluster`` the results are over every rank's shard (the
    progress bar shows rank 0's, on rank 0 only).
    """
    cluster = cluster or Cluster(False)
    done = dict(progress or {"batches": 0, "seen": 0, "correct": 0, "loss_sum": 0.0})
    seen_before, start = done["seen"], time.perf_counter()
    batches = itertools.islice(loader, done["batches"], None)
    with tqdm(batches, desc=f"epoch {epoch + 1}/{epochs}", unit="batch", leave=True,
              total=len(loader), initial=done["batches"], dynamic_ncols=True,
              mininterval=0.5, disable=None if cluster.main else True) as bar:
        for x, y in bar:
            if stop is not None and stop():
                raise Interrupted(done)
            loss, n_correct = train_step(x, y)
            n = y.shape[0]
            done["batches"] += 1
            done["seen"] += n
            done["loss_sum"] += loss.item() * n
            done["correct"] += n_correct.item()
            speed = (done["seen"] - seen_before) / (time.perf_counter() - start)
            bar.set_postfix(loss=f"{done['loss_sum'] / done['seen']:.4f}",
                            acc=f"{done['correct'] / done['seen']:.2%}",
                            samples_s=f"{speed:,.0f}", refresh=False)
    speed = (done["seen"] - seen_before) / (time.perf_counter() - start)
    seen, correct, loss_sum, speed = cluster.sum([done["seen"], done["correct"],
                                                  done["loss_sum"], speed])
    return loss_sum / seen, correct / seen, speed


def global_progress(progress: dict, cluster: Cluster) -> dict:
    """An epoch's progress summed over the ranks (what a checkpoint keeps)."""
    if "seen" not in progress:  # stopped between epochs: nothing to add up
        return progress
    seen, correct, loss_sum = cluster.sum([progress["seen"], progress["correct"],
                                           progress["loss_sum"]])
    return {**progress, "seen": int(seen), "correct": int(correct), "loss_sum": loss_sum}


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


def plural(n: int, word: str) -> str:
    """``1 epoch``, ``2 epochs``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def resume_command(args: argparse.Namespace, checkpoint: Path, processes: int = 1,
                   parse=None) -> str:
    """The command line that continues this run from ``checkpoint`` (``processes`` > 1:
    under ``mpiexec -n processes``); ``parse``: the script's parse_args (this one's)."""
    defaults = vars((parse or parse_args)([]))
    words = ["python", sys.argv[0]]
    if processes > 1:
        words = ["mpiexec", "-n", str(processes), *words]
    for name, value in vars(args).items():
        if name == "resume" or value == defaults[name]:
            continue
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            words.append(flag)
        elif isinstance(value, list):
            words += [flag, *map(str, value)]
        else:
            words += [flag, str(value)]
    return shlex.join([*words, "--resume", str(checkpoint)])


class Run:
    """The training state a checkpoint holds, and where it is written.

    ``mnist_cnn.py`` subclasses it: ``build_model``, ``describe``, ``parse_args`` (for the
    resume command), ``eval_batch`` and ``timed`` (the epoch line ends with its seconds).
    """

    eval_batch = 2000
    timed = False
    parse_args = staticmethod(parse_args)

    def __init__(self, args: argparse.Namespace, train_x: np.ndarray, train_y: np.ndarray,
                 cluster: Cluster | None = None):
        mt.manual_seed(args.seed)
        self.args = args
        self.cluster = cluster = cluster or Cluster(False)
        self.model = self.build_model().to(args.device)
        # what a training step calls: the model, or the model whose gradients are averaged
        # over the ranks in backward (its parameters are the model's: rank 0's at start)
        self.trained = self.model
        if cluster.distributed:
            self.trained = nn.parallel.DistributedDataParallel(self.model)
        if args.optimizer == "sgd":
            self.optimizer = nn.optim.SGD(self.model.parameters(), lr=args.lr, momentum=0.9)
        else:
            self.optimizer = nn.optim.Adam(self.model.parameters(), lr=args.lr)
        self.scheduler = nn.optim.CosineAnnealingLR(self.optimizer, T_max=args.epochs)
        dataset = nn.TensorDataset(train_x, train_y)
        if cluster.distributed:  # each rank: every size-th sample of the epoch's order
            if args.batch_size % cluster.size:
                raise SystemExit(f"--batch-size {args.batch_size} must be a multiple of the "
                                 f"{cluster.size} processes (it is the global batch)")
            sampler = nn.DistributedSampler(dataset, cluster.size, cluster.rank, shuffle=True,
                                            seed=args.seed)
            self.loader = nn.DataLoader(dataset, batch_size=args.batch_size // cluster.size,
                                        sampler=sampler, seed=args.seed, device=args.device)
        else:
            self.loader = nn.DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                                        seed=args.seed, device=args.device)
        self.history = {k: [] for k in ("train_loss", "train_acc", "test_loss", "test_acc")}
        self.epoch = 0  # epochs completed
        self.progress: dict | None = None  # of the next epoch, when stopped inside it
        self.out = Path(args.out)  # created only when something is written into it
        self.checkpoint = self.out / "checkpoint.npz"

    def build_model(self) -> nn.Module:
        return build_model(self.args.hidden)

    def describe(self) -> str:
        args = self.args
        processes = f", {self.cluster.size} processes" if self.cluster.distributed else ""
        return (f"model: {' -> '.join(str(n) for n in [784, *args.hidden, 10])}, "
                f"{sum(p.numel() for p in self.model.parameters()):,} parameters, "
                f"{args.optimizer} lr={args.lr}, batch {args.batch_size}, device "
                f"{args.device}{processes}")

    def resume(self, path: str) -> None:
        local = self.cluster.read(path)  # every rank restores rank 0's checkpoint
        state = mt.load(local)
        if local != path:
            os.remove(local)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.history = {k: [float(v) for v in vals] for k, vals in state["history"].items()}
        self.epoch = self.loader.epoch = int(state["epoch"])
        self.progress = state.get("progress")
        if self.progress and not self.cluster.main:  # the sums so far count on rank 0 only
            self.progress = {**self.progress, "seen": 0, "correct": 0, "loss_sum": 0.0}
        self.cluster.print(f"resumed from {path} {self.position()}")

    def position(self) -> str:
        if self.progress:
            batches = self.progress["batches"]
            return f"in epoch {self.epoch + 1} after {batches} of {len(self.loader)} batches"
        return f"after {plural(self.epoch, 'epoch')}"

    def save(self) -> None:
        if not self.cluster.main:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        mt.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "scheduler": self.scheduler.state_dict(), "history": self.history,
                 "epoch": self.epoch, "progress": self.progress,
                 "args": {k: str(v) for k, v in vars(self.args).items()}}, self.checkpoint)


def train_epochs(run: Run, train_step, test_x, test_y, stop: StopRequest):
    """Train up to ``--epochs``, evaluating and checkpointing after each epoch.
    Returns the last test predictions (None if no epoch ran); raises Interrupted."""
    predictions = None
    cluster = run.cluster
    while run.epoch < run.args.epochs:
        started = time.perf_counter()
        train_loss, train_acc, speed = train_epoch(train_step, run.loader, run.epoch,
                                                   run.args.epochs, run.progress,
                                                   cluster.stopper(stop), cluster)
        seconds = time.perf_counter() - started
        run.progress = None
        run.scheduler.step()
        test_loss, test_acc, predictions = evaluate(run.model, test_x, test_y, run.args.device,
                                                    run.eval_batch)
        for key, value in zip(run.history, (train_loss, train_acc, test_loss, test_acc)):
            run.history[key].append(value)
        cluster.print(f"epoch {run.epoch + 1}: train loss {train_loss:.4f} acc "
                      f"{train_acc:.2%} | test loss {test_loss:.4f} acc {test_acc:.2%} | "
                      f"{speed:,.0f} samples/s" + (f", {seconds:.1f} s" if run.timed else ""))
        run.epoch += 1
        run.save()
    if cluster.sum([float(stop.requested)])[0]:  # Ctrl-C while the last epoch ended
        raise Interrupted({"batches": 0})
    return predictions


def main(argv: list[str] | None = None, parse=parse_args, **training) -> int:
    """``parse`` (the script's parse_args) and ``training`` (``train``'s keywords):
    this script's by default, ``mnist_cnn.py``'s from there."""
    args = parse(argv)
    try:
        return train(args, **training)
    except KeyboardInterrupt:  # before training, or a second Ctrl-C mid-step
        print("\ninterrupted; no checkpoint written now", file=sys.stderr)
        return 130


def interrupted(run: Run, stopped: Interrupted) -> int:
    """Save the state at the stop and say how to continue."""
    cluster = run.cluster
    progress = global_progress(stopped.progress, cluster) if cluster.distributed \
        else stopped.progress
    run.progress = progress if progress["batches"] else None
    run.save()
    if cluster.main:
        print(f"\ninterrupted {run.position()}; saved {run.checkpoint}; continue with: "
              f"{resume_command(run.args, run.checkpoint, cluster.size, run.parse_args)}",
              file=sys.stderr)
    return 130


def train(args: argparse.Namespace, run_type: type[Run] = Run, prepare=prepare) -> int:
    """Train (or resume) a ``run_type`` run on MNIST as ``prepare`` turns its images
    into inputs; ``mnist_cnn.py`` passes its own."""
    cluster = Cluster(args.distributed or launched_by_mpi())
    data = load_mnist(args.data_dir)
    train_x, test_x = prepare(data.train_images), prepare(data.test_images)
    train_y, test_y = data.train_labels.astype(np.int64), data.test_labels.astype(np.int64)
    run = run_type(args, train_x, train_y, cluster)
    if args.resume:
        run.resume(args.resume)
    first_epoch, started = run.epoch, time.perf_counter()
    train_step = make_train_step(run.trained, run.optimizer, captured=not args.no_capture)
    with StopRequest() as stop:
        cluster.print(run.describe())
        try:
            predictions = train_epochs(run, train_step, test_x, test_y, stop)
        except Interrupted as stopped:
            return interrupted(run, stopped)
    if predictions is None:
        _, _, predictions = evaluate(run.model, test_x, test_y, args.device, run.eval_batch)
    if cluster.distributed and not run.trained.parameters_in_sync():
        print(f"warning: rank {cluster.rank}'s weights are out of sync with the other ranks'",
              file=sys.stderr)
    if not cluster.main:
        return 0
    run.out.mkdir(parents=True, exist_ok=True)
    figures = save_figures(run.history, data.test_images, test_y, predictions, run.out)
    final = run.history["test_acc"][-1] if run.history["test_acc"] else float("nan")
    print(f"\ntrained {plural(max(0, args.epochs - first_epoch), 'epoch')} "
          f"in {time.perf_counter() - started:.1f} s")
    print(f"checkpoint: {run.checkpoint}")
    for path in figures:
        print(f"figure: {path}")
    print(f"test accuracy: {100 * final:.2f}%")
    return 0


def launched_by_mpi() -> bool:
    """Started by mpiexec/mpirun (checked without importing MPI)."""
    from minitorch_exp.distributed import launched
    return launched()


if __name__ == "__main__":
    os.environ.setdefault("MPLBACKEND", "Agg")
    sys.exit(main())
