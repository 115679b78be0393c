"""``load_state_dict`` checks what a checkpoint holds before it writes anything.

It refuses arrays that are not numbers (a string array of "nan" used to be converted
to floats), naming the key and the dtype, and returns PyTorch's named tuple
``(missing_keys, unexpected_keys)``, in PyTorch's orders, strict or not (it
returned None).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.nn import module as nn_module

# ---- load_state_dict: what it accepts -----------------------------------------------------


def _linear():
    mt.manual_seed(0)
    return nn.Linear(2, 3)


@pytest.mark.parametrize("bad", [np.full((3, 2), "nan"), np.full((3, 2), b"1"),
                                 np.full((3, 2), None, dtype=object),
                                 np.full((3, 2), 1 + 2j)])
def test_load_state_dict_refuses_arrays_that_are_not_numbers(bad):
    model = _linear()
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    state = {"weight": bad, "bias": np.zeros(3, np.float32)}
    message = (f"load_state_dict: 'weight' has dtype {bad.dtype} in the checkpoint; expected "
               f"numbers (bool, integer or float)")
    with pytest.raises(TypeError, match=re.escape(message)):
        model.load_state_dict(state)
    for k, v in model.state_dict().items():  # nothing was written, the bias included
        np.testing.assert_array_equal(v.numpy(), before[k])


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.bool_])
def test_load_state_dict_still_takes_any_numeric_dtype(dtype):
    model = _linear()
    model.load_state_dict({"weight": np.ones((3, 2), dtype), "bias": np.zeros(3, dtype)})
    np.testing.assert_array_equal(model.weight.numpy(), np.ones((3, 2), np.float32))
    assert model.weight.dtype == np.float32


# ---- load_state_dict: what it returns ------------------------------------------------------

def test_load_state_dict_returns_the_keys_it_did_not_match():
    model = _linear()
    got = model.load_state_dict({"weight": np.ones((3, 2)), "extra": np.ones(1)}, strict=False)
    assert isinstance(got, nn_module.IncompatibleKeys) and isinstance(got, tuple)
    assert got == nn_module.IncompatibleKeys(missing_keys=["bias"], unexpected_keys=["extra"])
    missing, unexpected = got
    assert (missing, unexpected) == (got.missing_keys, got.unexpected_keys)
    np.testing.assert_array_equal(model.weight.numpy(), np.ones((3, 2)))


def test_strict_loading_returns_empty_lists():
    model = _linear()
    got = model.load_state_dict(model.state_dict())
    assert got == nn_module.IncompatibleKeys([], [])
    assert got.missing_keys == [] == got.unexpected_keys


def test_the_keys_are_pytorchs():
    torch = pytest.importorskip("torch")
    ours, theirs = _linear(), torch.nn.Linear(2, 3)
    state = {"x.y": np.zeros(1, np.float32), "b": np.zeros(1, np.float32)}
    got = ours.load_state_dict(state, strict=False)
    want = theirs.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()},
                                  strict=False)
    assert list(got) == [list(k) for k in want]
    assert got._fields == type(want)._fields
