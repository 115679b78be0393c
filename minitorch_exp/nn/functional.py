"""Functional forms of activations and losses, composed from fused primitives."""

from __future__ import annotations

import math

import numpy as np

from ..node import ops
from ..node.node import Node
from ..tensor import capture
from ..tensor.creation import arange, rand
from ..tensor.expr import where
from ..tensor.tensor import from_array


def relu(x: Node) -> Node:
    return ops.relu(x)


def tanh(x: Node) -> Node:
    return ops.tanh(x)


def sigmoid(x: Node) -> Node:
    return ops.sigmoid(x)


def leaky_relu(x: Node, negative_slope: float = 0.01) -> Node:
    return ops.where(x > 0, x, x * negative_slope)


def gelu(x: Node, approximate: str = "none") -> Node:
    """``x * Phi(x)``; ``approximate='tanh'`` uses the tanh formula, as PyTorch does."""
    if approximate == "tanh":
        inner = (x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)
        return x * 0.5 * (ops.tanh(inner) + 1.0)
    if approximate != "none":
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return x * 0.5 * (ops.op("erf", x * (1.0 / math.sqrt(2.0))) + 1.0)


softmax = ops.softmax
log_softmax = ops.log_softmax


def dropout(x: Node, p: float = 0.5, training: bool = True, generator=None) -> Node:
    """Zero each element with probability ``p`` and scale the rest by ``1/(1-p)``."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {p}")
    if not training or p == 0.0:
        return x
    u = rand(x.shape, dtype=np.float64, device=x.device, generator=generator)
    return x * ((u >= p).astype(x.dtype) * (1.0 / (1.0 - p)))


def _targets(target, n_classes: int, device):
    """Integer class targets as a Tensor on ``device``, range-checked unless capturing."""
    t = target.value if isinstance(target, Node) else from_array(np.asarray(target))
    if t.dtype.kind not in "iu":
        raise TypeError(f"class targets must be integers, got {t.dtype}")
    if not capture.is_recording():  # a captured step cannot read them: see _one_hot
        values = t.numpy(writable=False)
        if values.size and (values.min() < 0 or values.max() >= n_classes):
            raise ValueError(f"class targets must be in [0, {n_classes}), got range "
                             f"[{values.min()}, {values.max()}]")
    return t.to(device)


def _one_hot(target, n_classes: int, dtype, device, smoothing: float = 0.0):
    """The (smoothed) one-hot rows of ``target``, as a lazy expression.

    A compare against ``arange(n_classes)`` rather than host-side indexing: it
    fuses into the loss kernels, and a captured step recomputes it for each new
    batch. A captured step cannot range-check targets on the host, so there an
    out-of-range target turns its row of ``q``, and with it the loss, into NaN.
    """
    t = _targets(target, n_classes, device)
    rows = t.reshape(t.shape[0], 1)
    classes = arange(n_classes, dtype=np.int64, device=device).reshape(1, n_classes)
    q = (rows == classes).astype(dtype)
    if smoothing:
        q = q * (1.0 - smoothing) + smoothing / n_classes
    if capture.is_recording():
        q = where((rows >= 0) & (rows < n_classes), q, float("nan"))
    return q


def _reduce(loss: Node, reduction: str) -> Node:
    if reduction == "mean":
        return ops.mean(loss)
    if reduction == "sum":
        return ops.sum(loss)
    if reduction == "none":
        return loss
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _check_logits(logits: Node, target, name: str) -> None:
    shape = tuple(target.shape) if isinstance(target, Node) else np.shape(target)
    if logits.ndim != 2 or shape != (logits.shape[0],):
        raise ValueError(f"{name}: expected input of shape (N, C) and target of shape (N,), "
                         f"got {logits.shape} and {shape}")


def cross_entropy(logits: Node, target, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Node:
    """Softmax cross-entropy from logits and integer class targets.

    ``loss_i = log(sum_j exp(c_ij)) - sum_j q_ij c_ij`` with ``c = z - max(z)``
    and ``q`` the (smoothed) one-hot target. Shifting by the max first keeps it
    stable and exact for any logits (``logsumexp(z) - z_t`` would cancel
    catastrophically when both are ~1000); the gradient ``softmax(z) - q``
    comes out as one fused expression.
    """
    _check_logits(logits, target, "cross_entropy")
    q = _one_hot(target, logits.shape[1], logits.dtype, logits.device, label_smoothing)
    return _reduce(ops.softmax_cross_entropy(logits, q), reduction)


def nll_loss(log_probs: Node, target, reduction: str = "mean") -> Node:
    """Negative log-likelihood of integer targets given log-probabilities."""
    _check_logits(log_probs, target, "nll_loss")
    q = _one_hot(target, log_probs.shape[1], log_probs.dtype, log_probs.device)
    return _reduce(-ops.sum(log_probs * q, 1), reduction)


def mse_loss(input: Node, target, reduction: str = "mean") -> Node:  # noqa: A002
    if not isinstance(target, Node):
        target = Node(from_array(np.ascontiguousarray(target, dtype=input.dtype))).to(input.device)
    if tuple(input.shape) != tuple(target.shape):
        raise ValueError(f"mse_loss: input shape {input.shape} != target shape {target.shape}")
    d = input - target
    return _reduce(d * d, reduction)


linear = ops.linear


def layer_norm(x: Node, normalized_shape, weight=None, bias=None, eps: float = 1e-5) -> Node:
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    mu = ops.mean(x, axes, keepdims=True)
    xc = x - mu
    var = ops.mean(xc * xc, axes, keepdims=True)
    y = xc / ops.sqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y
