"""``dst += x @ W`` on the CPU goes through a product-sized temporary (NumPy's matmul has
no beta=1 form); explain says so instead of claiming the result goes straight into dst."""

from __future__ import annotations

import numpy as np

import minitorch_exp as mt
import minitorch_exp.tensor as T


def test_explain_reports_the_temporary_of_an_accumulating_product():
    x, W, d = T.randn(8, 4), T.randn(4, 6), T.zeros(8, 6)
    text = mt.explain(x @ W, out=d, saver="+=", parts=["code", "cost"])
    assert "1 temporary" in text, text
    assert "straight into" not in text
    assert "tmp = np.matmul(x, W)" in text and "d += tmp" in text
    expected = d.numpy() + x.numpy() @ W.numpy()
    d += x @ W
    np.testing.assert_allclose(d.numpy(), expected, rtol=1e-5)


def test_a_plain_product_still_goes_straight_into_dst():
    x, W, d = T.randn(8, 4), T.randn(4, 6), T.zeros(8, 6)
    text = mt.explain(x @ W, out=d, parts=["code", "cost"])
    assert "0 temporaries" in text.split("here")[-1] and "straight into d" in text
