"""``F.pad`` and the padding modules against NumPy's ``np.pad``, finite differences
and PyTorch."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
from minitorch_exp import nn

F = nn.functional
NUMPY_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge",
               "circular": "wrap"}


def _numpy_pad(x, pad, mode, value):
    """``np.pad`` of the last dims, PyTorch's pad order; negative pads crop first."""
    widths = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        dim = x.ndim - 1 - i
        before, after = pad[2 * i], pad[2 * i + 1]
        x = x[(slice(None),) * dim + (slice(max(-before, 0), x.shape[dim] - max(-after, 0)),)]
        widths[dim] = (max(before, 0), max(after, 0))
    extra = {"constant_values": value} if mode == "constant" else {}
    return np.pad(x, widths, mode=NUMPY_MODES[mode], **extra)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(2, 5), min_size=1, max_size=3), st.data(),
       st.sampled_from(sorted(NUMPY_MODES)), st.sampled_from([None, 0]))
def test_pad_matches_numpy_and_finite_differences(shape, data, mode, threshold):
    dims = data.draw(st.integers(1, len(shape)))
    low = -1 if mode == "constant" else 0
    pad = []
    for i in range(dims):
        n = shape[-1 - i]
        most = n - 1 if mode == "reflect" else n
        pad += [data.draw(st.integers(low, most)), data.draw(st.integers(low, most))]
    value = 1.5 if mode == "constant" else None
    rng = np.random.default_rng(len(shape))
    x = rng.standard_normal(shape)
    node = mt.tensor(x, requires_grad=True)
    with mt.fusion(threshold=threshold):
        got = F.pad(node, tuple(pad), mode=mode, value=value)
        np.testing.assert_array_equal(got.numpy(), _numpy_pad(x, pad, mode, value or 0.0))
        assert mt.gradcheck(lambda t: F.pad(t, tuple(pad), mode=mode, value=value), [node])


@pytest.mark.parametrize("mode", sorted(NUMPY_MODES))
def test_modules_match_pytorch(mode):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal((2, 3, 5, 6))
    ours = {"constant": nn.ConstantPad2d((1, 2, 2, 1), 0.5), "reflect": nn.ReflectionPad2d(2),
            "replicate": nn.ReplicationPad2d((0, 3, 1, 0)), "circular": nn.CircularPad2d(1)}
    theirs = {"constant": torch.nn.ConstantPad2d((1, 2, 2, 1), 0.5),
              "reflect": torch.nn.ReflectionPad2d(2),
              "replicate": torch.nn.ReplicationPad2d((0, 3, 1, 0)),
              "circular": torch.nn.CircularPad2d(1)}
    a, b = mt.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, ref = ours[mode](a), theirs[mode](b)
    np.testing.assert_array_equal(out.numpy(), ref.detach().numpy())
    g = np.random.default_rng(1).standard_normal(ref.shape)
    out.backward(mt.tensor(g))
    ref.backward(torch.tensor(g))
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-12)


def test_bad_pads_are_clear_errors():
    x = mt.ones(2, 3)
    with pytest.raises(ValueError, match="even number of ints"):
        F.pad(x, (1,))
    with pytest.raises(ValueError, match="even number of ints"):
        F.pad(x, (1, 1, 1, 1, 1, 1))
    with pytest.raises(ValueError, match="mode must be one of"):
        F.pad(x, (1, 1), mode="mirror")
    with pytest.raises(ValueError, match="reflect padding of 3 needs a dim larger"):
        F.pad(x, (3, 0), mode="reflect")
    with pytest.raises(ValueError, match="value= is for mode 'constant'"):
        F.pad(x, (1, 1), mode="replicate", value=2.0)
