"""A DCGAN training step: minitorch_exp vs PyTorch CPU eager.

The generator and discriminator of PyTorch's examples repository (``dcgan/main.py``),
cut to 32x32 images (one layer fewer on each side) and batch 16 for a 2-core machine:

    G: z (100) -convT 4x4-> 256x4x4 -convT s2-> 128x8x8 -convT s2-> 64x16x16
       -convT s2-> 3x32x32 (BatchNorm + ReLU between, Tanh last)
    D: 3x32x32 -conv s2-> 64x16x16 -conv s2-> 128x8x8 -conv s2-> 256x4x4
       -conv 4x4-> 1 (LeakyReLU(0.2), BatchNorm between, Sigmoid last)

One step is the example's: D on a real batch and on the generator's (detached) fakes,
BCE, Adam; then G through D with real labels, BCE, Adam (lr 2e-4, betas (0.5, 0.999)).
Both libraries build the same modules by the same names (``build``), start from the
same state dict, and a check first confirms they take the same steps. Then the steps
take turns in this process (``interleaved_timeit``, a pause before each block),
medians of the rounds, with 1 and 2 threads for every library:

    python benchmarks/bench_dcgan.py
    python benchmarks/bench_dcgan.py --threads 1 --min-time 1.0

Results go to ``benchmarks/results/dcgan_*``.
"""

from __future__ import annotations

import argparse
import functools
import os
import time

import numpy as np
from common import (
    RESULTS_DIR,
    Table,
    _atomic_write_text,
    format_seconds,
    interleaved_timeit,
    pin_threads,
    print_machine_info,
)

import minitorch_exp as mt

BATCH, NZ, NGF, NDF, NC, SIZE = 16, 100, 64, 64, 3, 32
POOL = 4  # distinct batches cycled through
PAUSE = 0.2  # seconds of quiet before each timed block
ROUNDS = 7


def build(nn):
    """The generator and discriminator from ``nn`` (``torch.nn`` or ``minitorch_exp.nn``)."""
    g = nn.Sequential(
        nn.ConvTranspose2d(NZ, NGF * 4, 4, 1, 0, bias=False), nn.BatchNorm2d(NGF * 4), nn.ReLU(),
        nn.ConvTranspose2d(NGF * 4, NGF * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(NGF * 2),
        nn.ReLU(),
        nn.ConvTranspose2d(NGF * 2, NGF, 4, 2, 1, bias=False), nn.BatchNorm2d(NGF), nn.ReLU(),
        nn.ConvTranspose2d(NGF, NC, 4, 2, 1, bias=False), nn.Tanh())
    d = nn.Sequential(
        nn.Conv2d(NC, NDF, 4, 2, 1, bias=False), nn.LeakyReLU(0.2),
        nn.Conv2d(NDF, NDF * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(NDF * 2), nn.LeakyReLU(0.2),
        nn.Conv2d(NDF * 2, NDF * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(NDF * 4),
        nn.LeakyReLU(0.2),
        nn.Conv2d(NDF * 4, 1, 4, 1, 0, bias=False), nn.Sigmoid())
    return g, d


def data(seed: int = 1):
    rng = np.random.default_rng(seed)
    return [(np.tanh(rng.standard_normal((BATCH, NC, SIZE, SIZE))).astype(np.float32),
             rng.standard_normal((BATCH, NZ, 1, 1)).astype(np.float32)) for _ in range(POOL)]


def initial_states(seed: int = 0):
    """The example's init (conv weights N(0, 0.02), BatchNorm weights N(1, 0.02)) in
    PyTorch, as NumPy state dicts for both libraries."""
    import torch
    torch.manual_seed(seed)
    g, d = build(torch.nn)

    def weights_init(m):
        name = type(m).__name__
        if "Conv" in name:
            torch.nn.init.normal_(m.weight, 0.0, 0.02)
        elif "BatchNorm" in name:
            torch.nn.init.normal_(m.weight, 1.0, 0.02)
            torch.nn.init.zeros_(m.bias)
    g.apply(weights_init)
    d.apply(weights_init)
    return [{k: v.numpy().copy() for k, v in m.state_dict().items()} for m in (g, d)]


def make_step(lib: str, states, batches):
    """A step function for ``lib`` ("minitorch_exp" or "pytorch") from ``states``."""
    if lib == "pytorch":
        import torch as api
        convert = api.from_numpy
    else:
        api, convert = mt, mt.tensor
    g, d = build(api.nn)
    for module, state in zip((g, d), states):
        module.load_state_dict({k: convert(v.copy()) for k, v in state.items()})
    criterion = api.nn.BCELoss()
    opt_d = api.optim.Adam(d.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_g = api.optim.Adam(g.parameters(), lr=2e-4, betas=(0.5, 0.999))
    pool = [(convert(x), convert(z)) for x, z in batches]
    real_label, fake_label = api.ones(BATCH), api.zeros(BATCH)
    turn = [0]

    def step():
        real, noise = pool[turn[0] % len(pool)]
        turn[0] += 1
        d.zero_grad()
        err_real = criterion(d(real).view(-1), real_label)
        err_real.backward()
        fake = g(noise)
        err_fake = criterion(d(fake.detach()).view(-1), fake_label)
        err_fake.backward()
        opt_d.step()
        g.zero_grad()
        err_g = criterion(d(fake).view(-1), real_label)
        err_g.backward()
        opt_g.step()
        return err_real + err_fake, err_g
    return step


def check_same_steps(states, batches, steps: int = 3) -> float:
    """Both libraries' losses agree for ``steps`` steps (float32 rounding apart);
    returns the largest difference."""
    ours, theirs = make_step("minitorch_exp", states, batches), make_step("pytorch", states,
                                                                           batches)
    worst = 0.0
    for _ in range(steps):
        a = [float(v.item()) for v in ours()]
        b = [float(v.item()) for v in theirs()]
        np.testing.assert_allclose(a, b, rtol=2e-3, atol=1e-4)
        worst = max(worst, float(np.abs(np.subtract(a, b)).max()))
    return worst


def run_threads(threads: int, min_time: float, rounds: int, states, batches) -> list[str]:
    print(f"\n=== {threads} thread(s): {pin_threads(threads)}", flush=True)
    steps = {lib: make_step(lib, states, batches) for lib in ("minitorch_exp", "pytorch")}
    pause = {name: functools.partial(time.sleep, PAUSE) for name in steps}
    times = interleaved_timeit(steps, min_time * len(steps), rounds=rounds, setups=pause)
    table = Table(f"dcgan_t{threads}", baseline="pytorch")
    for framework, t in times.items():
        table.add(framework, f"DCGAN {SIZE}x{SIZE} b{BATCH}", t)
    table.write()
    lines = [f"### {threads} thread(s)\n", "| framework | time/step | throughput vs PyTorch |",
             "| --- | ---: | ---: |"]
    lines += [f"| {f} | {format_seconds(t)} | {times['pytorch'] / t:.2f}x |"
              for f, t in times.items()]
    print("\n".join(lines), flush=True)
    return lines + [""]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--min-time", type=float, default=0.5,
                        help="seconds of measurement per row")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    args = parser.parse_args(argv)
    print_machine_info()
    try:
        import torch  # noqa: F401
    except ImportError:
        print("PyTorch is not installed: this benchmark compares with it, nothing to do")
        return 0
    states, batches = initial_states(), data()
    print(f"same steps as PyTorch: losses within {check_same_steps(states, batches):.1e}")
    lines = []
    for threads in args.threads:
        lines += run_threads(threads, args.min_time, args.rounds, states, batches)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    text = (f"# DCGAN training step, {SIZE}x{SIZE}, batch {BATCH}\n\nLoad average at the end: "
            f"{load} ({os.cpu_count()} logical cores). Medians of {args.rounds} interleaved "
            "rounds; throughput vs PyTorch = PyTorch's time / this row's time (above 1 is "
            "faster).\n\n" + "\n".join(lines))
    _atomic_write_text(RESULTS_DIR / "dcgan_summary.md", text)
    print(f"\nwrote {RESULTS_DIR}/dcgan_t*.{{md,csv}} and dcgan_summary.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
