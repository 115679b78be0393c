"""Transposed convolutions: the adjoint of conv2d (always), values and gradients against
PyTorch over drawn shapes, strides, paddings, output paddings, dilations and groups,
float64 gradcheck, both sides of the fusion policy, the module's output_size, errors."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.nn.functional import conv2d, conv_transpose1d, conv_transpose2d

from ..node._helpers import LAYOUTS, compare_with_torch, leaf
from .module_twins import compare_modules, twin

POLICIES = {"default": contextlib.nullcontext, "fuse_all": lambda: mt.fusion(threshold=0)}


@st.composite
def transposed_cases(draw):
    """(x shape, w shape, bias, stride, padding, output_padding, dilation, groups) that
    PyTorch accepts: output_padding below stride or dilation, a positive output."""
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    c_in, c_out = draw(st.integers(1, 2)) * groups, draw(st.integers(1, 2))
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    out_pad = tuple(draw(st.integers(0, max(s, d) - 1)) for s, d in zip(stride, dilation))
    hw = []
    for k, s, p, d, op in zip(kernel, stride, padding, dilation, out_pad):
        least = max(1, -(-(2 * p - d * (k - 1) - op) // s) + 1)  # a positive output size
        hw.append(draw(st.integers(least, least + 3)))
    n = draw(st.integers(1, 2))
    return ((n, c_in, *hw), (c_in, c_out, *kernel), draw(st.booleans()), stride, padding,
            out_pad, dilation, groups)


def _args(case):
    stride, padding, output_padding, dilation, groups = case[3:]
    return dict(stride=stride, padding=padding, output_padding=output_padding,
                dilation=dilation, groups=groups)


@settings(max_examples=25, deadline=None)
@given(case=transposed_cases(), seed=st.integers(0, 2**16))
def test_conv_transpose2d_is_the_adjoint_of_conv2d(case, seed):
    """<conv2d(y, w), x> == <y, conv_transpose2d(x, w)>: no PyTorch needed. An output
    padding at or above the stride (allowed below the dilation) gives conv2d of ``y``
    extra windows, outside the adjoint's range: they are cut off."""
    rng = np.random.default_rng(seed)
    x_shape, w_shape = case[:2]
    args = _args(case)
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    y_shape = conv_transpose2d(mt.tensor(x), mt.tensor(w), **args).shape
    y = rng.standard_normal(y_shape)
    conv_args = {k: v for k, v in args.items() if k != "output_padding"}
    forward = conv2d(mt.tensor(y), mt.tensor(w), **conv_args).numpy()
    forward = forward[..., :x.shape[2], :x.shape[3]]
    assert forward.shape == x.shape
    back = conv_transpose2d(mt.tensor(x), mt.tensor(w), **args).numpy()
    np.testing.assert_allclose((forward * x).sum(), (back * y).sum(), rtol=1e-10)


@settings(max_examples=25, deadline=None)
@given(case=transposed_cases(), layout=st.sampled_from(LAYOUTS), seed=st.integers(0, 2**16))
def test_conv_transpose2d_values_and_gradients_match_pytorch(case, layout, seed):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    x_shape, w_shape, has_bias = case[:3]
    groups = case[-1]
    nodes = [leaf(rng.standard_normal(x_shape), layout), leaf(rng.standard_normal(w_shape))]
    if has_bias:
        nodes.append(leaf(rng.standard_normal(w_shape[1] * groups)))
    compare_with_torch(lambda *a: conv_transpose2d(*a, **_args(case)),
                       lambda *a: torch.nn.functional.conv_transpose2d(*a, **_args(case)),
                       nodes, rtol=1e-9, atol=1e-9)


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 2), groups=st.sampled_from([1, 2]), length=st.integers(1, 6),
       k=st.integers(1, 3), stride=st.integers(1, 3), padding=st.integers(0, 1),
       dilation=st.integers(1, 2), data=st.data(), bias=st.booleans(),
       seed=st.integers(0, 2**16))
def test_conv_transpose1d_matches_pytorch(n, groups, length, k, stride, padding, dilation,
                                          data, bias, seed):
    torch = pytest.importorskip("torch")
    out_pad = data.draw(st.integers(0, max(stride, dilation) - 1))
    if (length - 1) * stride - 2 * padding + dilation * (k - 1) + out_pad + 1 < 1:
        length += 2 * padding
    rng = np.random.default_rng(seed)
    args = dict(stride=stride, padding=padding, output_padding=out_pad, groups=groups,
                dilation=dilation)
    nodes = [leaf(rng.standard_normal((n, 2 * groups, length))),
             leaf(rng.standard_normal((2 * groups, 3, k)))]
    if bias:
        nodes.append(leaf(rng.standard_normal(3 * groups)))
    compare_with_torch(lambda *a: conv_transpose1d(*a, **args),
                       lambda *a: torch.nn.functional.conv_transpose1d(*a, **args), nodes,
                       rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("args", [
    dict(),
    dict(stride=2, padding=1, output_padding=1),
    dict(stride=(2, 1), dilation=(1, 2), groups=2),
    dict(stride=1, dilation=2, output_padding=1, padding=(0, 1)),
])
def test_conv_transpose2d_gradcheck(args):
    rng = np.random.default_rng(0)
    groups = args.get("groups", 1)
    inputs = [mt.tensor(rng.standard_normal(s), requires_grad=True)
              for s in ((2, 4, 3, 4), (4, 2, 3, 2), (2 * groups,))]
    assert mt.gradcheck(lambda *a: conv_transpose2d(*a, **args), inputs)


def test_conv_transpose1d_gradcheck_unbatched():
    rng = np.random.default_rng(1)
    inputs = [mt.tensor(rng.standard_normal(s), requires_grad=True) for s in ((2, 5), (2, 3, 3))]
    assert mt.gradcheck(lambda x, w: conv_transpose1d(x, w, stride=2, output_padding=1), inputs)


@pytest.mark.parametrize("policy", POLICIES)
def test_both_sides_of_the_fusion_policy(policy):
    """Tiny shapes run op by op under the default threshold and fused with threshold 0;
    both give PyTorch's values and gradients through a ReLU after the layer."""
    torch = pytest.importorskip("torch")
    with POLICIES[policy]():
        layer = nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1,
                                   dtype=np.float64)
        theirs = torch.nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1).double()
        twin(layer, theirs)
        x = mt.tensor(np.random.default_rng(2).standard_normal((2, 4, 3, 3)), requires_grad=True)
        compare_modules(nn.Sequential(layer, nn.ReLU()),
                        torch.nn.Sequential(theirs, torch.nn.ReLU()), [x], rtol=1e-10,
                        atol=1e-12)


@pytest.mark.parametrize("module, shape, output_size", [
    ("ConvTranspose2d", (2, 4, 5, 5), (10, 10)),
    ("ConvTranspose2d", (4, 5, 6), (6, 9, 12)),
    ("ConvTranspose1d", (2, 4, 7), (14,)),
])
def test_module_state_dict_layout_and_output_size(module, shape, output_size):
    torch = pytest.importorskip("torch")
    kwargs = dict(stride=2, padding=1, groups=2)
    mine = getattr(nn, module)(4, 6, 3, dtype=np.float64, **kwargs)
    theirs = getattr(torch.nn, module)(4, 6, 3, **kwargs).double()
    assert mine.weight.shape == tuple(theirs.weight.shape) == (4, 3, 3) + (3,) * (module[-2] == "2")
    twin(mine, theirs)
    x = mt.tensor(np.random.default_rng(3).standard_normal(shape), requires_grad=True)
    compare_modules(mine, theirs, [x], {"output_size": output_size}, rtol=1e-10, atol=1e-12)


def test_default_initialisation_has_pytorchs_bounds():
    """kaiming_uniform_(a=sqrt(5)) over fan_in = out/groups * k*k (dim 1 of the weight)."""
    layer = nn.ConvTranspose2d(8, 6, 3, groups=2)
    bound = 1.0 / np.sqrt(3 * 9)
    for p in (layer.weight, layer.bias):
        values = p.numpy()
        assert np.abs(values).max() <= bound and np.abs(values).max() > 0.5 * bound
    assert repr(layer) == ("ConvTranspose2d(8, 6, kernel_size=(3, 3), stride=(1, 1), "
                           "groups=2)")


def test_forward_is_one_gemm_and_one_add_per_kernel_offset(fuse_all):
    """Forward: the channels-first copy, one product, col2im's KH*KW +=. Backward: the
    gradient's im2col (KH*KW copies) and two products."""
    rng = np.random.default_rng(4)
    layer = nn.ConvTranspose2d(6, 4, (3, 2), stride=2, bias=False)
    x = mt.tensor(rng.standard_normal((2, 6, 5, 5)).astype(np.float32), requires_grad=True)
    with mt.count_kernels("cpu") as k:
        out = layer(x).value
    assert k["blas"] == 1
    assert 3 * 2 <= k["fused"] <= 3 * 2 + 2
    y = layer(x)
    with mt.count_kernels("cpu") as k:
        y.backward(mt.tensor(rng.standard_normal(out.shape).astype(np.float32)))
    assert k["blas"] == 2


# ---- errors name the argument --------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    (dict(stride=0), "conv_transpose2d: stride must be positive"),
    (dict(padding=-1), "conv_transpose2d: padding must be non-negative"),
    (dict(output_padding=(1, 1.5)), "conv_transpose2d: output_padding must be non-negative"),
    (dict(output_padding=2, stride=2), "output_padding .* must be smaller than either stride"),
    (dict(dilation=(1, 2, 3)), "conv_transpose2d: dilation must be positive"),
    (dict(groups=0), "conv_transpose2d: groups must be positive"),
    (dict(groups=3), "groups=3 must be a positive divisor of the 4 input channels"),
    (dict(padding=3), "gives an output of size"),
])
def test_bad_arguments_are_refused_naming_them(kwargs, message):
    with pytest.raises(ValueError, match=message):
        conv_transpose2d(mt.zeros(1, 4, 3, 3), mt.zeros(4, 2, 3, 3), **kwargs)


def test_shape_and_dtype_mismatches_are_refused():
    with pytest.raises(ValueError, match=r"expected input with 4 channels .* with 3"):
        conv_transpose2d(mt.zeros(1, 3, 3, 3), mt.zeros(4, 2, 3, 3))
    with pytest.raises(ValueError, match=r"expected bias of shape \(4,\), got \(2,\)"):
        conv_transpose2d(mt.zeros(1, 4, 3, 3), mt.zeros(4, 2, 3, 3), mt.zeros(2), groups=2)
    with pytest.raises(TypeError, match="input is float64 but weight is float32"):
        conv_transpose2d(mt.zeros(1, 4, 3, 3, dtype=mt.float64), mt.zeros(4, 2, 3, 3))
    with pytest.raises(ValueError, match="conv_transpose1d: expected input"):
        conv_transpose1d(mt.zeros(1, 4, 3, 3), mt.zeros(4, 2, 3))


def test_module_errors_name_the_argument():
    with pytest.raises(ValueError, match="ConvTranspose2d: output_padding must be non-negative"):
        nn.ConvTranspose2d(2, 2, 3, output_padding=-1)
    with pytest.raises(ValueError, match="ConvTranspose1d: kernel_size must be positive"):
        nn.ConvTranspose1d(2, 2, 0)
    with pytest.raises(ValueError, match="ConvTranspose2d: padding must be an int"):
        nn.ConvTranspose2d(2, 2, 3, padding="same")
    layer = nn.ConvTranspose2d(2, 2, 3, stride=2)
    with pytest.raises(ValueError, match=r"valid sizes range from \(7, 7\) to \(8, 8\)"):
        layer(mt.zeros(1, 2, 3, 3), output_size=(9, 9))
