"""Attention: ``F.scaled_dot_product_attention`` and ``nn.MultiheadAttention``, as PyTorch's.

``softmax(q @ k^T * scale + mask) @ v``, composed from existing ops. The two
products go to BLAS; everything between them is elementwise or a row reduction,
so it fuses: the softmax's own kernels (the row maxima, the row sums of
``exp(x - max)``, the division) read the product and recompute the scale and the
masks inside them, and neither adds a kernel, forward or backward
(tests/nn/test_attention.py::test_scale_and_masks_add_no_kernel_to_the_softmax).
A causal mask is an index predicate -- a column and a row of indices compared
(tensor/masks.py ``triangle``) -- never an array the size of the scores.

Masks follow each function's PyTorch convention: for ``scaled_dot_product_attention``
a bool mask is True where a query *may* attend; for ``MultiheadAttention`` a bool
``attn_mask`` or ``key_padding_mask`` is True where it may *not*. A float mask is
added to the scores in both.
"""

from __future__ import annotations

import math

import numpy as np

from ..node import ops
from ..node.masks import constant
from ..node.node import Node
from ..tensor.masks import triangle
from . import functional as F
from . import init
from .layers import Linear
from .module import Module, Parameter

_NEG_INF = float("-inf")


def _as_mask(mask) -> Node | None:
    return None if mask is None else ops.as_node(mask)


def _apply_mask(scores: Node, mask: Node | None) -> Node:
    """``scores`` where a bool ``mask`` keeps them, -inf elsewhere; a float ``mask`` added."""
    if mask is None:
        return scores
    if mask.dtype == np.bool_:
        return ops.where(mask, scores, _NEG_INF)
    return scores + mask


def _causal_mask(rows: int, cols: int, device) -> Node:
    """Bool ``(rows, cols)``: query ``i`` attends to keys ``0..i`` (PyTorch's lower-left
    triangle); lazy, reading two aranges."""
    return constant(triangle(rows, cols, 0, True, device))


def _softmax_rows(x: Node) -> Node:
    """Softmax over the last axis where a row with every key masked (all -inf) gives
    zeros, as PyTorch's attention does, instead of NaN. The two guards are elementwise
    reads of the row maxima and sums, fused into the softmax's own kernels."""
    m = x.amax(-1, keepdims=True).detach()
    e = (x - ops.where(m == _NEG_INF, 0.0, m)).exp()
    s = e.sum(-1, keepdims=True)
    return e / ops.where(s == 0.0, 1.0, s)


def _attend(query: Node, key: Node, value: Node, masks: tuple = (), dropout_p: float = 0.0,
            scale: float | None = None) -> tuple[Node, Node]:
    """The output ``(..., L, Ev)`` and the attention weights ``(..., L, S)`` (after dropout)
    of ``query (..., L, E)`` against ``key (..., S, E)`` and ``value (..., S, Ev)``; each of
    ``masks`` (bool: True keeps, float: added, None: nothing) broadcasts to the scores."""
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = ops.matmul(query, key.transpose(-2, -1)) * scale
    for mask in masks:
        scores = _apply_mask(scores, mask)
    weights = F.dropout(_softmax_rows(scores), dropout_p)
    return ops.matmul(weights, value), weights


def scaled_dot_product_attention(query: Node, key: Node, value: Node, attn_mask=None,
                                 dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: float | None = None, enable_gqa: bool = False) -> Node:
    """``softmax(query @ key^T * scale + mask) @ value`` over the last two axes; leading
    axes (batch, heads) broadcast. ``attn_mask``: bool, True where a query may attend, or
    float, added to the scores. ``is_causal``: query ``i`` sees keys ``0..i``. ``scale``
    defaults to ``1/sqrt(E)``. Dropout on the weights applies whenever ``dropout_p > 0``,
    as in PyTorch (pass 0 in evaluation)."""
    if enable_gqa:
        raise NotImplementedError("scaled_dot_product_attention: enable_gqa is not supported; "
                                  "repeat the key and value heads to the query's")
    if is_causal and attn_mask is not None:
        raise ValueError("scaled_dot_product_attention: give attn_mask or is_causal=True, "
                         "not both (fold the causal mask into attn_mask)")
    mask = _as_mask(attn_mask)
    if is_causal:
        mask = _causal_mask(query.shape[-2], key.shape[-2], query.device)
    return _attend(query, key, value, (mask,), dropout_p, scale)[0]


# ---- nn.MultiheadAttention ------------------------------------------------------------

def _keep(mask) -> Node | None:
    """A MultiheadAttention mask (bool True = masked out) in ``_attend``'s convention
    (bool True = kept); a float mask as it is."""
    mask = _as_mask(mask)
    return ~mask if mask is not None and mask.dtype == np.bool_ else mask


class MultiheadAttention(Module):
    """Attention over ``num_heads`` heads of ``embed_dim // num_heads`` features each, with
    PyTorch's parameters: ``in_proj_weight`` (3E, E) packing the query, key and value
    projections (``q_proj_weight``, ``k_proj_weight``, ``v_proj_weight`` when ``kdim`` or
    ``vdim`` differ from E), ``in_proj_bias`` (3E) and ``out_proj``, so PyTorch's state
    dict loads one to one. ``add_bias_kv`` and ``add_zero_attn`` are not supported."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False, device=None, dtype=None):
        super().__init__()
        if add_bias_kv or add_zero_attn:
            raise NotImplementedError("MultiheadAttention: add_bias_kv and add_zero_attn are "
                                      "not supported")
        if embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim ({embed_dim}) must be divisible "
                             f"by num_heads ({num_heads})")
        dtype = np.float32 if dtype is None else dtype
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self.dropout, self.batch_first = dropout, batch_first
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self._make_parameters(bias, dtype)
        if device is not None:
            self.to(device)

    def _make_parameters(self, bias: bool, dtype) -> None:
        e = self.embed_dim
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(np.empty((3 * e, e), dtype))
            self.q_proj_weight = self.k_proj_weight = self.v_proj_weight = None
        else:
            self.in_proj_weight = None
            self.q_proj_weight = Parameter(np.empty((e, e), dtype))
            self.k_proj_weight = Parameter(np.empty((e, self.kdim), dtype))
            self.v_proj_weight = Parameter(np.empty((e, self.vdim), dtype))
        self.in_proj_bias = Parameter(np.zeros(3 * e, dtype)) if bias else None
        self.out_proj = Linear(e, e, bias=bias, dtype=dtype)
        for w in (self.in_proj_weight, self.q_proj_weight, self.k_proj_weight,
                  self.v_proj_weight):
            if w is not None:
                init.xavier_uniform_(w)
        if bias:
            init.zeros_(self.out_proj.bias)

    def forward(self, query: Node, key: Node, value: Node, key_padding_mask=None,
                need_weights: bool = True, attn_mask=None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[Node, Node | None]:
        """``(output, weights)``: output of ``query``'s shape -- (L, N, E), (N, L, E) when
        ``batch_first``, or (L, E) unbatched -- and, with ``need_weights``, the weights
        (N, L, S), or (N, heads, L, S) unless ``average_attn_weights``. ``attn_mask``
        (L, S) or (N * heads, L, S), ``key_padding_mask`` (N, S): bool True masks out, a
        float is added. ``is_causal`` without ``attn_mask`` masks the future (PyTorch
        wants the mask too and takes the flag as a hint)."""
        batched = query.ndim == 3
        q, k, v = self._project(query, key, value)
        n = q.shape[self._batch_axis] if batched else 1
        heads = [self._split_heads(x, batched) for x in (q, k, v)]
        masks = (self._attn_mask(attn_mask, n), self._padding_mask(key_padding_mask, n))
        if is_causal and attn_mask is None:
            masks += (_causal_mask(heads[0].shape[-2], heads[1].shape[-2], q.device),)
        out, weights = _attend(*heads, masks, self.dropout if self.training else 0.0)
        out = self.out_proj(self._merge_heads(out, batched))
        if not need_weights:
            return out, None
        weights = weights.mean(1) if average_attn_weights else weights
        return out, weights if batched else ops.squeeze(weights, 0)

    @property
    def _batch_axis(self) -> int:
        return 0 if self.batch_first else 1

    def _project(self, query, key, value) -> tuple[Node, Node, Node]:
        """The query, key and value projections; self-attention (one tensor for all three)
        is one product with the packed weight."""
        e, b = self.embed_dim, self.in_proj_bias
        if self._qkv_same_embed_dim and query is key is value:
            return F.linear(query, self.in_proj_weight, b).split(e, -1)
        if self._qkv_same_embed_dim:
            w = self.in_proj_weight
            weights = (w[:e], w[e:2 * e], w[2 * e:])
        else:
            weights = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)
        biases = (None,) * 3 if b is None else (b[:e], b[e:2 * e], b[2 * e:])
        return tuple(F.linear(x, w, bias) for x, w, bias in zip((query, key, value), weights,
                                                                biases))

    def _split_heads(self, x: Node, batched: bool) -> Node:
        """(L, N, E) or (N, L, E) -- or (L, E) -- as (N, heads, L, head_dim)."""
        if not batched:
            x = ops.unsqueeze(x, self._batch_axis)
        x = x.reshape(*x.shape[:2], self.num_heads, self.head_dim)
        return x.permute(0, 2, 1, 3) if self.batch_first else x.permute(1, 2, 0, 3)

    def _merge_heads(self, x: Node, batched: bool) -> Node:
        """(N, heads, L, head_dim) back to the input's layout, heads joined into E."""
        x = x.permute(0, 2, 1, 3) if self.batch_first else x.permute(2, 0, 1, 3)
        x = x.reshape(*x.shape[:2], self.embed_dim)
        return x if batched else ops.squeeze(x, self._batch_axis)

    def _attn_mask(self, mask, n: int) -> Node | None:
        """(L, S) broadcasts over batch and heads; (N * heads, L, S) is split into both."""
        mask = _keep(mask)
        if mask is not None and mask.ndim == 3:
            mask = mask.reshape(n, self.num_heads, *mask.shape[1:])
        return mask

    @staticmethod
    def _padding_mask(mask, n: int) -> Node | None:
        """(N, S) -- or (S,) unbatched -- as (N, 1, 1, S): one row of keys per sample."""
        mask = _keep(mask)
        return None if mask is None else mask.reshape(n, 1, 1, mask.shape[-1])

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
                f"dropout={self.dropout}, batch_first={self.batch_first}")
