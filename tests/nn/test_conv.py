"""Convolutions: values against a NumPy loop and PyTorch over drawn shapes, strides,
paddings, dilations and groups; gradients by finite differences; unfold as a view."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.nn import im2col
from minitorch_exp.nn.functional import conv1d, conv2d

from ..devices import DEVICES, on_device
from ..node._helpers import LAYOUTS, compare_with_torch, leaf, strided_array
from . import conv_reference as ref


@st.composite
def conv_cases(draw, max_size: int = 7):
    """Shapes and arguments of a valid conv2d: (x shape, w shape, bias, stride, padding,
    dilation, groups)."""
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    c, o = draw(st.integers(1, 2)) * groups, draw(st.integers(1, 2)) * groups
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    kinds = ["int", "pair", "valid"] + (["same"] if stride == (1, 1) else [])
    kind = draw(st.sampled_from(kinds))
    padding = {"int": draw(st.integers(0, 2)), "pair": (draw(st.integers(0, 2)),
               draw(st.integers(0, 2))), "valid": "valid", "same": "same"}[kind]
    extent = [d * (k - 1) + 1 for k, d in zip(kernel, dilation)]
    h, w = (draw(st.integers(e, e + max_size - 3)) for e in extent)
    n = draw(st.integers(1, 3))
    return (n, c, h, w), (o, c // groups, *kernel), draw(st.booleans()), stride, padding, \
        dilation, groups


def _args(case):
    _, _, _, stride, padding, dilation, groups = case
    return dict(stride=stride, padding=padding, dilation=dilation, groups=groups)


@settings(max_examples=40, deadline=None)
@given(case=conv_cases(), layout=st.sampled_from(LAYOUTS), seed=st.integers(0, 2**16))
def test_conv2d_matches_a_numpy_loop(case, layout, seed):
    rng = np.random.default_rng(seed)
    x_shape, w_shape, has_bias = case[:3]
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    b = rng.standard_normal(w_shape[0]) if has_bias else None
    out = conv2d(leaf(x, layout, requires_grad=False), mt.tensor(w),
                 None if b is None else mt.tensor(b), **_args(case))
    np.testing.assert_allclose(out.numpy(), ref.conv2d(x, w, b, **_args(case)),
                               rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=40, deadline=None)
@given(case=conv_cases(), layout=st.sampled_from(LAYOUTS), seed=st.integers(0, 2**16))
def test_conv2d_values_and_gradients_match_pytorch(device, case, layout, seed):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    x_shape, w_shape, has_bias = case[:3]
    nodes = [leaf(rng.standard_normal(x_shape), layout, device=device),
             leaf(rng.standard_normal(w_shape), device=device)]
    if has_bias:
        nodes.append(leaf(rng.standard_normal(w_shape[0]), device=device))
    compare_with_torch(lambda *a: conv2d(*a, **_args(case)),
                       lambda *a: torch.nn.functional.conv2d(*a, **_args(case)),
                       nodes, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("args", [
    dict(),
    dict(stride=2, padding=1),
    dict(padding=(2, 0), dilation=(1, 2)),
    dict(padding="same", groups=2),
    dict(groups=2, stride=(2, 1), dilation=2, padding=2),
])
@pytest.mark.parametrize("bias", [True, False])
def test_conv2d_gradcheck(args, bias):
    rng = np.random.default_rng(0)
    x = mt.tensor(rng.standard_normal((2, 2, 6, 5)), requires_grad=True)
    w = mt.tensor(rng.standard_normal((4, 2 // args.get("groups", 1), 3, 2)),
                  requires_grad=True)
    inputs = [x, w] + ([mt.tensor(rng.standard_normal(4), requires_grad=True)] if bias else [])
    assert mt.gradcheck(lambda *a: conv2d(*a, **args), inputs)


def test_only_the_gradients_asked_for_are_computed(fuse_all):
    rng = np.random.default_rng(1)
    x = mt.tensor(rng.standard_normal((2, 3, 6, 6)))
    w = mt.tensor(rng.standard_normal((4, 3, 3, 3)), requires_grad=True)
    conv2d(x, w, padding=1).sum().backward()
    assert x.grad is None and w.grad is not None
    with mt.count_kernels("cpu") as k:
        conv2d(x, w, padding=1).sum().backward()
    assert k["blas"] == 2  # forward, and the weight's gradient: no col2im product


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 3), c=st.integers(1, 4), length=st.integers(3, 9),
       k=st.integers(1, 3), stride=st.integers(1, 3), padding=st.integers(0, 2),
       dilation=st.integers(1, 2), bias=st.booleans(), seed=st.integers(0, 2**16))
def test_conv1d_matches_a_numpy_loop_and_pytorch(n, c, length, k, stride, padding, dilation,
                                                 bias, seed):
    rng = np.random.default_rng(seed)
    length = max(length, dilation * (k - 1) + 1)
    x, w = rng.standard_normal((n, c, length)), rng.standard_normal((3, c, k))
    b = rng.standard_normal(3) if bias else None
    args = dict(stride=stride, padding=padding, dilation=dilation)
    out = conv1d(mt.tensor(x), mt.tensor(w), None if b is None else mt.tensor(b), **args)
    expected = ref.conv2d(x[:, :, None], w[:, :, None], b, (1, stride), (0, padding),
                          (1, dilation))[:, :, 0]
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-10, atol=1e-10)
    torch = pytest.importorskip("torch")
    nodes = [leaf(x), leaf(w)] + ([leaf(b)] if bias else [])
    compare_with_torch(lambda *a: conv1d(*a, **args),
                       lambda *a: torch.nn.functional.conv1d(*a, **args), nodes)


def test_conv1d_gradcheck():
    rng = np.random.default_rng(2)
    inputs = [mt.tensor(rng.standard_normal(s), requires_grad=True)
              for s in ((2, 2, 7), (4, 1, 3), (4,))]
    assert mt.gradcheck(lambda x, w, b: conv1d(x, w, b, stride=2, padding=1, groups=2,
                                               dilation=2), inputs)


def test_padding_same_with_an_even_kernel_pads_the_far_side_more():
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((1, 1, 5, 6)), rng.standard_normal((1, 1, 2, 4))
    out = conv2d(mt.tensor(x), mt.tensor(w), padding="same")
    assert out.shape == (1, 1, 5, 6)
    np.testing.assert_allclose(out.numpy(), ref.conv2d(x, w, padding="same"), atol=1e-12)


def test_unbatched_input():
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((2, 5, 5)), rng.standard_normal((3, 2, 3, 3))
    out = conv2d(mt.tensor(x), mt.tensor(w))
    assert out.shape == (3, 3, 3)
    np.testing.assert_allclose(out.numpy(), ref.conv2d(x[None], w)[0], atol=1e-12)


def test_fusion_on_and_off_agree():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 7, 7))
    grads = []
    for enabled in (True, False):
        with mt.fusion(enabled):
            mt.manual_seed(0)
            layer = nn.Conv2d(3, 4, 3, stride=2, padding=1, dtype=np.float64)
            xn = mt.tensor(x, requires_grad=True)
            out = mt.relu(layer(xn))
            (out * out).sum().backward()
            grads.append([out.numpy(), xn.grad.numpy(), layer.weight.grad.numpy(),
                          layer.bias.grad.numpy()])
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


# ---- unfold: a view, not a copy --------------------------------------------------------------

def test_unfold_is_a_strided_view_of_the_input():
    x = mt.tensor(np.arange(2 * 3 * 6 * 7, dtype=np.float64).reshape(2, 3, 6, 7)).value
    window = im2col.conv_window((6, 7), (3, 2), (2, 1), (1, 2), (0, 0, 0, 0))
    with mt.count_kernels("cpu") as k:
        view = im2col.unfold(x, window)
    assert k.total == 0  # no kernel ran: nothing was copied
    assert view.storage is x.storage
    assert view.shape == (3, 3, 2, 2, *window.out) == (3, 3, 2, 2, 2, 5)
    arr, xs = view.numpy(), x.numpy()
    assert np.shares_memory(arr, xs)
    for c, i, j, n, oh, ow in np.ndindex(*view.shape):
        assert arr[c, i, j, n, oh, ow] == xs[n, c, oh * 2 + i * 1, ow * 1 + j * 2]
    x[...] = 0.0  # a write into the input shows through the view
    assert not view.numpy().any()


def test_unfold_of_a_non_contiguous_input_keeps_its_strides():
    base = np.arange(4 * 5 * 6 * 2, dtype=np.float64).reshape(4, 5, 6, 2)
    # every stride differs from a contiguous tensor's: (4, 5, 2, 6) over a transposed buffer
    x = on_device(strided_array(base, "transposed")).permute(0, 1, 3, 2)
    window = im2col.conv_window(x.shape[2:], (2, 2), (1, 1), (1, 1), (0, 0, 0, 0))
    view = im2col.unfold(x, window)
    assert view.storage is x.storage
    expected = np.asarray(x.numpy())
    for c, i, j, n, oh, ow in np.ndindex(*view.shape):
        assert view.numpy()[c, i, j, n, oh, ow] == expected[n, c, oh + i, ow + j]


def test_a_convolution_is_one_gemm_and_one_copy_per_kernel_offset(fuse_all):
    """Forward: KH*KW strided copies (im2col) and one BLAS product; backward: the
    gradient transposed once, two products, and KH*KW strided += (col2im)."""
    rng = np.random.default_rng(6)
    x = mt.tensor(rng.standard_normal((4, 3, 9, 9)).astype(np.float32), requires_grad=True)
    layer = nn.Conv2d(3, 5, (3, 2), bias=False)
    with mt.count_kernels("cpu") as k:
        out = layer(x).value
    assert (k["blas"], k["fused"]) == (1, 3 * 2)
    g = mt.tensor(rng.standard_normal(out.shape).astype(np.float32))
    y = layer(x)
    with mt.count_kernels("cpu") as k:
        y.backward(g)
    assert k["blas"] == 2
    # col2im's += per offset, then at most: the transpose and the two leaves' gradients
    assert 3 * 2 <= k["fused"] <= 3 * 2 + 3


def test_saved_columns_written_in_place_are_reported():
    rng = np.random.default_rng(7)
    x = mt.tensor(rng.standard_normal((1, 1, 4, 4)))
    w = mt.tensor(rng.standard_normal((1, 1, 2, 2)), requires_grad=True)
    out = conv2d(x, w)
    w.value[...] = 0.0
    with pytest.raises(RuntimeError, match="modified in place"):
        out.sum().backward()


# ---- errors name what was expected and what was found ---------------------------------------

@pytest.mark.parametrize("x_shape, w_shape, kwargs, message", [
    ((2, 1, 8, 8), (4, 3, 3, 3), {}, r"expected input with 3 channels .* got input of shape "
                                     r"\(2, 1, 8, 8\) with 1"),
    ((2, 4, 8, 8), (4, 2, 3, 3), dict(groups=3), "groups=3 must be a positive divisor"),
    ((3, 8), (4, 3, 3, 3), {}, r"expected input of shape \(N, C, H, W\)"),
    ((2, 3, 8, 8), (4, 3, 3), {}, "expected weight of shape"),
    ((2, 3, 2, 8), (4, 3, 3, 3), {}, r"padded to \(2, 8\), is smaller than the kernel"),
    ((2, 3, 8, 8), (4, 3, 3, 3), dict(stride=2, padding="same"), "not supported for strided"),
    ((2, 3, 8, 8), (4, 3, 3, 3), dict(padding="full"), "padding must be 'valid', 'same'"),
    ((2, 3, 8, 8), (4, 3, 3, 3), dict(stride=0), "stride must be positive"),
])
def test_bad_arguments_are_refused_with_what_was_expected(x_shape, w_shape, kwargs, message):
    x, w = mt.zeros(*x_shape), mt.zeros(*w_shape)
    with pytest.raises(ValueError, match=message):
        conv2d(x, w, **kwargs)


def test_bias_shape_and_dtype_mismatches_are_refused():
    x, w = mt.zeros(1, 2, 4, 4), mt.zeros(3, 2, 2, 2)
    with pytest.raises(ValueError, match=r"expected bias of shape \(3,\), got \(2,\)"):
        conv2d(x, w, mt.zeros(2))
    with pytest.raises(TypeError, match="input is float64 but weight is float32"):
        conv2d(mt.zeros(1, 2, 4, 4, dtype=mt.float64), w)


def test_module_checks_channels_against_groups():
    with pytest.raises(ValueError, match="in_channels=3 must be divisible by groups=2"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(NotImplementedError, match="padding_mode='reflect'"):
        nn.Conv2d(3, 4, 3, padding_mode="reflect")
    layer = nn.Conv2d(3, 4, 3)
    with pytest.raises(ValueError, match="expected input with 3 channels"):
        layer(mt.zeros(1, 1, 8, 8))


# ---- modules ------------------------------------------------------------------------------

def test_conv2d_module_shapes_init_and_repr():
    mt.manual_seed(0)
    layer = nn.Conv2d(6, 16, 5, stride=2, padding=1, groups=2)
    assert layer.weight.shape == (16, 3, 5, 5) and layer.bias.shape == (16,)
    bound = 1 / math.sqrt(3 * 5 * 5)  # kaiming_uniform(a=sqrt(5)) gives +-1/sqrt(fan_in)
    w = layer.weight.numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.1 * bound  # uniform's std
    assert np.abs(layer.bias.numpy()).max() <= bound
    assert repr(layer) == ("Conv2d(6, 16, kernel_size=(5, 5), stride=(2, 2), padding=(1, 1), "
                           "groups=2)")
    assert layer(mt.zeros(2, 6, 11, 11)).shape == (2, 16, 5, 5)
    assert nn.Conv2d(1, 2, 3, bias=False).bias is None


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")  # PyTorch's own
@pytest.mark.parametrize("make, shape", [
    (lambda m: m.Conv2d(3, 4, (3, 2), stride=(2, 1), padding=1, dilation=(1, 2)), (2, 3, 9, 8)),
    (lambda m: m.Conv2d(4, 4, 3, padding="same", groups=4, bias=False), (2, 4, 6, 6)),
    (lambda m: m.Conv1d(3, 6, 3, stride=2, padding=1, groups=3), (2, 3, 10)),
    (lambda m: m.Conv1d(2, 3, 4, padding="same"), (3, 2, 7)),
])
def test_modules_match_pytorch_from_the_same_weights(make, shape):
    torch = pytest.importorskip("torch")
    mt.manual_seed(1)
    layer, twin = make(nn), make(torch.nn)
    assert [p.shape for p in layer.parameters()] == [tuple(p.shape) for p in twin.parameters()]
    with torch.no_grad():
        for p, tp in zip(layer.parameters(), twin.parameters()):
            tp.copy_(torch.from_numpy(p.numpy().copy()))
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    xn, tx = mt.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, tout = layer(xn), twin(tx)
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-5)
    (out * out).sum().backward()
    (tout * tout).sum().backward()
    np.testing.assert_allclose(xn.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)
    for p, tp in zip(layer.parameters(), twin.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-4, atol=1e-3)


def test_module_init_matches_pytorch_distribution():
    torch = pytest.importorskip("torch")
    mt.manual_seed(3)
    torch.manual_seed(3)
    ours, theirs = nn.Conv2d(8, 32, 3).weight.numpy(), torch.nn.Conv2d(8, 32, 3).weight
    theirs = theirs.detach().numpy()
    assert abs(np.abs(ours).max() - np.abs(theirs).max()) < 0.01
    assert abs(ours.std() - theirs.std()) < 0.05 * theirs.std()
