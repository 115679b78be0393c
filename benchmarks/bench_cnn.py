"""Convolutions and a LeNet training step: minitorch_exp vs PyTorch CPU eager.

Three tables per thread count, every row of a table timed in this process, the
frameworks taking turns (``interleaved_timeit``, with a pause before each block so
that one library's spinning threads do not slow the next), medians of 7 rounds:

* ``cnn_conv_t<n>``: one conv2d, forward and backward (input and weight
  gradients; the first layer's input needs none), at LeNet's shapes and at the
  3x3 padded shape of PyTorch's MNIST example; and one conv_transpose2d at the
  shapes of the DCGAN generator's middle layers (``benchmarks/bench_dcgan.py``);
* ``cnn_lenet_t<n>``: one training step of ``examples/mnist_cnn.py``'s LeNet at
  batch 128 (forward, cross-entropy, backward, Adam): minitorch_exp eagerly and
  captured (``mt.capture``, as the example runs it), and PyTorch. Dropout is
  off in both, so that a check first confirms the two take the same steps;
* ``cnn_breakdown_t<n>``: where minitorch_exp's step spends its time, each part
  timed alone (captured) at the step's shapes, taking turns with the steps:
  im2col copies, the GEMMs of the convolutions and of the linear layers,
  col2im, pooling, and the rest of the step (ReLU and bias passes, the
  gradient's transposes, loss, Adam) as the captured step minus those parts;
  Python and graph overhead as eager minus captured.

    python benchmarks/bench_cnn.py                  # 1 and 2 threads
    python benchmarks/bench_cnn.py --threads 1 --min-time 1.0

Results go to ``benchmarks/results/cnn_*``; ``docs/conv.md`` discusses them.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from pathlib import Path

import numpy as np
from common import (
    RESULTS_DIR,
    Cycle,
    Table,
    _atomic_write_text,
    format_seconds,
    interleaved_timeit,
    pin_threads,
    print_machine_info,
)

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.nn import im2col
from minitorch_exp.nn.functional import conv2d, max_pool2d
from minitorch_exp.tensor.engine import realize
from minitorch_exp.tensor.expr import Dot

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from mnist_cnn import LeNet  # noqa: E402

BATCH = 128
#: name -> (input shape, out channels, kernel, padding, does the input need a gradient)
CONVS = {
    "conv1 1->20 k5 28x28": ((BATCH, 1, 28, 28), 20, 5, 0, False),
    "conv2 20->50 k5 12x12": ((BATCH, 20, 12, 12), 50, 5, 0, True),
    "32->64 k3 p1 14x14": ((BATCH, 32, 14, 14), 64, 3, 1, True),
}
#: name -> (input shape, out channels, kernel, stride, padding): DCGAN generator layers
TRANSPOSED = {
    "convT 256->128 k4 s2 4x4 b16": ((16, 256, 4, 4), 128, 4, 2, 1),
    "convT 128->64 k4 s2 8x8 b16": ((16, 128, 8, 8), 64, 4, 2, 1),
}
POOL = 4  # distinct batches cycled through
PAUSE = 0.2  # seconds of quiet before each timed block (see ``timed``)
ROUNDS = 7  # interleaved rounds per table; the median is kept (--rounds)


# ---------------------------------------------------------------- one convolution

def conv_arrays(shape, out_channels, kernel, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((out_channels, shape[1], kernel, kernel)).astype(np.float32) * 0.1
    g = rng.standard_normal((shape[0], out_channels, shape[2] + 1 - kernel,
                             shape[3] + 1 - kernel)).astype(np.float32)
    return x, w, rng.standard_normal(out_channels).astype(np.float32), g


def minitorch_conv(shape, out_channels, kernel, padding, input_grad):
    x, w, b, _ = conv_arrays(shape, out_channels, kernel)
    xn = mt.tensor(x, requires_grad=input_grad)
    wn, bn = mt.tensor(w, requires_grad=True), mt.tensor(b, requires_grad=True)

    def step():
        out = conv2d(xn, wn, bn, padding=padding)
        out.backward(mt.ones_like(out))
        wn.grad = bn.grad = xn.grad = None
    return step


def torch_conv(shape, out_channels, kernel, padding, input_grad):
    import torch
    x, w, b, _ = conv_arrays(shape, out_channels, kernel)
    xt = torch.tensor(x, requires_grad=input_grad)
    wt, bt = torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True)

    def step():
        out = torch.nn.functional.conv2d(xt, wt, bt, padding=padding)
        out.backward(torch.ones_like(out))
        wt.grad = bt.grad = xt.grad = None
    return step


def transposed_step(lib: str, shape, out_channels, kernel, stride, padding):
    """One conv_transpose2d forward and backward (input, weight and bias gradients) in
    ``lib`` ("minitorch_exp" or "pytorch"), from the same arrays."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((shape[1], out_channels, kernel, kernel)).astype(np.float32) * 0.1
    b = rng.standard_normal(out_channels).astype(np.float32)
    if lib == "pytorch":
        import torch
        fn, make, ones = (torch.nn.functional.conv_transpose2d,
                          lambda a: torch.tensor(a, requires_grad=True), torch.ones_like)
    else:
        fn, make, ones = (nn.functional.conv_transpose2d,
                          lambda a: mt.tensor(a, requires_grad=True), mt.ones_like)
    xs, ws, bs = make(x), make(w), make(b)

    def step():
        out = fn(xs, ws, bs, stride=stride, padding=padding)
        out.backward(ones(out))
        xs.grad = ws.grad = bs.grad = None
    return step


# ---------------------------------------------------------------- the LeNet step

def lenet_data(seed=1):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((BATCH, 1, 28, 28)).astype(np.float32),
             rng.integers(0, 10, BATCH).astype(np.int64)) for _ in range(POOL)]


def initial_state(seed=0):
    mt.manual_seed(seed)
    return {k: v.numpy().copy() for k, v in LeNet(dropout=0.0).state_dict().items()}


def minitorch_lenet(state, data, captured=False):
    model = LeNet(dropout=0.0)
    model.load_state_dict(state)
    opt = nn.optim.Adam(model.parameters(), lr=1e-3)
    pool = Cycle([(mt.tensor(x), mt.tensor(y)) for x, y in data])

    def train_step(x, y):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    run = mt.capture(train_step) if captured else train_step
    return lambda: run(*pool.next()), model


def torch_lenet(state, data):
    import torch

    class TorchLeNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = torch.nn.Conv2d(1, 20, 5), torch.nn.Conv2d(20, 50, 5)
            self.fc1, self.fc2 = torch.nn.Linear(800, 500), torch.nn.Linear(500, 10)

        def forward(self, x):
            F = torch.nn.functional
            x = F.max_pool2d(F.relu(self.conv1(x)), 2)
            x = F.max_pool2d(F.relu(self.conv2(x)), 2)
            return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))

    model = TorchLeNet()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    pool = Cycle([(torch.from_numpy(x), torch.from_numpy(y)) for x, y in data])

    def step():
        x, y = pool.next()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step, model


def check_same_steps(state, data, steps: int = 4) -> tuple[float, float]:
    """minitorch_exp (eager and captured) and PyTorch take the same steps: the losses of
    ``steps`` steps agree to float32 rounding, and no parameter differs by more than Adam
    can move it in one step (lr; Adam's g/sqrt(v) turns the rounding noise of a near-zero
    gradient into a step of up to lr). Returns the largest loss and parameter differences."""
    tstep, tmodel = torch_lenet(state, data)
    theirs = [tstep().item() for _ in range(steps)]
    worst_loss = worst_param = 0.0
    for captured in (False, True):
        step, model = minitorch_lenet(state, data, captured)
        ours = [step().item() for _ in range(steps)]
        np.testing.assert_allclose(ours, theirs, rtol=1e-4)
        worst_loss = max(worst_loss, float(np.abs(np.subtract(ours, theirs)).max()))
        for p, q in zip(model.parameters(), tmodel.parameters()):
            diff = float(np.abs(p.numpy() - q.detach().numpy()).max())
            assert diff < 1e-3, f"a parameter differs by {diff} after {steps} steps"
            worst_param = max(worst_param, diff)
    return worst_loss, worst_param


# ---------------------------------------------------------------- where the time goes

def _window(shape, kernel):
    return im2col.conv_window(shape[2:], (kernel, kernel), (1, 1), (1, 1), (0, 0, 0, 0))


def breakdown_parts(data) -> dict:
    """Each part of the LeNet step alone, at the step's shapes (its order of work)."""
    rng = np.random.default_rng(2)
    x1 = mt.tensor(data[0][0]).value
    x2 = mt.tensor(rng.standard_normal((BATCH, 20, 12, 12)).astype(np.float32)).value
    w1, w2 = (mt.tensor(rng.standard_normal(s).astype(np.float32)).value
              for s in ((20, 25), (50, 500)))
    win1, win2 = _window(x1.shape, 5), _window(x2.shape, 5)
    cols1, cols2 = im2col.im2col(x1, win1), im2col.im2col(x2, win2)
    g1, g2 = (mt.tensor(rng.standard_normal(s).astype(np.float32)).value
              for s in ((20, cols1.shape[1]), (50, cols2.shape[1])))
    fc = [mt.tensor(rng.standard_normal(s).astype(np.float32)).value
          for s in ((BATCH, 800), (500, 800), (BATCH, 500), (10, 500), (BATCH, 10))]
    gcols2 = realize(Dot(w2.T, g2))
    pooled = [mt.randn(BATCH, c, n, n, requires_grad=True) for c, n in ((20, 24), (50, 8))]

    def gemms_conv():
        for w, cols, g in ((w1, cols1, g1), (w2, cols2, g2)):
            realize(Dot(w, cols))
            realize(Dot(g, cols.T))
        realize(Dot(w2.T, g2))  # conv1's input needs no gradient: no col2im product

    def gemms_linear():
        x, fc1, h, fc2, g = fc
        realize(Dot(x, fc1.T))  # forward
        realize(Dot(h, fc2.T))
        realize(Dot(g.T, h))  # fc2's weight and input gradients
        gh = realize(Dot(g, fc2))
        realize(Dot(gh.T, x))  # fc1's
        realize(Dot(gh, fc1))

    def pooling():
        for p in pooled:
            out = max_pool2d(p, 2)
            out.backward(mt.ones_like(out))
            p.grad = None

    parts = {
        "im2col (2 convs)": lambda: (im2col.im2col(x1, win1), im2col.im2col(x2, win2)),
        "GEMM, convolutions (5)": gemms_conv,
        "col2im (conv2)": lambda: im2col.col2im(gcols2, win2, x2.shape),
        "max-pool fwd+bwd (2)": pooling,
        "GEMM, linear layers (6)": gemms_linear,
    }
    # captured, as the step runs: the same kernels into buffers kept from call to call
    # (a fresh 16 MB result each call would add its page faults to the part's time)
    return {name: mt.capture(part) for name, part in parts.items()}


# ---------------------------------------------------------------- driver

def timed(steps: dict, min_time: float, rounds: int) -> dict:
    """``interleaved_timeit`` with a pause before each block: the threads of the block
    before (OpenMP's, OpenBLAS's) stop spinning first, instead of taking the cores from
    the next framework on a machine with as many cores as threads."""
    pause = {name: functools.partial(time.sleep, PAUSE) for name in steps}
    return interleaved_timeit(steps, min_time * len(steps), rounds=rounds, setups=pause)


def run_threads(threads: int, min_time: float, rounds: int, has_torch: bool) -> list[str]:
    pinned = pin_threads(threads)
    print(f"\n=== {threads} thread(s): {pinned}", flush=True)
    tag = f"t{threads}"
    lines = []

    conv_table = Table(f"cnn_conv_{tag}", baseline="pytorch" if has_torch else None)
    for name, (shape, out, k, pad, input_grad) in CONVS.items():
        steps = {"minitorch_exp": minitorch_conv(shape, out, k, pad, input_grad)}
        if has_torch:
            steps["pytorch"] = torch_conv(shape, out, k, pad, input_grad)
        times = timed(steps, min_time, rounds)
        for framework, t in times.items():
            conv_table.add(framework, name, t)
        print(f"  conv {name}: " + ", ".join(f"{f} {format_seconds(t)}"
                                             for f, t in times.items()), flush=True)
    for name, args in TRANSPOSED.items():
        libs = ["minitorch_exp"] + ["pytorch"] * has_torch
        times = timed({lib: transposed_step(lib, *args) for lib in libs}, min_time, rounds)
        for framework, t in times.items():
            conv_table.add(framework, name, t)
        print(f"  {name}: " + ", ".join(f"{f} {format_seconds(t)}"
                                        for f, t in times.items()), flush=True)
    conv_table.write()

    state, data = initial_state(), lenet_data()
    if has_torch:
        loss, param = check_same_steps(state, data)
        print(f"  same steps as PyTorch: after 4 steps, losses within {loss:.1e}, "
              f"parameters within {param:.1e}")
    steps = {"minitorch_exp": minitorch_lenet(state, data)[0],
             "minitorch_exp captured": minitorch_lenet(state, data, captured=True)[0]}
    if has_torch:
        steps["pytorch"] = torch_lenet(state, data)[0]
    parts = breakdown_parts(data)
    # the parts take turns with the steps, so that a noisy neighbour slows all of them alike
    times = timed({**steps, **parts}, min_time, rounds)
    parts = {name: times.pop(name) for name in parts}
    lenet_table = Table(f"cnn_lenet_{tag}", baseline="pytorch" if has_torch else None)
    for framework, t in times.items():
        lenet_table.add(framework, f"LeNet b{BATCH}", t)
    lenet_table.write()
    lines.append(f"### {threads} thread(s)\n")
    lines += ["| framework | time/step | samples/s | throughput vs PyTorch |",
              "| --- | ---: | ---: | ---: |"]
    for framework, t in times.items():
        ratio = f"{times['pytorch'] / t:.2f}x" if "pytorch" in times else ""
        lines.append(f"| {framework} | {format_seconds(t)} | {BATCH / t:,.0f} | {ratio} |")

    captured, eager = times["minitorch_exp captured"], times["minitorch_exp"]
    parts["rest of the step (ReLU, bias, loss, Adam)"] = captured - sum(parts.values())
    parts["Python and graph (eager - captured)"] = eager - captured
    breakdown = Table(f"cnn_breakdown_{tag}")
    lines += ["", "| part of the minitorch_exp step | time | share of eager |",
              "| --- | ---: | ---: |"]
    for part, t in parts.items():
        if t > 0:  # a difference of medians can come out below zero on a busy machine
            breakdown.add(part, f"LeNet b{BATCH}", t)
        shown = format_seconds(t) if t > 0 else f"-{format_seconds(-t)} (noise)"
        lines.append(f"| {part} | {shown} | {t / eager:.0%} |")
    breakdown.write()
    lines.append("")
    print("\n".join(lines), flush=True)
    return lines


def time_transposed(args, has_torch: bool) -> int:
    """The transposed-convolution rows alone, printed (a quick look; the full run
    writes them into ``cnn_conv_t<n>``)."""
    for threads in args.threads:
        print(f"\n=== {threads} thread(s): {pin_threads(threads)}")
        for name, shape_args in TRANSPOSED.items():
            libs = ["minitorch_exp"] + ["pytorch"] * has_torch
            times = timed({lib: transposed_step(lib, *shape_args) for lib in libs},
                          args.min_time, args.rounds)
            ratio = f", PyTorch/ours {times['pytorch'] / times['minitorch_exp']:.2f}x" \
                if has_torch else ""
            print(f"  {name}: " + ", ".join(f"{f} {format_seconds(t)}"
                                            for f, t in times.items()) + ratio, flush=True)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                        help="thread counts for every library, one set of tables each")
    parser.add_argument("--min-time", type=float, default=0.5,
                        help="seconds of measurement per row")
    parser.add_argument("--rounds", type=int, default=ROUNDS,
                        help="interleaved rounds per table (the median is kept)")
    parser.add_argument("--transposed-only", action="store_true",
                        help="time only the transposed convolutions (no files written)")
    args = parser.parse_args(argv)
    print_machine_info()
    try:
        import torch  # noqa: F401
        has_torch = True
    except ImportError:
        has_torch = False
        print("PyTorch not installed: its rows are skipped")
    if args.transposed_only:
        return time_transposed(args, has_torch)
    lines = []
    for threads in args.threads:
        lines += run_threads(threads, args.min_time, args.rounds, has_torch)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    text = (f"# LeNet training step, batch {BATCH}\n\nLoad average at the end: {load} "
            f"({os.cpu_count()} logical cores). Medians of {args.rounds} interleaved rounds; "
            "throughput vs PyTorch = PyTorch's time / this row's time (above 1 is "
            "faster). The breakdown times each part alone (captured) at the step's "
            "shapes, taking turns with the steps.\n\n"
            + "\n".join(lines))
    _atomic_write_text(RESULTS_DIR / "cnn_summary.md", text)
    print(f"\nwrote {RESULTS_DIR}/cnn_*_t*.{{md,csv}} and cnn_summary.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
