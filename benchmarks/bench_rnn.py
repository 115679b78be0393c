"""LSTM language-model training step: minitorch_exp's nn.LSTM vs PyTorch's.

The step of PyTorch's word language model example (examples/word_language_model):
an embedding of 200, a 2-layer LSTM 200 wide, a decoder to the vocabulary, on
sequences of 35 tokens in batches of 20, with the hidden state carried over from
the previous batch (detached), cross-entropy, gradient clipping at 0.25 and SGD
at lr 20. The example's vocabulary (Wikitext-2, ~33,000 words; 10,000 in issue
40's measurement) makes the decoder and the softmax dominate a step; on the 2-core
reference machine we use 1,000 words so that the recurrent part -- what this
benchmark is about -- is most of the work. Dropout 0.2 as in the example.

Rows, in one process, on the same batches and starting weights (PyTorch's
initialisation, loaded into ours by ``load_state_dict``):

* ``pytorch``: torch.nn.LSTM (its fused CPU kernels), eager;
* ``minitorch_exp``: nn.LSTM, eager;
* ``minitorch_exp captured``: the step under ``mt.capture`` when it can be
  recorded. The embedding reads its indices on the host (a bounds check), which a
  recording refuses (``CaptureError``); the row then says so.

A second table splits each framework's step into forward (embedding to loss),
backward, and clipping + SGD. A sanity check first takes two steps with dropout 0
in both frameworks and compares every parameter.

    python benchmarks/bench_rnn.py                # 2 threads
    python benchmarks/bench_rnn.py --threads 1
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from common import (
    RESULTS_DIR,
    Cycle,
    Table,
    _atomic_write_text,
    format_seconds,
    interleaved_timeit,
    phase_times,
    pin_threads,
    print_machine_info,
)

import minitorch_exp as mt
from minitorch_exp import nn

VOCAB, WIDTH, LAYERS, BPTT, BATCH = 1000, 200, 2, 35, 20
DROPOUT, LR, CLIP = 0.2, 20.0, 0.25
POOL = 4  # distinct batches, cycled


def word_lm(lib, dropout: float):
    """The example's RNNModel (LSTM), written once against ``torch.nn`` or ``nn``."""

    class RNNModel(lib.Module):
        def __init__(self):
            super().__init__()
            self.drop = lib.Dropout(dropout)
            self.encoder = lib.Embedding(VOCAB, WIDTH)
            self.rnn = lib.LSTM(WIDTH, WIDTH, LAYERS, dropout=dropout)
            self.decoder = lib.Linear(WIDTH, VOCAB)

        def forward(self, x, hidden):
            out, hidden = self.rnn(self.drop(self.encoder(x)), hidden)
            return self.decoder(self.drop(out)).reshape(-1, VOCAB), hidden

    return RNNModel()


def batches(seed: int = 1):
    rng = np.random.default_rng(seed)
    return [(rng.integers(0, VOCAB, (BPTT, BATCH)), rng.integers(0, VOCAB, BPTT * BATCH))
            for _ in range(POOL)]


def initial_state(seed: int = 0) -> dict:
    """PyTorch's initialisation of the model, as arrays."""
    import torch
    torch.manual_seed(seed)
    return {k: v.numpy().copy() for k, v in word_lm(torch.nn, 0.0).state_dict().items()}


# ---- the steps: each returns (step, parameters as arrays, phases) -------------------------------

def minitorch_step(state, data, dropout=DROPOUT, captured=False):
    model = word_lm(nn, dropout)
    model.load_state_dict(state)
    opt = nn.optim.SGD(model.parameters(), lr=LR)
    pool = Cycle([(mt.tensor(x), mt.tensor(y)) for x, y in data])
    zeros = mt.zeros(LAYERS, BATCH, WIDTH)
    hidden = [(zeros, zeros)]

    def forward(x, y, h, c):
        out, (h, c) = model(x, (h, c))
        return nn.functional.cross_entropy(out, y), h.detach(), c.detach()

    def update():
        nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()

    def train_step(x, y, h, c):
        opt.zero_grad()
        loss, h, c = forward(x, y, h, c)
        loss.backward()
        update()
        return h, c

    run = mt.capture(train_step) if captured else train_step

    def step():
        hidden[0] = run(*pool.next(), *hidden[0])

    def phases():
        x, y = pool.next()
        times, (_, h, c) = phase_times(opt.zero_grad, lambda: forward(x, y, *hidden[0]),
                                       update)
        hidden[0] = (h, c)
        return times

    return step, lambda: [p.numpy() for p in model.parameters()], phases


def minitorch_captured_step(state, data, dropout=DROPOUT):
    return minitorch_step(state, data, dropout, captured=True)


def torch_step(state, data, dropout=DROPOUT):
    import torch
    model = word_lm(torch.nn, dropout)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    pool = Cycle([(torch.from_numpy(x), torch.from_numpy(y)) for x, y in data])
    zeros = torch.zeros(LAYERS, BATCH, WIDTH)
    hidden = [(zeros, zeros)]

    def forward(x, y):
        out, (h, c) = model(x, hidden[0])
        hidden[0] = (h.detach(), c.detach())
        return torch.nn.functional.cross_entropy(out, y)

    def update():
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()

    def step():
        opt.zero_grad()
        forward(*pool.next()).backward()
        update()

    def phases():
        x, y = pool.next()
        return phase_times(opt.zero_grad, lambda: forward(x, y), update)[0]

    return step, lambda: [p.detach().numpy() for p in model.parameters()], phases


# ---- driver --------------------------------------------------------------------------------------

def check_same_steps(state, data, steps: int = 2, rtol=2e-3, atol=2e-4) -> None:
    """Without dropout, both frameworks take the same steps (float32 rounding apart)."""
    mine, theirs = minitorch_step(state, data, 0.0), torch_step(state, data, 0.0)
    for _ in range(steps):
        mine[0]()
        theirs[0]()
    for a, b in zip(mine[1](), theirs[1]()):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def median_phases(phases, n: int = 7) -> tuple[float, float, float]:
    phases()
    samples = [phases() for _ in range(n)]
    return tuple(float(np.median([s[i] for s in samples])) for i in range(3))


def try_captured(state, data):
    """The captured step, or the reason it cannot be recorded."""
    step = minitorch_captured_step(state, data)[0]
    try:
        for _ in range(3):  # warm-up, record, replay
            step()
    except mt.CaptureError as err:
        return None, str(err).split(";")[0]
    return step, None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="threads for every library")
    parser.add_argument("--min-time", type=float, default=1.0,
                        help="seconds of measurement per row")
    args = parser.parse_args(argv)
    pinned = pin_threads(args.threads)
    mt.set_num_threads(args.threads)
    print_machine_info()
    print(f"{'pinned':>22}: {pinned}\n")
    try:
        import torch  # noqa: F401
    except ImportError:
        print("PyTorch not installed: this benchmark compares with it; nothing to do")
        return 0

    state, data = initial_state(), batches()
    check_same_steps(state, data)
    size = f"V{VOCAB} w{WIDTH} l{LAYERS} T{BPTT} b{BATCH}"
    steps = {"pytorch": torch_step(state, data)[0],
             "minitorch_exp": minitorch_step(state, data)[0]}
    captured, why_not = try_captured(state, data)
    if captured is not None:
        steps["minitorch_exp captured"] = captured
    times = interleaved_timeit(steps, args.min_time * len(steps))
    tag = f"rnn_lm_t{args.threads}"
    table = Table(f"{tag}_vs_pytorch", baseline="pytorch")
    for name, t in times.items():
        table.add(name, size, t)
    split = {"pytorch": median_phases(torch_step(state, data)[2]),
             "minitorch_exp": median_phases(minitorch_step(state, data)[2])}

    lines = ["| framework | time/step | tokens/s | vs pytorch |", "| --- | ---: | ---: | ---: |"]
    for name, t in times.items():
        lines.append(f"| {name} | {format_seconds(t)} | {BPTT * BATCH / t:,.0f} | "
                     f"{t / times['pytorch']:.2f}x |")
    if why_not:
        lines.append(f"| minitorch_exp captured | -- | -- | not recorded: {why_not} |")
    lines += ["", "Where the time goes (median of 7 steps, each phase timed alone):", "",
              "| framework | forward + loss | backward | clip + SGD |",
              "| --- | ---: | ---: | ---: |"]
    for name, (f, b, u) in split.items():
        lines.append(f"| {name} | {format_seconds(f)} | {format_seconds(b)} | "
                     f"{format_seconds(u)} |")
    load = ""
    if hasattr(os, "getloadavg"):
        load = "Load average during the run: " + ", ".join(f"{x:.1f}" for x in os.getloadavg())
    text = (f"# LSTM language-model training step, {args.threads} threads\n\n{load}\n\n"
            f"{size} (vocabulary 1000, not the example's: see bench_rnn.py), dropout "
            f"{DROPOUT}, clip {CLIP}, SGD lr {LR}. Time per step is the median of 5 "
            "interleaved rounds; `vs pytorch` is time over PyTorch's (below 1 is "
            "faster).\n\n" + "\n".join(lines) + "\n")
    print("\n" + text)
    table.write()
    _atomic_write_text(RESULTS_DIR / f"{tag}_summary.md", text)
    print(f"wrote {RESULTS_DIR}/{tag}_vs_pytorch.{{md,csv}}, {tag}_summary.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
