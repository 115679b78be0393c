"""Edge cases of the Node API, each checked against PyTorch's (or NumPy's) behaviour.

Where torch is installed the tests compare with it; they also assert the value
torch gives as a literal (derived from the math), so they run without torch.
"""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp import tensor as T

# ---- .grad accepts None or a tensor like the leaf (item 3) --------------------------


def test_grad_setter_rejects_a_number_and_backward_still_works():
    a = mt.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(TypeError, match=r"\.grad.*None or a tensor.*float"):
        a.grad = 0.0
    assert a.grad is None
    (a * 2).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [2.0, 2.0])


def test_grad_setter_checks_shape_and_dtype():
    a = mt.tensor([1.0, 2.0], requires_grad=True)  # float32, shape (2,)
    with pytest.raises(ValueError, match=r"shape \(2,\).*\(3,\)"):
        a.grad = mt.zeros(3)
    with pytest.raises(TypeError, match=r"float32.*float64"):
        a.grad = mt.zeros(2, dtype=mt.float64)
    assert a.grad is None


def test_grad_setter_accepts_a_node_a_tensor_or_none():
    a = mt.tensor([1.0, 2.0], requires_grad=True)
    g = mt.ones(2)
    a.grad = g
    assert a.grad is g
    (a * 3).sum().backward()  # accumulates into the tensor that was set, as torch does
    np.testing.assert_array_equal(g.numpy(), [4.0, 4.0])
    a.grad = T.zeros((2,))  # a Tensor-level value is wrapped
    assert isinstance(a.grad, mt.Node)
    a.grad = None
    assert a.grad is None


def test_grad_setter_matches_torch_in_what_it_refuses():
    torch = pytest.importorskip("torch")
    t = torch.tensor([1.0, 2.0], requires_grad=True)
    for bad in (torch.zeros(3), torch.zeros(2, dtype=torch.float64)):
        with pytest.raises(RuntimeError):
            t.grad = bad
    with pytest.raises(TypeError):
        t.grad = 0.0


# ---- .data is settable (item 2) --------------------------------------------------------


def test_data_inplace_add_updates_the_leaf():
    p = mt.tensor([1.0, 2.0], requires_grad=True)
    g = mt.tensor([0.5, 0.5])
    p.data += g.data  # ``tmp = p.data; tmp += ...; p.data = tmp``: the setter sees tmp
    np.testing.assert_array_equal(p.numpy(), [1.5, 2.5])
    p.data -= 0.5
    np.testing.assert_array_equal(p.numpy(), [1.0, 2.0])


def test_data_assignment_replaces_the_value_sharing_memory_as_torch_does():
    p = mt.tensor([1.0, 2.0], requires_grad=True)
    new = T.tensor([7.0, 8.0])
    p.data = new
    assert p.value is new and p.requires_grad and p.is_leaf
    new[0] = 5.0  # the value is ``new`` itself, not a copy
    np.testing.assert_array_equal(p.numpy(), [5.0, 8.0])
    p.data = mt.tensor([3.0, 4.0])  # a Node gives its value
    (p * p).sum().backward()
    np.testing.assert_array_equal(p.grad.numpy(), [6.0, 8.0])


def test_data_assignment_matches_torch_aliasing():
    torch = pytest.importorskip("torch")
    t = torch.tensor([1.0, 2.0], requires_grad=True)
    new = torch.tensor([7.0, 8.0])
    t.data = new
    new[0] = 5.0
    assert t.tolist() == [5.0, 8.0]


def test_data_assignment_checks_type_shape_and_dtype():
    p = mt.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(TypeError, match=r"\.data.*tensor.*float"):
        p.data = 1.0
    with pytest.raises(ValueError, match=r"shape \(2,\).*\(3,\)"):
        p.data = T.zeros((3,))
    with pytest.raises(TypeError, match=r"float32.*float64"):
        p.data = T.zeros((2,), dtype=T.float64)
    np.testing.assert_array_equal(p.numpy(), [1.0, 2.0])


# ---- only floating point tensors can require gradients (item 4) -----------------------


@pytest.mark.parametrize("dtype", ["int64", "int32", "bool"])
def test_requires_grad_on_an_integer_or_bool_tensor_is_refused(dtype):  # TypeError too
    expected = rf"only floating point tensors can require gradients.*{dtype}"
    x = mt.zeros(2, dtype=dtype)
    with pytest.raises(RuntimeError, match=expected):
        x.requires_grad_()
    assert not x.requires_grad
    assert x.requires_grad_(False) is x  # turning it off is always allowed
    with pytest.raises(RuntimeError, match=expected):
        mt.zeros(2, dtype=dtype, requires_grad=True)
    with pytest.raises(RuntimeError, match=expected):
        mt.tensor([1, 0], dtype=dtype, requires_grad=True)


def test_requires_grad_on_an_integer_tensor_is_refused_by_torch_too():
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match="floating point"):
        torch.zeros(2, dtype=torch.int64).requires_grad_()


# ---- dims and axes: out of range or not ints (item 6) ---------------------------------

_OUT_OF_RANGE = r"5.*out of range.*\(2, 3\).*\[-2, 1\]"


@pytest.mark.parametrize("call", [
    lambda x: x.transpose(0, 5),
    lambda x: x.transpose(5, 0),
    lambda x: x.permute(0, 5),
    lambda x: x.sum(axis=5),
    lambda x: x.mean(axis=(0, 5)),
    lambda x: x.max(axis=5),
    lambda x: x.squeeze(5),
    lambda x: x.flatten(0, 5),
    lambda x: mt.softmax(x, 5),
    lambda x: mt.cat([x, x], 5),
], ids=["transpose-j", "transpose-i", "permute", "sum", "mean", "max", "squeeze", "flatten",
        "softmax", "cat"])
@pytest.mark.parametrize("level", ["node", "tensor"])
def test_an_out_of_range_dim_names_it_the_range_and_the_shape(call, level):
    x = mt.zeros(2, 3)
    if level == "tensor":
        if "mt" in call.__code__.co_names:
            pytest.skip("a Node-level function")
        x = x.value
    with pytest.raises(IndexError, match=_OUT_OF_RANGE):
        call(x)


def test_unsqueeze_out_of_range_names_the_range_for_the_new_dim():
    for x in (mt.zeros(2, 3), mt.zeros(2, 3).value):
        with pytest.raises(IndexError, match=r"4.*out of range.*\(2, 3\).*\[-3, 2\]"):
            x.unsqueeze(4)
    with pytest.raises(IndexError, match=r"-4.*out of range.*\[-3, 2\]"):
        mt.stack([mt.zeros(2, 3)] * 2, axis=-4)


@pytest.mark.parametrize("axis", [1.5, "0", (0, 1.5)])
@pytest.mark.parametrize("level", ["node", "tensor"])
def test_an_axis_that_is_not_an_int_is_a_type_error_naming_it(axis, level):
    x = mt.zeros(2, 3)
    x = x if level == "node" else x.value
    with pytest.raises(TypeError, match=r"axis.*int.*got.*(1\.5|'0').*\(2, 3\)"):
        x.sum(axis=axis)


def test_valid_negative_and_tuple_axes_still_work():
    x = mt.tensor(np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(x.sum(axis=-1).numpy(), [3.0, 12.0])
    np.testing.assert_array_equal(x.transpose(-1, -2).numpy(), np.arange(6.0).reshape(2, 3).T)
    np.testing.assert_array_equal(x.sum(axis=(0, -1)).numpy(), 15.0)
    np.testing.assert_array_equal(x.sum(axis=np.int64(0)).numpy(), [3.0, 5.0, 7.0])
    assert x.unsqueeze(-1).shape == (2, 3, 1) and x.unsqueeze(2).shape == (2, 3, 1)
    assert mt.stack([x, x], axis=-1).shape == (2, 3, 2)


def test_torch_raises_index_error_for_the_same_dims():
    torch = pytest.importorskip("torch")
    t = torch.zeros(2, 3)
    with pytest.raises(IndexError, match=r"\[-2, 1\].*5"):
        t.transpose(0, 5)
    with pytest.raises(TypeError):
        t.sum(dim=1.5)


# ---- Function.apply: a non-tensor passed positionally (item 9) ---------------------------


class SumAxis(mt.Function):
    """``x.sum(axis)`` written as in PyTorch: ``axis`` is an input (its gradient None),
    and backward reads it from ``ctx.attrs``, where keywords go."""

    @staticmethod
    def forward(ctx, x, axis):
        ctx.attrs["shape"] = x.shape
        return x.sum(axis)

    @staticmethod
    def backward(ctx, g):
        shape, axis = ctx.attrs["shape"], ctx.attrs["axis"]
        kept = tuple(1 if i == axis else n for i, n in enumerate(shape))
        return g.reshape(kept).broadcast_to(shape), None


def test_a_positional_non_tensor_reaches_backward_by_its_name():
    a = mt.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    out = SumAxis.apply(a, 1)
    assert out.grad_fn.needs_input_grad == (True, False)
    np.testing.assert_array_equal(out.numpy(), [3.0, 12.0])
    (out * mt.tensor([1.0, 2.0])).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [[1.0] * 3, [2.0] * 3])


def test_a_positional_non_tensor_given_as_a_keyword_too_is_refused():
    a = mt.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(TypeError, match="axis"):
        SumAxis.apply(a, 0, axis=0)


def test_a_builtin_function_refuses_an_attribute_passed_positionally():
    from minitorch_exp.node import ops
    a = mt.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    with pytest.raises(TypeError, match=r"Permute.apply: argument 2 .*keyword: dims=\(1, 0\)"):
        ops.Permute.apply(a, (1, 0))
    with pytest.raises(TypeError, match=r"Sum.apply: argument 2 .*keyword: axes=1"):
        ops.Sum.apply(a, 1, False)
    with pytest.raises(TypeError, match=r"Cat.apply: argument 3 .*keyword: axis=1"):
        ops.Cat.apply(a, a, 1)
    ops.Permute.apply(a, dims=(1, 0)).sum().backward()  # as keywords: fine
    np.testing.assert_array_equal(a.grad.numpy(), np.ones((2, 3)))


# ---- integer ** negative integer (item 5) -----------------------------------------------

_NEGATIVE_POWER = r"[Ii]ntegers to negative integer powers are not allowed.*{}.*-1"


@pytest.mark.parametrize("dtype", ["int64", "int32", "bool"])
def test_an_integer_base_to_a_negative_integer_power_is_refused(dtype):
    x = mt.tensor([1, 2] if dtype != "bool" else [True, False], dtype=dtype)
    match = _NEGATIVE_POWER.format(dtype)
    with pytest.raises(ValueError, match=match):
        x ** -1  # noqa: B018
    with pytest.raises(ValueError, match=match):
        x.value ** -1  # noqa: B018
    with pytest.raises(ValueError, match=match):
        x.value ** np.int64(-1)  # noqa: B018
    with pytest.raises(ValueError, match=match):
        T.apply_op("pow", x.value, -1)
    with pytest.raises(ValueError, match=match):
        mt.op("pow", x, -1)


def test_numpy_refuses_an_integer_to_a_negative_integer_power():
    with pytest.raises(ValueError, match="Integers to negative integer powers"):
        np.array([1, 2]) ** -1  # noqa: B018


def test_integer_powers_that_are_allowed_still_work():
    x = mt.tensor([1, 2, 3])
    np.testing.assert_array_equal((x ** 2).numpy(), [1, 4, 9])
    np.testing.assert_array_equal((x ** 0).numpy(), [1, 1, 1])
    np.testing.assert_allclose((x ** -1.0).numpy(), [1.0, 0.5, 1 / 3])  # a float exponent
    np.testing.assert_allclose((x.astype(mt.float32) ** -1).numpy(), [1.0, 0.5, 1 / 3],
                               rtol=1e-6)
    np.testing.assert_array_equal((2 ** x).numpy(), [2, 4, 8])


# ---- gradients at NaN and at singular points follow PyTorch (item 8) --------------------

NAN, INF = float("nan"), float("inf")

# (name, f, inputs, the gradient of each input as torch gives it)
SINGULAR_GRADS = [
    ("relu at nan", lambda x: x.relu(), [NAN], [1.0]),  # torch: grad where not (x <= 0)
    ("relu at 0", lambda x: x.relu(), [0.0], [0.0]),
    ("abs at nan", lambda x: abs(x), [NAN], [0.0]),  # torch: grad * sgn(x), sgn(nan) = 0
    ("abs at 0", lambda x: abs(x), [0.0], [0.0]),
    ("maximum nan, 1", lambda a, b: mt.maximum(a, b), [NAN, 1.0], [1.0, 1.0]),
    ("maximum 1, nan", lambda a, b: mt.maximum(a, b), [1.0, NAN], [1.0, 1.0]),
    ("maximum tie", lambda a, b: mt.maximum(a, b), [1.0, 1.0], [0.5, 0.5]),
    ("maximum 2, 1", lambda a, b: mt.maximum(a, b), [2.0, 1.0], [1.0, 0.0]),
    ("minimum nan, 1", lambda a, b: mt.minimum(a, b), [NAN, 1.0], [1.0, 1.0]),
    ("minimum 1, nan", lambda a, b: mt.minimum(a, b), [1.0, NAN], [1.0, 1.0]),
    ("minimum 2, 1", lambda a, b: mt.minimum(a, b), [2.0, 1.0], [0.0, 1.0]),
    # d/dx (-1) ** x = (-1) ** x * log(-1): nan (torch does not special-case it)
    ("(-1) ** x", lambda a, x: a ** x, [-1.0, 2.0], [-2.0, NAN]),
    ("(-1) ** 0.5", lambda a, x: a ** x, [-1.0, 0.5], [NAN, NAN]),
    # d/dx 0 ** x: 0 where x >= 0 (torch's special case), else 0 ** x * log(0) = -inf
    ("0 ** x, x = 2", lambda a, x: a ** x, [0.0, 2.0], [0.0, 0.0]),
    ("0 ** x, x = 0", lambda a, x: a ** x, [0.0, 0.0], [0.0, 0.0]),
    ("0 ** x, x = -1", lambda a, x: a ** x, [0.0, -1.0], [-INF, -INF]),
    ("x ** 2 at 0", lambda x: x ** 2, [0.0], [0.0]),
    ("x ** 0 at 0", lambda x: x ** 0, [0.0], [0.0]),  # torch: 0 where the exponent is 0
    ("x ** 0.5 at 0", lambda x: x ** 0.5, [0.0], [INF]),
    ("2 ** x at 0", lambda x: 2 ** x, [0.0], [np.log(2.0)]),
    ("sqrt at 0", lambda x: x.sqrt(), [0.0], [INF]),
]


def _grads(f, inputs, lib):
    if lib == "mt":
        xs = [mt.tensor([v], dtype=mt.float64, requires_grad=True) for v in inputs]
    else:
        import torch
        xs = [torch.tensor([v], dtype=torch.float64, requires_grad=True) for v in inputs]
    f(*xs).sum().backward()
    return [float(x.grad.numpy()[0]) for x in xs]


@pytest.mark.parametrize("name, f, inputs, expected", SINGULAR_GRADS,
                         ids=[row[0] for row in SINGULAR_GRADS])
def test_gradient_at_nan_and_singular_points_is_torchs(name, f, inputs, expected):
    np.testing.assert_array_equal(_grads(f, inputs, "mt"), expected, err_msg=name)


@pytest.mark.parametrize("name, f, inputs, expected", SINGULAR_GRADS,
                         ids=[row[0] for row in SINGULAR_GRADS])
def test_the_expected_singular_gradients_are_torchs(name, f, inputs, expected):
    torch = pytest.importorskip("torch")
    tf = {"maximum": torch.maximum, "minimum": torch.minimum}
    fn = f
    if "maximum" in name or "minimum" in name:
        def fn(a, b):
            return tf[name.split()[0]](a, b)
    np.testing.assert_array_equal(_grads(fn, inputs, "torch"), expected, err_msg=name)


# ---- writing into memory from a read-only NumPy array (item 7) -------------------------

_READ_ONLY = r"tensor is read-only: its memory came from a read-only NumPy array"


def _read_only(values=(1.0, 2.0, 3.0)):
    arr = np.array(values)
    arr.flags.writeable = False
    return arr


@pytest.mark.parametrize("write", [
    lambda t: t.__setitem__(Ellipsis, 1.0),
    lambda t: t.__setitem__(0, 5.0),
    lambda t: t.__setitem__(slice(1, None), t[:2] * 2),
    lambda t: t.__iadd__(1.0),
    lambda t: t.__imul__(t),
    lambda t: T.assign(t, t * 2),
    lambda t: T.assign_all([(t, t + 1), (t, t * 2)]),
], ids=["fill", "item", "slice", "iadd", "imul", "assign", "assign_all"])
def test_a_write_into_a_read_only_array_is_a_clear_error(write):
    arr = _read_only()
    t = T.from_numpy(arr)
    with pytest.raises(ValueError, match=_READ_ONLY):
        write(t)
    np.testing.assert_array_equal(arr, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal((t * 2).numpy(), [2.0, 4.0, 6.0])  # reading is fine


def test_a_read_only_array_under_a_node_refuses_writes_and_its_copies_do_not():
    arr = _read_only()
    x = mt.from_numpy(arr)
    with pytest.raises(ValueError, match=_READ_ONLY):
        x += 1
    with pytest.raises(ValueError, match=_READ_ONLY):
        x[0] = 0.0
    y = x.clone()
    y += 1
    np.testing.assert_array_equal(y.numpy(), [2.0, 3.0, 4.0])
    np.testing.assert_array_equal(arr, [1.0, 2.0, 3.0])
    strided = _read_only(np.arange(12.0).reshape(3, 4))[:, ::2]  # not contiguous
    with pytest.raises(ValueError, match=_READ_ONLY):
        T.from_numpy(strided)[...] = 0.0


def test_numpy_refuses_the_same_write():
    with pytest.raises(ValueError, match="read-only"):
        _read_only()[...] = 1.0
