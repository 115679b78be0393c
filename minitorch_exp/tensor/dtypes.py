"""The six dtypes minitorch_exp supports, and NumPy's promotion rules for them.

Dtypes are plain ``numpy.dtype`` objects, so ``mt.float32 == np.float32`` holds.
Promotion is NumPy's (NEP 50): Python scalars are *weak*, so a float32 tensor
times ``0.5`` stays float32, while an int32 tensor times ``0.5`` becomes float64.

float16 is a storage dtype, as in PyTorch's CPU kernels: a float16 value takes part
in arithmetic as float32 (``arithmetic_dtype``) and is rounded to float16 once, when
it is stored; promotion still says what is stored, as ``np.result_type`` does:
float16 + float32 -> float32, float16 * 0.5 -> float16, bool + float16 -> float16,
int32 + float16 -> float64 (float16 cannot hold an int32; PyTorch says float16).
"""

from __future__ import annotations

import numpy as np

float16 = np.dtype(np.float16)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
bool_ = np.dtype(np.bool_)

SUPPORTED = (float16, float32, float64, int32, int64, bool_)
_NAMES = {"float16": float16, "half": float16, "float32": float32, "float": float32,
          "float64": float64, "double": float64,
          "int32": int32, "int": int64, "int64": int64, "long": int64, "bool": bool_}
_PYTHON_TYPES = {float: float32, int: int64, bool: bool_}


def as_dtype(dtype) -> np.dtype:
    """Normalize a dtype given as a name, a Python or NumPy type, or a ``numpy.dtype``."""
    if isinstance(dtype, str) and dtype in _NAMES:
        found = _NAMES[dtype]
    elif any(dtype is t for t in _PYTHON_TYPES):
        found = _PYTHON_TYPES[dtype]
    else:
        try:  # NumPy's spellings too: "f4", "<i8", "?", np.float64 ...
            found = np.dtype(dtype)
        except (TypeError, ValueError):
            found = None
    if found is None or found not in SUPPORTED:
        names = ", ".join(d.name for d in SUPPORTED)
        raise TypeError(f"unknown dtype {dtype!r}: expected one of {names}")
    return found


def is_name(value) -> bool:
    """Whether ``value`` is a dtype's name ``as_dtype`` takes (``"half"``, ``"float32"``):
    ``Module.to("half")`` tells it from a device's name so."""
    return isinstance(value, str) and value in _NAMES


def is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f"


def default_dtype_for(data) -> np.dtype:
    """The dtype ``tensor(data)`` picks, as PyTorch does.

    NumPy arrays keep their dtype (when supported); Python floats become
    float32, Python ints int64, bools bool.
    """
    arr = np.asarray(data)
    if arr.dtype in SUPPORTED:
        if arr.dtype == float64 and not isinstance(data, (np.ndarray, np.generic)):
            return float32
        return arr.dtype
    if arr.dtype.kind == "f":
        return float32
    if arr.dtype.kind in "iu":
        return int64
    raise TypeError(f"cannot make a tensor from data of dtype {arr.dtype}; "
                    f"supported: {', '.join(d.name for d in SUPPORTED)}")


def result_type(*operands) -> np.dtype:
    """Promote dtypes and weak Python scalars the way NumPy 2 does; stay inside SUPPORTED."""
    dtype = np.result_type(*operands)
    if dtype not in SUPPORTED:
        dtype = float64 if dtype.kind in "fc" else int64
    return dtype


def arithmetic_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype values of ``dtype`` are computed in: float16's is float32 (module
    docstring); every other dtype computes as itself."""
    return float32 if dtype == float16 else dtype


def float_result(dtype: np.dtype) -> np.dtype:
    """Dtype of a float-only op (exp, log, ...): floats stay, ints and bools become float64."""
    return dtype if dtype.kind == "f" else float64
