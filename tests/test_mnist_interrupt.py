"""examples/mnist_mlp.py: Ctrl-C saves a checkpoint and says how to resume; --help
shows defaults; no empty output folder is left behind."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp import nn

from ._mnist import write_tiny_mnist
from ._scripts import load_script

pytest.importorskip("tqdm")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "mnist_mlp.py"
posix_only = pytest.mark.skipif(os.name != "posix", reason="sends SIGINT to a child")
ENV = {**os.environ, "MPLBACKEND": "Agg", "TQDM_DISABLE": "1", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def example():
    return load_script("examples/mnist_mlp.py", "mnist_mlp_example")


@pytest.fixture(scope="module")
def tiny_mnist(tmp_path_factory) -> Path:
    """512 training and 64 test images of noise, in the MNIST layout."""
    return write_tiny_mnist(tmp_path_factory.mktemp("tiny_mnist"), 512, 64)


def tiny_args(data: Path, out: Path, epochs: int) -> list[str]:
    return ["--data-dir", str(data), "--out", str(out), "--epochs", str(epochs),
            "--batch-size", "16", "--hidden", "8"]


def default_sigint() -> None:
    """In the child: take SIGINT even when pytest runs with it ignored (background jobs)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_until(args: list[str], marker: str, timeout: float = 120,
              script: Path = EXAMPLE) -> subprocess.CompletedProcess:
    """Run the example ``script``, send SIGINT once ``marker`` appears on stdout, wait for
    the end."""
    proc = subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT,
                            preexec_fn=default_sigint)
    stderr: list[str] = []
    reader = threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True)
    reader.start()
    stdout, deadline = [], time.monotonic() + timeout
    for line in proc.stdout:
        stdout.append(line)
        if marker in line:
            proc.send_signal(signal.SIGINT)
            break
        assert time.monotonic() < deadline, "".join(stdout)
    else:
        proc.wait()
        pytest.fail(f"{marker!r} never printed:\n{''.join(stdout)}\n{''.join(stderr)}")
    stdout.extend(proc.stdout)
    proc.wait(timeout=timeout)
    reader.join(timeout=10)
    return subprocess.CompletedProcess(proc.args, proc.returncode, "".join(stdout),
                                       "".join(stderr))


def resume_words(stderr: str) -> list[str]:
    """The command the interrupted run suggests, with this interpreter."""
    lines = [line for line in stderr.splitlines() if "--resume" in line]
    assert len(lines) == 1, stderr
    words = shlex.split(lines[0].split("continue with: ", 1)[1])
    assert words[0] == "python"
    return [sys.executable, *words[1:]]


def assert_interrupted(proc: subprocess.CompletedProcess, checkpoint: Path) -> None:
    assert proc.returncode == 130, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert checkpoint.is_file() and str(checkpoint) in proc.stderr, proc.stderr


@posix_only
def test_ctrl_c_in_the_first_epoch_saves_and_resume_finishes(tiny_mnist, tmp_path) -> None:
    out = tmp_path / "run"
    proc = run_until(tiny_args(tiny_mnist, out, epochs=1), "model:")
    assert_interrupted(proc, out / "checkpoint.npz")
    state = mt.load(out / "checkpoint.npz")
    assert state["epoch"] == 0 and state["history"]["train_loss"] == []

    resumed = subprocess.run(resume_words(proc.stderr), capture_output=True, text=True,
                             env=ENV, cwd=ROOT, timeout=120)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stdout
    assert "trained 1 epoch in" in resumed.stdout, resumed.stdout
    assert mt.load(out / "checkpoint.npz")["epoch"] == 1


@posix_only
def test_ctrl_c_mid_training_saves_the_current_state(tiny_mnist, tmp_path) -> None:
    out = tmp_path / "run"
    proc = run_until(tiny_args(tiny_mnist, out, epochs=10_000), "epoch 2:")
    assert_interrupted(proc, out / "checkpoint.npz")
    state = mt.load(out / "checkpoint.npz")
    assert state["epoch"] >= 2 and len(state["history"]["test_acc"]) == state["epoch"]
    words = resume_words(proc.stderr)
    assert words[words.index("--epochs") + 1] == "10000"
    assert words[words.index("--resume") + 1] == str(out / "checkpoint.npz")


def test_interrupt_before_training_leaves_no_folder(example, tmp_path, monkeypatch,
                                                   capsys) -> None:
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(example, "load_mnist", interrupted)
    out = tmp_path / "nested" / "run"
    assert example.main(["--out", str(out)]) == 130
    assert not (tmp_path / "nested").exists()
    assert "interrupted" in capsys.readouterr().err


def test_failure_before_training_leaves_no_folder(example, tmp_path) -> None:
    out = tmp_path / "run"
    with pytest.raises(FileNotFoundError):
        example.main(["--out", str(out), "--data-dir", str(tmp_path / "missing")])
    assert not out.exists()


def test_resume_mid_epoch_is_bitwise_exact(example, tmp_path) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((96, 784)).astype(np.float32)
    y = rng.integers(0, 10, 96)

    def make():
        mt.manual_seed(0)
        model = example.build_model([8])
        opt = nn.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        loader = nn.DataLoader(nn.TensorDataset(x, y), batch_size=16, shuffle=True, seed=3)
        return model, opt, loader, example.make_train_step(model, opt)

    straight, _, loader, step = make()
    expected = example.train_epoch(step, loader, 0, 1)

    model, opt, loader, step = make()
    checks = iter(range(100))
    with pytest.raises(example.Interrupted) as info:
        example.train_epoch(step, loader, 0, 1, stop=lambda: next(checks) == 4)
    assert info.value.progress["batches"] == 4
    mt.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
             "progress": info.value.progress}, tmp_path / "c.npz")

    state = mt.load(tmp_path / "c.npz")
    resumed, opt, loader, step = make()
    resumed.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    got = example.train_epoch(step, loader, 0, 1, progress=state["progress"])
    assert got[:2] == expected[:2]  # the epoch's loss and accuracy cover all its batches
    for p, q in zip(straight.parameters(), resumed.parameters()):
        assert p.numpy().tobytes() == q.numpy().tobytes()


def test_help_shows_every_default(example, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as info:
        example.parse_args(["--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out.split("\noptions:\n", 1)[1]
    options = [name.replace("_", "-") for name in vars(example.parse_args([]))]
    for name in options:
        block = text.split(f"\n  --{name}", 1)[1].split("\n  -", 1)[0]
        assert "(default: " in block, (name, block)
    assert "(default: 10)" in text and "(default: runs/mnist_mlp)" in text


@pytest.mark.parametrize(("n", "text"), [(0, "0 epochs"), (1, "1 epoch"), (2, "2 epochs")])
def test_epoch_count_is_pluralised(example, n, text) -> None:
    assert example.plural(n, "epoch") == text
