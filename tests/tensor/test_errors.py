"""Errors a user can act on: each names what was expected and what was found.

Where NumPy refuses the same thing, the test first checks that it does (so the
case is a real error, not an engine quirk), then checks our message.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from minitorch_exp.tensor import (
    as_device,
    assign,
    clip,
    from_numpy,
    maximum,
    ones,
    tensor,
    where,
    zeros,
)


def numpy_refuses(fn, exc=Exception):
    with pytest.raises(exc):
        fn()


def test_index_out_of_range():
    a = np.zeros((3, 4))
    numpy_refuses(lambda: a[3], IndexError)
    t = from_numpy(a)
    with pytest.raises(IndexError, match=r"index 3 is out of range for dim 0 with size 3"):
        t[3]
    with pytest.raises(IndexError, match=r"index -5 .* dim 1 with size 4"):
        t[0, -5]
    numpy_refuses(lambda: a[[0, 7]], IndexError)
    with pytest.raises(IndexError, match=r"\(3, 4\)"):
        t[[0, 7]]


def test_too_many_indices():
    a = np.zeros((3, 4))
    numpy_refuses(lambda: a[0, 0, 0], IndexError)
    with pytest.raises(IndexError, match=r"too many indices.* 2 dims but 3"):
        from_numpy(a)[0, 0, 0]


def test_bad_reshape_names_sizes_and_shape():
    a = np.zeros((2, 3))
    numpy_refuses(lambda: a.reshape(4, 4), ValueError)
    t = from_numpy(a)
    with pytest.raises(ValueError, match=re.escape("cannot reshape 6 elements into shape (4, 4)")):
        t.reshape(4, 4)
    with pytest.raises(ValueError, match=re.escape("(4, -1)")):
        t.view(4, -1)
    with pytest.raises(ValueError, match="only one dimension can be -1"):
        t.reshape(-1, -1)


def test_view_of_a_non_viewable_layout_suggests_reshape():
    t = from_numpy(np.zeros((3, 4))).T
    with pytest.raises(ValueError) as err:
        t.view(12)
    msg = str(err.value)
    assert "(4, 3)" in msg and "(12,)" in msg and str(t.strides) in msg
    assert ".reshape()" in msg


def test_non_broadcastable_shapes_name_both_shapes_and_the_op():
    a, b = np.zeros((3, 4)), np.zeros((5,), np.float32)
    numpy_refuses(lambda: a + b, ValueError)
    with pytest.raises(ValueError) as err:
        from_numpy(a) + from_numpy(b)
    msg = str(err.value)
    assert msg.startswith("add: shapes (3, 4) and (5,) cannot broadcast")
    assert "float64" in msg and "float32" in msg and "cpu" in msg


@pytest.mark.parametrize("build,op", [
    (lambda x, y: x * y, "mul"),
    (lambda x, y: x - y, "sub"),
    (lambda x, y: x / y, "div"),
    (lambda x, y: x < y, "lt"),
    (lambda x, y: maximum(x, y), "maximum"),
    (lambda x, y: where(x > 0, x, y), "where"),
])
def test_build_time_errors_name_the_op_and_every_operand(build, op):
    x = from_numpy(np.zeros((3, 4)))
    y = from_numpy(np.zeros((2, 1, 5), np.int32))
    with pytest.raises(ValueError) as err:
        build(x, y)
    msg = str(err.value)
    assert msg.startswith(f"{op}:")
    for part in ["(3, 4) float64 on cpu", "(2, 1, 5) int32 on cpu"]:
        assert part in msg


def test_three_operand_error_lists_all_operands():
    x, lo = from_numpy(np.zeros((3,))), from_numpy(np.zeros((4,), np.float32))
    with pytest.raises(ValueError) as err:
        clip(x, lo, 1.0)
    msg = str(err.value)
    assert msg.startswith("clip:") and "(3,) float64" in msg and "(4,) float32" in msg
    assert "scalar 1.0" in msg


def test_unknown_dtype_lists_the_supported_ones():
    numpy_refuses(lambda: np.dtype("float17"), TypeError)
    for bad in ["float17", np.complex64, "uint8"]:
        with pytest.raises(TypeError) as err:
            zeros(2, dtype=bad)
        msg = str(err.value)
        assert "unknown dtype" in msg and repr(bad) in msg
        for name in ["float16", "float32", "float64", "int32", "int64", "bool"]:
            assert name in msg
    with pytest.raises(TypeError, match="unknown dtype"):
        from_numpy(np.zeros(2)).astype("uint8")


def test_unknown_device_says_what_is_accepted():
    for bad in ["tpu", "cuda:x", "cpu:1", "gpu"]:
        with pytest.raises(ValueError) as err:
            zeros(2, device=bad)
        msg = str(err.value)
        assert repr(bad) in msg and "'cpu'" in msg and "'cuda'" in msg
    with pytest.raises(ValueError, match="'tpu'"):
        tensor([1.0]).to("tpu")
    assert str(as_device("cuda:1")) == "cuda:1"


def test_writing_into_an_expanded_view():
    a = np.zeros((1, 4))
    numpy_refuses(lambda: np.broadcast_to(a, (3, 4)).__setitem__(Ellipsis, 1.0), ValueError)
    t = from_numpy(a)
    v = t.expand(3, 4)
    with pytest.raises(ValueError) as err:
        v[...] = 1.0
    msg = str(err.value)
    assert "expanded view" in msg and "(3, 4)" in msg and "(0, 1)" in msg
    with pytest.raises(ValueError, match="expanded view"):
        v += 1
    with pytest.raises(ValueError, match="expanded view"):
        t.broadcast_to(2, 1, 4)[:, 0, :] = 3.0
    np.testing.assert_array_equal(t.numpy(), a)  # nothing was written
    v[0] = 2.0  # one row of the expanded view is a plain view: fine
    np.testing.assert_array_equal(t.numpy(), np.full((1, 4), 2.0))


def test_assignment_shape_and_dtype_errors():
    dst = zeros(3, 4)
    with pytest.raises(ValueError, match=r"shape \(5,\).*shape \(3, 4\)"):
        dst[...] = ones(5)
    with pytest.raises(ValueError, match=r"\(2, 3, 4\).*\(3, 4\)"):
        dst += ones(2, 3, 4)
    idst = zeros(3, dtype="int32")
    numpy_refuses(lambda: np.add(np.zeros(3, np.int32), np.ones(3), out=np.zeros(3, np.int32)),
                  TypeError)
    with pytest.raises(TypeError, match=r"float32.*int32.*astype"):
        idst += ones(3)
    with pytest.raises(TypeError, match=r"/=.*int32"):
        idst /= 2
    with pytest.raises(ValueError, match="saver"):
        assign(dst, ones(3, 4), "%=")
    with pytest.raises(TypeError, match="Tensor"):
        assign(ones(3) * 2, ones(3))


def test_setitem_through_advanced_index_is_refused():
    t = zeros(4)
    with pytest.raises(IndexError, match="boolean-mask"):
        t[[0, 2]] = 1.0
    with pytest.raises(IndexError, match="integer-array"):
        t[np.array([True, False, True, False])] = 1.0


def test_item_and_bool_of_many_elements():
    numpy_refuses(lambda: np.zeros(3).item(), ValueError)
    with pytest.raises(ValueError, match=r"one element.*\(3,\)"):
        zeros(3).item()
    with pytest.raises(ValueError, match=r"\(3,\) is ambiguous"):
        bool(zeros(3) > 0)


def test_bad_permute_transpose_and_squeeze_axes():
    t = zeros(2, 3)
    with pytest.raises(ValueError, match=r"permute.*\(0, 0\).*2 dims"):
        t.permute(0, 0)
    with pytest.raises(IndexError, match="axis 2 is out of range.* 2 dims"):
        t.transpose(0, 2)
    with pytest.raises(IndexError, match="axis 3"):
        t.unsqueeze(3)
    with pytest.raises(ValueError, match=r"cannot broadcast shape \(2, 3\) to \(4, 3\)"):
        t.broadcast_to(4, 3)
    with pytest.raises(ValueError, match="expand"):
        t.expand(3)


def test_non_tensor_operands_are_type_errors():
    t = zeros(2)
    with pytest.raises(TypeError):
        t + "a"
    with pytest.raises(TypeError):
        t * [1, 2]
    with pytest.raises(TypeError, match="dict"):
        maximum(t, {})


def test_boolean_subtract_and_negate_are_refused_like_numpy():
    a = np.array([True, False])
    numpy_refuses(lambda: a - a, TypeError)
    numpy_refuses(lambda: -a, TypeError)
    t = from_numpy(a)
    with pytest.raises(TypeError, match="sub: cannot subtract bool"):
        t - t
    with pytest.raises(TypeError, match="sub"):
        t - True
    with pytest.raises(TypeError, match="neg: cannot negate bool"):
        _ = -t
    with pytest.raises(TypeError, match="-="):
        t -= t
    np.testing.assert_array_equal((t - 1).numpy(), a - 1)  # bool - int is an int: fine


def test_true_division_into_an_int_tensor_is_refused_like_numpy():
    a = np.arange(3, dtype=np.int32)
    numpy_refuses(lambda: np.true_divide(a, a, out=a.copy()), TypeError)
    t = from_numpy(a.copy())
    with pytest.raises(TypeError, match=r"/=.*int32"):
        t /= t
    with pytest.raises(TypeError, match=r"/=.*int32"):
        t /= from_numpy(a.copy())
    np.testing.assert_array_equal(t.numpy(), a)
