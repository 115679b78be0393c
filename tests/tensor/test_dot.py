"""Matrix products (``@``, ``matmul``) against ``np.matmul``: 1-D, 2-D, batched, strided, savers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minitorch_exp.tensor import matmul, relu, tensor

from ..devices import DEVICES, on_device
from .strategies import FLOATS, INTS, assert_matches, tensor_pairs


@st.composite
def matmul_shapes(draw):
    """Shapes for every case of NumPy's matmul rules, with broadcast batch dims."""
    m, k, n = (draw(st.integers(0, 4)) for _ in range(3))
    kind = draw(st.sampled_from(["vv", "vm", "mv", "mm", "batched"]))
    if kind == "vv":
        return (k,), (k,)
    if kind == "vm":
        return (k,), (k, n)
    if kind == "mv":
        return (m, k), (k,)
    if kind == "mm":
        return (m, k), (k, n)
    batch = draw(st.lists(st.integers(1, 3), min_size=1, max_size=2))
    a_batch = [1 if draw(st.booleans()) else b for b in batch]
    b_batch = [1 if draw(st.booleans()) else b for b in batch][draw(st.integers(0, len(batch))):]
    b = tuple(b_batch) + (k, n)
    if draw(st.booleans()):
        return (k,), b  # a vector against a batch of matrices
    return tuple(a_batch) + (m, k), b


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=120, deadline=None)
@given(shapes=matmul_shapes(), dtype=st.sampled_from(FLOATS + INTS), data=st.data())
def test_matmul_matches_numpy(device, shapes, dtype, data):
    sa, sb = shapes
    ta, a = data.draw(tensor_pairs(shape=sa, dtype=dtype, device=device))
    other = data.draw(st.sampled_from([dtype] + list(FLOATS)))
    tb, b = data.draw(tensor_pairs(shape=sb, dtype=other, device=device))
    expected = np.matmul(a, b)
    e = ta @ tb
    assert e.shape == expected.shape and e.dtype == expected.dtype
    scale = 10 * max(1, sa[-1])
    assert_matches(e.eval(), expected, scale=scale, device=device)
    assert_matches(matmul(ta, tb).eval(), expected, scale=scale, device=device)


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 4), k=st.integers(1, 4), n=st.integers(1, 4), data=st.data())
def test_transposed_and_strided_operands(device, m, k, n, data):
    ta, a = data.draw(tensor_pairs(shape=(k, m), dtype=np.dtype(np.float64), device=device))
    tb, b = data.draw(tensor_pairs(shape=(n, 2 * k), dtype=np.dtype(np.float64), device=device))

    def check(actual, expected):
        assert_matches(actual, expected, device=device)

    check((ta.T @ tb[:, ::2].T).eval(), a.T @ b[:, ::2].T)
    check((ta.T @ tb[::-1, 1::2].T).eval(), a.T @ b[::-1, 1::2].T)
    check((tb[0, ::-2] @ ta).eval(), b[0, ::-2] @ a)
    check((ta.transpose(0, 1)[::-1] @ ta).eval(), a.T[::-1] @ a)
    check((ta.expand(2, k, m).transpose(1, 2) @ ta).eval(),
          np.broadcast_to(a, (2, k, m)).transpose(0, 2, 1) @ a)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("saver", ["=", "+=", "-=", "*=", "/="])
def test_dot_savers_into_views(device, saver):
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(3, 4)), rng.normal(size=(4, 5))
    ta, tb = on_device(a, device), on_device(b, device)
    base = rng.normal(size=(7, 11)) + 3
    ref, t = base.copy(), on_device(base.copy(), device)
    for view in (lambda x: x[:3, :5], lambda x: x[6:0:-2, 9::-2], lambda x: x[1:6, 2:5],
                 lambda x: x[2:5, 1:6].T):
        r, v = view(ref), view(t)
        prod = a @ b if r.shape == (3, 5) else (b.T @ a.T)
        e = ta @ tb if r.shape == (3, 5) else tb.T @ ta.T
        if saver == "=":
            r[...] = prod
            v[...] = e
        elif saver == "+=":
            r += prod
            v += e
        elif saver == "-=":
            r -= prod
            v -= e
        elif saver == "*=":
            r *= prod
            v *= e
        else:
            r /= prod
            v /= e
    assert_matches(t, ref, device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_dot_result_broadcasts_into_destination(device):
    a, b = np.arange(12.0).reshape(3, 4), np.arange(4.0)
    ref = np.zeros((5, 3))
    t = on_device(ref.copy(), device)
    ref[...] = a @ b
    t[...] = on_device(a, device) @ on_device(b, device)
    assert_matches(t, ref, device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_dot_into_a_destination_of_another_dtype(device):
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    ref = np.zeros((2, 2))
    t = on_device(ref.copy(), device)
    ref[...] = a @ a.T
    t[...] = on_device(a, device) @ on_device(a, device).T
    assert_matches(t, ref, device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_dot_inside_expressions(device):
    rng = np.random.default_rng(1)
    a, b, c = rng.normal(size=(3, 4)), rng.normal(size=(4, 2)), rng.normal(size=(2,))
    ta, tb, tc = on_device(a, device), on_device(b, device), on_device(c, device)

    def check(actual, expected):
        assert_matches(actual, expected, device=device)

    check(((ta @ tb) + tc).eval(), a @ b + c)
    check(relu(ta @ tb - 0.1).eval(), np.maximum(a @ b - 0.1, 0))
    check(((ta * 2) @ (tb + 1)).eval(), (a * 2) @ (b + 1))
    check(((ta @ tb).T @ (ta @ tb)).eval(), (a @ b).T @ (a @ b))
    check((ta @ tb).sum(axis=0).eval(), (a @ b).sum(axis=0))
    if device == "cpu":  # a NumPy operand is a cpu tensor: only cpu ones mix with it
        check((a @ tb).eval(), a @ b)  # ndarray @ Tensor
        check((ta @ b).eval(), a @ b)


def test_matmul_shape_errors_name_both_operands():
    with pytest.raises(ValueError, match=r"matmul.*\(3, 4\).*\(5, 2\)"):
        tensor(np.ones((3, 4))) @ tensor(np.ones((5, 2)))
    with pytest.raises(ValueError, match="matmul"):
        tensor(np.ones((2, 3, 4))) @ tensor(np.ones((3, 4, 5)))
    with pytest.raises(ValueError, match="at least 1 dim"):
        tensor(np.ones(())) @ tensor(np.ones((3,)))
