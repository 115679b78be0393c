"""Transformer layers, as PyTorch's: ``TransformerEncoderLayer``, ``TransformerDecoderLayer``,
their stacks ``TransformerEncoder`` and ``TransformerDecoder``, and ``Transformer``.

Composed of ``MultiheadAttention``, ``Linear``, ``LayerNorm`` and ``Dropout``, under
PyTorch's attribute names (``self_attn``, ``multihead_attn``, ``linear1``, ``norm1``,
``layers.0``...), so a PyTorch state dict loads one to one. Each sub-block is wrapped
in a residual connection: ``x + block(norm(x))`` with ``norm_first``, else
``norm(x + block(x))``.
"""

from __future__ import annotations

import copy

import numpy as np

from ..node.node import Node, full
from . import functional as F
from . import init
from .attention import MultiheadAttention
from .containers import ModuleList
from .layers import Dropout, LayerNorm, Linear
from .module import Module

_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


def _activation(activation):
    """``"relu"``, ``"gelu"`` or a callable (a function or a Module)."""
    if callable(activation):
        return activation
    if activation not in _ACTIVATIONS:
        raise ValueError(f"activation should be 'relu', 'gelu' or a callable, not "
                         f"{activation!r}")
    return _ACTIVATIONS[activation]




class _Layer(Module):
    """What the encoder and decoder layers share: the feed-forward block, the residual
    wiring and the settings."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int, dropout: float,
                 activation, layer_norm_eps: float, batch_first: bool, norm_first: bool,
                 bias: bool, dtype, norms: int):
        super().__init__()
        dtype = np.float32 if dtype is None else dtype
        self.self_attn = self._attention(d_model, nhead, dropout, bias, batch_first, dtype)
        if norms == 3:  # the decoder's attention over the encoder's output
            self.multihead_attn = self._attention(d_model, nhead, dropout, bias, batch_first,
                                                  dtype)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
        self.norm_first = norm_first
        for i in range(1, norms + 1):
            setattr(self, f"norm{i}", LayerNorm(d_model, layer_norm_eps, bias=bias, dtype=dtype))
        for i in range(1, norms + 1):
            setattr(self, f"dropout{i}", Dropout(dropout))
        self.activation = _activation(activation)

    @staticmethod
    def _attention(d_model, nhead, dropout, bias, batch_first, dtype) -> MultiheadAttention:
        return MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                  batch_first=batch_first, dtype=dtype)

    def _residual(self, x: Node, norm: LayerNorm, block) -> Node:
        if self.norm_first:
            return x + block(norm(x))
        return norm(x + block(x))

    def _feed_forward(self, x: Node, dropout: Dropout) -> Node:
        return dropout(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    @staticmethod
    def _attend(attn: MultiheadAttention, dropout: Dropout, x: Node, memory: Node, mask,
                padding_mask, is_causal: bool) -> Node:
        out = attn(x, memory, memory, attn_mask=mask, key_padding_mask=padding_mask,
                   need_weights=False, is_causal=is_causal)[0]
        return dropout(out)


class TransformerEncoderLayer(_Layer):
    """Self-attention, then a feed-forward block (``linear1``, activation, ``linear2``),
    each with a residual connection and a LayerNorm (``norm1``, ``norm2``)."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation="relu", layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 device=None, dtype=None):
        super().__init__(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                         batch_first, norm_first, bias, dtype, norms=2)
        if device is not None:
            self.to(device)

    def forward(self, src: Node, src_mask=None, src_key_padding_mask=None,
                is_causal: bool = False) -> Node:
        def self_attention(x):
            return self._attend(self.self_attn, self.dropout1, x, x, src_mask,
                                src_key_padding_mask, is_causal)
        x = self._residual(src, self.norm1, self_attention)
        return self._residual(x, self.norm2, lambda x: self._feed_forward(x, self.dropout2))


class TransformerDecoderLayer(_Layer):
    """Self-attention over the target, attention over the encoder's output (``memory``),
    then a feed-forward block, each with a residual connection and a LayerNorm."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation="relu", layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 device=None, dtype=None):
        super().__init__(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                         batch_first, norm_first, bias, dtype, norms=3)
        if device is not None:
            self.to(device)

    def forward(self, tgt: Node, memory: Node, tgt_mask=None, memory_mask=None,
                tgt_key_padding_mask=None, memory_key_padding_mask=None,
                tgt_is_causal: bool = False, memory_is_causal: bool = False) -> Node:
        def self_attention(x):
            return self._attend(self.self_attn, self.dropout1, x, x, tgt_mask,
                                tgt_key_padding_mask, tgt_is_causal)

        def cross_attention(x):
            return self._attend(self.multihead_attn, self.dropout2, x, memory, memory_mask,
                                memory_key_padding_mask, memory_is_causal)
        x = self._residual(tgt, self.norm1, self_attention)
        x = self._residual(x, self.norm2, cross_attention)
        return self._residual(x, self.norm3, lambda x: self._feed_forward(x, self.dropout3))


class _Stack(Module):
    """``num_layers`` deep copies of ``layer`` under ``layers.0``, ``layers.1``..., and an
    optional final ``norm``."""

    def __init__(self, layer: Module, num_layers: int, norm: Module | None):
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def _finish(self, x: Node) -> Node:
        return x if self.norm is None else self.norm(x)


class TransformerEncoder(_Stack):
    def __init__(self, encoder_layer: TransformerEncoderLayer, num_layers: int,
                 norm: Module | None = None, enable_nested_tensor: bool = True,
                 mask_check: bool = True):
        super().__init__(encoder_layer, num_layers, norm)  # the last two: PyTorch's, unused

    def forward(self, src: Node, mask=None, src_key_padding_mask=None,
                is_causal: bool | None = None) -> Node:
        for layer in self.layers:
            src = layer(src, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                        is_causal=bool(is_causal))
        return self._finish(src)


class TransformerDecoder(_Stack):
    def __init__(self, decoder_layer: TransformerDecoderLayer, num_layers: int,
                 norm: Module | None = None):
        super().__init__(decoder_layer, num_layers, norm)

    def forward(self, tgt: Node, memory: Node, tgt_mask=None, memory_mask=None,
                tgt_key_padding_mask=None, memory_key_padding_mask=None,
                tgt_is_causal: bool | None = None, memory_is_causal: bool = False) -> Node:
        for layer in self.layers:
            tgt = layer(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                        tgt_key_padding_mask=tgt_key_padding_mask,
                        memory_key_padding_mask=memory_key_padding_mask,
                        tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal)
        return self._finish(tgt)


class Transformer(Module):
    """An encoder stack and a decoder stack, each ending in a LayerNorm; the weight
    matrices start Xavier-uniform, as in PyTorch."""

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation="relu", custom_encoder: Module | None = None,
                 custom_decoder: Module | None = None, layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        settings = dict(dim_feedforward=dim_feedforward, dropout=dropout, activation=activation,
                        layer_norm_eps=layer_norm_eps, batch_first=batch_first,
                        norm_first=norm_first, bias=bias, dtype=dtype)
        dtype = np.float32 if dtype is None else dtype
        self.encoder = custom_encoder or TransformerEncoder(
            TransformerEncoderLayer(d_model, nhead, **settings), num_encoder_layers,
            LayerNorm(d_model, layer_norm_eps, bias=bias, dtype=dtype))
        self.decoder = custom_decoder or TransformerDecoder(
            TransformerDecoderLayer(d_model, nhead, **settings), num_decoder_layers,
            LayerNorm(d_model, layer_norm_eps, bias=bias, dtype=dtype))
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)
        if device is not None:
            self.to(device)

    def forward(self, src: Node, tgt: Node, src_mask=None, tgt_mask=None, memory_mask=None,
                src_key_padding_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, src_is_causal: bool | None = None,
                tgt_is_causal: bool | None = None, memory_is_causal: bool = False) -> Node:
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None) -> Node:
        """Float ``(sz, sz)``: 0 where query ``i`` may see key ``j <= i``, -inf above the
        diagonal -- the additive form of a causal mask."""
        dtype = np.float32 if dtype is None else dtype
        return full((sz, sz), float("-inf"), dtype=dtype, device=device).triu(1)
