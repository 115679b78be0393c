"""Batch normalization, composed from reductions and elementwise ops.

Training: each channel is normalized by the batch's mean and (biased) variance
over every axis but the channel axis, ``y = (x - mean) / sqrt(var + eps) * w + b``;
the running statistics move toward the batch's, with the *unbiased* variance, as
PyTorch does: ``r = (1 - momentum) * r + momentum * batch``. Evaluation uses the
running statistics instead. The gradient comes from the ops it is made of.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from ..node import ops
from ..node.grad_mode import no_grad
from ..node.node import Node
from .im2col import window_count
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
        y, mean, var = _normalize(x, axes, eps)
        with no_grad():
            if running_mean is not None:
                _update(running_mean, mean, momentum)
            if running_var is not None:
                _update(running_var, var * (count / (count - 1)), momentum)
    else:
        y = _by_running_stats(x, running_mean, running_var, eps, stat_shape,
                              "batch_norm: evaluation (training=False)")
    return _affine(y, weight, bias, stat_shape)


def _by_running_stats(x: Node, running_mean, running_var, eps: float, stat_shape: tuple,
                      who: str) -> Node:
    """``x`` normalized by running statistics (evaluation), which ``who`` needs."""
    if running_mean is None or running_var is None:
        raise ValueError(f"{who} needs running_mean and running_var")
    return (x - ops.reshape(running_mean, stat_shape)) / ops.sqrt(
        ops.reshape(running_var, stat_shape) + eps)


def _normalize(x: Node, axes: tuple[int, ...], eps: float) -> tuple[Node, Node, Node]:
    """``(x - mean) / sqrt(var + eps)`` over ``axes`` (biased variance), with the mean and
    variance (kept dims): the statistics step every normalization shares."""
    mean = ops.mean(x, axes, True)
    centered = x - mean
    var = ops.mean(centered * centered, axes, True)
    return centered / ops.sqrt(var + eps), mean, var


def _affine(y: Node, weight, bias, shape) -> Node:
    """``y * weight + bias`` with each (when given) reshaped to ``shape``."""
    if weight is not None:
        y = y * ops.reshape(weight, shape)
    if bias is not None:
        y = y + ops.reshape(bias, shape)
    return y


def group_norm(input: Node, num_groups: int, weight: Node | None = None,  # noqa: A002
               bias: Node | None = None, eps: float = 1e-5) -> Node:
    """PyTorch's ``F.group_norm``: (N, C, *) normalized over each group of ``C/num_groups``
    channels and all positions, then scaled and shifted per channel."""
    x = ops.as_node(input)
    if x.ndim < 2 or x.shape[1] % num_groups:
        raise ValueError(f"group_norm: expected input (N, C, *) with C divisible by "
                         f"num_groups={num_groups}, got shape {x.shape}")
    grouped = ops.reshape(x, x.shape[0], num_groups, -1)
    y = ops.reshape(_normalize(grouped, (2,), eps)[0], x.shape)
    return _affine(y, weight, bias, (1, x.shape[1]) + (1,) * (x.ndim - 2))


def instance_norm(input: Node, running_mean: Node | None = None,  # noqa: A002
                  running_var: Node | None = None, weight: Node | None = None,
                  bias: Node | None = None, use_input_stats: bool = True, momentum=0.1,
                  eps: float = 1e-5) -> Node:
    """PyTorch's ``F.instance_norm``: each (sample, channel) of (N, C, *) normalized over
    its positions. Running statistics, when given, move toward the batch's average of
    the instances' mean and unbiased variance; ``use_input_stats=False`` normalizes by them."""
    x = ops.as_node(input)
    stat_shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    if not use_input_stats:
        y = _by_running_stats(x, running_mean, running_var, eps, stat_shape,
                              "instance_norm: use_input_stats=False")
        return _affine(y, weight, bias, stat_shape)
    count = math.prod(x.shape[2:])
    if count <= 1:
        raise ValueError(f"instance_norm: expected more than 1 spatial element when "
                         f"training, got input of shape {x.shape}")
    y, mean, var = _normalize(x, tuple(range(2, x.ndim)), eps)
    with no_grad():
        if running_mean is not None:
            _update(running_mean, ops.mean(mean, 0), momentum)
        if running_var is not None:
            _update(running_var, ops.mean(var, 0) * (count / (count - 1)), momentum)
    return _affine(y, weight, bias, stat_shape)


class GroupNorm(Module):
    """``nn.GroupNorm(num_groups, num_channels, eps, affine)``: weight and bias per channel."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True, dtype=np.float32):
        super().__init__()
        num_groups = window_count(num_groups, "num_groups", where="GroupNorm")
        if num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels={num_channels} must be divisible by "
                             f"num_groups={num_groups}")
        self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
        self.affine = affine
        self.weight = Parameter(np.ones(num_channels, dtype)) if affine else None
        self.bias = Parameter(np.zeros(num_channels, dtype)) if affine else None

    def forward(self, x):
        return group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


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


class _InstanceNorm(_BatchNorm):
    """PyTorch's ``_InstanceNorm``: ``_BatchNorm``'s parameters and buffers with other
    defaults (``affine=False``, ``track_running_stats=False``); statistics per instance."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = False, track_running_stats: bool = False, dtype=np.float32):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, dtype)

    def forward(self, x):
        x = ops.as_node(x)
        name, dims = type(self).__name__, self.ndims[0]
        if x.ndim not in (dims - 1, dims):
            shape = "(N, C, L) or (C, L)" if dims == 3 else "(N, C, H, W) or (C, H, W)"
            raise ValueError(f"{name}: expected input of shape {shape}, got shape {x.shape}")
        if x.ndim < dims:  # unbatched (C, *): a batch of one
            return ops.squeeze(self.forward(ops.unsqueeze(x, 0)), 0)
        if x.shape[1] != self.num_features:
            if self.affine:
                raise ValueError(f"{name}: expected input with {self.num_features} channels "
                                 f"(num_features), got shape {x.shape} with {x.shape[1]}")
            warnings.warn(f"{name}: input has {x.shape[1]} channels but num_features is "
                          f"{self.num_features}; num_features is not used without affine",
                          UserWarning, stacklevel=2)
        # as PyTorch: num_batches_tracked stays, and momentum=None moves nothing
        use_input_stats = self.training or not self.track_running_stats
        return instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                             use_input_stats, self.momentum or 0.0, self.eps)


class InstanceNorm1d(_InstanceNorm):
    """Over (N, C, L) or (C, L): statistics per (sample, channel)."""

    ndims = (3,)


class InstanceNorm2d(_InstanceNorm):
    """Over (N, C, H, W) or (C, H, W): statistics per (sample, channel)."""

    ndims = (4,)
