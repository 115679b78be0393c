"""Parameter initialisation, in place, seeded by ``mt.manual_seed`` or a ``generator``."""

from __future__ import annotations

import math

import numpy as np

from ..node.node import Node
from ..tensor.creation import default_generator
from ..tensor.tensor import from_array


def _fill(t: Node, values: np.ndarray) -> Node:
    t.value[...] = from_array(values.astype(t.dtype)).to(t.device)
    return t


def _fans(t: Node) -> tuple[int, int]:
    if t.ndim < 2:
        raise ValueError(f"fan in/out needs at least 2 dims, got shape {t.shape}")
    receptive = math.prod(t.shape[2:])
    return t.shape[1] * receptive, t.shape[0] * receptive


#: The functions whose recommended gain is 1: linear maps and the sigmoid.
_UNIT_GAIN = ("linear", "sigmoid", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
              "conv_transpose2d", "conv_transpose3d")


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    if nonlinearity in _UNIT_GAIN:
        return 1.0
    if nonlinearity == "selu":
        return 3.0 / 4
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope * slope))
    raise ValueError(f"unknown nonlinearity {nonlinearity!r}")


def uniform_(t: Node, a: float = 0.0, b: float = 1.0, generator=None) -> Node:
    rng = generator or default_generator()
    return _fill(t, rng.uniform(a, b, t.shape))


def normal_(t: Node, mean: float = 0.0, std: float = 1.0, generator=None) -> Node:
    rng = generator or default_generator()
    return _fill(t, rng.normal(mean, std, t.shape))


def constant_(t: Node, value: float) -> Node:
    t.value[...] = value
    return t


def zeros_(t: Node) -> Node:
    return constant_(t, 0.0)


def ones_(t: Node) -> Node:
    return constant_(t, 1.0)


def _fan(t: Node, mode: str) -> int:
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"mode must be 'fan_in' or 'fan_out', got {mode!r}")
    return _fans(t)[0 if mode == "fan_in" else 1]


def kaiming_uniform_(t: Node, a: float = 0.0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu", generator=None) -> Node:
    fan = _fan(t, mode)
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / fan) if fan else 0.0
    return uniform_(t, -bound, bound, generator)


def kaiming_normal_(t: Node, a: float = 0.0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu", generator=None) -> Node:
    fan = _fan(t, mode)
    std = calculate_gain(nonlinearity, a) / math.sqrt(fan) if fan else 0.0
    return normal_(t, 0.0, std, generator)


def xavier_uniform_(t: Node, gain: float = 1.0, generator=None) -> Node:
    fan_in, fan_out = _fans(t)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(t, -bound, bound, generator)


def xavier_normal_(t: Node, gain: float = 1.0, generator=None) -> Node:
    fan_in, fan_out = _fans(t)
    return normal_(t, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator)


# ---- issue 41: structured initializers --------------------------------------------------

def eye_(t: Node) -> Node:
    """The identity matrix (2-D ``t``; ones on the main diagonal of a rectangle)."""
    if t.ndim != 2:
        raise ValueError(f"eye_ needs a 2-D tensor, got shape {t.shape}")
    return _fill(t, np.eye(*t.shape))


def dirac_(t: Node, groups: int = 1) -> Node:
    """A convolution weight (3-, 4- or 5-D) that passes its input through: in each of
    ``groups`` groups, output channel ``k`` reads input channel ``k`` at the kernel's
    centre (as many as both counts allow)."""
    if t.ndim not in (3, 4, 5) or t.shape[0] % groups:
        raise ValueError(f"dirac_ needs a 3-, 4- or 5-D tensor whose first dimension "
                         f"divides into {groups} groups, got shape {t.shape}")
    out_per_group = t.shape[0] // groups
    values = np.zeros(t.shape)
    centre = tuple(k // 2 for k in t.shape[2:])
    for g in range(groups):
        for k in range(min(out_per_group, t.shape[1])):
            values[(g * out_per_group + k, k) + centre] = 1.0
    return _fill(t, values)


def orthogonal_(t: Node, gain: float = 1.0, generator=None) -> Node:
    """A (semi-)orthogonal matrix times ``gain`` (Saxe et al. 2013): ``t`` viewed as
    (rows, rest), orthonormal rows or columns, whichever are fewer; from the QR
    decomposition of a Gaussian matrix, signs fixed so it is uniformly distributed."""
    if t.ndim < 2:
        raise ValueError(f"orthogonal_ needs at least 2 dimensions, got shape {t.shape}")
    rows = t.shape[0]
    cols = t.numel() // rows if rows else 0
    rng = generator or default_generator()
    a = rng.standard_normal((rows, cols))
    q, r = np.linalg.qr(a.T if rows < cols else a)
    q = q * np.sign(np.diag(r))
    return _fill(t, gain * (q.T if rows < cols else q).reshape(t.shape))


def trunc_normal_(t: Node, mean: float = 0.0, std: float = 1.0, a: float = -2.0,
                  b: float = 2.0, generator=None) -> Node:
    """Normal(mean, std) draws conditioned on ``[a, b]`` (absolute bounds, as PyTorch's):
    values outside are drawn again."""
    mass = 0.5 * (math.erf((b - mean) / (std * math.sqrt(2))) -
                  math.erf((a - mean) / (std * math.sqrt(2))))
    if not mass > 1e-6:
        raise ValueError(f"trunc_normal_: [{a}, {b}] holds almost none of N({mean}, {std}**2)")
    rng = generator or default_generator()
    values = rng.normal(mean, std, t.shape)
    outside = (values < a) | (values > b)
    while outside.any():
        values[outside] = rng.normal(mean, std, int(outside.sum()))
        outside = (values < a) | (values > b)
    return _fill(t, values)


def sparse_(t: Node, sparsity: float, std: float = 0.01, generator=None) -> Node:
    """A 2-D weight ~ N(0, std**2) with ``ceil(sparsity * rows)`` zeros in each column,
    at random rows (Martens 2010)."""
    if t.ndim != 2:
        raise ValueError(f"sparse_ needs a 2-D tensor, got shape {t.shape}")
    rng = generator or default_generator()
    rows, cols = t.shape
    values = rng.normal(0.0, std, (rows, cols))
    zeros = math.ceil(sparsity * rows)
    for c in range(cols):
        values[rng.permutation(rows)[:zeros], c] = 0.0
    return _fill(t, values)
