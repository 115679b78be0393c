"""mt.save / mt.load of model and optimizer state: exact round trips, atomic writes,
bitwise-exact resume of training, and one run of the MNIST example."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.nn import checkpoint

from .._scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "mnist_mlp.py"


def load_example():
    return load_script("examples/mnist_mlp.py", "mnist_mlp_example")


@pytest.fixture(scope="module")
def example():
    pytest.importorskip("tqdm")
    return load_example()


@pytest.fixture(scope="module")
def mnist_subset(example):
    """400 training images, prepared as the example prepares them."""
    from minitorch_exp.nn.idx import load_mnist
    try:
        data = load_mnist()
    except FileNotFoundError:
        pytest.skip("MNIST files not found")
    x = example.prepare(data.train_images[:400])
    y = data.train_labels[:400].astype(np.int64)
    return x, y


def trained_model_and_optimizer(dtype=np.float32):
    mt.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5, dtype=dtype), nn.ReLU(), nn.Linear(5, 3, dtype=dtype))
    opt = nn.optim.Adam(model.parameters(), lr=0.01, betas=(0.8, 0.95))
    x = mt.tensor(np.random.default_rng(0).standard_normal((8, 6)).astype(dtype))
    for _ in range(2):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), np.arange(8) % 3).backward()
        opt.step()
    return model, opt


def assert_bitwise_equal(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()


# ---- exact round trips ----------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_model_and_optimizer_state_round_trip(dtype, tmp_path):
    model, opt = trained_model_and_optimizer(dtype)
    path = tmp_path / "ckpt.npz"
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3,
             "lr": 0.1, "name": "mlp", "labels": np.arange(3, dtype=np.int32)}
    mt.save(state, path)
    loaded = mt.load(path)
    assert list(loaded["model"]) == list(state["model"])
    for k, v in state["model"].items():
        assert isinstance(loaded["model"][k], mt.Node)
        assert loaded["model"][k].dtype == dtype
        assert_bitwise_equal(loaded["model"][k].numpy(), v.numpy())
    saved_opt, got_opt = state["optimizer"], loaded["optimizer"]
    assert got_opt["param_groups"] == saved_opt["param_groups"]
    assert isinstance(got_opt["param_groups"][0]["betas"], tuple)
    assert sorted(got_opt["state"]) == sorted(saved_opt["state"]) == [0, 1, 2, 3]
    for i, entries in saved_opt["state"].items():
        assert got_opt["state"][i]["step"] == entries["step"] == 2
        for key in ("exp_avg", "exp_avg_sq"):
            assert_bitwise_equal(got_opt["state"][i][key].numpy(), entries[key].numpy())
    assert loaded["epoch"] == 3 and loaded["lr"] == 0.1 and loaded["name"] == "mlp"
    assert_bitwise_equal(loaded["labels"].numpy(), state["labels"])
    # and it loads back into fresh objects
    fresh, _ = trained_model_and_optimizer(dtype)
    nn.init.zeros_(fresh[0].weight)
    fresh.load_state_dict(loaded["model"])
    for p, q in zip(model.parameters(), fresh.parameters()):
        assert_bitwise_equal(p.numpy(), q.numpy())


def test_saved_file_has_no_pickle(tmp_path):
    model, opt = trained_model_and_optimizer()
    path = tmp_path / "ckpt.npz"
    mt.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, path)
    with np.load(path, allow_pickle=False) as npz:  # every member loads without pickle
        for name in npz.files:
            assert npz[name].dtype != object


def test_crash_mid_write_leaves_the_old_file_intact(tmp_path, monkeypatch):
    model, _ = trained_model_and_optimizer()
    path = tmp_path / "ckpt.npz"
    mt.save({"model": model.state_dict()}, path)
    before = path.read_bytes()
    old_bias = model[0].bias.numpy().copy()
    with mt.no_grad():
        for p in model.parameters():
            p += 1.0

    def crashing_savez(f, **arrays):
        f.write(b"PK\x03\x04 half a zip file")
        raise KeyboardInterrupt("power cut")

    monkeypatch.setattr(checkpoint.np, "savez", crashing_savez)
    with pytest.raises(KeyboardInterrupt):
        mt.save({"model": model.state_dict()}, path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["ckpt.npz"]  # no temp file left behind
    loaded = mt.load(path)
    assert_bitwise_equal(loaded["model"]["0.bias"].numpy(), old_bias)


def test_nested_lists_tuples_and_namedtuples(tmp_path):
    from collections import namedtuple
    Pair = namedtuple("Pair", "a b")
    obj = {"list": [mt.ones(2), 1.5], "tuple": (mt.zeros(1, dtype=mt.int64), "x"),
           "named": Pair(mt.ones(1), None)}
    mt.save(obj, tmp_path / "n.npz")
    got = mt.load(tmp_path / "n.npz")
    assert isinstance(got["list"], list) and got["list"][1] == 1.5
    np.testing.assert_array_equal(got["list"][0].numpy(), [1.0, 1.0])
    assert isinstance(got["tuple"], tuple) and got["tuple"][0].dtype == np.int64
    assert isinstance(got["named"], tuple) and got["named"][1] is None


def test_save_rejects_unsupported_values(tmp_path):
    with pytest.raises(TypeError):
        mt.save({"model": object()}, tmp_path / "x.npz")
    assert not (tmp_path / "x.npz").exists()


# ---- exact resume ---------------------------------------------------------------

def make_run(example, x, y, optimizer: str, captured: bool):
    mt.manual_seed(0)
    model = example.build_model([32])
    if optimizer == "sgd":
        opt = nn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    else:
        opt = nn.optim.AdamW(model.parameters(), lr=1e-3)
    sched = nn.optim.CosineAnnealingLR(opt, T_max=2)
    loader = nn.DataLoader(nn.TensorDataset(x, y), batch_size=64, shuffle=True, seed=5)
    return model, opt, sched, loader, example.make_train_step(model, opt, captured)


def train_epochs(example, run, first, last):
    model, opt, sched, loader, step = run
    for epoch in range(first, last):
        example.train_epoch(step, loader, epoch, last)
        sched.step()


# a captured step is bitwise the eager one when both run fused kernels
@pytest.mark.usefixtures("fuse_all")
@pytest.mark.parametrize("captured", [True, False], ids=["captured", "eager"])
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_resume_is_bitwise_exact(example, mnist_subset, optimizer, captured, tmp_path):
    """Also: a captured step gives the eager step's numbers, and one made before
    ``load_state_dict`` still trains the loaded weights."""
    x, y = mnist_subset
    straight = make_run(example, x, y, optimizer, captured=False)
    train_epochs(example, straight, 0, 2)

    first = make_run(example, x, y, optimizer, captured)
    train_epochs(example, first, 0, 1)
    model, opt, sched, loader, _ = first
    path = tmp_path / "checkpoint.npz"
    mt.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
             "scheduler": sched.state_dict(), "epoch": 1}, path)
    del first, model, opt, sched, loader

    resumed = make_run(example, x, y, optimizer, captured)  # fresh, different init below
    with mt.no_grad():
        for p in resumed[0].parameters():
            p += 1.0
    state = mt.load(path)
    model, opt, sched, loader, _ = resumed
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    sched.load_state_dict(state["scheduler"])
    loader.epoch = int(state["epoch"])
    train_epochs(example, resumed, 1, 2)

    for (name, p), q in zip(straight[0].named_parameters(), resumed[0].parameters()):
        assert p.numpy().tobytes() == q.numpy().tobytes(), name
    assert straight[1].param_groups[0]["lr"] == resumed[1].param_groups[0]["lr"]
    # and training actually changed the weights
    fresh = make_run(example, x, y, optimizer, captured)[0]
    assert not np.array_equal(fresh[0].weight.numpy(), resumed[0][0].weight.numpy())


# ---- the example, once ------------------------------------------------------------

def test_mnist_example_runs_one_epoch(example, mnist_subset, tmp_path):
    env = {**os.environ, "MPLBACKEND": "Agg", "TQDM_DISABLE": "1"}
    pytest.importorskip("matplotlib")
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, str(EXAMPLE), "--epochs", "1", "--out", str(out)],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "test accuracy: " in proc.stdout
    acc = float(proc.stdout.split("test accuracy: ")[1].split("%")[0])
    assert acc > 90.0
    for name in ("checkpoint.npz", "curves.png", "predictions.png"):
        assert (out / name).stat().st_size > 0, name
    state = mt.load(out / "checkpoint.npz")
    assert state["epoch"] == 1 and len(state["history"]["test_acc"]) == 1
    model = example.build_model([256])
    model.load_state_dict(state["model"])  # the checkpoint fits the example's model
    x, y = mnist_subset
    with mt.no_grad():
        pred = model(mt.tensor(x)).argmax(1).numpy()
    assert (pred == y).mean() > 0.85
