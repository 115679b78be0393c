"""micrograd-style end-to-end expressions, scalars and small tensors, against PyTorch.

The same Python function runs on minitorch_exp Nodes and on torch tensors (both
overload the operators), so a mismatch can only come from the framework.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt

from ._helpers import compare_with_torch, leaf


def sanity(x):
    z = 2 * x + 2 + x
    q = z.relu() + z * x
    h = (z * z).relu()
    return h + q + q * x


def more_ops(a, b):
    c = a + b
    d = a * b + b ** 3
    c = c + c + 1
    c = c + 1 + c + (-a)
    d = d + d * 2 + (b + a).relu()
    d = d + 3 * d + (b - a).relu()
    e = c - d
    f = e ** 2
    g = f / 2.0
    g = g + 10.0 / f
    return g


def augmented(a, b):
    """The same as ``more_ops`` written with ``+=`` on intermediates, as micrograd does."""
    c = a + b
    d = a * b + b ** 3
    c += c + 1
    c += 1 + c + (-a)
    d += d * 2 + (b + a).relu()
    d += 3 * d + (b - a).relu()
    e = c - d
    f = e ** 2
    g = f / 2.0
    g += 10.0 / f
    return g


def neuron(x, w, b):
    return (x * w).sum(-1) + b


def mlp(x, w1, b1, w2, b2):
    h = (x @ w1 + b1).tanh()
    out = (h @ w2 + b2).sigmoid()
    return ((out - 0.5) ** 2).mean() + 0.01 * (w1 * w1).sum()


def test_sanity_check_scalar():
    x = leaf(-4.0)
    y = sanity(x)
    y.backward()
    assert y.item() == pytest.approx(-20.0)
    assert x.grad.item() == pytest.approx(46.0)
    pytest.importorskip("torch")
    compare_with_torch(sanity, sanity, [leaf(-4.0)])


@pytest.mark.parametrize("fn", [more_ops, augmented])
def test_more_ops_scalar(fn):
    pytest.importorskip("torch")
    a, b = leaf(-4.0), leaf(2.0)
    g = fn(a, b)
    g.backward()
    assert g.item() == pytest.approx(24.70408163265306)
    assert a.grad.item() == pytest.approx(138.83381924198252)
    assert b.grad.item() == pytest.approx(645.5772594752186)
    compare_with_torch(fn, fn, [a, b], rtol=1e-10)


@settings(max_examples=25, deadline=None)
@given(a=st.floats(-3, 3), b=st.floats(-3, 3), n=st.integers(1, 4))
def test_more_ops_on_vectors(a, b, n):
    pytest.importorskip("torch")
    if abs(a) < 1e-3 or abs(b) < 1e-3 or abs(a - b) < 1e-3 or abs(a + b) < 1e-3:
        return  # relu kinks
    rng = np.random.default_rng(0)
    va = leaf(a + rng.uniform(-0.1, 0.1, n))
    vb = leaf(b + rng.uniform(-0.1, 0.1, n))
    compare_with_torch(more_ops, more_ops, [va, vb], rtol=1e-9, atol=1e-9)
    assert mt.gradcheck(more_ops, [va, vb], rtol=1e-3, atol=1e-4)


def test_neuron_and_mlp():
    pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x, w, b = leaf(rng.normal(size=(5, 3))), leaf(rng.normal(size=3)), leaf(0.5)
    compare_with_torch(neuron, neuron, [x, w, b])
    params = [leaf(rng.normal(size=s)) for s in [(5, 3), (3, 8), (8,), (8, 2), (2,)]]
    compare_with_torch(mlp, mlp, params)
    assert mt.gradcheck(mlp, params)


def test_training_matches_torch_step_by_step():
    """Ten SGD steps of a tiny MLP: losses and parameters track PyTorch."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    x = rng.normal(size=(16, 3))
    arrays = [rng.normal(size=s) * 0.5 for s in [(3, 8), (8,), (8, 2), (2,)]]
    ours = [leaf(a) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    xo, xt = mt.tensor(x, dtype=mt.float64), torch.tensor(x)
    for _ in range(10):
        lo = mlp(xo, *ours)
        lt = mlp(xt, *theirs)
        lo.backward()
        lt.backward()
        assert lo.item() == pytest.approx(lt.item(), rel=1e-10)
        with mt.no_grad():
            for p in ours:
                p -= 0.5 * p.grad
                p.grad = None
        with torch.no_grad():
            for p in theirs:
                p -= 0.5 * p.grad
                p.grad = None
    for p, t in zip(ours, theirs):
        np.testing.assert_allclose(p.numpy(), t.detach().numpy(), rtol=1e-9, atol=1e-12)


def test_accumulating_into_a_tensor_with_plus_equals_keeps_the_gradient():
    torch = pytest.importorskip("torch")

    def accumulate(x, lib):
        total = lib.zeros(3, dtype=x.dtype)
        for k in range(3):
            total += x[k] * (k + 1)
        return total

    x = leaf(np.arange(9.0).reshape(3, 3))
    compare_with_torch(lambda x: accumulate(x, mt), lambda x: accumulate(x, torch), [x])


# ---- random programs -------------------------------------------------------------

UNARY_STEPS = {
    "tanh": lambda x, lib: x.tanh(),
    "sigmoid": lambda x, lib: x.sigmoid(),
    "relu": lambda x, lib: x.relu(),
    "abs": lambda x, lib: abs(x),
    "neg": lambda x, lib: -x,
    "square": lambda x, lib: x * x,
    "soft_sqrt": lambda x, lib: (x * x + 1) ** 0.5,
    "log1p_sq": lambda x, lib: (x * x + 1).log(),
    "exp_tanh": lambda x, lib: x.tanh().exp(),
    "T": lambda x, lib: x.T if x.ndim == 2 else x,
    "unsqueeze": lambda x, lib: x.unsqueeze(0),
    "flatten": lambda x, lib: x.reshape(-1),
    "softmax": lambda x, lib: lib.softmax(x, -1) if x.ndim else x,
    "sum_keep": lambda x, lib: x.sum(-1, keepdims=True) if lib is mt else x.sum(-1, True),
    "mean0": lambda x, lib: x.mean(0) if x.ndim else x,
    "max_last": lambda x, lib: x.amax(-1) if x.ndim else x,
    "slice": lambda x, lib: x[..., ::2] if x.ndim else x,
}

BINARY_STEPS = {
    "add": lambda a, b, lib: a + b,
    "sub": lambda a, b, lib: a - b,
    "mul": lambda a, b, lib: a * b,
    "div": lambda a, b, lib: a / (b * b + 1),
    "maximum": lambda a, b, lib: lib.maximum(a, b),
}


def _broadcastable(sa, sb):
    try:
        np.broadcast_shapes(sa, sb)
        return True
    except ValueError:
        return False


@settings(max_examples=40, deadline=None)
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_random_programs_match_torch(data, seed):
    """Random sequences of ops over a pool of values (reusing earlier results, so graphs
    have diamonds and broadcasts) agree with PyTorch in value and gradient, fused or not."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    arrays = [rng.uniform(-2, 2, s) for s in [(2, 3), (3,), (3, 2)]]
    fused = data.draw(st.booleans())
    with mt.fusion(fused):
        ours = [leaf(a) for a in arrays]
        theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
        pool = list(zip(ours, theirs))
        for _ in range(data.draw(st.integers(1, 8))):
            i = data.draw(st.integers(0, len(pool) - 1))
            a, ta = pool[i]
            kind = data.draw(st.sampled_from(["unary", "binary", "matmul"]))
            if kind == "unary":
                f = UNARY_STEPS[data.draw(st.sampled_from(sorted(UNARY_STEPS)))]
                pool.append((f(a, mt), f(ta, torch)))
            elif kind == "binary":
                partners = [p for p in pool if _broadcastable(a.shape, p[0].shape)]
                b, tb = data.draw(st.sampled_from(partners))
                f = BINARY_STEPS[data.draw(st.sampled_from(sorted(BINARY_STEPS)))]
                pool.append((f(a, b, mt), f(ta, tb, torch)))
            else:
                partners = [p for p in pool if a.ndim and p[0].ndim and
                            p[0].shape[0] == a.shape[-1] and p[0].ndim <= 2]
                if partners:
                    b, tb = data.draw(st.sampled_from(partners))
                    pool.append((a @ b, ta @ tb))
        loss = sum((n * (k + 1)).sum() for k, (n, _) in enumerate(pool))
        tloss = sum((t * (k + 1)).sum() for k, (_, t) in enumerate(pool))
        loss.backward()
    tloss.backward()
    np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-9)
    for n, t in pool:
        np.testing.assert_allclose(n.numpy(), t.detach().numpy(), rtol=1e-9, atol=1e-12)
    for n, t in zip(ours, theirs):
        np.testing.assert_allclose(n.grad.numpy(), t.grad.numpy(), rtol=1e-8, atol=1e-10)
