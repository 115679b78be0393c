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


def _total_norm(tensors: list, norm_type: float, error_if_nonfinite: bool) -> Node:
    """The ``norm_type``-norm of ``tensors`` together, a 0-d tensor of the first one's
    dtype and device, as PyTorch returns norms. Computed by tensor ops, nothing read on
    the host (unless ``error_if_nonfinite`` asks), so a captured step can clip."""
    norm_type = float(norm_type)
    tensors = [t for t in tensors if t.numel()]
    if not tensors:
        return tensor(0.0)
    with no_grad():
        if norm_type == math.inf:
            total = ops.stack([t.abs().amax() for t in tensors]).amax()
        else:
            total = ops.stack([(t.abs() ** norm_type).sum() for t in tensors]).sum()
            total = total ** (1.0 / norm_type)
    if error_if_nonfinite and not math.isfinite(float(total)):
        raise RuntimeError(f"the total norm of order {norm_type} of the gradients is "
                           f"{float(total)}, so they cannot be clipped; pass "
                           "error_if_nonfinite=False to clip anyway")
    return total


def get_total_norm(tensors, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                   foreach=None) -> Node:
    """The ``norm_type``-norm of all the ``tensors`` together, as one vector."""
    tensors = [tensors] if isinstance(tensors, Node) else list(tensors)
    return _total_norm(tensors, norm_type, error_if_nonfinite)


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach=None, *, eps: float = 1e-6):
    """Scale the gradients in place so that their norm together is at most ``max_norm``:
    by ``min(max_norm / (norm + eps), 1)``, as a tensor (PyTorch's way: nothing read on
    the host, so a captured step clips each replay by its own norm); returns the norm
    before, a 0-d tensor of the first gradient's dtype. ``foreach`` is accepted."""
    grads = [p.grad for p in _with_grads(parameters)]
    total = _total_norm(grads, norm_type, error_if_nonfinite)
    with no_grad():
        scale = ops.minimum(float(max_norm) / (total + eps), 1.0)
        for g in grads:
            g.mul_(scale)
    return total


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
