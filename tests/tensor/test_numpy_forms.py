"""Registry rows whose NumPy form is written for speed give the plain formula's bits."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from minitorch_exp.tensor.ops import OPS


def plain_sigmoid(x):
    """The two forms by sign, selected with ``np.where``: the kernels' formula."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1, e).astype(x.dtype) / (1 + e)


SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 88.0, -88.0, 100.0, -104.0, 1e-30, -1e-30]


@settings(max_examples=60, deadline=None)
@given(data=st.data(), dtype=st.sampled_from([np.float32, np.float64]))
def test_sigmoid_form_is_the_plain_formula_bitwise(data, dtype):
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=3, max_side=6))
    base = data.draw(hnp.arrays(dtype, shape, elements=st.sampled_from(SPECIAL) | st.floats(
        -120, 120, width=32)))
    x = base[..., ::-1] if base.ndim and data.draw(st.booleans()) else base  # strided too
    got = OPS["sigmoid"].numpy(x)
    np.testing.assert_array_equal(got, plain_sigmoid(x))
    assert got.dtype == dtype


def test_sigmoid_form_takes_numbers_and_integers():
    assert OPS["sigmoid"].numpy(0.0) == 0.5
    np.testing.assert_allclose(OPS["sigmoid"].numpy(np.array([-1, 0, 2])),
                               1 / (1 + np.exp(-np.array([-1.0, 0.0, 2.0]))))
