"""``einsum``, ``addmm`` and ``baddbmm`` against NumPy, finite differences and PyTorch.

einsum is a composition (sums, permutes, reshapes, batched products: node/einsum.py),
so its gradient is theirs; these tests draw equations at random.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt

SIZES = {"a": 2, "b": 3, "c": 1, "d": 4, "e": 2}


@st.composite
def equations(draw):
    """An explicit equation over 1-3 operands of distinct letters, and its output."""
    n = draw(st.integers(1, 3))
    inputs = [draw(st.lists(st.sampled_from(sorted(SIZES)), min_size=0, max_size=3,
                            unique=True)) for _ in range(n)]
    order = draw(st.permutations(sorted(set().union(*inputs))))
    output = order[:draw(st.integers(0, len(order)))]
    return ",".join("".join(s) for s in inputs) + "->" + "".join(output), inputs


@settings(max_examples=40, deadline=None)
@given(equations(), st.sampled_from([None, 0]))
def test_random_equations_give_numpy_s_values_and_gradients(drawn, threshold):
    equation, inputs = drawn
    rng = np.random.default_rng(len(equation))
    arrays = [rng.standard_normal([SIZES[c] for c in s]) for s in inputs]
    nodes = [mt.tensor(a, requires_grad=True) for a in arrays]
    with mt.fusion(threshold=threshold):
        got = mt.einsum(equation, *nodes)
        np.testing.assert_allclose(got.numpy(), np.einsum(equation, *arrays),
                                   rtol=1e-12, atol=1e-12)
        assert mt.gradcheck(lambda *xs: mt.einsum(equation, *xs), nodes)


@pytest.mark.parametrize(("equation", "shapes"), [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bij,bjk", [(2, 3, 4), (2, 4, 5)]),               # implicit output: ik
    ("...ij,...jk", [(2, 3, 4), (1, 4, 5)]),            # broadcast batch dims
    ("...j,...jk->...k", [(4,), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),  # attention scores
    ("i,i->", [(5,), (5,)]),
    ("ij->ji", [(3, 4)]),
])
def test_everyday_equations(equation, shapes):
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(s) for s in shapes]
    got = mt.einsum(equation, [mt.tensor(a) for a in arrays])  # a list, as torch takes
    np.testing.assert_allclose(got.numpy(), np.einsum(equation, *arrays), rtol=1e-12,
                               atol=1e-12)


def test_bad_equations_are_clear_errors():
    x = mt.ones(2, 3)
    with pytest.raises(ValueError, match="names 2 operands, got 1"):
        mt.einsum("ij,jk->ik", x)
    with pytest.raises(ValueError, match="subscripts 'i'"):
        mt.einsum("i->i", x)
    with pytest.raises(ValueError, match="letter 'j' has sizes 3 and 4"):
        mt.einsum("ij,jk->ik", x, mt.ones(4, 2))
    with pytest.raises(NotImplementedError, match="diagonal"):
        mt.einsum("ii->i", mt.ones(3, 3))


@pytest.mark.parametrize("beta, alpha", [(1, 1), (0.5, 2.0), (0, 1)])
def test_addmm_and_baddbmm(beta, alpha):
    rng = np.random.default_rng(2)
    base, m1, m2 = rng.standard_normal((3, 5)), rng.standard_normal((3, 4)), \
        rng.standard_normal((4, 5))
    got = mt.addmm(mt.tensor(base), mt.tensor(m1), mt.tensor(m2), beta=beta, alpha=alpha)
    np.testing.assert_allclose(got.numpy(), beta * base + alpha * m1 @ m2, rtol=1e-12)
    b1, b2 = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 4, 5))
    got = mt.tensor(base).baddbmm(mt.tensor(b1), mt.tensor(b2), beta=beta, alpha=alpha)
    np.testing.assert_allclose(got.numpy(), beta * base + alpha * b1 @ b2, rtol=1e-12)
    nodes = [mt.tensor(a, requires_grad=True) for a in (base, b1, b2)]
    assert mt.gradcheck(lambda i, x, y: mt.baddbmm(i, x, y, beta=beta, alpha=alpha), nodes)


def test_against_pytorch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 4, 5))
    for equation in ("bij,bjk->bik", "bij,bjk->", "bij,bjk->kb"):
        ours = [mt.tensor(x, requires_grad=True) for x in (a, b)]
        theirs = [torch.tensor(x, requires_grad=True) for x in (a, b)]
        out, ref = mt.einsum(equation, *ours), torch.einsum(equation, *theirs)
        np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-12)
        out.sum().backward()
        ref.sum().backward()
        for x, y in zip(ours, theirs):
            np.testing.assert_allclose(x.grad.numpy(), y.grad.numpy(), rtol=1e-12)


def test_addmm_adds_the_product_with_blas_beta(monkeypatch):
    """The product goes into the result's buffer by the GEMM's beta: ``add_product``
    runs once, and returns True (no temporary product) where OpenBLAS is found."""
    from minitorch_exp.tensor import blas
    calls = []
    real = blas.add_product
    monkeypatch.setattr(blas, "add_product", lambda *a: calls.append(real(*a)) or calls[-1])
    rng = np.random.default_rng(4)
    bias, m1, m2 = (rng.standard_normal(s).astype(np.float32) for s in ((5,), (3, 4), (5, 4)))
    with mt.fusion(threshold=0):
        got = mt.addmm(mt.tensor(bias), mt.tensor(m1), mt.tensor(m2).T, beta=0.5, alpha=2.0)
    np.testing.assert_allclose(got.numpy(), 0.5 * bias + 2.0 * m1 @ m2.T, rtol=1e-5)
    assert len(calls) == 1 and got.dtype == mt.float32
    assert calls[0] == (blas._gemm() is not None)


def test_addmm_ignores_input_at_beta_zero_and_passes_gradgradcheck():
    nan = mt.tensor([np.nan, np.nan])
    m1, m2 = mt.ones(3, 4, dtype=mt.float64), mt.ones(4, 2, dtype=mt.float64)
    assert mt.addmm(nan, m1, m2, beta=0).tolist() == [[4.0, 4.0]] * 3
    rng = np.random.default_rng(5)
    args = [mt.tensor(rng.standard_normal(s), requires_grad=True)
            for s in ((1, 2), (3, 4), (4, 2))]
    assert mt.autograd.gradgradcheck(
        lambda i, a, b: mt.addmm(i, a * a, b, beta=0.5, alpha=-1.5).sin(), args)
