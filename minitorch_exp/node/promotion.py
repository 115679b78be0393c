"""PyTorch's type promotion, for the Node level (the Tensor level keeps NumPy's).

The two differ where categories mix. PyTorch looks at the *category* first --
bool < integer < float -- and lets an operand widen the result only within the
category it decides:

* tensors with dimensions decide: the highest category among them, and the
  widest dtype of that category (``float32`` with ``int64`` gives ``float32``;
  NumPy gives ``float64``);
* 0-d tensors, then Python numbers, count only when they raise the category:
  a 0-d tensor then gives its own dtype, a Python float the default float
  dtype (``float32``), a Python int ``int64`` (``int64`` tensor times ``0.5``
  gives ``float32``; NumPy gives ``float64``). NumPy scalars count as Python
  numbers, as in PyTorch;
* an op whose result is always float (``/``, ``exp``, ``sqrt``...) on integers
  gives the default float dtype (NumPy: ``float64``).

``cast_operands`` applies this to an elementwise op by converting the operands
that need it (``astype``, which fuses), so the Tensor level computes the
PyTorch dtype with its own rules. tests/compat/test_promotion.py checks each
case against PyTorch.
"""

from __future__ import annotations

import numpy as np

from ..tensor import dtypes

#: The float dtype that integer results of float ops, and Python floats, become.
DEFAULT_FLOAT = dtypes.float32
_CATEGORY = {"b": 0, "i": 1, "u": 1, "f": 2}
_SCALAR_DTYPE = {0: dtypes.bool_, 1: dtypes.int64, 2: DEFAULT_FLOAT}


def _category(dtype: np.dtype) -> int:
    return _CATEGORY[dtype.kind]


def _widest(dtype_list: list) -> np.dtype:
    """The widest dtype of the highest category among ``dtype_list``."""
    top = max(_category(d) for d in dtype_list)
    return dtypes.result_type(*(d for d in dtype_list if _category(d) == top))


def _scalar_category(x) -> int:
    return 0 if isinstance(x, (bool, np.bool_)) else 1 if isinstance(x, (int, np.integer)) else 2


def result_dtype(operands) -> np.dtype:
    """The dtype PyTorch gives an op over ``operands``: tensors (anything with ``dtype``
    and ``shape``: Nodes, expressions, arrays) and Python or NumPy numbers."""
    shaped, zero_d, numbers = [], [], []
    for x in operands:
        if isinstance(x, np.generic) or not hasattr(x, "dtype"):
            numbers.append(_scalar_category(x))
        else:
            (shaped if len(x.shape) else zero_d).append(np.dtype(x.dtype))
    result = _widest(shaped) if shaped else None
    if zero_d and (result is None or _category(_widest(zero_d)) > _category(result)):
        result = _widest(zero_d)
    if numbers and (result is None or max(numbers) > _category(result)):
        result = _SCALAR_DTYPE[max(numbers)]
    if result is None:
        raise TypeError("result_dtype needs at least one operand")
    return result


def cast_operands(op, args: tuple, astype) -> tuple:
    """``args`` of the registry op ``op``, converted (``astype(x, dtype)``) when NumPy's
    promotion would give another dtype than PyTorch's; NumPy scalars become Python
    numbers (NumPy 2 treats them as typed, PyTorch as Python numbers)."""
    args = tuple(x.item() if isinstance(x, np.generic) else x for x in args)
    if op.result == "bool":  # comparisons: a bool either way
        return args
    first = 1 if op.result == "where" else 0  # where's condition takes no part
    target = result_dtype(args[first:])
    if op.result == "float" and target.kind != "f":
        target = DEFAULT_FLOAT
    if op.result_dtype([getattr(x, "dtype", x) for x in args]) == target:
        return args
    return args[:first] + tuple(x if getattr(x, "dtype", target) == target else astype(x, target)
                                for x in args[first:])
