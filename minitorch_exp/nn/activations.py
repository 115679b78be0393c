"""More activations, functional forms and modules: SiLU, ELU, SELU, Softplus, Hardtanh,
ReLU6, Hardswish, Mish, PReLU and LogSigmoid, with PyTorch's names and defaults.

Each is a composition of registry rows (``where``, ``expm1``, ``log1p``, ``exp``,
``sigmoid``, ``tanh``), so a chain of them fuses into one kernel and its
gradient comes from the pieces'. None needed a row of its own: each piece that calls
a function (``exp``, ``log1p``...) would be called by a row as well.

Where PyTorch's formula has a branch, the branch not taken is fed a harmless value
(``_below``): ``where`` sends it a zero gradient, and a zero times an overflowed
``exp`` would be NaN. The gradient at a kink is PyTorch's (tests/nn/test_activations_more.py
compares them at the kinks).
"""

from __future__ import annotations

import numpy as np

from ..node import ops
from ..node.node import Node
from .module import Module, Parameter

#: SELU's constants (Klambauer et al. 2017), as PyTorch rounds them.
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _below(x: Node, bound: float) -> Node:
    """``x`` where ``x <= bound``, else ``bound``; the gradient passes only where kept."""
    return ops.where(x > bound, bound, x)


def silu(input: Node) -> Node:  # noqa: A002
    """``x * sigmoid(x)`` (swish)."""
    return input * ops.sigmoid(input)


def elu(input: Node, alpha: float = 1.0) -> Node:  # noqa: A002
    """``x`` where ``x > 0``, else ``alpha * (exp(x) - 1)``."""
    return ops.where(input > 0, input, _below(input, 0.0).expm1() * alpha)


def selu(input: Node) -> Node:  # noqa: A002
    """``scale * elu(x, alpha)`` with the self-normalizing constants."""
    return elu(input, SELU_ALPHA) * SELU_SCALE


def softplus(input: Node, beta: float = 1.0, threshold: float = 20.0) -> Node:  # noqa: A002
    """``log(1 + exp(beta x)) / beta``, and ``x`` itself where ``beta x > threshold``."""
    bx = input * beta if beta != 1 else input
    smooth = _below(bx, threshold).exp().log1p()
    return ops.where(bx > threshold, input, smooth / beta if beta != 1 else smooth)


def hardtanh(input: Node, min_val: float = -1.0, max_val: float = 1.0) -> Node:  # noqa: A002
    """``x`` clamped to ``[min_val, max_val]``; the gradient passes strictly inside, as
    PyTorch's (``clamp``'s passes at the bounds too)."""
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val ({min_val}) must not exceed max_val ({max_val})")
    inner = ops.where(input >= max_val, max_val, input)
    return ops.where(input <= min_val, min_val, inner)


def relu6(input: Node) -> Node:  # noqa: A002
    """``min(max(x, 0), 6)``."""
    return hardtanh(input, 0.0, 6.0)


def hardswish(input: Node) -> Node:  # noqa: A002
    """``x * relu6(x + 3) / 6`` (MobileNetV3)."""
    return input * relu6(input + 3.0) * (1.0 / 6.0)


def mish(input: Node) -> Node:  # noqa: A002
    """``x * tanh(softplus(x))`` (Misra 2019)."""
    return input * ops.tanh(softplus(input))


def logsigmoid(input: Node) -> Node:  # noqa: A002
    """``log(sigmoid(x)) = min(x, 0) - log(1 + exp(-|x|))``, finite for any ``x``
    (``-|x|`` written as a ``where``, whose gradient at 0 is PyTorch's)."""
    negative = input < 0
    return ops.where(negative, input, 0.0) - ops.where(negative, input, -input).exp().log1p()


def prelu(input: Node, weight: Node) -> Node:  # noqa: A002
    """``x`` where ``x > 0``, else ``weight * x``; a weight of C values is per channel,
    dimension 1 (an input of fewer dimensions has one channel), as PyTorch's."""
    n = weight.numel()
    if n != 1:
        if input.ndim < 2 or input.shape[1] != n:
            raise ValueError(f"prelu: {n} weights for input of shape {tuple(input.shape)}; "
                             f"the channel dimension (1) must have {n} entries")
        weight = ops.reshape(weight, (n,) + (1,) * (input.ndim - 2))
    elif weight.ndim:
        weight = ops.reshape(weight, ())
    return ops.where(input > 0, input, weight * input)


# ---- modules --------------------------------------------------------------------------

class _Activation(Module):
    """Calls ``fn`` with the module's ``options`` (attribute names) as keywords."""

    fn = staticmethod(silu)
    options: tuple[str, ...] = ()

    def forward(self, input):  # noqa: A002
        return type(self).fn(input, **{k: getattr(self, k) for k in self.options})

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={getattr(self, k)}" for k in self.options)


class _InPlaceActivation(_Activation):
    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace  # accepted, as ReLU's: the result is a new tensor


class SiLU(_InPlaceActivation):
    fn = staticmethod(silu)


class SELU(_InPlaceActivation):
    fn = staticmethod(selu)


class Hardswish(_InPlaceActivation):
    fn = staticmethod(hardswish)


class Mish(_InPlaceActivation):
    fn = staticmethod(mish)


class ReLU6(_InPlaceActivation):
    fn = staticmethod(relu6)


class LogSigmoid(_Activation):
    fn = staticmethod(logsigmoid)


class ELU(_Activation):
    fn = staticmethod(elu)
    options = ("alpha",)

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace


class Softplus(_Activation):
    fn = staticmethod(softplus)
    options = ("beta", "threshold")

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold


class Hardtanh(_Activation):
    fn = staticmethod(hardtanh)
    options = ("min_val", "max_val")

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
        super().__init__()
        if min_val > max_val:
            raise ValueError(f"Hardtanh: min_val ({min_val}) must not exceed max_val "
                             f"({max_val})")
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace


class PReLU(Module):
    """``x`` where positive, else ``weight * x``: one learnable slope, or one per channel
    (``num_parameters``), each starting at ``init``."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, dtype=np.float32):
        super().__init__()
        self.num_parameters = num_parameters
        self.weight = Parameter(np.full(num_parameters, init, dtype=dtype))

    def forward(self, input):  # noqa: A002
        return prelu(input, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"
