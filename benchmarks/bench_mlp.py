"""Training throughput of an MLP: minitorch_exp vs PyTorch CPU eager vs hand-written NumPy.

One training step is forward, softmax cross-entropy, backward and an SGD
update with momentum 0.9, on a batch drawn from a fixed pool of synthetic
MNIST-shaped data. minitorch_exp runs it twice: eagerly, and with the whole
step under ``mt.capture`` (the kernels replayed, the optimizer's step re-run
eagerly: what the MNIST example does). The NumPy row is the same math written
by hand (no graph, no autograd, in-place updates): the "no framework
overhead" floor.
A last row times the step's matrix products alone (NumPy's BLAS): no framework
does less work, so PyTorch's time over that row bounds how far ahead of
PyTorch any framework can get on this machine.
All rows run in this process, on the same batches, with the same starting
weights and thread counts; a sanity check first confirms that minitorch_exp
and NumPy take identical steps. Results go to
``benchmarks/results/mlp_train_t<threads>*``, one set per thread count.

    python benchmarks/bench_mlp.py                 # 2 threads, as on CI
    python benchmarks/bench_mlp.py --threads 1     # steadier on a busy machine
    python benchmarks/bench_mlp.py --threads 4 --min-time 1.0

On a machine shared with other work, multi-threaded BLAS steps swing by 10x
(threads spin waiting for a core); compare rows of one run only, and prefer
``--threads 1`` there.
"""

from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np
from common import Cycle, Table, format_seconds, interleaved_timeit, pin_threads, print_machine_info

import minitorch_exp as mt
from minitorch_exp import nn

ARCHS = {"784-256-10": [784, 256, 10], "784-512-256-10": [784, 512, 256, 10]}
BATCHES = [32, 128, 512]
LR, MOMENTUM = 0.01, 0.9
POOL = 8  # distinct batches cycled through, so no step sees the same data twice in a row


def initial_weights(sizes, seed=0):
    """PyTorch-style uniform(+-1/sqrt(fan_in)) weights, float32."""
    rng = np.random.default_rng(seed)
    out = []
    for n_in, n_out in zip(sizes, sizes[1:]):
        bound = 1 / math.sqrt(n_in)
        out.append((rng.uniform(-bound, bound, (n_out, n_in)).astype(np.float32),
                    rng.uniform(-bound, bound, n_out).astype(np.float32)))
    return out


def batches(batch, seed=1):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((batch, 784)).astype(np.float32),
             rng.integers(0, 10, batch).astype(np.int64)) for _ in range(POOL)]


# ---------------------------------------------------------------- minitorch_exp

# The step builders take ``device`` ("cpu", or "cuda" for bench_cuda.py): the model,
# its optimizer and the batch pool live there. The default is this script's setup.

def minitorch_step(weights, data, device="cpu", captured=False):
    """``captured``: the step runs through ``mt.capture`` (forward, loss and backward
    replayed as kernels from the third step on; the optimizer's step inside it,
    which each replay runs eagerly)."""
    layers = []
    for i, (w, b) in enumerate(weights):
        lin = nn.Linear(w.shape[1], w.shape[0])
        lin.load_state_dict({"weight": w, "bias": b})
        layers.append(lin)
        if i < len(weights) - 1:
            layers.append(nn.ReLU())
    model = nn.Sequential(*layers).to(device)  # before the optimizer makes its flat buffers
    opt = nn.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    pool = Cycle([(mt.from_numpy(x).to(device), mt.from_numpy(y).to(device)) for x, y in data])

    def train_step(x, y):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    run = mt.capture(train_step) if captured else train_step
    return lambda: run(*pool.next()), lambda: [p.numpy() for p in model.parameters()]


def minitorch_captured_step(weights, data, device="cpu"):
    return minitorch_step(weights, data, device, captured=True)


# ---------------------------------------------------------------- PyTorch

def torch_step(weights, data, device="cpu"):
    import torch
    layers = []
    for i, (w, b) in enumerate(weights):
        lin = torch.nn.Linear(w.shape[1], w.shape[0])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w))
            lin.bias.copy_(torch.from_numpy(b))
        layers.append(lin)
        if i < len(weights) - 1:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    pool = Cycle([(torch.from_numpy(x).to(device), torch.from_numpy(y).to(device))
                  for x, y in data])

    def step():
        x, y = pool.next()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step, lambda: [p.detach().cpu().numpy() for p in model.parameters()]


# ---------------------------------------------------------------- NumPy by hand

def numpy_step(weights, data):
    params = [(w.copy(), b.copy()) for w, b in weights]
    bufs: list = [None] * (2 * len(params))
    pool = Cycle(data)
    last = len(params) - 1

    def step():
        x, y = pool.next()
        n = len(y)
        acts = [x]
        h = x
        for i, (w, b) in enumerate(params):  # forward: h = relu(h @ W.T + b)
            h = h @ w.T
            h += b
            if i < last:
                np.maximum(h, 0, out=h)
            acts.append(h)
        g = h - h.max(1, keepdims=True)  # dloss/dlogits = (softmax - onehot) / n
        np.exp(g, out=g)
        g /= g.sum(1, keepdims=True)
        g[np.arange(n), y] -= 1
        g *= np.float32(1 / n)
        for i in range(last, -1, -1):
            w, b = params[i]
            a = acts[i]
            gw, gb = g.T @ a, g.sum(0)
            if i:
                g = g @ w
                g *= a > 0  # relu'(z) from its output
            for j, (p, grad) in enumerate(((w, gw), (b, gb))):
                k = 2 * i + j
                if bufs[k] is None:  # PyTorch's first momentum step copies the gradient
                    bufs[k] = grad
                else:
                    bufs[k] *= np.float32(MOMENTUM)
                    bufs[k] += grad
                p -= np.float32(LR) * bufs[k]

    def params_out():
        return [a for pair in params for a in pair]

    return step, params_out


def matmul_floor_step(weights, data):
    """Only the matrix products of one step, into preallocated outputs: the forward
    ``h @ W.T`` per layer, and in backward ``g.T @ h`` per layer and ``g @ W`` per
    layer but the first. Every framework must do them; their time bounds from
    below what any step here can take, so ``pytorch / this`` bounds how far ahead
    of PyTorch a framework can be on this machine."""
    params = [w for w, _ in weights]
    pool = Cycle(data)
    n = len(data[0][1])
    acts = [np.empty((n, w.shape[0]), np.float32) for w in params]
    grads_w = [np.empty_like(w) for w in params]
    grads_x = [np.empty((n, w.shape[1]), np.float32) for w in params]

    def step():
        h = pool.next()[0]
        inputs = []
        for w, out in zip(params, acts):
            inputs.append(h)
            h = np.matmul(h, w.T, out=out)
        g = h
        for i in range(len(params) - 1, -1, -1):
            np.matmul(g.T, inputs[i], out=grads_w[i])
            if i:
                g = np.matmul(g, params[i], out=grads_x[i])

    return step, lambda: grads_w


# ---------------------------------------------------------------- driver

def check_same_steps(weights, data, device="cpu", rtol=1e-4, atol=1e-6):
    """minitorch_exp (on ``device``) and the NumPy floor must do the same work: compare
    5 steps."""
    for make in (minitorch_step, minitorch_captured_step):
        (mstep, mparams) = make(weights, data, device)
        (nstep, nparams) = numpy_step(weights, data)
        for _ in range(5):
            mstep()
            nstep()
        for a, b in zip(mparams(), nparams()):
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def kernels_per_step(step, device="cpu") -> dict[str, int]:
    """Kernels one call of ``step`` runs, by kind (``device``: "cpu" or "cuda", the
    names the kernel counters use)."""
    step()
    step()
    with mt.count_kernels(device) as k:
        step()
    return {kind: n for kind, n in k.counts.items() if n}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="threads for every library")
    parser.add_argument("--min-time", type=float, default=0.5,
                        help="seconds of measurement per row")
    args = parser.parse_args(argv)

    pinned = pin_threads(args.threads)
    print_machine_info()
    print(f"{'pinned':>22}: {pinned}\n")
    try:
        import torch  # noqa: F401
        has_torch = True
    except ImportError:
        has_torch = False
        print("PyTorch not installed: its rows are skipped\n")

    tag = f"mlp_train_t{args.threads}"  # one set of files per thread count
    vs_numpy = Table(tag, baseline="numpy")
    vs_torch = Table(f"{tag}_vs_pytorch", baseline="pytorch")
    summary = []
    for arch, sizes in ARCHS.items():
        weights = initial_weights(sizes)
        for batch in BATCHES:
            data = batches(batch)
            size = f"{arch} b{batch}"
            check_same_steps(weights, data)
            makers = {"numpy": numpy_step, "minitorch_exp": minitorch_step,
                      "minitorch_exp captured": minitorch_captured_step}
            if has_torch:
                makers["pytorch"] = torch_step
            steps = {name: make(weights, data)[0] for name, make in makers.items()}
            torch_fn = steps.pop("pytorch", None)
            # numpy and minitorch_exp share NumPy's BLAS pool, so they take turns; PyTorch
            # brings its own (OpenMP) threads, which would fight the BLAS threads still
            # spinning from the last call on 2 cores: it runs alone, after a pause.
            steps["matrix products only"] = matmul_floor_step(weights, data)[0]
            times = interleaved_timeit(steps, args.min_time * len(steps))
            if torch_fn is not None:
                time.sleep(0.5)
                times["pytorch"] = interleaved_timeit({"pytorch": torch_fn},
                                                      args.min_time)["pytorch"]
                time.sleep(0.5)
            for name, t in times.items():
                vs_numpy.add(name, size, t)
                vs_torch.add(name, size, t)
            kernels = kernels_per_step(minitorch_step(weights, data)[0])
            summary.append((size, batch, times, kernels))
            print(f"  {size}: " + ", ".join(f"{k} {format_seconds(v)}" for k, v in times.items()),
                  flush=True)

    lines = ["| size | framework | time/step | samples/s | vs numpy | vs pytorch |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for size, batch, times, _ in summary:
        for name, t in times.items():
            vt = f"{t / times['pytorch']:.2f}x" if "pytorch" in times else ""
            lines.append(f"| {size} | {name} | {format_seconds(t)} | {batch / t:,.0f} | "
                         f"{t / times['numpy']:.2f}x | {vt} |")
    lines += ["", "Kernels per minitorch_exp training step (forward + loss + backward + SGD "
              "momentum), from `mt.count_kernels()`:", "",
              "| size | total | by kind |", "| --- | ---: | --- |"]
    for size, _, _, kernels in summary:
        kinds = ", ".join(f"{k} {v}" for k, v in kernels.items() if k != "total")
        lines.append(f"| {size} | {kernels.get('total', 0)} | {kinds} |")
    load = ""
    if hasattr(os, "getloadavg"):
        load = "Load average during the run: " + ", ".join(f"{x:.1f}" for x in os.getloadavg())
    text = (f"# MLP training step, {args.threads} threads\n\n{load}\n\n"
            "Time per step is the median of 5 "
            "interleaved rounds; ratios are time / time of the named framework at the same size "
            "(below 1 is faster). `matrix products only` is the step's matrix products alone: "
            "the time no framework can go below, so 1 / its `vs pytorch` is the most any "
            "framework could be ahead of PyTorch here.\n\n" + "\n".join(lines) + "\n")
    print("\n" + text)
    vs_numpy.write()
    vs_torch.write()
    from common import RESULTS_DIR, _atomic_write_text
    _atomic_write_text(RESULTS_DIR / f"{tag}_summary.md", text)
    print(f"wrote {RESULTS_DIR}/{tag}.{{md,csv}}, {tag}_vs_pytorch.{{md,csv}}, {tag}_summary.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
