"""User-defined ``mt.Function`` subclasses, and ``mt.gradcheck`` catching a wrong backward."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

import minitorch_exp as mt

from ._helpers import broadcast_shapes, layouts, leaf, seeds, values


class ScaledProduct(mt.Function):
    """``alpha * x * y``: saves both inputs, keeps alpha as a plain attribute."""

    calls: list = []

    @staticmethod
    def forward(ctx, x, y, alpha=1.0):
        ctx.save_for_backward(x, y)
        ctx.alpha = alpha  # arbitrary attributes on ctx, as in PyTorch
        return x * y * alpha

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        ScaledProduct.calls.append(ctx.needs_input_grad)
        gx = grad * y * ctx.alpha if ctx.needs_input_grad[0] else None
        gy = grad * x * ctx.alpha if ctx.needs_input_grad[1] else None
        return gx, gy


class Cube(mt.Function):
    """``x ** 3`` computed with NumPy inside forward (a non-fused, realized result)."""

    @staticmethod
    def forward(ctx, x):
        arr = x.numpy()
        ctx.save_for_backward(x)
        return mt.tensor.from_numpy(np.asarray(arr ** 3))

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3 * x * x


@settings(max_examples=25, deadline=None)
@given(shp=broadcast_shapes(), la=layouts, lb=layouts, seed=seeds)
def test_custom_function_gradcheck(shp, la, lb, seed):
    rng = np.random.default_rng(seed)
    shape = np.broadcast_shapes(*shp)
    x, y = leaf(values(rng, shape), la), leaf(values(rng, shape), lb)
    assert mt.gradcheck(lambda x, y: ScaledProduct.apply(x, y, alpha=2.5), [x, y])
    assert mt.gradcheck(lambda x: Cube.apply(x * 2).tanh(), [x])  # composed with built-ins
    assert mt.gradcheck(lambda x, y: ScaledProduct.apply(x.exp(), y.T.T, alpha=-1.0), [x, y])


def test_custom_function_matches_torch():
    torch = pytest.importorskip("torch")
    x = leaf([[1.0, -2.0], [0.5, 3.0]])
    tx = torch.tensor(x.numpy(), requires_grad=True)
    (Cube.apply(x) + ScaledProduct.apply(x, x, alpha=3.0)).sum().backward()
    (tx ** 3 + 3 * tx * tx).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())


def test_needs_input_grad_and_non_tensor_arguments():
    ScaledProduct.calls.clear()
    x = leaf([1.0, 2.0])
    y = leaf([3.0, 4.0], requires_grad=False)
    out = ScaledProduct.apply(x, y, alpha=2.0)
    assert out.grad_fn is not None and out.requires_grad
    out.sum().backward()
    assert ScaledProduct.calls == [(True, False)]
    np.testing.assert_array_equal(x.grad.numpy(), [6.0, 8.0])
    assert y.grad is None
    # a positional non-tensor argument is never marked as needing a gradient
    ScaledProduct.calls.clear()
    out = ScaledProduct.apply(x, y, 2.0)
    assert out.grad_fn.needs_input_grad == (True, False, False)


def test_custom_function_under_no_grad_records_nothing():
    x = leaf([1.0, 2.0])
    with mt.no_grad():
        out = ScaledProduct.apply(x, x)
    assert not out.requires_grad and out.grad_fn is None


def test_saved_tensors_are_freed_after_backward():
    x = leaf([1.0, 2.0])
    out = ScaledProduct.apply(x, x)
    ctx = out.grad_fn
    out.sum().backward()
    with pytest.raises(RuntimeError, match="freed"):
        _ = ctx.saved_tensors


def test_backward_returning_the_wrong_count_or_shape_is_reported():
    class TooFew(mt.Function):
        @staticmethod
        def forward(ctx, x, y):
            return x + y

        @staticmethod
        def backward(ctx, grad):
            return (grad,)

    class WrongShape(mt.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad.sum()

    x = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError, match="TooFew.*1 gradients for 2 inputs"):
        TooFew.apply(x, x).sum().backward()
    with pytest.raises(RuntimeError, match="WrongShape.*shape"):
        WrongShape.apply(x).sum().backward()


# ---- gradcheck catches a wrong backward -------------------------------------------

class WrongAt01(mt.Function):
    """``x * y`` whose backward is right for x and wrong at y's element (0, 1)."""

    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        gy = (grad * x).numpy().copy()
        gy[0, 1] += 0.25
        return grad * y, mt.tensor.from_numpy(gy)


def test_gradcheck_names_the_input_and_element_of_a_wrong_backward():
    rng = np.random.default_rng(0)
    x, y = leaf(values(rng, (2, 3))), leaf(values(rng, (2, 3)))
    with pytest.raises(AssertionError) as err:
        mt.gradcheck(WrongAt01.apply, [x, y])
    msg = str(err.value)
    assert "input 1" in msg and "(0, 1)" in msg, msg
    assert "input 0" not in msg


def test_gradcheck_catches_a_wrong_sign():
    class NegExp(mt.Function):
        @staticmethod
        def forward(ctx, x):
            e = x.exp()
            ctx.save_for_backward(e)
            return e

        @staticmethod
        def backward(ctx, grad):
            (e,) = ctx.saved_tensors
            return -grad * e

    x = leaf([[0.5, 1.0]])
    with pytest.raises(AssertionError, match=r"input 0 .*element \(0, 0\)"):
        mt.gradcheck(NegExp.apply, [x])


def test_gradcheck_passes_a_right_backward_and_skips_non_grad_inputs():
    x = leaf([[0.5, 1.0]])
    c = leaf([[2.0, 3.0]], requires_grad=False)
    assert mt.gradcheck(lambda x, c: x * c, [x, c]) is True


def test_gradcheck_wants_float64():
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(TypeError, match="float64"):
        mt.gradcheck(lambda x: x * 2, [x])


def test_gradcheck_leaves_inputs_unchanged():
    arr = np.array([[0.5, -1.0], [2.0, 3.0]])
    x = leaf(arr, "transposed")
    mt.gradcheck(lambda x: (x * x).tanh(), [x])
    np.testing.assert_array_equal(x.numpy(), arr)


def test_gradcheck_perturbations_do_not_leak_into_lazy_values():
    """A lazy value built from an input before gradcheck keeps the unperturbed numbers,
    even if the checked function realizes it while the input is perturbed."""
    x = leaf([0.5, 1.5])
    y = x * 2 + 1  # lazy, reads x's buffer
    calls = []

    def f(x):
        calls.append(x)
        if len(calls) == 1:  # the analytic pass leaves y alone ...
            return x * x
        return x * x + 0 * y.detach()  # ... the perturbed passes realize it

    assert mt.gradcheck(f, [x])
    np.testing.assert_array_equal(y.numpy(), [2.0, 4.0])
