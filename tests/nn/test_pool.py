"""Pooling: max, average and adaptive average against a NumPy loop and PyTorch over drawn
kernels, strides, paddings, dilations and ceil modes; gradients by finite differences;
PyTorch's tie rule for max pooling."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.nn.functional import adaptive_avg_pool2d, avg_pool2d, max_pool2d

from ..devices import DEVICES
from ..node._helpers import LAYOUTS, compare_with_torch, leaf
from . import conv_reference as ref


@st.composite
def pool_cases(draw, dilation: bool = True):
    """(x shape, kernel, stride, padding, dilation, ceil_mode) that PyTorch accepts."""
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = draw(st.one_of(st.none(), st.tuples(st.integers(1, 3), st.integers(1, 3))))
    dil = (draw(st.integers(1, 2)), draw(st.integers(1, 2))) if dilation else (1, 1)
    extent = [d * (k - 1) + 1 for k, d in zip(kernel, dil)]
    padding = tuple(draw(st.integers(0, k // 2)) for k in kernel)
    h, w = (draw(st.integers(max(1, e - 2 * p), max(1, e - 2 * p) + 4))
            for e, p in zip(extent, padding))
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 3)), h, w)
    return shape, kernel, stride, padding, dil, draw(st.booleans())


def _distinct(rng, shape):
    """Values with no ties (a max's gradient is then unique)."""
    return rng.permutation(np.prod(shape)).reshape(shape) * 0.01 + rng.uniform(0, 0.001, shape)


@settings(max_examples=40, deadline=None)
@given(case=pool_cases(), layout=st.sampled_from(LAYOUTS), seed=st.integers(0, 2**16))
def test_max_pool2d_matches_a_numpy_loop(case, layout, seed):
    shape, kernel, stride, padding, dilation, ceil_mode = case
    x = np.random.default_rng(seed).standard_normal(shape)
    out = max_pool2d(leaf(x, layout, requires_grad=False), kernel, stride, padding, dilation,
                     ceil_mode)
    np.testing.assert_array_equal(out.numpy(), ref.max_pool2d(x, kernel, stride, padding,
                                                              dilation, ceil_mode))


@settings(max_examples=40, deadline=None)
@given(case=pool_cases(dilation=False), include=st.booleans(),
       override=st.sampled_from([None, 3]), layout=st.sampled_from(LAYOUTS),
       seed=st.integers(0, 2**16))
def test_avg_pool2d_matches_a_numpy_loop(case, include, override, layout, seed):
    shape, kernel, stride, padding, _, ceil_mode = case
    x = np.random.default_rng(seed).standard_normal(shape)
    out = avg_pool2d(leaf(x, layout, requires_grad=False), kernel, stride, padding, ceil_mode,
                     include, override)
    expected = ref.avg_pool2d(x, kernel, stride, padding, ceil_mode, include, override)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=30, deadline=None)
@given(case=pool_cases(), layout=st.sampled_from(LAYOUTS), seed=st.integers(0, 2**16))
def test_max_pool2d_matches_pytorch(device, case, layout, seed):
    torch = pytest.importorskip("torch")
    shape, kernel, stride, padding, dilation, ceil_mode = case
    x = leaf(_distinct(np.random.default_rng(seed), shape), layout, device=device)
    # a dilated window may skip every input element (all padding): -inf, and PyTorch then
    # sends its gradient to a padding-clamped index; no gradient is as defensible
    assume(np.isfinite(max_pool2d(x, kernel, stride, padding, dilation, ceil_mode).numpy()).all())
    compare_with_torch(
        lambda t: max_pool2d(t, kernel, stride, padding, dilation, ceil_mode),
        lambda t: torch.nn.functional.max_pool2d(t, kernel, stride or kernel, padding,
                                                 dilation, ceil_mode), [x])


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=30, deadline=None)
@given(case=pool_cases(dilation=False), include=st.booleans(),
       override=st.sampled_from([None, 2]), seed=st.integers(0, 2**16))
def test_avg_pool2d_matches_pytorch(device, case, include, override, seed):
    torch = pytest.importorskip("torch")
    shape, kernel, stride, padding, _, ceil_mode = case
    x = leaf(np.random.default_rng(seed).standard_normal(shape), device=device)
    compare_with_torch(
        lambda t: avg_pool2d(t, kernel, stride, padding, ceil_mode, include, override),
        lambda t: torch.nn.functional.avg_pool2d(t, kernel, stride or kernel, padding,
                                                 ceil_mode, include, override), [x])


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=30, deadline=None)
@given(h=st.integers(1, 9), w=st.integers(1, 9), oh=st.integers(1, 5), ow=st.integers(1, 5),
       seed=st.integers(0, 2**16))
def test_adaptive_avg_pool2d_matches_a_numpy_loop_and_pytorch(device, h, w, oh, ow, seed):
    x = np.random.default_rng(seed).standard_normal((2, 3, h, w))
    out = adaptive_avg_pool2d(leaf(x, requires_grad=False, device=device), (oh, ow))
    np.testing.assert_allclose(out.numpy(), ref.adaptive_avg_pool2d(x, (oh, ow)), rtol=1e-6,
                               atol=1e-6)
    torch = pytest.importorskip("torch")
    compare_with_torch(lambda t: adaptive_avg_pool2d(t, (oh, ow)),
                       lambda t: torch.nn.functional.adaptive_avg_pool2d(t, (oh, ow)),
                       [leaf(x, device=device)])


@pytest.mark.parametrize("fn", [
    lambda x: max_pool2d(x, 2),
    lambda x: max_pool2d(x, 3, 2, 1, 2, True),
    lambda x: max_pool2d(x, (3, 2), (1, 2), (1, 0)),
    lambda x: avg_pool2d(x, 3, 2, 1, True, False),
    lambda x: avg_pool2d(x, (2, 3), 1, (1, 1), False, True, 4),
    lambda x: adaptive_avg_pool2d(x, (2, 3)),
    lambda x: adaptive_avg_pool2d(x, (3, None)),
])
def test_pooling_gradcheck(fn):
    x = mt.tensor(_distinct(np.random.default_rng(0), (2, 2, 7, 6)), requires_grad=True)
    assert mt.gradcheck(fn, [x])


def test_ties_send_the_gradient_to_the_first_maximum_as_pytorch_does():
    x = np.zeros((1, 1, 4, 4))  # windows of zeros, as after a ReLU
    x[0, 0, 3, 3] = x[0, 0, 2, 3] = 1.0  # a tie between two ones, in the last window
    xn = mt.tensor(x, requires_grad=True)
    max_pool2d(xn, 2).sum().backward()
    expected = np.zeros((4, 4))
    expected[0, 0] = expected[0, 2] = expected[2, 0] = expected[2, 3] = 1.0
    np.testing.assert_array_equal(xn.grad.numpy()[0, 0], expected)
    torch = pytest.importorskip("torch")
    tx = torch.tensor(x, requires_grad=True)
    torch.nn.functional.max_pool2d(tx, 2).sum().backward()
    np.testing.assert_array_equal(xn.grad.numpy(), tx.grad.numpy())


def test_overlapping_windows_add_their_gradients():
    xn = mt.tensor(np.arange(9.0).reshape(1, 1, 3, 3), requires_grad=True)
    avg_pool2d(xn, 2, stride=1).sum().backward()  # the centre is in all four windows
    np.testing.assert_allclose(xn.grad.numpy()[0, 0], [[.25, .5, .25], [.5, 1, .5],
                                                       [.25, .5, .25]])


def test_padding_never_wins_a_max():
    x = -np.ones((1, 1, 2, 2))
    np.testing.assert_array_equal(max_pool2d(mt.tensor(x), 3, 1, 1).numpy(), x)


def test_without_a_graph_max_pooling_skips_the_argmax_pass():
    x = mt.randn(2, 3, 8, 8)
    with mt.no_grad(), mt.count_kernels("cpu") as k:
        max_pool2d(x, 2)
    without = k["fused"]
    with mt.count_kernels("cpu") as k:
        max_pool2d(mt.randn(2, 3, 8, 8, requires_grad=True), 2)
    assert k["fused"] == without + 1


def test_unbatched_input_and_modules():
    x = mt.randn(3, 8, 8)
    assert nn.MaxPool2d(2)(x).shape == (3, 4, 4)
    assert nn.AvgPool2d(3, stride=2, padding=1)(x).shape == (3, 4, 4)
    assert nn.AdaptiveAvgPool2d((5, 7))(x).shape == (3, 5, 7)
    assert nn.AdaptiveAvgPool2d(1)(mt.randn(2, 3, 8, 8)).shape == (2, 3, 1, 1)
    np.testing.assert_allclose(nn.MaxPool2d(2)(x).numpy(), max_pool2d(x, 2).numpy())
    assert repr(nn.MaxPool2d(2)) == ("MaxPool2d(kernel_size=2, stride=2, padding=0, "
                                     "dilation=1, ceil_mode=False)")


@pytest.mark.parametrize("call, message", [
    (lambda x: max_pool2d(x, 2, padding=2), r"padding \(2, 2\) must be at most half"),
    (lambda x: max_pool2d(x, 3, padding=2, dilation=2), r"at most half of kernel_size=\(3, 3"),
    (lambda x: avg_pool2d(x, 3, padding=2), r"padding \(2, 2\) must be at most half"),
    (lambda x: max_pool2d(x, 9), r"too small for kernel_size=\(9, 9\)"),
    (lambda x: max_pool2d(x.reshape(2, 48), 2), r"expected input of shape \(N, C, H, W\)"),
    (lambda x: max_pool2d(x, 0), "must be positive"),
    (lambda x: adaptive_avg_pool2d(x, 0), "output_size must be positive"),
])
def test_bad_arguments_are_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call(mt.randn(2, 3, 4, 4))


def test_return_indices_is_refused_clearly():
    with pytest.raises(NotImplementedError, match="return_indices"):
        max_pool2d(mt.randn(1, 1, 4, 4), 2, return_indices=True)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**16), k=st.integers(4, 6))
def test_big_kernels_combine_in_several_passes(seed, k):
    """Kernels with more than CHUNK offsets fold in chunks; the result is the same."""
    assume(k * k > 16)
    x = np.random.default_rng(seed).standard_normal((1, 2, 9, 9))
    np.testing.assert_array_equal(max_pool2d(mt.tensor(x), k, 1).numpy(),
                                  ref.max_pool2d(x, k, 1))
    # a window's mean may cancel to near zero: the sums' own rounding bounds the error
    np.testing.assert_allclose(avg_pool2d(mt.tensor(x), k, 1).numpy(),
                               ref.avg_pool2d(x, k, 1), rtol=1e-12, atol=1e-15 * k * k)
