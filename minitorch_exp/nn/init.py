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


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    if nonlinearity in ("linear", "sigmoid"):
        return 1.0
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
