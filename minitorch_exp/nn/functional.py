"""Functional forms: activations, losses, dropout, embedding (composed from fused
primitives), and the convolution, pooling and normalization functions of their modules."""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np

from ..node import ops
from ..node.function import Function
from ..node.library_ops import index_select
from ..node.masks import constant
from ..node.node import Node
from ..tensor import capture, eager
from ..tensor.creation import arange, rand
from ..tensor.engine import realize
from ..tensor.tensor import from_array
from .conv import conv1d, conv2d  # noqa: F401  (F.conv2d, as in PyTorch)
from .conv_transpose import conv_transpose1d, conv_transpose2d  # noqa: F401
from .normalization import batch_norm, group_norm, instance_norm  # noqa: F401
from .pooling import (  # noqa: F401
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    adaptive_max_pool2d,
    avg_pool1d,
    avg_pool2d,
    max_pool1d,
    max_pool2d,
)
from .resample import interpolate, pixel_shuffle, pixel_unshuffle  # noqa: F401


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


def _softmax_dim(x: Node, dim, axis, name: str) -> int:
    """``dim`` (PyTorch) or ``axis``; neither: PyTorch's old implicit choice, with its warning."""
    if dim is not None and axis is not None:
        raise TypeError(f"{name}: give dim or axis, not both")
    dim = axis if dim is None else dim
    if dim is None:
        warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the "
                      "call to include dim=X as an argument.", UserWarning, stacklevel=3)
        dim = 0 if x.ndim in (0, 1, 3) else 1
    return dim


def softmax(input: Node, dim: int | None = None, _stacklevel: int = 3, dtype=None,  # noqa: A002
            *, axis: int | None = None) -> Node:
    x = input if dtype is None else ops.astype(input, dtype)
    return ops.softmax(x, _softmax_dim(x, dim, axis, "softmax"))


def log_softmax(input: Node, dim: int | None = None, _stacklevel: int = 3,  # noqa: A002
                dtype=None, *, axis: int | None = None) -> Node:
    x = input if dtype is None else ops.astype(input, dtype)
    return ops.log_softmax(x, _softmax_dim(x, dim, axis, "log_softmax"))


def _check_p(p: float) -> None:
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {p}")


def _keep_mask(x: Node, shape, p: float, generator) -> Node:
    """Ones with probability ``1-p`` (scaled by ``1/(1-p)``), zeros otherwise, of ``shape``."""
    u = rand(shape, dtype=np.float64, device=x.device, generator=generator)
    return (u >= p).astype(x.dtype) * (1.0 / (1.0 - p))


def dropout(x: Node, p: float = 0.5, training: bool = True, inplace: bool = False,
            generator=None) -> Node:
    """Zero each element with probability ``p`` and scale the rest by ``1/(1-p)``
    (``inplace`` is accepted for PyTorch's signature; the result is always new)."""
    _check_p(p)
    if not training or p == 0.0:
        return x
    return x * _keep_mask(x, x.shape, p, generator)


def dropout2d(x: Node, p: float = 0.5, training: bool = True, inplace: bool = False,
              generator=None) -> Node:
    """Zero whole channels: each (sample, channel) of (N, C, H, W) -- or (N, C, L) -- with
    probability ``p``; the rest scaled by ``1/(1-p)``."""
    return _channel_dropout(x, p, training, generator, (3, 4), x.ndim - 2,
                            "dropout2d", "(N, C, H, W) or (N, C, L)")


def dropout1d(x: Node, p: float = 0.5, training: bool = True, inplace: bool = False,
              generator=None) -> Node:
    """Zero whole channels of (N, C, L) or (C, L): each with probability ``p``; the rest
    scaled by ``1/(1-p)``."""
    return _channel_dropout(x, p, training, generator, (2, 3), 1, "dropout1d",
                            "(N, C, L) or (C, L)")


def _channel_dropout(x: Node, p: float, training: bool, generator, ndims: tuple,
                     spatial: int, name: str, shapes: str) -> Node:
    """``x`` with whole channels zeroed: one draw per element of its leading dims, the
    last ``spatial`` dims sharing it."""
    _check_p(p)
    if x.ndim not in ndims:
        raise ValueError(f"{name}: expected input of shape {shapes}, got shape {x.shape}")
    if not training or p == 0.0:
        return x
    mask = realize(_keep_mask(x, x.shape[:x.ndim - spatial] + (1,) * spatial, p, generator))
    return x * Node(mask)


def embedding_padding_idx(padding_idx: int | None, num_embeddings: int) -> int | None:
    """``padding_idx`` checked against the table and made non-negative."""
    if padding_idx is None:
        return None
    if not -num_embeddings <= padding_idx < num_embeddings:
        raise ValueError(f"padding_idx must be within [-{num_embeddings}, {num_embeddings}), "
                         f"got {padding_idx}")
    return padding_idx % num_embeddings


class _MaskGrad(Function):
    """Identity forward; backward passes the gradient only where ``keep`` is true."""

    keyword_attributes = True
    lazy = True
    backward_on_nodes = True

    @staticmethod
    def forward(ctx, x, *, keep):
        return x

    @staticmethod
    def backward(ctx, g):
        return (g * ctx.attrs["keep"],)


def embedding(input, weight: Node, padding_idx: int | None = None,  # noqa: A002
              max_norm=None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
              sparse: bool = False) -> Node:
    """Rows of ``weight`` (num_embeddings, dim) picked by integer ``input`` of any shape;
    the row ``padding_idx`` gets no gradient. The rows are one ``index_select`` (a library
    call a captured step repeats), and the range check a host op, so a replay looks up
    and checks each new batch's indices."""
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise NotImplementedError("embedding: max_norm, scale_grad_by_freq and sparse are not "
                                  "supported")
    if len(weight.shape) != 2:
        raise ValueError(f"embedding: weight must be 2-D (num_embeddings, embedding_dim), got "
                         f"shape {tuple(weight.shape)}")
    t = input.value if isinstance(input, Node) else from_array(np.asarray(input))
    rows = weight.shape[0]
    if t.dtype.kind not in "iu":
        raise TypeError(f"embedding: indices must be integers, got {t.dtype}")
    capture.host_op(functools.partial(_check_indices, t, rows))
    index = Node(t if t.dtype in (np.int64, np.int32) else t.astype(np.int64)).to(
        weight.device)
    rows_at = Node(index.value.reshape(-1))  # integers: no gradient, so not recorded
    out = ops.reshape(index_select(weight, 0, rows_at), (*t.shape, weight.shape[1]))
    padding_idx = embedding_padding_idx(padding_idx, rows)
    if padding_idx is None:
        return out
    keep = ops.unsqueeze(ops.astype(index != padding_idx, weight.dtype), -1)
    return _MaskGrad.apply(out, keep=realize(keep.value))


def _check_indices(t, rows: int) -> None:
    idx = t.numpy(writable=False)
    if idx.size and (idx.min() < 0 or idx.max() >= rows):
        raise IndexError(f"embedding: indices must be in [0, {rows}), got range "
                         f"[{idx.min()}, {idx.max()}]")


def _targets(target, n_classes: int, device):
    """Integer class targets as a Tensor on ``device``, range-checked by a host op: a
    captured step's replays check each new batch too, before its backward runs."""
    t = target.value if isinstance(target, Node) else from_array(np.asarray(target))
    if t.dtype.kind not in "iu":
        raise TypeError(f"class targets must be integers, got {t.dtype}")
    capture.host_op(functools.partial(_check_targets, t, n_classes))
    return t.to(device)


def _check_targets(t, n_classes: int) -> None:
    values = t.numpy(writable=False)
    if values.size and (values.min() < 0 or values.max() >= n_classes):
        raise ValueError(f"class targets must be in [0, {n_classes}), got range "
                         f"[{values.min()}, {values.max()}]")


def _one_hot(target, n_classes: int, dtype, device, smoothing: float = 0.0):
    """The (smoothed) one-hot rows of ``target``, as a lazy expression.

    A compare against ``arange(n_classes)`` rather than host-side indexing: it
    fuses into the loss kernels, and a captured step recomputes it for each new
    batch.
    """
    t = _targets(target, n_classes, device)
    if eager.now((t.shape[0], n_classes), device):  # small: made now, as the ops would be
        q = (t.numpy(writable=False).reshape(-1, 1) == np.arange(n_classes)).astype(dtype)
        return eager.wrap(q * (1.0 - smoothing) + smoothing / n_classes if smoothing else q)
    rows = t.reshape(t.shape[0], 1)
    classes = arange(n_classes, dtype=np.int64, device=device).reshape(1, n_classes)
    q = (rows == classes).astype(dtype)
    if smoothing:
        q = q * (1.0 - smoothing) + smoothing / n_classes
    return q


def one_hot(tensor, num_classes: int = -1) -> Node:
    """PyTorch's ``F.one_hot``: int64 of shape ``(*tensor.shape, num_classes)``, 1 at each
    value's class. ``tensor`` holds int64 classes in ``[0, num_classes)``; -1: the largest
    value plus one (a read of the values). A compare against a broadcast arange, lazy, so
    it fuses into what reads it."""
    t = tensor.value if isinstance(tensor, Node) else from_array(np.asarray(tensor))
    if t.dtype != np.int64:
        raise TypeError(f"one_hot: the classes must be int64 (a LongTensor), got {t.dtype}")
    if num_classes == -1:
        if not t.numel():
            raise ValueError("one_hot: cannot infer num_classes from an empty tensor; pass it")
        num_classes = int(t.numpy(writable=False).max()) + 1
    t = _targets(t, num_classes, t.device)
    classes = arange(num_classes, dtype=np.int64, device=t.device)
    return constant((t.reshape(*t.shape, 1) == classes).astype(np.int64))


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


def cross_entropy(input: Node, target, weight=None, *, ignore_index: int = -100,  # noqa: A002
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Node:
    """Softmax cross-entropy from logits and integer class targets, as PyTorch's: input
    (N, C) or (N, C, d1, ...) with target (N,) or (N, d1, ...); ``weight`` (C,) scales
    each class, ``ignore_index`` targets count for nothing, and 'mean' divides by the
    summed weights of the targets counted. The arguments after ``weight`` are keywords.

    ``loss_i = log(sum_j exp(c_ij)) - sum_j q_ij c_ij`` with ``c = z - max(z)``
    and ``q`` the (smoothed) one-hot target. Shifting by the max first keeps it
    stable and exact for any logits (``logsumexp(z) - z_t`` would cancel
    catastrophically when both are ~1000); the gradient ``softmax(z) - q``
    comes out as one fused expression.
    """
    logits, target, shape = _class_rows(input, target)
    _check_logits(logits, target, "cross_entropy")
    if weight is None and not _any_ignored(target, ignore_index):  # one fused Function
        q = _one_hot(target, logits.shape[1], logits.dtype, logits.device, label_smoothing)
        loss = ops.softmax_cross_entropy(logits, q)
    else:
        loss = _weighted_cross_entropy(logits, target, weight, ignore_index, label_smoothing,
                                       reduction)
        if reduction == "mean":
            return loss
    return _reduce(ops.reshape(loss, shape) if reduction == "none" else loss, reduction)


def _any_ignored(target, ignore_index: int) -> bool:
    """Whether a target is ``ignore_index``, read on the host -- except while a step is
    captured, where no value may be read: there the range check of each replay refuses
    an ignored target (pass ``weight=`` to take the path that counts them)."""
    if capture.is_recording():
        return False
    t = target.numpy(writable=False) if isinstance(target, Node) else np.asarray(target)
    return bool((t == ignore_index).any())


def _class_rows(input: Node, target):  # noqa: A002
    """(N, C, d1, ...) logits as rows (N*d1*..., C) with their targets flattened, and the
    per-sample shape (N, d1, ...) a 'none' reduction gives back."""
    if input.ndim <= 2:
        return input, target, tuple(np.shape(target))
    n_classes = input.shape[1]
    rows = ops.reshape(ops.permute(input, 0, *range(2, input.ndim), 1), (-1, n_classes))
    shape = (input.shape[0], *input.shape[2:])
    flat = ops.reshape(target, -1) if isinstance(target, Node) else np.reshape(target, -1)
    if tuple(np.shape(target)) != shape:
        raise ValueError(f"cross_entropy: input of shape {input.shape} needs a target of "
                         f"shape {shape}, got {tuple(np.shape(target))}")
    return rows, flat, shape


def _weighted_cross_entropy(logits: Node, target, weight, ignore_index: int,
                            smoothing: float, reduction: str) -> Node:
    """Per-row ``-sum_j q_ij w_j log softmax(z)_ij`` for counted rows, 0 for ignored ones
    (PyTorch's formula, label smoothing included); with 'mean', the sum over the summed
    ``w[t_i]`` of the counted rows. Tensor ops only: nothing is read on the host."""
    n_classes, dtype, device = logits.shape[1], logits.dtype, logits.device
    t = Node(target.value if isinstance(target, Node) else from_array(np.asarray(target)))
    counted = ops.unsqueeze(ops.astype(t.to(device) != ignore_index, dtype), 1)
    safe = ops.where(t != ignore_index, t, 0)
    w = Node(from_array(np.ones(n_classes, dtype))).to(device) if weight is None \
        else ops.astype(weight, dtype)
    hot = Node(_one_hot(safe, n_classes, dtype, device)) * counted
    q = hot * (1.0 - smoothing) + counted * (smoothing / n_classes) if smoothing else hot
    loss = -ops.sum(_target_terms(ops.log_softmax(logits, 1), q * w), 1)
    if reduction == "mean":
        return ops.sum(loss) / ops.sum(hot * w)
    return loss


def nll_loss(log_probs: Node, target, reduction: str = "mean") -> Node:
    """Negative log-likelihood of integer targets given log-probabilities."""
    _check_logits(log_probs, target, "nll_loss")
    q = _one_hot(target, log_probs.shape[1], log_probs.dtype, log_probs.device)
    return _reduce(-ops.sum(_target_terms(log_probs, q), 1), reduction)


def _target_terms(log_probs: Node, q) -> Node:
    """``log_probs * q`` with a class ``q`` gives no weight counted as 0: a masked class's
    -inf log-probability then costs nothing, as PyTorch's gather of the target's does
    (``0 * -inf`` would be nan), and gets no gradient."""
    return ops.where(q != 0, log_probs * q, 0.0)


def mse_loss(input: Node, target, reduction: str = "mean") -> Node:  # noqa: A002
    if not isinstance(target, Node):
        target = Node(from_array(np.asarray(target, dtype=input.dtype, order="C"))).to(input.device)
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



# ---- more of PyTorch's losses (issue 21) ------------------------------------------------

def _target_like(input: Node, target, name: str) -> Node:
    """``target`` as a Node of ``input``'s shape (an array or number is converted)."""
    if not isinstance(target, Node):
        target = Node(from_array(np.array(target, dtype=input.dtype))).to(input.device)
    if tuple(input.shape) != tuple(target.shape):
        raise ValueError(f"{name}: input shape {tuple(input.shape)} != target shape "
                         f"{tuple(target.shape)} (no broadcasting here, as in PyTorch)")
    return target


def _weighted(loss: Node, weight, reduction: str) -> Node:
    return _reduce(loss if weight is None else loss * weight, reduction)


def l1_loss(input: Node, target, *, reduction: str = "mean") -> Node:  # noqa: A002
    """Mean (or sum) absolute error."""
    return _reduce(abs(input - _target_like(input, target, "l1_loss")), reduction)


def smooth_l1_loss(input: Node, target, *, reduction: str = "mean",  # noqa: A002
                   beta: float = 1.0) -> Node:
    """Huber-like: ``0.5 d**2 / beta`` where ``|d| < beta``, else ``|d| - 0.5 beta``
    (``d = input - target``; ``beta = 0``: the absolute error)."""
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be >= 0, got {beta}")
    d = input - _target_like(input, target, "smooth_l1_loss")
    a = abs(d)
    loss = a if beta == 0 else ops.where(a < beta, d * d * (0.5 / beta), a - 0.5 * beta)
    return _reduce(loss, reduction)


def binary_cross_entropy_with_logits(input: Node, target, weight=None, *,  # noqa: A002
                                     reduction: str = "mean", pos_weight=None) -> Node:
    """Binary cross-entropy of ``sigmoid(input)`` against ``target`` in [0, 1], computed
    from the logits stably, as PyTorch's: with ``p = pos_weight`` (1 by default),
    ``(1 - y) x + (1 + (p - 1) y) (log(1 + exp(-|x|)) + max(-x, 0))``."""
    y = _target_like(input, target, "binary_cross_entropy_with_logits")
    log_1pe = ops.log(ops.exp(-abs(input)) + 1.0) + ops.relu(-input)  # log(1 + exp(-x))
    scale = 1.0 if pos_weight is None else (pos_weight - 1.0) * y + 1.0
    return _weighted((1.0 - y) * input + scale * log_1pe, weight, reduction)


def binary_cross_entropy(input: Node, target, weight=None, *,  # noqa: A002
                         reduction: str = "mean") -> Node:
    """Binary cross-entropy of probabilities ``input`` against ``target``; each log is
    clamped at -100, as in PyTorch, so a probability of 0 or 1 gives a finite loss."""
    y = _target_like(input, target, "binary_cross_entropy")
    log_p = ops.maximum(ops.log(input), -100.0)
    log_q = ops.maximum(ops.log(1.0 - input), -100.0)
    return _weighted(-(y * log_p + (1.0 - y) * log_q), weight, reduction)


from .activations import (  # noqa: E402,F401  (issue 41)
    elu,
    hardswish,
    hardtanh,
    logsigmoid,
    mish,
    prelu,
    relu6,
    selu,
    silu,
    softplus,
)
from .attention import scaled_dot_product_attention  # noqa: E402,F401  (needs the above)
from .loss_functions import (  # noqa: E402,F401  (needs _reduce above)
    cosine_embedding_loss,
    huber_loss,
    kl_div,
    margin_ranking_loss,
    pairwise_distance,
    triplet_margin_loss,
)
from .padding import pad  # noqa: E402,F401
