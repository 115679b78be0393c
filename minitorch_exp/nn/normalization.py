"""Batch normalization, composed from reductions and elementwise ops.

Training: each channel is normalized by the batch's mean and (biased) variance
over every axis but the channel axis, ``y = (x - mean) / sqrt(var + eps) * w + b``;
the running statistics move toward the batch's, with the *unbiased* variance, as
PyTorch does: ``r = (1 - momentum) * r + momentum * batch``. Evaluation uses the
running statistics instead. The gradient comes from the ops it is made of.
"""

from __future__ import annotations

import numpy as np

from ..node import ops
from ..node.grad_mode import no_grad
from ..node.node import Node
from .module import Module, Parameter


def _check_channels(name: str, x: Node, channels: int | None, ndims: tuple[int, ...]) -> None:
    if x.ndim not in ndims:
        shapes = " or ".join({2: "(N, C)", 3: "(N, C, L)", 4: "(N, C, H, W)"}[n] for n in ndims)
        raise ValueError(f"{name}: expected input of shape {shapes}, got shape {x.shape}")
    if channels is not None and x.shape[1] != channels:
        raise ValueError(f"{name}: expected input with {channels} channels (num_features), "
                         f"got shape {x.shape} with {x.shape[1]}")


def _update(running: Node, batch: Node, momentum) -> None:
    """``running = (1 - momentum) * running + momentum * batch``, in place (one pass)."""
    r = running.value
    r[...] = r + (batch.value.reshape(r.shape) - r) * momentum


def batch_norm(input: Node, running_mean: Node | None, running_var: Node | None,  # noqa: A002
               weight: Node | None = None, bias: Node | None = None, training: bool = False,
               momentum=0.1, eps: float = 1e-5) -> Node:
    """PyTorch's ``F.batch_norm`` over axis 1 of (N, C, ...); with ``training`` the batch's
    statistics normalize and update the running ones (``momentum`` may be a 0-d tensor)."""
    x = ops.as_node(input)
    axes = (0, *range(2, x.ndim))
    stat_shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    if training:
        count = x.numel() // x.shape[1]
        if count <= 1:
            raise ValueError(f"batch_norm: expected more than 1 value per channel when "
                             f"training, got input of shape {x.shape}")
        mean = x.mean(axes, True)
        centered = x - mean
        var = (centered * centered).mean(axes, True)
        with no_grad():
            if running_mean is not None:
                _update(running_mean, mean, momentum)
            if running_var is not None:
                _update(running_var, var * (count / (count - 1)), momentum)
    else:
        if running_mean is None or running_var is None:
            raise ValueError("batch_norm: evaluation (training=False) needs running_mean and "
                             "running_var")
        centered = x - ops.reshape(running_mean, stat_shape)
        var = ops.reshape(running_var, stat_shape)
    y = centered / ops.sqrt(var + eps)
    if weight is not None:
        y = y * ops.reshape(weight, stat_shape)
    if bias is not None:
        y = y + ops.reshape(bias, stat_shape)
    return y


class _BatchNorm(Module):
    ndims: tuple[int, ...] = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, dtype=np.float32):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.weight = Parameter(np.ones(num_features, dtype)) if affine else None
        self.bias = Parameter(np.zeros(num_features, dtype)) if affine else None
        tracked = track_running_stats
        self.register_buffer("running_mean", np.zeros(num_features, dtype) if tracked else None)
        self.register_buffer("running_var", np.ones(num_features, dtype) if tracked else None)
        self.register_buffer("num_batches_tracked", np.array(0, np.int64) if tracked else None)

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            self.running_mean.value[...] = 0.0
            self.running_var.value[...] = 1.0
            self.num_batches_tracked.value[...] = 0

    def _momentum(self):
        """The weight of this batch in the running statistics: ``momentum``, or with
        ``momentum=None`` a cumulative average (1 / batches seen, a 0-d expression read
        by the update's kernel, so a captured step stays right)."""
        counter = self.num_batches_tracked.value
        counter[...] = counter + 1
        return self.momentum if self.momentum is not None else 1.0 / counter

    def forward(self, x):
        x = ops.as_node(x)
        _check_channels(type(self).__name__, x, self.num_features, self.ndims)
        tracking = self.training and self.track_running_stats
        momentum = self._momentum() if tracking else 0.0
        use_batch = self.training or self.running_mean is None
        keep = not self.training or self.track_running_stats
        return batch_norm(x, self.running_mean if keep else None,
                          self.running_var if keep else None, self.weight, self.bias,
                          use_batch, momentum, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Over (N, C) or (N, C, L): statistics per channel ``C``."""

    ndims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Over (N, C, H, W): statistics per channel ``C``."""

    ndims = (4,)
