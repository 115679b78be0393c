"""Finite-difference gradient checking in float64."""

from __future__ import annotations

import numpy as np

from ..tensor.tensor import from_array
from .grad_mode import no_grad
from .node import Node


def _as_scalar(out, weights):
    from .ops import sum as node_sum
    return node_sum(out * weights) if out.ndim else out * weights


def gradcheck(fn, inputs, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3,
              seed: int = 0) -> bool:
    """Compare ``backward`` with central differences for every element of every input.

    ``fn(*inputs)`` may return any shape: it is reduced to a scalar with fixed
    random weights, so every output element takes part. Inputs must be float64
    Nodes on one device; those with ``requires_grad`` are checked. Raises AssertionError naming
    the input, the element, and both values when they disagree; returns True.
    """
    inputs = list(inputs)
    for i, x in enumerate(inputs):
        if isinstance(x, Node) and x.requires_grad and x.dtype != np.float64:
            raise TypeError(f"gradcheck: input {i} is {x.dtype.name}; use float64 inputs")
    out = fn(*inputs)
    rng = np.random.default_rng(seed)
    weights = Node(from_array(rng.uniform(0.5, 1.5, out.shape).astype(np.float64))).to(out.device)
    for x in inputs:
        if isinstance(x, Node):
            x.grad = None
    _as_scalar(out, weights).backward()
    for i, x in enumerate(inputs):
        if not (isinstance(x, Node) and x.requires_grad):
            continue
        analytic = np.zeros(x.shape) if x.grad is None else x.grad.numpy()
        numeric = _numeric_grad(fn, inputs, x, weights, eps)
        bad = ~np.isclose(analytic, numeric, atol=atol, rtol=rtol)
        if bad.any():
            idx = tuple(int(k) for k in np.argwhere(bad)[0])
            raise AssertionError(
                f"gradcheck: input {i} (shape {x.shape}) element {idx}: backward gives "
                f"{analytic[idx]:.8g}, central differences give {numeric[idx]:.8g} "
                f"(atol={atol}, rtol={rtol}; {int(bad.sum())} of {bad.size} elements differ)")
    return True


def _numeric_grad(fn, inputs, x: Node, weights, eps: float) -> np.ndarray:
    values = x.value.array  # the device's array, sharing memory: perturb, restore after
    storage = x.value.storage
    grad = np.zeros(x.shape)

    def write(idx, v):
        storage.before_write()  # lazy values reading x are realized first, as for any write
        values[idx] = v

    with no_grad():
        for idx in np.ndindex(*x.shape):
            old = float(values[idx])
            write(idx, old + eps)
            hi = _as_scalar(fn(*inputs), weights).item()
            write(idx, old - eps)
            lo = _as_scalar(fn(*inputs), weights).item()
            write(idx, old)
            grad[idx] = (hi - lo) / (2 * eps)
    return grad
