"""Shared helpers for the Node-level tests: leaves in many layouts, and PyTorch twins.

Every op test builds its inputs with ``leaf``: a float64 Node that requires grad
and may be contiguous, transposed, sliced with a gap, or reversed -- so each
op meets non-contiguous strides -- on a given device. ``torch_twin`` makes the
matching PyTorch leaf (on the CPU), and ``compare_with_torch`` runs both forward
and backward with the same upstream gradient and compares values and every
input's gradient.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import minitorch_exp as mt

from ..devices import on_device, tolerance

LAYOUTS = ("contiguous", "transposed", "sliced", "reversed")


def strided_array(values: np.ndarray, layout: str) -> np.ndarray:
    """An ndarray equal to ``values`` whose memory layout is ``layout`` (never copied back)."""
    values = np.asarray(values, dtype=np.float64)
    if layout == "contiguous" or values.ndim == 0:
        return values.copy(order="C")
    if layout == "transposed":
        return np.ascontiguousarray(values.T).T
    if layout == "sliced":  # every other element of a twice-as-wide buffer
        big = np.full(values.shape[:-1] + (2 * values.shape[-1],), np.nan)
        big[..., ::2] = values
        return big[..., ::2]
    if layout == "reversed":
        return np.ascontiguousarray(values[..., ::-1])[..., ::-1]
    raise ValueError(layout)


def leaf(values, layout: str = "contiguous", requires_grad: bool = True,
         device="cpu") -> mt.Node:
    """A float64 leaf Node over ``values`` laid out as ``layout`` on ``device`` (on cpu
    it shares that buffer; elsewhere the whole buffer is copied, keeping the strides)."""
    arr = strided_array(values, layout)
    if device == "cpu":
        return mt.from_numpy(arr, requires_grad=requires_grad)
    return mt.Node(on_device(arr, device), requires_grad=requires_grad)


def torch_twin(node: mt.Node):
    import torch
    arr = np.array(node.numpy())  # a copy: torch refuses negative strides
    return torch.tensor(arr, dtype=torch.float64, requires_grad=node.requires_grad)


def assert_hessians_match_torch(f, a: np.ndarray, v: np.ndarray) -> None:
    """``f(m, x)`` -> a scalar, for ``m`` this library and then PyTorch: its gradient at
    ``a`` (recorded, ``create_graph``) and the Hessian times ``v`` agree to 1e-9."""
    import torch
    results = []
    for m, x in ((mt, leaf(a)), (torch, torch.tensor(a, requires_grad=True))):
        g, = m.autograd.grad(f(m, x), x, create_graph=True)
        hv, = m.autograd.grad((g * m.tensor(v)).sum(), x)
        results.append((g.detach().numpy(), hv.numpy()))
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-12)


def assert_penalties_match_torch(penalty) -> None:
    """``penalty(lib, tensor)`` -- a gradient penalty's parameter gradients, written once
    for both libraries -- gives PyTorch's gradients here, or both refuse its shapes."""
    import pytest
    torch = pytest.importorskip("torch")
    try:
        theirs = penalty(torch, lambda a, **kw: torch.tensor(a, **kw))
    except RuntimeError:  # e.g. a kernel larger than the padded input
        with pytest.raises(ValueError):
            penalty(mt, mt.tensor)
        return
    for got, want in zip(penalty(mt, mt.tensor), theirs, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-10)


def compare_with_torch(mt_fn, torch_fn, nodes, rtol=1e-7, atol=1e-9, seed=0):
    """Forward and backward of ``mt_fn`` and ``torch_fn`` agree (values and grads).

    The Nodes may live on any device (torch runs on the CPU); off the CPU the
    tolerances are at least float32-level (tests/devices.py).
    """
    import torch
    device = next((n.device for n in nodes if isinstance(n, mt.Node)), "cpu")
    rtol, atol = tolerance(device, rtol, atol)
    twins = [torch_twin(n) if isinstance(n, mt.Node) else n for n in nodes]
    for n in nodes:
        if isinstance(n, mt.Node):
            n.grad = None
    out = mt_fn(*nodes)
    ref = torch_fn(*twins)
    assert out.shape == tuple(ref.shape), (out.shape, tuple(ref.shape))
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=rtol, atol=atol)
    if not ref.requires_grad:
        assert not out.requires_grad and out.grad_fn is None
        return
    upstream = np.random.default_rng(seed).uniform(0.5, 1.5, ref.shape)
    out.backward(mt.tensor(upstream, dtype=out.dtype, device=out.device))
    ref.backward(torch.tensor(upstream, dtype=ref.dtype))
    for i, (n, t) in enumerate(zip(nodes, twins)):
        if not (isinstance(n, mt.Node) and n.requires_grad):
            continue
        if t.grad is None:
            assert n.grad is None or not np.any(n.grad.numpy()), f"input {i}"
            continue
        assert n.grad is not None, f"input {i} got no gradient"
        assert n.grad.shape == n.shape, f"input {i}: grad {n.grad.shape} vs leaf {n.shape}"
        np.testing.assert_allclose(n.grad.numpy(), t.grad.numpy(), rtol=rtol, atol=atol,
                                   err_msg=f"gradient of input {i}")


# ---- hypothesis strategies -----------------------------------------------------

shapes = st.lists(st.integers(1, 3), min_size=0, max_size=3).map(tuple)
nonempty_shapes = st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple)
layouts = st.sampled_from(LAYOUTS)
seeds = st.integers(0, 2**16)


@st.composite
def broadcast_shapes(draw, n: int = 2, min_dims: int = 0):
    """``n`` shapes that broadcast together: the first is full, others drop/squash dims."""
    full = draw(st.lists(st.integers(1, 3), min_size=min_dims, max_size=3).map(tuple))
    out = [full]
    for _ in range(n - 1):
        keep = draw(st.integers(0, len(full)))
        tail = full[len(full) - keep:]
        out.append(tuple(1 if draw(st.booleans()) else s for s in tail))
    order = draw(st.permutations(range(n)))
    return [out[i] for i in order]


def values(rng: np.random.Generator, shape, domain: str = "real") -> np.ndarray:
    """Random float64 values away from the kinks of the ops they feed."""
    mag = rng.uniform(0.3, 1.5, shape)
    if domain == "positive":
        return mag
    sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return mag * sign
