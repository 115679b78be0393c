"""orthogonal_, trunc_normal_, sparse_, dirac_, eye_ and calculate_gain: PyTorch's
values where they are deterministic, the distributions' properties where random."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.nn import init

GAINS = [("linear", None), ("conv1d", None), ("conv_transpose2d", None), ("sigmoid", None),
         ("tanh", None), ("relu", None), ("leaky_relu", None), ("leaky_relu", 0.2),
         ("selu", None)]


@pytest.mark.parametrize("name,param", GAINS)
def test_calculate_gain_matches_torch(name, param):
    torch = pytest.importorskip("torch")
    assert init.calculate_gain(name, param) == pytest.approx(
        torch.nn.init.calculate_gain(name, param), rel=1e-15)


def test_calculate_gain_refuses_an_unknown_name():
    with pytest.raises(ValueError, match="swish"):
        init.calculate_gain("swish")


@pytest.mark.parametrize("shape", [(3, 3), (2, 5), (5, 2)])
def test_eye_matches_torch(shape):
    torch = pytest.importorskip("torch")
    t = nn.Parameter(np.full(shape, 7.0, np.float32))
    np.testing.assert_array_equal(init.eye_(t).numpy(), torch.nn.init.eye_(
        torch.empty(shape)).numpy())


@pytest.mark.parametrize("shape,groups", [((4, 4, 3), 1), ((6, 2, 3, 3), 2), ((4, 6, 3, 2), 1),
                                          ((3, 2, 3, 3, 3), 1), ((4, 2, 5, 5), 2),
                                          ((3, 5, 3, 5), 1)])
def test_dirac_matches_torch_and_passes_its_input_through(shape, groups):
    torch = pytest.importorskip("torch")
    t = nn.Parameter(np.ones(shape, np.float32))
    want = torch.nn.init.dirac_(torch.empty(shape), groups).numpy()
    np.testing.assert_array_equal(init.dirac_(t, groups).numpy(), want)
    if len(shape) == 4 and groups == 1 and shape[0] <= shape[1] and shape[2] % 2 and shape[3] % 2:
        conv = nn.Conv2d(shape[1], shape[0], shape[2:], padding="same", bias=False)
        init.dirac_(conv.weight)
        x = mt.randn(2, shape[1], 6, 6)
        np.testing.assert_allclose(conv(x).numpy(), x.numpy()[:, :shape[0]], atol=1e-6)


@pytest.mark.parametrize("shape", [(6, 6), (3, 8), (8, 3), (4, 2, 3, 3)])
def test_orthogonal_is_orthogonal_and_scaled(shape):
    t = nn.Parameter(np.zeros(shape, np.float64))
    init.orthogonal_(t, gain=2.0, generator=np.random.default_rng(0))
    m = t.numpy().reshape(shape[0], -1)
    small = min(m.shape)
    gram = m @ m.T if m.shape[0] == small else m.T @ m
    np.testing.assert_allclose(gram, 4.0 * np.eye(small), atol=1e-12)


def test_trunc_normal_stays_in_bounds_with_the_truncated_moments():
    t = nn.Parameter(np.zeros((200, 200), np.float64))
    init.trunc_normal_(t, mean=0.5, std=1.0, a=-0.5, b=1.0, generator=np.random.default_rng(1))
    v = t.numpy()
    assert v.min() >= -0.5 and v.max() <= 1.0
    # the mean of N(0.5, 1) cut to [-0.5, 1]: mu + (phi(alpha) - phi(beta)) / Z
    phi = lambda z: np.exp(-z * z / 2) / np.sqrt(2 * np.pi)  # noqa: E731
    cdf = lambda z: 0.5 * (1 + np.vectorize(__import__("math").erf)(z / np.sqrt(2)))  # noqa: E731
    want = 0.5 + (phi(-1.0) - phi(0.5)) / (cdf(0.5) - cdf(-1.0))
    assert v.mean() == pytest.approx(want, abs=0.01)
    with pytest.raises(ValueError, match="almost none"):
        init.trunc_normal_(t, mean=0.0, std=1.0, a=10.0, b=11.0)


def test_sparse_zeros_a_fraction_of_each_column():
    t = nn.Parameter(np.zeros((10, 7), np.float32))
    init.sparse_(t, sparsity=0.3, std=0.5, generator=np.random.default_rng(2))
    v = t.numpy()
    assert ((v == 0).sum(0) == 3).all()
    assert 0.2 < v[v != 0].std() < 1.0
    with pytest.raises(ValueError, match="2-D"):
        init.sparse_(nn.Parameter(np.zeros(4, np.float32)), 0.1)


def test_generator_makes_them_reproducible_and_the_torch_names_exist():
    for fn in (init.orthogonal_, init.trunc_normal_, lambda t, generator: init.sparse_(
            t, 0.2, generator=generator)):
        a, b = (fn(nn.Parameter(np.zeros((5, 4), np.float32)),
                   generator=np.random.default_rng(9)).numpy() for _ in range(2))
        np.testing.assert_array_equal(a, b)
    assert mt.nn.init.orthogonal_ is init.orthogonal_
