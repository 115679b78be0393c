"""Handles on parameters and gradients stay what PyTorch says they are across an optimizer.

An optimizer keeps each group's parameters (and gradients) in one flat buffer so
that a step is one kernel. Making it must not detach ``.data`` handles taken
before, and ``.grad`` references must follow PyTorch's rules across steps.
"""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp import tensor as T
from minitorch_exp.nn import optim

X = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)


def _model():
    mt.manual_seed(0)
    return nn.Linear(3, 2)


def _loss(model):
    return (model(mt.tensor(X)) ** 2).sum()


# ---- .data handles ----------------------------------------------------------------


@pytest.mark.parametrize("opt_cls", [optim.SGD, optim.Adam])
def test_data_handles_taken_before_the_optimizer_keep_aliasing(opt_cls):
    lin = _model()
    h, hb = lin.weight.data, lin.bias.data
    row = lin.weight.data[1]  # a view
    _ = h.numpy(), row.numpy()  # a NumPy view made before, too
    opt = opt_cls(lin.parameters(), lr=0.1)
    h[...] = 0.0
    np.testing.assert_array_equal(lin.weight.numpy(), 0.0)
    hb += 1.0
    bias = lin.bias.numpy().copy()
    _loss(lin).backward()
    opt.step()
    assert not np.array_equal(lin.weight.numpy(), 0.0)
    np.testing.assert_array_equal(h.numpy(), lin.weight.numpy())
    np.testing.assert_array_equal(row.numpy(), lin.weight.numpy()[1])
    np.testing.assert_array_equal(hb.numpy(), lin.bias.numpy())
    assert not np.array_equal(hb.numpy(), bias)


def test_data_handles_taken_after_the_optimizer_alias_and_the_step_is_one_kernel():
    lin = _model()
    opt = optim.SGD(lin.parameters(), lr=0.1, momentum=0.9)
    h = lin.weight.data
    h[...] = 1.0
    np.testing.assert_array_equal(lin.weight.numpy(), 1.0)
    for _ in range(2):
        opt.zero_grad()
        _loss(lin).backward()
        with mt.count_kernels() as k:
            opt.step()
        assert k.total == 1, k
        np.testing.assert_array_equal(h.numpy(), lin.weight.numpy())


def test_handles_match_torch():
    torch = pytest.importorskip("torch")
    results = []
    for lib in ("mt", "torch"):
        if lib == "mt":
            w = nn.Parameter(np.array([1.0, 2.0], np.float32))
            make = optim.SGD
        else:
            w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
            make = torch.optim.SGD
        h = w.data
        opt = make([w], lr=0.5)
        h[...] = 3.0
        (w * w).sum().backward()
        opt.step()
        results.append([h.numpy().tolist(), w.detach().numpy().tolist()])
    assert results[0] == results[1] == [[0.0, 0.0], [0.0, 0.0]]


# ---- .grad references across steps (PyTorch's rules) ---------------------------------


def _grad_story(lib):
    """The values a held ``g = p.grad`` shows through backwards, zero_grads and steps."""
    if lib == "mt":
        p = nn.Parameter(np.array([1.0, 2.0], np.float32))
        opt = optim.SGD([p], lr=0.1)
    else:
        import torch
        p = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
        opt = torch.optim.SGD([p], lr=0.1)
    seen = []
    (p * p).sum().backward()
    g = p.grad
    seen.append(g.numpy().tolist())
    (p * 3).sum().backward()  # accumulates into the same tensor
    seen.append(g.numpy().tolist())
    assert p.grad is g
    opt.step()
    opt.zero_grad(set_to_none=False)  # zeroed in place: g stays p's gradient
    seen.append(g.numpy().tolist())
    (p * 2).sum().backward()
    seen.append(g.numpy().tolist())
    assert p.grad is g
    opt.zero_grad(set_to_none=True)  # p.grad is None: the next backward makes a new one
    assert p.grad is None
    (p * 5).sum().backward()
    seen.append(g.numpy().tolist())  # the old tensor keeps its values
    seen.append(p.grad.numpy().tolist())
    assert p.grad is not g
    opt.step()
    seen.append(p.detach().numpy().tolist())
    return seen


def test_grad_references_follow_torch_across_steps():
    seen = _grad_story("mt")
    expected = [[2.0, 4.0], [5.0, 7.0], [0.0, 0.0], [2.0, 2.0], [2.0, 2.0], [5.0, 5.0]]
    np.testing.assert_allclose(seen[:6], expected)
    # p: [1, 2] - 0.1 * [5, 7] - 0.1 * [5, 5]
    np.testing.assert_allclose(seen[6], [0.0, 0.8], atol=1e-6)
    torch = pytest.importorskip("torch")  # noqa: F841
    np.testing.assert_allclose(_grad_story("torch"), seen, atol=1e-6)


def test_a_grad_taken_before_the_optimizer_stays_the_gradient():
    lin = _model()
    _loss(lin).backward()
    g = lin.weight.grad
    first = g.numpy().copy()
    opt = optim.SGD(lin.parameters(), lr=0.1)
    assert lin.weight.grad is g
    _loss(lin).backward()  # accumulates into g
    np.testing.assert_allclose(g.numpy(), 2 * first, rtol=1e-6)
    before = lin.weight.numpy().copy()
    with mt.count_kernels() as k:
        opt.step()
    assert k.total == 1, k  # and the step is still one flat kernel
    np.testing.assert_allclose(lin.weight.numpy(), before - 0.1 * 2 * first, rtol=1e-5)


def test_grads_kept_from_every_step_keep_their_values():
    lin = _model()
    opt = optim.SGD(lin.parameters(), lr=0.1)
    kept, copies = [], []
    for _ in range(3):
        opt.zero_grad()
        _loss(lin).backward()
        kept.append(lin.weight.grad)
        copies.append(lin.weight.grad.numpy().copy())
        opt.step()
    for g, c in zip(kept, copies):
        np.testing.assert_array_equal(g.numpy(), c)
    assert not np.array_equal(copies[0], copies[2])


# ---- what the flat buffer must not change ---------------------------------------------


def test_a_step_between_forward_and_backward_is_reported_as_in_torch():
    lin = _model()
    opt = optim.SGD(lin.parameters(), lr=0.1)
    _loss(lin).backward()
    loss = _loss(lin)
    opt.step()  # writes the weight the graph saved
    with pytest.raises(RuntimeError, match="modified in place"):
        loss.backward()


def test_a_lazy_value_of_a_parameter_keeps_its_value_through_a_step():
    lin = _model()
    opt = optim.SGD(lin.parameters(), lr=0.1)
    _loss(lin).backward()
    twice = lin.weight * 2
    expected = lin.weight.numpy() * 2
    opt.step()
    np.testing.assert_array_equal(twice.numpy(), expected)


def test_parameters_that_cannot_be_flat_are_updated_one_by_one():
    base = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    expected = base.T - 0.5
    p = nn.Parameter(base.T)  # strided, and base's memory: not a buffer of its own
    q = nn.Parameter(np.ones(3, np.float32))
    h = p.data
    opt = optim.SGD([p, q], lr=0.5)
    (p.sum() + q.sum()).backward()
    opt.step()
    np.testing.assert_array_equal(p.numpy(), expected)
    np.testing.assert_array_equal(h.numpy(), expected)
    np.testing.assert_array_equal(base.T, expected)  # updated in place, as torch would
    np.testing.assert_array_equal(q.numpy(), 0.5)


def test_a_read_only_parameter_is_refused_by_the_step():
    arr = np.ones(3, np.float32)
    arr.flags.writeable = False
    p = nn.Parameter(T.from_numpy(arr))
    opt = optim.SGD([p], lr=0.5)
    p.sum().backward()
    with pytest.raises(ValueError, match="read-only"):
        opt.step()
    np.testing.assert_array_equal(arr, 1.0)


def test_a_parameter_given_new_data_after_the_optimizer_is_updated_there():
    lin = _model()
    opt = optim.SGD(lin.parameters(), lr=0.5)
    new = T.zeros((2, 3))
    lin.weight.data = new  # as in torch: the optimizer now updates ``new``
    _loss(lin).backward()
    expected = -0.5 * lin.weight.grad.numpy()
    opt.step()
    np.testing.assert_allclose(new.numpy(), expected, rtol=1e-6)
    assert lin.weight.value is new
