"""examples/shakespeare_gpt.py on a tiny config: it trains (the loss falls), ends with
``val loss: X.XXXX``, and a run stopped by Ctrl-C and resumed ends exactly where a
straight run does."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import minitorch_exp as mt

from ._scripts import load_script
from .test_mnist_interrupt import ENV, assert_interrupted, resume_words
from .test_mnist_interrupt import run_until as _run_until

pytest.importorskip("tqdm")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "shakespeare_gpt.py"
posix_only = pytest.mark.skipif(os.name != "posix", reason="sends SIGINT to a child")


@pytest.fixture(scope="module")
def example():
    return load_script("examples/shakespeare_gpt.py", "shakespeare_gpt_example")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """The corpus's first 30,000 characters (27,000 to train on, 3,000 held out)."""
    path = tmp_path_factory.mktemp("corpus") / "text.txt"
    text = (ROOT / "data" / "shakespeare" / "shakespeare.txt").read_text(encoding="utf-8")
    path.write_text(text[:30_000], encoding="utf-8")
    return path


def run_until(args: list[str], marker: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the example, send SIGINT once ``marker`` appears on stdout, wait for the end."""
    return _run_until(args, marker, timeout, script=EXAMPLE)


def tiny_args(corpus: Path, out: Path, steps: int) -> list[str]:
    return ["--data", str(corpus), "--out", str(out), "--steps", str(steps),
            "--batch-size", "8", "--block", "16", "--layers", "1", "--heads", "2",
            "--width", "32", "--lr", "1e-2", "--warmup", "3", "--eval-interval", "4",
            "--eval-batches", "2", "--sample-chars", "20"]


def test_a_short_run_learns_and_ends_with_the_val_loss(example, corpus, tmp_path,
                                                       capsys) -> None:
    out = tmp_path / "run"
    assert example.main(tiny_args(corpus, out, steps=40)) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"val loss: \d+\.\d{4}", lines[-1]), lines[-3:]
    history = mt.load(out / "checkpoint.npz")["history"]
    assert history["eval_step"] == list(range(0, 41, 4))
    assert history["val"][-1] < history["val"][0] - 0.5, history["val"]
    assert history["train"][-1] < history["train"][0] - 0.5, history["train"]
    assert len(history["loss"]) == 40
    assert (out / "loss.png").stat().st_size > 0
    assert len((out / "sample.txt").read_text(encoding="utf-8")) == 21  # prompt + 20


@posix_only
def test_ctrl_c_then_resume_ends_where_a_straight_run_does(example, corpus, tmp_path,
                                                           capsys) -> None:
    straight = tmp_path / "straight"
    assert example.main(tiny_args(corpus, straight, steps=100)) == 0
    expected = capsys.readouterr().out.strip().splitlines()[-1]

    out = tmp_path / "stopped"
    proc = run_until(tiny_args(corpus, out, steps=100), "step 4:")
    assert_interrupted(proc, out / "checkpoint.npz")
    stopped_at = mt.load(out / "checkpoint.npz")["step"]
    assert 4 <= stopped_at < 100
    assert f"interrupted after {stopped_at} steps" in proc.stderr

    words = resume_words(proc.stderr)
    assert words[words.index("--steps") + 1] == "100"
    resumed = subprocess.run(words, capture_output=True, text=True, env=ENV, cwd=ROOT,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from {out / 'checkpoint.npz'} after {stopped_at} steps" in resumed.stdout
    assert f"trained {100 - stopped_at} steps in" in resumed.stdout
    assert resumed.stdout.strip().splitlines()[-1] == expected
    a, b = mt.load(straight / "checkpoint.npz"), mt.load(out / "checkpoint.npz")
    assert a["step"] == b["step"] == 100
    for name, value in a["model"].items():
        assert np.asarray(value).tobytes() == np.asarray(b["model"][name]).tobytes(), name
    assert a["history"]["loss"] == b["history"]["loss"]


def test_the_learning_rate_warms_up_then_decays_to_a_tenth(example) -> None:
    args = example.parse_args(["--steps", "1000", "--warmup", "100", "--lr", "1e-3"])
    rates = [example.learning_rate(s, args) for s in range(1000)]
    assert rates[0] == pytest.approx(1e-5) and rates[99] == pytest.approx(1e-3)
    assert np.all(np.diff(rates[:100]) > 0) and np.all(np.diff(rates[100:]) < 0)
    assert example.learning_rate(1000, args) == pytest.approx(1e-4)


def test_decay_applies_to_2d_weights_only(example) -> None:
    model = example.GPT(10, 8, 2, 2, 16)
    args = example.parse_args(["--weight-decay", "0.1"])
    decay, keep = example.make_optimizer(model, args).param_groups
    assert decay["weight_decay"] == 0.1 and keep["weight_decay"] == 0.0
    assert {p.ndim for p in decay["params"]} == {2}
    assert {p.ndim for p in keep["params"]} == {1}
    assert len(decay["params"]) + len(keep["params"]) == len(list(model.parameters()))


def test_pick_draws_among_the_top_k_only(example) -> None:
    rng = mt.Generator().manual_seed(0)
    logits = mt.tensor([0.0, 3.0, 1.0, 2.9, -1.0])
    assert {example.pick(logits, 1.0, 1, rng) for _ in range(50)} == {1}
    assert {example.pick(logits, 1.0, 2, rng) for _ in range(200)} == {1, 3}
    assert {example.pick(logits, 0.01, 0, rng) for _ in range(50)} == {1}  # cold: argmax
    assert len({example.pick(logits, 100.0, 0, rng) for _ in range(500)}) == 5


def test_tokenizer_round_trips_and_the_split_is_90_10(example) -> None:
    text = "To be, or not to be: that is the question.\n" * 10
    tok = example.CharTokenizer.fit(text)
    assert tok.decode(tok.encode(text)) == text and len(tok) == len(set(text))
    train, val = example.split(tok.encode(text))
    assert len(train) == int(0.9 * len(text)) and len(train) + len(val) == len(text)


def test_help_shows_every_default(example, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as info:
        example.parse_args(["--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out.split("\noptions:\n", 1)[1]
    for name in vars(example.parse_args([])):
        block = text.split(f"\n  --{name.replace('_', '-')}", 1)[1].split("\n  -", 1)[0]
        assert "(default: " in block, (name, block)


def test_a_missing_corpus_leaves_no_folder(example, tmp_path) -> None:
    out = tmp_path / "run"
    with pytest.raises(FileNotFoundError):
        example.main(["--out", str(out), "--data", str(tmp_path / "missing.txt")])
    assert not out.exists()


def test_the_example_runs_as_a_script(corpus, tmp_path) -> None:
    proc = subprocess.run([sys.executable, str(EXAMPLE), *tiny_args(corpus, tmp_path, 2)],
                          capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.fullmatch(r"val loss: \d+\.\d{4}", proc.stdout.strip().splitlines()[-1])
