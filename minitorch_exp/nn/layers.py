"""Layers: Linear, activations, Dropout, Dropout2d, Embedding, Flatten, Sequential, LayerNorm."""

from __future__ import annotations

import math

import numpy as np

from ..node import ops
from . import functional as F
from . import init
from .module import Module, Parameter


class Linear(Module):
    """``y = x @ W.T + b`` with PyTorch's default initialisation (uniform +-1/sqrt(fan_in))."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 dtype=np.float32, generator=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(np.empty((out_features, in_features), dtype=dtype))
        self.bias = Parameter(np.empty(out_features, dtype=dtype)) if bias else None
        init.kaiming_uniform_(self.weight, a=math.sqrt(5), generator=generator)
        if self.bias is not None:
            bound = 1.0 / math.sqrt(in_features) if in_features else 0.0
            init.uniform_(self.bias, -bound, bound, generator=generator)

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class _Activation(Module):
    fn = staticmethod(ops.relu)

    def forward(self, x):
        return type(self).fn(x)


class ReLU(_Activation):
    fn = staticmethod(ops.relu)

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace  # PyTorch's argument, accepted: the result is a new tensor


class Tanh(_Activation):
    fn = staticmethod(ops.tanh)


class Sigmoid(_Activation):
    fn = staticmethod(ops.sigmoid)


class GELU(Module):
    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return F.gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class LeakyReLU(Module):
    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace  # inplace: as ReLU's

    def forward(self, x):
        return F.leaky_relu(x, self.negative_slope)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}"


class Softmax(Module):
    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return ops.softmax(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    def forward(self, x):
        return ops.log_softmax(x, self.dim)


class Dropout(Module):
    """Active only in training mode (``model.train()``); identity after ``model.eval()``."""

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class Dropout1d(Dropout):
    """Zeroes whole channels: each (sample, channel) row of (N, C, L), with probability p."""

    def forward(self, x):
        return F.dropout1d(x, self.p, self.training)


class Dropout2d(Dropout):
    """Zeroes whole channels: each (sample, channel) plane of (N, C, H, W), with probability p."""

    def forward(self, x):
        return F.dropout2d(x, self.p, self.training)


class Embedding(Module):
    """A lookup table: ``weight[indices]``, weight (num_embeddings, embedding_dim) ~ N(0, 1).

    The row ``padding_idx`` starts at zero and receives no gradient, as in PyTorch.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 max_norm=None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                 sparse: bool = False, _weight=None, dtype=np.float32, generator=None):
        super().__init__()
        if max_norm is not None or scale_grad_by_freq or sparse:
            raise NotImplementedError("Embedding: max_norm, scale_grad_by_freq and sparse are "
                                      "not supported")
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = F.embedding_padding_idx(padding_idx, num_embeddings)
        if _weight is None:
            self.weight = Parameter(np.empty((num_embeddings, embedding_dim), dtype=dtype))
            init.normal_(self.weight, generator=generator)
            if self.padding_idx is not None:
                self.weight.value[self.padding_idx] = 0.0
        else:
            self.weight = Parameter(_weight)

    @classmethod
    def from_pretrained(cls, embeddings, freeze: bool = True, padding_idx: int | None = None):
        rows, dim = embeddings.shape
        module = cls(rows, dim, padding_idx, _weight=embeddings.detach().numpy().copy())
        module.weight.requires_grad = not freeze
        return module

    def forward(self, indices):
        return F.embedding(indices, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        extra = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        return f"{self.num_embeddings}, {self.embedding_dim}{extra}"


class Flatten(Module):
    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return ops.flatten(x, self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Sequential(Module):
    """Calls its layers in order."""

    def __init__(self, *layers: Module):
        super().__init__()
        self.layers = list(layers)

    def named_children(self):
        for i, layer in enumerate(self.layers):
            yield str(i), layer

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

    def __getitem__(self, i):
        return self.layers[i]

    def __len__(self) -> int:
        return len(self.layers)

    def __iter__(self):
        return iter(self.layers)


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, dtype=np.float32):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.weight = self.bias = None
        if elementwise_affine:
            self.weight = Parameter(np.ones(self.normalized_shape, dtype))
            self.bias = Parameter(np.zeros(self.normalized_shape, dtype)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"
