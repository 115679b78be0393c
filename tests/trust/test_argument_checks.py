"""Convolution, pooling and embedding arguments are checked before anything runs.

A bad size (zero, negative, a float, the wrong count) is a ValueError that names the
argument, says what it takes and shows what it got -- never a NumPy error from deep
inside, and never a silent default (``stride=0`` once meant "stride = kernel" in the
pooling modules). PyTorch refuses each of these too; where it is installed the tests
check that it does.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.nn import functional as F
from minitorch_exp.nn import im2col

X2 = (1, 2, 6, 6)
X1 = (1, 2, 6)


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _refused(message: str, call, *args):
    with pytest.raises(ValueError, match=message):
        call(*args)


# ---- the shared validator ---------------------------------------------------------------

@pytest.mark.parametrize("value, n, least, want", [
    (3, 2, 1, (3, 3)), ((2, 3), 2, 1, (2, 3)), ([0, 4], 2, 0, (0, 4)), (5, 1, 1, (5,)),
    ((7,), 1, 1, (7,)), (np.int64(2), 2, 1, (2, 2)),
])
def test_window_sizes_accepts_ints_and_sequences_of_n(value, n, least, want):
    got = im2col.window_sizes(value, "stride", n, least)
    assert got == want and all(type(v) is int for v in got)


@pytest.mark.parametrize("value, n, least, expected", [
    (0, 2, 1, "positive"), (-1, 2, 0, "non-negative"), (2.0, 2, 1, "positive"),
    ((2, 0), 2, 1, "positive"), ((2, 2, 2), 2, 1, "an int or a tuple of 2 ints"),
    ((2,), 2, 1, "an int or a tuple of 2 ints"), ("2", 2, 1, "positive"),
    (None, 2, 1, "positive"), ((2, 2), 1, 1, "an int or a tuple of 1 int"),
])
def test_window_sizes_refuses_naming_the_argument_and_the_value(value, n, least, expected):
    with pytest.raises(ValueError) as info:
        im2col.window_sizes(value, "dilation", n, least, where="conv9d")
    text = str(info.value)
    assert text.startswith("conv9d: dilation must be ") and expected in text
    assert text.endswith(f"got {value!r}")


# ---- modules and functional forms ----------------------------------------------------------

def _check_torch_refuses(make_torch):
    torch = _torch()
    if torch is None:
        return
    with pytest.raises((ValueError, RuntimeError, TypeError)):
        make_torch(torch)


@pytest.mark.parametrize("cls", ["MaxPool2d", "AvgPool2d"])
def test_pool_modules_refuse_stride_zero(cls):
    """stride=0 used to become stride=kernel_size (``stride or kernel_size``)."""
    _refused(r"stride must be positive: .* got 0", lambda: getattr(nn, cls)(2, stride=0))
    _check_torch_refuses(lambda torch: getattr(torch.nn, cls)(2, stride=0)(torch.zeros(X2)))


@pytest.mark.parametrize("make, message", [
    (lambda m: m.Conv2d(2, 2, 0), r"Conv2d: kernel_size must be positive: .* got 0$"),
    (lambda m: m.Conv2d(2, 2, -3), r"Conv2d: kernel_size must be positive: .* got -3$"),
    (lambda m: m.Conv2d(2, 2, 3, stride=2.0), r"Conv2d: stride must be positive: .* got 2\.0$"),
    (lambda m: m.Conv2d(2, 2, (3, 3, 3)), r"kernel_size must be .*tuple of 2 ints, got \(3, "),
    (lambda m: m.Conv2d(2, 2, 3, dilation=(1, 0)), r"dilation must be positive: .*\(1, 0\)$"),
    (lambda m: m.Conv2d(2, 2, 3, padding=-1), r"padding must be non-negative: .* got -1$"),
    (lambda m: m.Conv2d(2, 2, 3, groups=0), r"groups must be positive: an int, got 0$"),
    (lambda m: m.Conv2d(2, 2, 3, groups=2.0), r"groups must be positive: an int, got 2\.0$"),
    (lambda m: m.Conv1d(2, 2, 0), r"Conv1d: kernel_size must be positive: .* got 0$"),
    (lambda m: m.Conv1d(2, 2, 3, stride=1.5), r"Conv1d: stride must be positive: .* 1\.5$"),
    (lambda m: m.Conv1d(2, 2, 3, padding=-2), r"Conv1d: padding must be non-negative"),
    (lambda m: m.Conv1d(2, 2, 3, dilation=(1, 1)), r"dilation must be .*tuple of 1 int, got"),
    (lambda m: m.MaxPool2d(0), r"MaxPool2d: kernel_size must be positive: .* got 0$"),
    (lambda m: m.MaxPool2d(2, padding=-1), r"MaxPool2d: padding must be non-negative"),
    (lambda m: m.MaxPool2d(2, dilation=0.5), r"MaxPool2d: dilation must be positive.* 0\.5$"),
    (lambda m: m.AvgPool2d((2, 2, 2)), r"AvgPool2d: kernel_size must be .*tuple of 2 ints"),
])
def test_modules_refuse_bad_sizes_when_built(make, message):
    _refused(message, make, nn)


def _conv2d(stride=1, padding=0, dilation=1, groups=1):
    return F.conv2d(mt.zeros(*X2), mt.zeros(2, 2, 3, 3), None, stride, padding,
                    dilation, groups)


def _conv1d(stride=1, padding=0, dilation=1, groups=1):
    return F.conv1d(mt.zeros(*X1), mt.zeros(2, 2, 3), None, stride, padding,
                    dilation, groups)


@pytest.mark.parametrize("call, message", [
    (lambda: _conv2d(stride=2.0), r"conv2d: stride must be positive: .* got 2\.0$"),
    (lambda: _conv2d(stride=(1, 1, 1)), r"conv2d: stride must be .*tuple of 2 ints"),
    (lambda: _conv2d(dilation=-1), r"conv2d: dilation must be positive: .* got -1$"),
    (lambda: _conv2d(padding=(0, -1)), r"conv2d: padding must be non-negative.*\(0, -1\)$"),
    (lambda: _conv2d(groups=2.0), r"conv2d: groups must be positive: an int, got 2\.0$"),
    (lambda: _conv1d(stride=0), r"conv1d: stride must be positive: .* got 0$"),
    (lambda: _conv1d(dilation=2.0), r"conv1d: dilation must be positive: .* got 2\.0$"),
    (lambda: _conv1d(padding=(1, 1)), r"conv1d: padding must be .*tuple of 1 int, got"),
    (lambda: _conv1d(groups=0), r"conv1d: groups must be positive: an int, got 0$"),
    (lambda: F.max_pool2d(mt.zeros(*X2), 2, stride=2.0), r"max_pool2d: stride must be posi"),
    (lambda: F.max_pool2d(mt.zeros(*X2), 2, 0), r"max_pool2d: stride must be positive"),
    (lambda: F.max_pool2d(mt.zeros(*X2), 2, 1, -1), r"max_pool2d: padding must be non-neg"),
    (lambda: F.avg_pool2d(mt.zeros(*X2), (2, 0)), r"avg_pool2d: kernel_size must be posi"),
    (lambda: F.avg_pool2d(mt.zeros(*X2), 2, 2.5), r"avg_pool2d: stride must be .* 2\.5$"),
])
def test_functional_forms_refuse_bad_sizes(call, message):
    _refused(message, call)


def test_pytorch_refuses_the_same_functional_arguments():
    torch = pytest.importorskip("torch")
    x, w = torch.zeros(X2), torch.zeros(2, 2, 3, 3)
    for call in (lambda: torch.nn.functional.conv2d(x, w, stride=2.0),
                 lambda: torch.nn.functional.conv2d(x, w, dilation=-1),
                 lambda: torch.nn.functional.max_pool2d(x, 2, 0),
                 lambda: torch.nn.functional.avg_pool2d(x, (2, 0))):
        with pytest.raises((RuntimeError, TypeError, ValueError)):
            call()


def test_good_arguments_still_give_pytorchs_shapes():
    assert nn.MaxPool2d(2, stride=1)(mt.zeros(*X2)).shape == (1, 2, 5, 5)
    assert nn.AvgPool2d(2)(mt.zeros(*X2)).shape == (1, 2, 3, 3)
    assert nn.AvgPool2d(3, stride=np.int64(1), padding=[1, 1])(mt.zeros(*X2)).shape == X2
    assert nn.Conv2d(2, 4, (3, 1), stride=[2, 1], groups=2)(mt.zeros(*X2)).shape == (1, 4, 2, 6)
    assert nn.Conv1d(2, 2, 3, stride=(2,), dilation=np.int32(1))(mt.zeros(*X1)).shape == (1, 2, 2)
    assert _conv1d(padding="same").shape == X1


# ---- embedding ---------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(5,), (5, 2, 2), ()])
def test_embedding_refuses_a_weight_that_is_not_2d(shape):
    with pytest.raises(ValueError, match=re.escape(f"embedding: weight must be 2-D "
                                                   f"(num_embeddings, embedding_dim), got "
                                                   f"shape {shape}")):
        F.embedding(mt.tensor([0, 1]), mt.zeros(*shape))
    torch = _torch()
    if torch is not None:
        with pytest.raises(RuntimeError, match="'weight' must be 2-D"):
            torch.nn.functional.embedding(torch.tensor([0, 1]), torch.zeros(shape))


def test_embedding_with_a_2d_weight_still_picks_rows():
    w = np.arange(10.0, dtype=np.float32).reshape(5, 2)
    got = F.embedding(mt.tensor([[4, 0]]), mt.tensor(w))
    np.testing.assert_array_equal(got.numpy(), w[[[4, 0]]])
