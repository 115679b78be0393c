"""Functional forms of the distribution, robust and embedding losses: ``kl_div``,
``huber_loss``, ``margin_ranking_loss``, ``cosine_embedding_loss``,
``triplet_margin_loss`` (with ``pairwise_distance``), as PyTorch's.

Each is a composition of elementwise rows and reductions, so it fuses and
differentiates for free (for the target too, where PyTorch's does), and ends in
``nn.functional``'s one ``reduction`` rule (``_reduce``). As in the other losses here, the
deprecated ``size_average`` and ``reduce`` are left out and the options are keywords.
"""

from __future__ import annotations

import numpy as np

from ..node import ops
from ..node.node import Node
from ..tensor.tensor import from_array
from .functional import _reduce, _target_like, smooth_l1_loss

#: The cosine embedding loss's guard against a zero vector, as PyTorch's.
COSINE_EPS = 1e-12


def _as_node(x, like: Node) -> Node:
    """``x`` (a Node, an array or a number) as a Node of ``like``'s dtype and device."""
    if isinstance(x, Node):
        return x
    return Node(from_array(np.array(x, dtype=like.dtype))).to(like.device)


def kl_div(input: Node, target, *, reduction: str = "mean",  # noqa: A002
           log_target: bool = False) -> Node:
    """``target * (log(target) - input)`` pointwise, ``input`` being log-probabilities;
    a zero target counts 0. ``log_target``: the target is given as log-probabilities,
    ``exp(target) * (target - input)``. ``reduction='batchmean'`` divides the sum by
    the batch size (the first dimension): the KL divergence's true value per sample."""
    target = _target_like(input, target, "kl_div")
    if log_target:
        loss = target.exp() * (target - input)
    else:
        positive = target > 0
        log_t = ops.where(positive, target, 1.0).log()  # log(1) = 0 where the target is 0
        loss = ops.where(positive, target * (log_t - input), 0.0)
    if reduction == "batchmean":
        return ops.sum(loss) / (input.shape[0] if input.ndim else 1)
    return _reduce(loss, reduction)


def huber_loss(input: Node, target, *, reduction: str = "mean",  # noqa: A002
               delta: float = 1.0) -> Node:
    """``0.5 d**2`` where ``|d| < delta``, else ``delta (|d| - 0.5 delta)``: ``delta``
    times the smooth L1 loss of ``beta = delta``."""
    if not delta > 0:
        raise ValueError(f"huber_loss: delta must be positive, got {delta}")
    loss = smooth_l1_loss(input, target, reduction="none", beta=delta)
    return _reduce(loss * delta if delta != 1 else loss, reduction)


def margin_ranking_loss(input1: Node, input2: Node, target, *, margin: float = 0.0,
                        reduction: str = "mean") -> Node:
    """``max(0, -y (x1 - x2) + margin)``: ``y = 1`` asks for ``x1`` ranked above ``x2``,
    ``y = -1`` for the opposite."""
    y = _as_node(target, input1)
    return _reduce(ops.relu(-y * (input1 - input2) + margin), reduction)


def cosine_embedding_loss(input1: Node, input2: Node, target, *, margin: float = 0.0,
                          reduction: str = "mean") -> Node:
    """``1 - cos(x1, x2)`` for ``y = 1``, ``max(0, cos(x1, x2) - margin)`` for ``y = -1``
    (any other target counts 0); the cosine over the last dimension of (N, D) or (D,)."""
    y = _as_node(target, input1)
    dim = input1.ndim - 1
    norms = (ops.sum(input1 * input1, dim) + COSINE_EPS) * (ops.sum(input2 * input2, dim) +
                                                             COSINE_EPS)
    cos = ops.sum(input1 * input2, dim) / ops.sqrt(norms)
    loss = ops.where(y == 1, 1.0 - cos, 0.0) + ops.where(y == -1, ops.relu(cos - margin), 0.0)
    return _reduce(loss, reduction)


def pairwise_distance(x1: Node, x2: Node, p: float = 2.0, eps: float = 1e-6,
                      keepdim: bool = False) -> Node:
    """``||x1 - x2 + eps||_p`` over the last dimension (``eps`` keeps the gradient of a
    zero difference finite)."""
    d = x1 - x2 + eps
    dim = max(d.ndim - 1, 0)
    if p == 2:
        return ops.sqrt(ops.sum(d * d, dim, keepdims=keepdim))
    if p == 1:
        return ops.sum(abs(d), dim, keepdims=keepdim)
    if not p > 0:
        raise ValueError(f"pairwise_distance: p must be positive, got {p}")
    return ops.sum(abs(d) ** p, dim, keepdims=keepdim) ** (1.0 / p)


def triplet_margin_loss(anchor: Node, positive: Node, negative: Node, *,
                        margin: float = 1.0, p: float = 2.0, eps: float = 1e-6,
                        swap: bool = False, reduction: str = "mean") -> Node:
    """``max(0, d(a, p) - d(a, n) + margin)`` with ``d`` the ``p``-norm distance;
    ``swap`` takes ``d(p, n)`` instead of ``d(a, n)`` where smaller (Balntas et al. 2016)."""
    if not anchor.ndim == positive.ndim == negative.ndim:
        raise ValueError(f"triplet_margin_loss: anchor, positive and negative must have the "
                         f"same number of dimensions, got {anchor.ndim}, {positive.ndim} "
                         f"and {negative.ndim}")
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = ops.minimum(d_neg, pairwise_distance(positive, negative, p, eps))
    return _reduce(ops.relu(d_pos - d_neg + margin), reduction)
