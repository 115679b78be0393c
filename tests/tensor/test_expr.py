"""Expression templates against NumPy: random trees, dtype promotion, evaluation entry points."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minitorch_exp.tensor import (
    Exp,
    Tensor,
    apply_op,
    clip,
    evaluate,
    exp,
    from_numpy,
    log,
    maximum,
    minimum,
    relu,
    sigmoid,
    sqrt,
    tanh,
    tensor,
    where,
)

from ..devices import DEVICES, on_device
from .strategies import (
    ALL_DTYPES,
    assert_matches,
    block_size,
    case_on,
    expr_cases,
    pair_on,
    tensor_pairs,
)

# ---- random trees ------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=250, deadline=None)
@given(case=expr_cases(), block=st.sampled_from([None, None, 1, 5]))
def test_random_tree_matches_numpy(device, case, block):
    e, ref, tree, _ = case_on(case, device)
    assert e.shape == np.shape(ref), tree
    assert e.dtype == np.asarray(ref).dtype, tree
    with block_size(block):
        out = e.eval()
    assert isinstance(out, Tensor)
    assert out.device == e.device
    assert_matches(out, ref, scale=tree.scale, f32=tree.f32, device=device)


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=60, deadline=None)
@given(case=expr_cases(max_depth=3), data=st.data())
def test_tree_evaluated_into_strided_destination(device, case, data):
    """The same tree written into a reversed, gapped view of a bigger buffer."""
    e, ref, tree, _ = case_on(case, device)
    ref = np.asarray(ref)
    big = np.zeros(tuple(2 * n + 1 for n in ref.shape), ref.dtype)
    idx = tuple(slice(2 * n, 0, -2) for n in ref.shape)
    expected = big.copy()
    expected[idx] = ref
    t = on_device(big, device)
    block = data.draw(st.sampled_from([None, 2]))
    with block_size(block):
        t[idx] = e
    assert_matches(t, expected, scale=tree.scale, f32=tree.f32, device=device)


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=40, deadline=None)
@given(case=expr_cases(max_depth=4, dtypes=(np.dtype(np.float64),)))
def test_float64_trees_are_tight(device, case):
    e, ref, tree, _ = case_on(case, device)
    assert_matches(e.eval(), ref, scale=tree.scale, f32=tree.f32, device=device)


# ---- every built-in op, one at a time ------------------------------------------------

UNARY_FNS = [
    ("neg", lambda x: -x, lambda x: -x),
    ("abs", abs, np.abs),
    ("exp", exp, np.exp),
    ("log", lambda x: log(abs(x) + 0.25), lambda x: np.log(np.abs(x) + 0.25)),
    ("sqrt", lambda x: sqrt(abs(x)), lambda x: np.sqrt(np.abs(x))),
    ("tanh", tanh, np.tanh),
    ("sigmoid", sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    ("relu", relu, lambda x: np.maximum(x, 0)),
    ("sign", lambda x: x.sign(), np.sign),
    ("method_exp", lambda x: x.exp(), np.exp),
    ("method_relu", lambda x: x.relu(), lambda x: np.maximum(x, 0)),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,fn,ref", UNARY_FNS, ids=[u[0] for u in UNARY_FNS])
@settings(max_examples=15, deadline=None)
@given(pair=tensor_pairs())
def test_unary_op_matches_numpy(device, name, fn, ref, pair):
    t, a = pair_on(pair, device)
    assert_matches(fn(t), ref(a), device=device)


BINARY_FNS = [
    ("add", lambda x, y: x + y),
    ("sub", lambda x, y: x - y),
    ("mul", lambda x, y: x * y),
    ("maximum", None),
    ("minimum", None),
    ("lt", lambda x, y: x < y),
    ("le", lambda x, y: x <= y),
    ("gt", lambda x, y: x > y),
    ("ge", lambda x, y: x >= y),
    ("eq", lambda x, y: x == y),
    ("ne", lambda x, y: x != y),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,fn", BINARY_FNS, ids=[b[0] for b in BINARY_FNS])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_binary_op_broadcasts_like_numpy(device, name, fn, data):
    shape = data.draw(st.lists(st.integers(0, 3), max_size=3).map(tuple))
    t1, a1 = data.draw(tensor_pairs(shape=shape, device=device))
    lead = data.draw(st.integers(0, len(shape)))
    other = tuple(1 if data.draw(st.booleans()) else n for n in shape[lead:])
    t2, a2 = data.draw(tensor_pairs(shape=other, device=device))
    if fn is None:
        mt_fn = {"maximum": maximum, "minimum": minimum}[name]
        np_fn = {"maximum": np.maximum, "minimum": np.minimum}[name]
    else:
        mt_fn = np_fn = fn
    assert_matches(mt_fn(t1, t2), np_fn(a1, a2), device=device)
    assert_matches(mt_fn(t2, t1), np_fn(a2, a1), device=device)


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_division_and_power_match_numpy(device, data):
    t1, a1 = data.draw(tensor_pairs(device=device))
    t2, a2 = data.draw(tensor_pairs(shape=a1.shape, lo=0.5, hi=2.0, device=device))
    assert_matches(t1 / t2, a1 / a2, device=device)
    assert_matches((abs(t1) + 0.5) ** (t2 - 1), (np.abs(a1) + 0.5) ** (a2 - 1), device=device)
    assert_matches(t1 ** 2, a1 ** 2, device=device)
    assert_matches(2.0 ** t2, 2.0 ** a2, device=device)
    assert_matches(1 / t2, 1 / a2, device=device)


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_where_clip_and_logical_ops(device, data):
    t, a = data.draw(tensor_pairs(device=device))
    u, b = data.draw(tensor_pairs(shape=a.shape[1:], device=device))
    lo = data.draw(st.integers(-2, 0))
    hi = data.draw(st.floats(0, 2))

    def check(actual, expected):
        assert_matches(actual, expected, device=device)

    check(where(t > 0, t, u), np.where(a > 0, a, b))
    check(where(t > 0, 1.5, u), np.where(a > 0, 1.5, b))
    check(where(t > u, t, 0), np.where(a > b, a, 0))
    check(clip(t, lo, hi), np.minimum(np.maximum(a, lo), hi))
    check(t.clip(lo, hi), np.minimum(np.maximum(a, lo), hi))
    check((t > 0) & (u < 1), (a > 0) & (b < 1))
    check((t > 0) | (u < 1), (a > 0) | (b < 1))
    check(~(t > 0), ~(a > 0))


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=30, deadline=None)
@given(pair=tensor_pairs(), dtype=st.sampled_from(ALL_DTYPES))
def test_astype_matches_numpy(device, pair, dtype):
    t, a = pair_on(pair, device)
    assert_matches(t.astype(dtype), a.astype(dtype), device=device)
    assert_matches((t * 2).astype(dtype), (a * 2).astype(dtype), device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_where_condition_need_not_be_bool(device):
    a = np.array([0.0, 1.5, -2.0, 0.0])
    assert_matches(where(on_device(a, device), 1.0, -1.0), np.where(a, 1.0, -1.0),
                   device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_where_in_place_reads_before_writing(device):
    """``x[...] = where(x > 0, x, 0)``: the condition and branch read x, the output is x."""
    a = np.array([-1.0, 2.0, -3.0, 4.0])
    t = tensor(a.copy(), device=device)
    t[...] = where(t > 0, t, 0)
    np.testing.assert_array_equal(t.numpy(), np.where(a > 0, a, 0))


# ---- dtype promotion: NumPy 2 with weak Python scalars ------------------------------

SCALARS = [0.5, 2, True, -3, 1e10, 0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt1", ALL_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("dt2", ALL_DTYPES, ids=lambda d: d.name)
def test_tensor_tensor_promotion_matches_numpy(device, dt1, dt2):
    a, b = np.ones(3, dt1), np.ones(3, dt2)
    ta, tb = on_device(a, device), on_device(b, device)
    assert (ta * tb).dtype == (a * b).dtype
    assert (ta + tb).dtype == (a + b).dtype
    assert maximum(ta, tb).dtype == np.maximum(a, b).dtype
    assert where(ta > 0, ta, tb).dtype == np.where(a > 0, a, b).dtype
    assert (ta < tb).dtype == (a < b).dtype
    if dt1.kind != "b" or dt2.kind != "b":
        assert (ta / tb).dtype == (a / b).dtype
        assert_matches((ta / tb).eval(), a / b, device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", ALL_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("s", SCALARS, ids=repr)
def test_tensor_scalar_promotion_matches_numpy(device, dt, s):
    a = np.ones(3, dt)
    t = on_device(a, device)
    for f in (lambda x, y: x * y, lambda x, y: y * x, lambda x, y: x + y,
              lambda x, y: maximum(x, y) if isinstance(x, Exp) else np.maximum(x, y)):
        try:
            expected = f(a, s)
        except (OverflowError, TypeError):
            continue
        assert_matches(f(t, s), expected, device=device)


def test_weak_scalar_examples():
    f32 = from_numpy(np.ones(2, np.float32))
    i32 = from_numpy(np.ones(2, np.int32))
    assert (f32 * 0.5).dtype == (np.ones(2, np.float32) * 0.5).dtype
    assert (i32 * 0.5).dtype == (np.ones(2, np.int32) * 0.5).dtype
    assert (i32 + 1).dtype == (np.ones(2, np.int32) + 1).dtype
    assert exp(i32).dtype == np.exp(np.ones(2, np.int32)).dtype
    assert (i32 / 2).dtype == (np.ones(2, np.int32) / 2).dtype


def test_shared_scalars_keep_their_type_and_sign():
    """Operators share one Scalar per (type, value); 1, 1.0 and True stay apart, and a
    zero is never shared, so -0.0 keeps its sign."""
    f32 = from_numpy(np.ones(2, np.float32))
    i32 = from_numpy(np.ones(2, np.int32))
    for make in (lambda: i32 * 1, lambda: i32 * 1.0, lambda: i32 * True):
        make()  # the first of each type is interned
    assert [(i32 * s).dtype for s in (1, 1.0, True)] == \
        [(np.ones(2, np.int32) * s).dtype for s in (1, 1.0, True)]
    np.testing.assert_array_equal(np.signbit((f32 * 0.0).numpy()), [False, False])
    np.testing.assert_array_equal(np.signbit((f32 * -0.0).numpy()), [True, True])


def test_float_defaults_for_python_data():
    assert tensor([1.5, 2.0]).dtype == np.float32
    assert tensor(0.5).dtype == np.float32
    assert tensor([1, 2]).dtype == np.int64
    assert tensor([True]).dtype == np.bool_


# ---- building is lazy; evaluation entry points ---------------------------------------

def test_building_computes_nothing_until_evaluated():
    a = np.arange(4.0)
    t = from_numpy(a)
    e = t * 2 + 1
    assert isinstance(e, Exp) and not isinstance(e, Tensor)
    a[:] = 10.0  # the expression reads the tensor when evaluated, not when built
    np.testing.assert_array_equal(e.eval().numpy(), a * 2 + 1)


def test_print_shows_the_values(capsys):
    a = np.array([[1.5, -2.0], [3.0, 0.25]])
    print(from_numpy(a) * 2)
    assert capsys.readouterr().out.strip() == str(a * 2)


def test_eval_asarray_print_and_repr():
    a = np.array([[1.0, -2.0], [3.0, 0.25]])
    t = from_numpy(a)
    e = relu(t) * 2 - 1
    ref = np.maximum(a, 0) * 2 - 1
    out = e.eval()
    assert isinstance(out, Tensor) and out.is_contiguous()
    np.testing.assert_array_equal(out.numpy(), ref)
    np.testing.assert_array_equal(np.asarray(e), ref)
    np.testing.assert_array_equal(np.asarray(e, dtype=np.float32), ref.astype(np.float32))
    assert str(e) == str(ref)
    text = repr(e)
    assert "(2, 2)" in text and "float64" in text and "cpu" in text
    assert str(ref[0, 0]).rstrip(".0") in text
    assert e.numpy().tolist() == ref.tolist()
    assert e.tolist() == ref.tolist()
    assert (t.sum() * 1).item() == pytest.approx(a.sum())


def test_expression_truth_value():
    t = from_numpy(np.array([1.0, 2.0]))
    assert bool(t.sum() > 2) == bool(np.array([1.0, 2.0]).sum() > 2)
    with pytest.raises(ValueError, match="ambiguous"):
        bool(t > 0)


def test_apply_op_by_name_and_arity_errors():
    a = np.array([1.0, -1.0])
    t = from_numpy(a)
    assert_matches(apply_op("tanh", t), np.tanh(a))
    with pytest.raises(KeyError, match="no_such_op"):
        apply_op("no_such_op", t)
    with pytest.raises(TypeError, match="tanh takes 1"):
        apply_op("tanh", t, t)


def test_ops_on_scalars_only_make_a_tensor():
    out = exp(0.5)
    assert out.shape == ()
    assert out.item() == pytest.approx(np.exp(0.5), rel=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=30, deadline=None)
@given(case=expr_cases(max_depth=3))
def test_views_of_expressions(device, case):
    """Views applied to a whole expression: pushed down to the leaves, same values."""
    e, ref, tree, _ = case_on(case, device)
    ref = np.asarray(ref)

    def check(actual, expected):
        assert_matches(actual, expected, scale=tree.scale, f32=tree.f32, device=device)

    check(e.T, ref.T)
    check(e.reshape(-1), ref.reshape(-1))
    check(e.unsqueeze(0), ref[None])
    check(e.flatten(), ref.reshape(-1))
    if ref.ndim >= 2:
        check(e.transpose(0, 1), np.swapaxes(ref, 0, 1))


@pytest.mark.parametrize("device", DEVICES)
def test_an_expression_of_numbers_alone_joins_a_tensor_on_any_device(device):
    """``lo < hi`` of two numbers has no device of its own (clip's derivative builds it)."""
    from minitorch_exp.tensor.expr import as_exp

    both = as_exp(-0.5) < as_exp(0.7)
    assert both.device is None
    x = on_device(np.array([-1.0, 0.0, 1.0]), device)
    got = ((x < as_exp(-0.5)) & both).numpy()
    np.testing.assert_array_equal(got, [True, False, False])
    np.testing.assert_array_equal(evaluate(both).numpy(), True)  # alone: on the CPU
