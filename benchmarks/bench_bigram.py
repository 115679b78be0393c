"""The lecture's bigram language model: a training step here and in PyTorch.

The model of the well-known lecture's first step towards a GPT: an embedding of
the vocabulary into itself (each character's row is the logits of the next),
cross-entropy over the vocabulary, AdamW at 1e-3, on batches of 32 sequences of
8 characters of ``data/shakespeare``. At this size a step is a few hundred
microseconds of arithmetic, so it measures what every small op costs: the
lookup, the loss and its gradient, the gradient's scatter back into the table,
and the optimizer. Both start from PyTorch's initial table and see the same
batches; a check first compares the tables after two steps.

Rows per thread count, in one process, interleaved:

* ``pytorch``: the step in PyTorch, eager;
* ``minitorch_exp``: the same step written with ``import minitorch_exp as torch``;
* ``minitorch_exp captured``: that step under ``mt.capture``.

    python benchmarks/bench_bigram.py                 # 1 and 2 threads
    python benchmarks/bench_bigram.py --threads 1
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from common import (
    RESULTS_DIR,
    StepCounter,
    Table,
    _atomic_write_text,
    format_seconds,
    interleaved_timeit,
    load_average,
    phase_times,
    pin_threads,
    print_machine_info,
)

import minitorch_exp as mt

CORPUS = Path(__file__).resolve().parents[1] / "data" / "shakespeare" / "shakespeare.txt"
BATCH, BLOCK, LR = 32, 8, 1e-3
POOL = 16  # distinct batches cycled through in the timed rows


class Setup:
    """The corpus as token ids, a pool of batches, and PyTorch's initial table."""

    def __init__(self, seed: int = 0):
        import torch
        text = CORPUS.read_text(encoding="utf-8")
        chars = sorted(set(text))
        index = {c: i for i, c in enumerate(chars)}
        tokens = np.array([index[c] for c in text], dtype=np.int64)
        self.vocab = len(chars)
        rng = np.random.default_rng(seed)
        self.pool = []
        for _ in range(POOL):
            starts = rng.integers(0, len(tokens) - BLOCK - 1, BATCH)
            x = np.stack([tokens[s:s + BLOCK] for s in starts])
            y = np.stack([tokens[s + 1:s + BLOCK + 1] for s in starts])
            self.pool.append((x, y))
        torch.manual_seed(seed)
        self.table = torch.nn.Embedding(self.vocab, self.vocab).weight.detach().numpy().copy()


def make_step(lib, setup: Setup, captured: bool = False):
    """``(step(i), phases(i), table())`` for ``lib`` (torch or minitorch_exp): the
    lecture's model and step, written once for both."""
    nn, F = lib.nn, lib.nn.functional

    class Bigram(nn.Module):
        def __init__(self, vocab: int):
            super().__init__()
            self.token_embedding_table = nn.Embedding(vocab, vocab)

        def forward(self, idx, targets):
            logits = self.token_embedding_table(idx)
            b, t, c = logits.shape
            return F.cross_entropy(logits.view(b * t, c), targets.view(b * t))

    model = Bigram(setup.vocab)
    with lib.no_grad():
        model.token_embedding_table.weight.copy_(lib.tensor(setup.table))
    opt = lib.optim.AdamW(model.parameters(), lr=LR)
    pool = [(lib.tensor(x), lib.tensor(y)) for x, y in setup.pool]

    def train_step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        opt.step()
        return loss

    run = mt.capture(train_step) if captured else train_step

    def step(i: int):
        return run(*pool[i % POOL])

    def phases(i: int):
        x, y = pool[i % POOL]
        return phase_times(lambda: opt.zero_grad(set_to_none=True), lambda: model(x, y),
                           opt.step)[0]

    return step, phases, lambda: model.token_embedding_table.weight.detach().numpy()


def check_same_steps(setup: Setup, steps: int = 2) -> None:
    import torch
    mine, theirs = make_step(mt, setup), make_step(torch, setup)
    for i in range(steps):
        mine[0](i)
        theirs[0](i)
    np.testing.assert_allclose(mine[2](), theirs[2](), rtol=1e-5, atol=1e-6)


def timing(setup: Setup, threads: int, min_time: float) -> str:
    import torch
    pin_threads(threads)
    mt.set_num_threads(threads)
    steps = {"pytorch": StepCounter(make_step(torch, setup)[0]),
             "minitorch_exp": StepCounter(make_step(mt, setup)[0]),
             "minitorch_exp captured": StepCounter(make_step(mt, setup, captured=True)[0])}
    times = interleaved_timeit(steps, min_time * len(steps), rounds=7)
    table = Table(f"bigram_t{threads}_vs_pytorch", baseline="pytorch")
    size = f"V{setup.vocab} b{BATCH} T{BLOCK}"
    for name, t in times.items():
        table.add(name, size, t)
    table.write()
    lines = [f"## {threads} thread{'s' if threads > 1 else ''}", "",
             "| framework | time/step | vs pytorch |", "| --- | ---: | ---: |"]
    lines += [f"| {name} | {format_seconds(t)} | {t / times['pytorch']:.2f}x |"
              for name, t in times.items()]
    lines += ["", "Phases (median of 15 steps, each phase timed alone):", "",
              "| framework | forward + loss | backward | AdamW |", "| --- | ---: | ---: | ---: |"]
    for name, lib in (("pytorch", torch), ("minitorch_exp", mt)):
        phases = make_step(lib, setup)[1]
        phases(0)
        samples = np.array([phases(i) for i in range(15)])
        f, b, u = np.median(samples, axis=0)
        lines.append(f"| {name} | {format_seconds(f)} | {format_seconds(b)} | "
                     f"{format_seconds(u)} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--min-time", type=float, default=1.0,
                        help="seconds of measurement per row")
    args = parser.parse_args(argv)
    print_machine_info()
    try:
        import torch  # noqa: F401
    except ImportError:
        print("PyTorch not installed: this benchmark compares with it; nothing to do")
        return 0
    setup = Setup()
    pin_threads(1)
    check_same_steps(setup)
    load = f"Load average at the start: {load_average()}"
    parts = [f"# Bigram model training step against PyTorch\n\n{load}\n\n"
             f"Vocabulary {setup.vocab}, batch {BATCH}, block {BLOCK}, AdamW lr {LR}. Time "
             "per step is the median of 7 interleaved rounds; `vs pytorch` is time over "
             "PyTorch's (below 1 is faster).\n"]
    for threads in args.threads:
        parts.append(timing(setup, threads, args.min_time))
        print("\n" + parts[-1], flush=True)
    text = "\n".join(parts)
    _atomic_write_text(RESULTS_DIR / "bigram_summary.md", text)
    print(f"wrote {RESULTS_DIR}/bigram_t*_vs_pytorch.{{md,csv}}, bigram_summary.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
