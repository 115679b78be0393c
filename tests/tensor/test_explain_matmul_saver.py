"""``dst += x @ W``: BLAS adds the product into dst as it computes it (``beta = 1``)
where it can -- OpenBLAS on the CPU (``blas.add_product``), cuBLAS on a GPU -- and
otherwise goes through a product-sized temporary. ``explain`` says which, from the
backend's own ``accumulates_in_place``, the answer ``dot`` acts on."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt
import minitorch_exp.tensor as T
from minitorch_exp.tensor import blas

needs_gemm = pytest.mark.skipif(blas._gemm() is None, reason="no OpenBLAS GEMM found here")


@pytest.fixture
def added_in_place(monkeypatch):
    """How many products ``blas.add_product`` added into their dst."""
    done = []
    real = blas.add_product
    monkeypatch.setattr(blas, "add_product", lambda *a: done.append(real(*a)) or done[-1])
    return done


@needs_gemm
@pytest.mark.parametrize("saver", ["+=", "-="])
def test_an_accumulated_product_goes_into_dst_by_blas_beta(saver, added_in_place):
    x, W, d = T.randn(8, 4), T.randn(4, 6), T.randn(8, 6)
    text = mt.explain(x @ W, out=d, saver=saver, parts=["code", "cost"])
    assert f"alpha={'1' if saver == '+=' else '-1'}, beta=1" in text, text
    assert "0 temporaries" in text.split("here")[-1] and "straight into d" in text
    sign = 1 if saver == "+=" else -1
    expected = d.numpy() + sign * (x.numpy() @ W.numpy())
    T.assign(d, x @ W, saver)
    np.testing.assert_allclose(d.numpy(), expected, rtol=1e-5, atol=1e-6)
    assert added_in_place == [True]


@pytest.mark.parametrize("saver, make_dst", [
    ("*=", lambda: T.randn(8, 6)),
    ("+=", lambda: T.randn(6, 8).transpose(0, 1)),  # columns of unit stride
])
def test_elsewhere_explain_reports_the_temporary(saver, make_dst, added_in_place):
    x, W, d = T.randn(8, 4), T.randn(4, 6), make_dst()
    text = mt.explain(x @ W, out=d, saver=saver, parts=["code", "cost"])
    assert "1 temporary" in text and "straight into" not in text, text
    assert "tmp = np.matmul(x, W)" in text and f"d {saver} tmp" in text
    expected = {"*=": np.multiply, "+=": np.add}[saver](d.numpy(), x.numpy() @ W.numpy())
    T.assign(d, x @ W, saver)
    np.testing.assert_allclose(d.numpy(), expected, rtol=1e-5, atol=1e-6)
    assert True not in added_in_place


def test_a_plain_product_still_goes_straight_into_dst():
    x, W, d = T.randn(8, 4), T.randn(4, 6), T.zeros(8, 6)
    text = mt.explain(x @ W, out=d, parts=["code", "cost"])
    assert "0 temporaries" in text.split("here")[-1] and "straight into d" in text
