"""PyTorch's ``torch.nn.utils``: gradient clipping and parameters as one vector."""

from __future__ import annotations

import math

from ..node import ops
from ..node.grad_mode import no_grad
from ..node.node import Node, tensor


def _with_grads(parameters) -> list[Node]:
    """The parameters (one tensor, or an iterable of them) that have a gradient."""
    if isinstance(parameters, Node):  # one tensor, as torch allows (iterating it gives rows)
        parameters = [parameters]
    return [p for p in parameters if p.grad is not None]


def _norm(g: Node, norm_type: float) -> float:
    if g.numel() == 0:
        return 0.0
    a = g.abs()
    return float(a.amax()) if norm_type == math.inf else float((a ** norm_type).sum())


def _total_norm(tensors: list, norm_type: float, error_if_nonfinite: bool) -> float:
    norm_type = float(norm_type)
    parts = [_norm(t, norm_type) for t in tensors]
    total = max(parts, default=0.0) if norm_type == math.inf else \
        sum(parts) ** (1.0 / norm_type)
    if error_if_nonfinite and not math.isfinite(total):
        raise RuntimeError(f"the total norm of order {norm_type} of the gradients is "
                           f"{total}, so they cannot be clipped; pass "
                           "error_if_nonfinite=False to clip anyway")
    return total


def _as_tensor(total: float, tensors: list) -> Node:
    """A 0-d tensor of the first tensor's dtype and device, as PyTorch returns norms."""
    like = tensors[0] if tensors else None
    return tensor(total, dtype=None if like is None else like.dtype,
                  device=None if like is None else like.device)


def get_total_norm(tensors, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                   foreach=None) -> Node:
    """The ``norm_type``-norm of all the ``tensors`` together, as one vector."""
    tensors = [tensors] if isinstance(tensors, Node) else list(tensors)
    return _as_tensor(_total_norm(tensors, norm_type, error_if_nonfinite), tensors)


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach=None, *, eps: float = 1e-6):
    """Scale the gradients in place so that their norm together is at most ``max_norm``
    (by ``max_norm / (norm + eps)`` when below 1); returns the norm before, a 0-d tensor
    of the first gradient's dtype, as PyTorch's. ``foreach`` is accepted."""
    grads = [p.grad for p in _with_grads(parameters)]
    total = _total_norm(grads, norm_type, error_if_nonfinite)
    scale = float(max_norm) / (total + eps)
    if scale < 1.0:
        with no_grad():
            for g in grads:
                g.mul_(scale)
    return _as_tensor(total, grads)


def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """Clamp every gradient into ``[-clip_value, clip_value]``, in place."""
    with no_grad():
        for p in _with_grads(parameters):
            p.grad.clamp_(-clip_value, clip_value)


def parameters_to_vector(parameters) -> Node:
    """The parameters flattened and joined into one 1-D tensor (differentiable)."""
    return ops.cat([ops.reshape(p, -1) for p in parameters])


def vector_to_parameters(vec: Node, parameters) -> None:
    """Point each parameter at its slice of ``vec`` (``p.data = ...``, sharing memory
    with ``vec``, as PyTorch's does)."""
    if not isinstance(vec, Node) or vec.ndim != 1:
        raise TypeError(f"vector_to_parameters: expected a 1-D tensor, got {vec!r}")
    params = list(parameters)
    total = sum(p.numel() for p in params)
    if total != vec.numel():
        raise ValueError(f"vector_to_parameters: the vector has {vec.numel()} elements, "
                         f"the parameters {total}")
    start = 0
    for p in params:
        n = p.numel()
        p.data = vec.value[start:start + n].reshape(p.shape)
        start += n
