"""An in-place write into an expanded view is refused on both sides of the fusion
threshold, as in PyTorch: several elements share one memory location, so no
result would be right (found by putting a plausible bug back, issue #44: the
computed-at-once path's own check could go and no test noticed)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt


def _write(view, saver: str, value):
    if saver == "+=":
        view += value
    elif saver == "-=":
        view -= value
    elif saver == "*=":
        view *= value
    else:
        view /= value


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 6), st.integers(2, 5), st.sampled_from(["+=", "-=", "*=", "/="]),
       st.sampled_from([2.0, "tensor"]), st.sampled_from([None, 0]))
def test_writing_into_an_expanded_view_is_an_error_that_changes_nothing(
        width, copies, saver, value, threshold):
    base = mt.arange(1.0, width + 1.0)
    view = base.expand(copies, width)
    operand = mt.full((copies, width), 2.0) if value == "tensor" else value
    with mt.fusion(threshold=threshold), mt.no_grad(), \
            pytest.raises(ValueError, match="expanded view"):
        _write(view, saver, operand)
    np.testing.assert_array_equal(base.numpy(), np.arange(1.0, width + 1.0))
