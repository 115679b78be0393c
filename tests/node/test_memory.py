"""Graph freeing: a training loop keeps no graph alive from one step to the next."""

from __future__ import annotations

import gc
import tracemalloc
import weakref

import numpy as np

import minitorch_exp as mt


def _mlp(seed: int = 0):
    mt.manual_seed(seed)
    params = [mt.randn(8, 16) * 0.3, mt.zeros(16), mt.randn(16, 4) * 0.3, mt.zeros(4)]
    params = [mt.tensor(p.numpy(), requires_grad=True) for p in params]
    rng = np.random.default_rng(seed)
    X = mt.tensor(rng.standard_normal((32, 8)).astype(np.float32))
    labels = rng.integers(0, 4, 32)
    return params, X, labels


def _step(params, X, labels, lr=0.1):
    w1, b1, w2, b2 = params
    h = mt.relu(X @ w1 + b1)
    logits = (h @ w2 + b2).tanh() * 3
    loss = -mt.log_softmax(logits, 1)[np.arange(len(labels)), labels].mean()
    loss.backward()
    with mt.no_grad():
        for p in params:
            p -= lr * p.grad
            p.grad = None
    return loss, h, logits


def test_previous_graph_is_freed_after_each_step_without_the_cycle_collector():
    params, X, labels = _mlp()
    gc.collect()
    gc.disable()  # everything must be freed by reference counting alone: no cycles
    try:
        refs = []
        first = last = None
        for i in range(1000):
            loss, h, logits = _step(params, X, labels)
            value = loss.item()
            first = value if first is None else first
            last = value
            # backward freed the graph: the links to inputs are gone with the saved values
            assert loss.grad_fn.freed and loss.grad_fn.inputs == ()
            refs.append([weakref.ref(n) for n in (loss, h, logits)])
            del loss, h, logits
            for r in refs[-1]:
                assert r() is None, f"step {i}: a node of the graph outlived its step"
    finally:
        gc.enable()
    assert last < first  # it did train


def test_traced_memory_does_not_grow_across_steps():
    """tracemalloc over a window of steps (tracing is slow; the 1,000-step loop above
    checks the same thing node by node)."""
    params, X, labels = _mlp(1)
    for _ in range(30):  # warm up caches (plans, kernels)
        _step(params, X, labels)
    gc.collect()
    tracemalloc.start()
    try:
        for _ in range(10):
            _step(params, X, labels)
        base, _ = tracemalloc.get_traced_memory()
        for _ in range(60):
            _step(params, X, labels)
        gc.collect()
        end, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # one step's graph holds ~45 kB of Python objects and arrays: 60 leaked steps would be
    # megabytes
    assert end - base < 32 * 1024, f"grew by {end - base} bytes over 60 steps"


def test_saved_values_are_released_by_backward():
    x = mt.randn(1000, 100, requires_grad=True)
    y = (x * 2).tanh()
    z = (y @ mt.randn(100, 10)).sum()
    ctx = z.grad_fn.inputs[0].grad_fn  # the matmul, which saved two tensors
    assert len(ctx.saved_tensors) == 2
    z.backward()
    assert ctx.freed and ctx._saved == ()
