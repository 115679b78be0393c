"""Character-level GPT training step: ``examples/shakespeare_gpt.py``'s model vs PyTorch's.

The recipe of issue 40 and the example's defaults: block 64, batch 12, 4 layers,
4 heads, width 128, dropout 0, AdamW (decay 0.1 on the 2-D weights, betas 0.9 and
0.99) at 1e-3 with warm-up and cosine, gradients clipped to norm 1, on
``data/shakespeare``. Ours is the example's ``GPT`` and its optimizer; PyTorch's is
the same model written the same way below (the same classes, attribute names and
initialisation), and its initial weights load into ours, so both start from the
same point and see the same batches.

Per thread count (``--threads``, 1 and 2 by default), rows in one process:

* ``pytorch``: the step in PyTorch, eager;
* ``minitorch_exp``: the example's step, eager;
* ``minitorch_exp captured``: the whole step under ``mt.capture`` when it can be
  recorded; otherwise the table says why (the first error), and whether the step
  records without gradient clipping.

A second table splits each step into forward + loss, backward, and clipping +
AdamW. Then, unless ``--loss-steps 0``, both frameworks train ``--loss-steps``
steps from the same start and report the loss over the whole validation split
(the example's last line) and the seconds it took. ``--profile`` prints the top
costs of our eager step under cProfile (and writes them to the results).

    python benchmarks/bench_gpt.py                      # 1 and 2 threads, 500 steps
    python benchmarks/bench_gpt.py --threads 1 --loss-steps 0 --profile
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time
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
from minitorch_exp import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import shakespeare_gpt as example  # noqa: E402

POOL = 8  # distinct batches cycled through in the timed rows


# ---- PyTorch's twin of the example's model ------------------------------------------------------

def torch_gpt(vocab: int, block: int, layers: int, heads: int, width: int):
    """``example.GPT`` written in PyTorch: the same modules and names (and both keep
    PyTorch's default initialisation)."""
    import torch
    from torch import nn as tnn
    from torch.nn import functional as tF

    class CausalSelfAttention(tnn.Module):
        def __init__(self):
            super().__init__()
            self.qkv, self.proj = tnn.Linear(width, 3 * width), tnn.Linear(width, width)
            self.resid_dropout = tnn.Dropout(0.0)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = (z.reshape(b, t, heads, c // heads).transpose(1, 2)
                       for z in self.qkv(x).split(c, -1))
            y = tF.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.resid_dropout(self.proj(y.transpose(1, 2).reshape(b, t, c)))

    class MLP(tnn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.proj = tnn.Linear(width, 4 * width), tnn.Linear(4 * width, width)
            self.dropout = tnn.Dropout(0.0)

        def forward(self, x):
            return self.dropout(self.proj(tF.gelu(self.fc(x))))

    class Block(tnn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.attn = tnn.LayerNorm(width), CausalSelfAttention()
            self.ln2, self.mlp = tnn.LayerNorm(width), MLP()

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class GPT(tnn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = tnn.Embedding(vocab, width), tnn.Embedding(block, width)
            self.dropout = tnn.Dropout(0.0)
            self.blocks = tnn.ModuleList([Block() for _ in range(layers)])
            self.ln, self.head = tnn.LayerNorm(width), tnn.Linear(width, vocab)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
            x = self.dropout(x)
            for b in self.blocks:
                x = b(x)
            return self.head(self.ln(x))

    return GPT()


class Setup:
    """The recipe's data and arguments, and PyTorch's initial weights as arrays."""

    def __init__(self, steps: int, seed: int = 0):
        import torch
        self.args = example.parse_args(["--steps", str(max(steps, 1)), "--seed", str(seed)])
        a = self.args
        text = Path(a.data).read_text(encoding="utf-8")
        self.tokenizer = example.CharTokenizer.fit(text)
        self.train_tokens, self.val_tokens = example.split(self.tokenizer.encode(text))
        torch.manual_seed(seed)
        model = torch_gpt(len(self.tokenizer), a.block, a.layers, a.heads, a.width)
        self.state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
        self.pool = [example.step_batch(self.train_tokens, i, a) for i in range(POOL)]

    def size(self) -> str:
        a = self.args
        return f"T{a.block} b{a.batch_size} l{a.layers} h{a.heads} w{a.width}"


# ---- the steps: each returns step(i) -> loss, phases(i) -> three seconds, parameters() ----------

def minitorch_run(setup: Setup, captured: bool = False, clip: bool = True):
    a = setup.args
    model = example.GPT(len(setup.tokenizer), a.block, a.layers, a.heads, a.width)
    model.load_state_dict(setup.state)
    opt = example.make_optimizer(model, a)

    def forward(x, y):
        logits = model(x)
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y)

    def tensors(batch):
        x, y = batch
        return mt.from_numpy(x), mt.from_numpy(y.reshape(-1))

    pool = [tensors(batch) for batch in setup.pool]

    def update():
        if clip:
            nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()

    def train_step(x, y):
        opt.zero_grad()
        loss = forward(x, y)
        loss.backward()
        update()
        return loss

    run = mt.capture(train_step) if captured else train_step

    def step(i: int, batch=None) -> float:
        for group in opt.param_groups:
            group["lr"] = example.learning_rate(i, a)
        return run(*(pool[i % POOL] if batch is None else tensors(batch)))

    def phases(i: int):
        x, y = pool[i % POOL]
        return phase_times(opt.zero_grad, lambda: forward(x, y), update)[0]

    def val_loss() -> float:
        return example.whole_split_loss(model, setup.val_tokens, a.block, "cpu")

    return step, phases, lambda: [p.numpy() for p in model.parameters()], val_loss


def torch_run(setup: Setup):
    import torch
    a = setup.args
    model = torch_gpt(len(setup.tokenizer), a.block, a.layers, a.heads, a.width)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in setup.state.items()})
    params = list(model.parameters())
    opt = torch.optim.AdamW([{"params": [p for p in params if p.ndim == 2],
                              "weight_decay": a.weight_decay},
                             {"params": [p for p in params if p.ndim != 2],
                              "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.99))

    def forward(x, y):
        logits = model(torch.from_numpy(x))
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 torch.from_numpy(y.reshape(-1)))

    def update():
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()

    def step(i: int, batch=None):
        for group in opt.param_groups:
            group["lr"] = example.learning_rate(i, a)
        opt.zero_grad()
        loss = forward(*(batch or setup.pool[i % POOL]))
        loss.backward()
        update()
        return loss

    def phases(i: int):
        x, y = setup.pool[i % POOL]
        return phase_times(opt.zero_grad, lambda: forward(x, y), update)[0]

    def val_loss() -> float:
        n = (len(setup.val_tokens) - 1) // a.block
        x = setup.val_tokens[:n * a.block].reshape(n, a.block)
        y = setup.val_tokens[1:n * a.block + 1].reshape(n, a.block)
        model.eval()
        with torch.no_grad():
            total = sum(forward(x[s:s + 128], y[s:s + 128]).item() * len(x[s:s + 128])
                        for s in range(0, n, 128))
        model.train()
        return total / n

    return step, phases, lambda: [p.detach().numpy() for p in model.parameters()], val_loss


# ---- driver --------------------------------------------------------------------------------------

def check_same_steps(setup: Setup, steps: int = 2, rtol=2e-3, atol=2e-5) -> None:
    """Both frameworks take the same first steps (float32 rounding apart)."""
    mine, theirs = minitorch_run(setup), torch_run(setup)
    for i in range(steps):
        mine[0](i)
        theirs[0](i)
    for a, b in zip(mine[2](), theirs[2]()):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def try_captured(setup: Setup, clip: bool = True):
    """The captured step, or the first line of the reason it cannot be recorded."""
    step = StepCounter(minitorch_run(setup, captured=True, clip=clip)[0])
    try:
        for _ in range(3):  # warm-up, record, replay
            step()
    except mt.CaptureError as err:
        return None, f"{str(err).split(';')[0].splitlines()[0]} ({_nn_site(err)})"
    return step, None


def _nn_site(err: Exception) -> str:
    """The innermost frame of ``minitorch_exp/nn`` that led to ``err``: the layer to blame."""
    import traceback
    frames = [f for f in traceback.extract_tb(err.__traceback__)
              if f"minitorch_exp{os.sep}nn{os.sep}" in f.filename]
    if not frames:
        return "outside nn"
    f = frames[-1]
    return f"{f.name}, nn/{Path(f.filename).name}:{f.lineno}"


def median_phases(phases, n: int = 7) -> tuple[float, float, float]:
    phases(0)
    samples = [phases(i) for i in range(n)]
    return tuple(float(np.median([s[i] for s in samples])) for i in range(3))


def profile_step(setup: Setup, steps: int = 5, top: int = 15) -> str:
    """cProfile's top costs (own time) over ``steps`` eager steps of ours."""
    step = minitorch_run(setup)[0]
    for i in range(3):
        step(i)
    profiler = cProfile.Profile()
    profiler.enable()
    for i in range(steps):
        step(i)
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    root = str(Path(__file__).resolve().parents[1]) + "/"
    return out.getvalue().replace(root, "").replace(os.path.expanduser("~"), "~")


def timing(setup: Setup, threads: int, min_time: float) -> str:
    pin_threads(threads)
    mt.set_num_threads(threads)
    steps = {"pytorch": StepCounter(torch_run(setup)[0]),
             "minitorch_exp": StepCounter(minitorch_run(setup)[0])}
    captured, why_not = try_captured(setup)
    unclipped_why = None
    if captured is not None:
        steps["minitorch_exp captured"] = captured
    else:
        unclipped_why = try_captured(setup, clip=False)[1]
    times = interleaved_timeit(steps, min_time * len(steps), rounds=7)
    tag = f"gpt_t{threads}"
    table = Table(f"{tag}_vs_pytorch", baseline="pytorch")
    for name, t in times.items():
        table.add(name, setup.size(), t)
    table.write()
    a = setup.args
    tokens = a.block * a.batch_size
    lines = [f"## {threads} thread{'s' if threads > 1 else ''}", "",
             "| framework | time/step | tokens/s | vs pytorch |", "| --- | ---: | ---: | ---: |"]
    for name, t in times.items():
        lines.append(f"| {name} | {format_seconds(t)} | {tokens / t:,.0f} | "
                     f"{t / times['pytorch']:.2f}x |")
    if why_not:
        lines.append(f"| minitorch_exp captured | -- | -- | not recorded: {why_not} |")
        lines.append(f"| captured, without clipping | -- | -- | "
                     f"{'not recorded: ' + unclipped_why if unclipped_why else 'records'} |")
    split = {"pytorch": median_phases(torch_run(setup)[1]),
             "minitorch_exp": median_phases(minitorch_run(setup)[1])}
    lines += ["", "Phases (median of 7 steps, each phase timed alone):", "",
              "| framework | forward + loss | backward | clip + AdamW |",
              "| --- | ---: | ---: | ---: |"]
    for name, (f, b, u) in split.items():
        lines.append(f"| {name} | {format_seconds(f)} | {format_seconds(b)} | "
                     f"{format_seconds(u)} |")
    return "\n".join(lines) + "\n"


def losses(setup: Setup, steps: int, threads: int) -> str:
    """Both frameworks trained ``steps`` steps of the recipe from the same start."""
    pin_threads(threads)
    mt.set_num_threads(threads)
    lines = [f"## Validation loss after {steps} steps ({threads} thread"
             f"{'s' if threads > 1 else ''}, the whole held-out split)", "",
             "| framework | val loss | training time |", "| --- | ---: | ---: |"]
    for name, make in (("pytorch", torch_run), ("minitorch_exp", minitorch_run)):
        step, _, _, val_loss = make(setup)
        started = time.perf_counter()
        for i in range(steps):
            step(i, example.step_batch(setup.train_tokens, i, setup.args))
        seconds = time.perf_counter() - started
        lines.append(f"| {name} | {val_loss():.4f} | {seconds:.1f} s |")
        print(lines[-1], flush=True)
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                        help="thread counts to time (every library pinned to each)")
    parser.add_argument("--min-time", type=float, default=2.0,
                        help="seconds of measurement per row")
    parser.add_argument("--loss-steps", type=int, default=500,
                        help="steps of training for the loss comparison (0: skip it)")
    parser.add_argument("--profile", action="store_true",
                        help="print cProfile's top costs of our eager step")
    args = parser.parse_args(argv)
    print_machine_info()
    try:
        import torch  # noqa: F401
    except ImportError:
        print("PyTorch not installed: this benchmark compares with it; nothing to do")
        return 0
    setup = Setup(args.loss_steps)
    pin_threads(1)
    check_same_steps(setup)
    load = f"Load average at the start: {load_average()}"
    a = setup.args
    parts = [f"# GPT training step (examples/shakespeare_gpt.py) against PyTorch\n\n{load}\n\n"
             f"{setup.size()}, vocabulary {len(setup.tokenizer)}, dropout 0, AdamW lr "
             f"{a.lr}, clip {a.clip}. Time per step is the median of 7 interleaved rounds; "
             "`vs pytorch` is time over PyTorch's (below 1 is faster).\n"]
    for threads in args.threads:
        parts.append(timing(setup, threads, args.min_time))
        print("\n" + parts[-1], flush=True)
    if args.loss_steps:
        parts.append(losses(setup, args.loss_steps, args.threads[0]))
    if args.profile:
        pin_threads(args.threads[0])
        mt.set_num_threads(args.threads[0])
        profile = profile_step(setup)
        print(profile)
        parts.append("## Our eager step under cProfile (5 steps, by own time)\n\n```\n"
                     + profile.strip() + "\n```\n")
    text = "\n".join(parts)
    _atomic_write_text(RESULTS_DIR / "gpt_summary.md", text)
    print(text)
    print(f"wrote {RESULTS_DIR}/gpt_t*_vs_pytorch.{{md,csv}}, gpt_summary.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
