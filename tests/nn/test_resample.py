"""Resampling: interpolate (nearest, linear, bilinear with and without align_corners,
area), pixel shuffles, adaptive max pooling, 1-D pooling and Dropout1d -- against
PyTorch over drawn shapes and arguments, by finite differences, and by their own
invariants where PyTorch is absent."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.nn.functional import (
    adaptive_max_pool2d,
    avg_pool1d,
    dropout1d,
    interpolate,
    max_pool1d,
    pixel_shuffle,
    pixel_unshuffle,
)

from ..node._helpers import LAYOUTS, compare_with_torch, leaf

POLICIES = {"default": contextlib.nullcontext, "fuse_all": lambda: mt.fusion(threshold=0)}


@st.composite
def interpolate_cases(draw):
    """(shape, kwargs) of an interpolate PyTorch accepts, 3-D or 4-D input."""
    dims = draw(st.sampled_from([1, 2]))
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 2)),
             *(draw(st.integers(1, 6)) for _ in range(dims)))
    mode = draw(st.sampled_from(["nearest", "area", "linear" if dims == 1 else "bilinear"]))
    kwargs = {"mode": mode}
    if draw(st.booleans()):
        kwargs["size"] = tuple(draw(st.integers(1, 9)) for _ in range(dims))
    else:
        factor = st.sampled_from([0.5, 0.75, 1.0, 1.5, 2, 2.5, 3])
        kwargs["scale_factor"] = tuple(draw(factor) for _ in range(dims))
        if min(int(n * f) for n, f in zip(shape[2:], kwargs["scale_factor"])) < 1:
            kwargs["scale_factor"] = (2,) * dims
        if draw(st.booleans()):
            kwargs["recompute_scale_factor"] = True
    if mode not in ("nearest", "area") and draw(st.booleans()):
        kwargs["align_corners"] = draw(st.booleans())
    if mode == "area":
        kwargs.pop("recompute_scale_factor", None)
    return shape, kwargs


@settings(max_examples=30, deadline=None)
@given(case=interpolate_cases(), layout=st.sampled_from(LAYOUTS), seed=st.integers(0, 2**16))
def test_interpolate_matches_pytorch(case, layout, seed):
    torch = pytest.importorskip("torch")
    shape, kwargs = case
    x = leaf(np.random.default_rng(seed).standard_normal(shape), layout)
    compare_with_torch(lambda x: interpolate(x, **kwargs),
                       lambda x: torch.nn.functional.interpolate(x, **kwargs), [x],
                       rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kwargs", [
    dict(scale_factor=2, mode="bilinear"),
    dict(size=(5, 2), mode="bilinear", align_corners=True),
    dict(size=(4, 7)),
])
def test_interpolate_gradcheck(kwargs):
    x = mt.tensor(np.random.default_rng(0).standard_normal((2, 2, 3, 4)), requires_grad=True)
    assert mt.gradcheck(lambda x: interpolate(x, **kwargs), [x])


def test_nearest_by_an_integer_factor_is_a_view_and_one_copy():
    """No product: the broadcast view is copied once, and the values repeat each input."""
    x = mt.tensor(np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5))
    with mt.count_kernels("cpu") as k:
        out = nn.Upsample(scale_factor=2)(x).value
    assert k["blas"] == 0 and k.total <= 1
    np.testing.assert_array_equal(out.numpy(), x.numpy().repeat(2, 2).repeat(2, 3))


@pytest.mark.parametrize("policy", POLICIES)
def test_upsample_modules_on_both_sides_of_the_fusion_policy(policy):
    torch = pytest.importorskip("torch")
    x = leaf(np.random.default_rng(1).standard_normal((2, 3, 4, 5)))
    pairs = [(nn.Upsample(scale_factor=2), torch.nn.Upsample(scale_factor=2)),
             (nn.UpsamplingBilinear2d(size=(7, 3)), torch.nn.UpsamplingBilinear2d(size=(7, 3))),
             (nn.UpsamplingNearest2d(scale_factor=3), torch.nn.UpsamplingNearest2d(scale_factor=3)),
             (nn.Upsample(scale_factor=1.5, mode="bilinear"),
              torch.nn.Upsample(scale_factor=1.5, mode="bilinear"))]
    with POLICIES[policy]():
        for mine, theirs in pairs:
            compare_with_torch(nn.Sequential(mine, nn.ReLU()),
                               torch.nn.Sequential(theirs, torch.nn.ReLU()), [x],
                               rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(), ValueError, "give exactly one of size and scale_factor"),
    (dict(size=4, scale_factor=2), ValueError, "give exactly one of size and scale_factor"),
    (dict(size=(0, 3)), ValueError, "interpolate: size must be positive"),
    (dict(scale_factor=-1.0), ValueError, "interpolate: scale_factor must be a positive"),
    (dict(scale_factor=0.1), ValueError, "makes input of shape"),
    (dict(size=4, align_corners=True), ValueError, "align_corners option can only be set"),
    (dict(size=4, mode="linear"), NotImplementedError, "linear mode needs 3-D input"),
    (dict(size=4, mode="bicubic"), NotImplementedError, "mode='bicubic' is not supported"),
])
def test_interpolate_errors_name_the_argument(kwargs, error, message):
    with pytest.raises(error, match=message):
        interpolate(mt.zeros(1, 1, 4, 4), **kwargs)


# ---- pixel shuffles -------------------------------------------------------------------------

@settings(max_examples=15, deadline=None)
@given(lead=st.lists(st.integers(1, 2), max_size=2), c=st.integers(1, 3), r=st.integers(1, 3),
       h=st.integers(1, 3), w=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_pixel_shuffle_matches_pytorch_and_unshuffle_inverts_it(lead, c, r, h, w, seed):
    x = np.random.default_rng(seed).standard_normal((*lead, c * r * r, h, w))
    shuffled = pixel_shuffle(mt.tensor(x), r)
    assert shuffled.shape == (*lead, c, h * r, w * r)
    np.testing.assert_array_equal(pixel_unshuffle(shuffled, r).numpy(), x)
    torch = pytest.importorskip("torch")
    compare_with_torch(lambda x: nn.PixelShuffle(r)(x),
                       lambda x: torch.nn.PixelShuffle(r)(x), [leaf(x)])
    y = shuffled.numpy()
    compare_with_torch(lambda y: nn.PixelUnshuffle(r)(y),
                       lambda y: torch.nn.PixelUnshuffle(r)(y), [leaf(y)])


def test_pixel_shuffle_errors():
    with pytest.raises(ValueError, match="divisible by upscale_factor"):
        pixel_shuffle(mt.zeros(1, 6, 2, 2), 2)
    with pytest.raises(ValueError, match="pixel_unshuffle: .* divisible by downscale_factor=2"):
        pixel_unshuffle(mt.zeros(1, 1, 3, 4), 2)
    with pytest.raises(ValueError, match="PixelShuffle: upscale_factor must be positive"):
        nn.PixelShuffle(0)


# ---- adaptive max pooling, 1-D pooling ------------------------------------------------------

def _distinct(rng, shape):
    """Values with no ties (a max's gradient is then unique)."""
    return rng.permutation(np.prod(shape)).reshape(shape) * 0.01 + rng.uniform(0, 0.001, shape)


@settings(max_examples=25, deadline=None)
@given(h=st.integers(1, 9), w=st.integers(1, 9), oh=st.integers(1, 5), ow=st.integers(1, 5),
       unbatched=st.booleans(), seed=st.integers(0, 2**16))
def test_adaptive_max_pool2d_matches_pytorch(h, w, oh, ow, unbatched, seed):
    torch = pytest.importorskip("torch")
    shape = (2, h, w) if unbatched else (2, 2, h, w)
    x = leaf(_distinct(np.random.default_rng(seed), shape))
    compare_with_torch(lambda x: nn.AdaptiveMaxPool2d((oh, ow))(x),
                       lambda x: torch.nn.AdaptiveMaxPool2d((oh, ow))(x), [x])


def test_adaptive_max_pool2d_ties_go_to_the_first_maximum():
    """Zeros everywhere (after a ReLU): each uneven bin sends its gradient to its first
    element only, as PyTorch does -- the repeated elements that even the bins out do not
    take a share."""
    x = mt.zeros(1, 1, 5, 5, requires_grad=True)
    adaptive_max_pool2d(x, 3).sum().backward()
    grad = x.grad.numpy()[0, 0]
    assert grad.sum() == 9.0
    starts = [0, 1, 3]  # floor(i * 5 / 3)
    expected = np.zeros((5, 5))
    for i in starts:
        for j in starts:
            expected[i, j] = 1.0
    np.testing.assert_array_equal(grad, expected)


def test_adaptive_max_pool2d_gradcheck_and_sizes():
    x = mt.tensor(_distinct(np.random.default_rng(2), (1, 2, 5, 7)), requires_grad=True)
    assert mt.gradcheck(lambda x: adaptive_max_pool2d(x, (3, None)), [x])
    assert adaptive_max_pool2d(x, (3, None)).shape == (1, 2, 3, 7)
    with pytest.raises(ValueError, match="adaptive_max_pool2d: output_size must be positive"):
        adaptive_max_pool2d(x, 0)
    with pytest.raises(NotImplementedError, match="return_indices"):
        adaptive_max_pool2d(x, 2, return_indices=True)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 2), length=st.integers(1, 9), k=st.integers(1, 3),
       stride=st.one_of(st.none(), st.integers(1, 3)), data=st.data(), ceil_mode=st.booleans(),
       unbatched=st.booleans(), seed=st.integers(0, 2**16))
def test_pool1d_matches_pytorch(n, length, k, stride, data, ceil_mode, unbatched, seed):
    torch = pytest.importorskip("torch")
    padding = data.draw(st.integers(0, k // 2))
    dilation = data.draw(st.integers(1, 2))
    length = max(length, dilation * (k - 1) + 1)
    shape = (3, length) if unbatched else (n, 3, length)
    x = leaf(_distinct(np.random.default_rng(seed), shape))
    compare_with_torch(lambda x: nn.MaxPool1d(k, stride, padding, dilation, ceil_mode=ceil_mode)(x),
                       lambda x: torch.nn.MaxPool1d(k, stride, padding, dilation,
                                                    ceil_mode=ceil_mode)(x), [x])
    include = data.draw(st.booleans())
    compare_with_torch(lambda x: nn.AvgPool1d(k, stride, padding, ceil_mode, include)(x),
                       lambda x: torch.nn.AvgPool1d(k, stride, padding, ceil_mode, include)(x),
                       [x])


def test_pool1d_gradcheck_and_errors():
    x = mt.tensor(_distinct(np.random.default_rng(3), (2, 2, 7)), requires_grad=True)
    assert mt.gradcheck(lambda x: max_pool1d(x, 3, 2, 1), [x])
    assert mt.gradcheck(lambda x: avg_pool1d(x, 2, 1, 1, count_include_pad=False), [x])
    with pytest.raises(ValueError, match="max_pool1d: kernel_size must be positive: an int"):
        max_pool1d(x, (2, 2))
    with pytest.raises(ValueError, match="AvgPool1d: stride must be positive"):
        nn.AvgPool1d(2, 0)
    with pytest.raises(ValueError, match="avg_pool1d: expected input of shape"):
        avg_pool1d(mt.zeros(1, 1, 4, 4), 2)


# ---- Dropout1d ------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(4, 8, 6), (8, 6)])
def test_dropout1d_zeroes_whole_channels(shape):
    mt.manual_seed(0)
    x = mt.ones(*shape)
    layer = nn.Dropout1d(0.5)
    out = layer(x).numpy()
    rows = out.reshape(-1, shape[-1])
    assert set(np.unique(rows)) <= {0.0, 2.0}
    assert all(len(set(row)) == 1 for row in rows)  # a channel is kept or dropped whole
    assert 0 < (rows[:, 0] == 0).sum() < rows.shape[0]
    layer.eval()
    np.testing.assert_array_equal(layer(x).numpy(), x.numpy())
    with pytest.raises(ValueError, match="dropout1d: expected input of shape"):
        dropout1d(mt.ones(2, 2, 2, 2))
