"""Recurrent layers: RNN, LSTM, GRU and their cells, with PyTorch's parameters.

Parameter names, shapes and gate order are PyTorch's (``weight_ih_l0``, ``bias_hh_l1_reverse``;
LSTM gates input, forget, cell, output; GRU gates reset, update, new), so a PyTorch
state dict loads one to one and gives the same outputs (tests/nn/test_rnn.py).

A layer runs in two parts. The input projection of every time step is one product,
``x @ W_ih.T + b_ih`` over the whole (T, B, in) sequence; then the recurrence over time,
the recurrent product ``h @ W_hh.T + b_hh`` and the gate arithmetic of each step
(nn/recurrence.py: each step as ops, and the whole sequence as one node). RNN, LSTM and
GRU share the loop over layers and directions (``RNNBase``); only the step differs.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from ..node import ops
from ..node.node import Node
from ..tensor import creation
from . import functional as F
from . import init
from .module import Module, Parameter
from .recurrence import STEPS, Weights, run

# ---- parameters -----------------------------------------------------------------------

def _weights(gates: int, input_size: int, hidden_size: int, bias: bool, proj_size: int,
             dtype) -> dict[str, Parameter]:
    """One layer's and direction's parameters, by PyTorch's names without the suffix."""
    h_out = proj_size or hidden_size
    shapes = {"weight_ih": (gates * hidden_size, input_size),
              "weight_hh": (gates * hidden_size, h_out)}
    if bias:
        shapes.update(bias_ih=(gates * hidden_size,), bias_hh=(gates * hidden_size,))
    if proj_size:
        shapes["weight_hr"] = (proj_size, hidden_size)
    return {name: Parameter(np.empty(shape, dtype=dtype)) for name, shape in shapes.items()}


def _reset(module: Module, hidden_size: int, generator) -> None:
    """PyTorch's initialisation: every parameter ~ U(-1/sqrt(hidden), 1/sqrt(hidden))."""
    bound = 1.0 / math.sqrt(hidden_size) if hidden_size else 0.0
    for p in module.parameters():
        init.uniform_(p, -bound, bound, generator=generator)


def _project(module: Module, x: Node, suffix: str) -> Node:
    """The input projection of every step at once: ``x @ W_ih.T + b_ih``, one product."""
    return F.linear(x, getattr(module, "weight_ih" + suffix),
                    getattr(module, "bias_ih" + suffix, None))


def _step_weights(module: Module, suffix: str) -> Weights:
    return Weights(getattr(module, "weight_hh" + suffix),
                    getattr(module, "bias_hh" + suffix, None),
                    getattr(module, "weight_hr" + suffix, None))


def _zeros(shape, like: Node) -> Node:
    return Node(creation.zeros(shape, dtype=like.dtype, device=like.device))


def _check_shape(what: str, x: Node, expected: tuple) -> None:
    if x.shape != expected:
        raise RuntimeError(f"{what}: expected shape {expected}, got {x.shape}")


# ---- the layers ---------------------------------------------------------------------------

class RNNBase(Module):
    """The multi-layer, optionally bidirectional recurrence that RNN, LSTM and GRU share.

    Input (T, B, in) -- (B, T, in) with ``batch_first`` -- or unbatched (T, in); states
    (layers * directions, B, H), never batch-first. Dropout ``p`` applies to each layer's
    output but the last, in training mode.
    """

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0, dtype=np.float32,
                 generator=None):
        super().__init__()
        if mode not in STEPS:
            raise ValueError(f"unknown RNN mode {mode!r}; expected one of {sorted(STEPS)}")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"dropout should be a number in [0, 1], got {dropout}")
        if num_layers < 1 or hidden_size < 1:
            raise ValueError(f"num_layers and hidden_size must be positive, got {num_layers} "
                             f"and {hidden_size}")
        if proj_size and (mode != "LSTM" or not 0 < proj_size < hidden_size):
            raise ValueError(f"proj_size={proj_size}: only an LSTM projects, to a size in "
                             f"(0, hidden_size={hidden_size})")
        if dropout > 0 and num_layers == 1:
            warnings.warn(f"dropout={dropout} with num_layers=1 has no effect: dropout applies "
                          "between recurrent layers", UserWarning, stacklevel=2)
        self.mode, self.input_size, self.hidden_size = mode, input_size, hidden_size
        self.num_layers, self.bias, self.batch_first = num_layers, bias, batch_first
        self.dropout, self.bidirectional, self.proj_size = float(dropout), bidirectional, proj_size
        gates = STEPS[mode][0]
        for layer in range(num_layers):
            size = input_size if layer == 0 else (proj_size or hidden_size) * self._directions
            for suffix in self._suffixes(layer):
                for name, p in _weights(gates, size, hidden_size, bias, proj_size, dtype).items():
                    setattr(self, name + suffix, p)
        _reset(self, hidden_size, generator)

    @property
    def _directions(self) -> int:
        return 2 if self.bidirectional else 1

    def _suffixes(self, layer: int) -> list[str]:
        return [f"_l{layer}", f"_l{layer}_reverse"][:self._directions]

    @property
    def all_weights(self) -> list[list[Parameter]]:
        """Each layer's and direction's parameters, in PyTorch's order."""
        names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr")
        return [[getattr(self, n + s) for n in names if hasattr(self, n + s)]
                for layer in range(self.num_layers) for s in self._suffixes(layer)]

    def flatten_parameters(self) -> None:
        """PyTorch's cuDNN call: a no-op here (the weights are used where they lie)."""

    def _state_shape(self, batch: int, size: int) -> tuple:
        return (self.num_layers * self._directions, batch, size)

    def _initial_state(self, hx, x: Node):
        """The states as given or zeros, (layers * directions, B, H) each, checked."""
        h_shape = self._state_shape(x.shape[1], self.proj_size or self.hidden_size)
        c_shape = self._state_shape(x.shape[1], self.hidden_size)
        if self.mode != "LSTM":
            hx = _zeros(h_shape, x) if hx is None else hx
            _check_shape(f"{type(self).__name__} h0", hx, h_shape)
            return hx
        hx = (_zeros(h_shape, x), _zeros(c_shape, x)) if hx is None else tuple(hx)
        _check_shape("LSTM h0", hx[0], h_shape)
        _check_shape("LSTM c0", hx[1], c_shape)
        return hx

    def forward(self, input: Node, hx=None):  # noqa: A002 (PyTorch's name)
        """``(output, h_n)``, an LSTM's ``(output, (h_n, c_n))``."""
        batched = input.ndim == 3
        if input.ndim not in (2, 3) or input.shape[-1] != self.input_size:
            raise ValueError(f"{type(self).__name__}: expected input of shape (T, B, "
                             f"{self.input_size}) or (T, {self.input_size}), got {input.shape}")
        x = input if batched else input.unsqueeze(1)
        if batched and self.batch_first:
            x = x.transpose(0, 1)
        if not batched and hx is not None:
            hx = tuple(s.unsqueeze(1) for s in hx) if self.mode == "LSTM" else hx.unsqueeze(1)
        output, states = self._layers(x, self._initial_state(hx, x))
        if batched and self.batch_first:
            output = output.transpose(0, 1)
        return _unbatch(output, states, batched)

    def _layers(self, x: Node, hx):
        """Every layer and direction in turn: the output of the last layer, and each
        (layer, direction)'s final state stacked as h_n (and c_n)."""
        finals = []
        for layer in range(self.num_layers):
            if layer and self.training and self.dropout:
                x = F.dropout(x, self.dropout, True)
            outs = []
            for d, suffix in enumerate(self._suffixes(layer)):
                k = layer * self._directions + d
                state = tuple(s[k] for s in hx) if isinstance(hx, tuple) else hx[k]
                out, state = run(self.mode, _project(self, x, suffix), state,
                                 _step_weights(self, suffix), reverse=d == 1)
                outs.append(out)
                finals.append(state)
            x = outs[0] if len(outs) == 1 else ops.cat(outs, 2)
        if isinstance(hx, tuple):
            return x, tuple(ops.stack(parts, 0) for parts in zip(*finals))
        return x, ops.stack(finals, 0)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        defaults = {"proj_size": 0, "num_layers": 1, "bias": True, "batch_first": False,
                    "dropout": 0.0, "bidirectional": False}
        for name, default in defaults.items():
            if getattr(self, name) != default:
                s += f", {name}={getattr(self, name)}"
        return s


def _unbatch(output: Node, states, batched: bool):
    if batched:
        return output, states
    if isinstance(states, tuple):
        return output.squeeze(1), tuple(s.squeeze(1) for s in states)
    return output.squeeze(1), states.squeeze(1)


class RNN(RNNBase):
    """Elman RNN: ``h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)`` (or relu)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 nonlinearity: str = "tanh", bias: bool = True, batch_first: bool = False,
                 dropout: float = 0.0, bidirectional: bool = False, **kwargs):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity {nonlinearity!r}; select from 'tanh' or "
                             "'relu'")
        super().__init__(f"RNN_{nonlinearity.upper()}", input_size, hidden_size, num_layers,
                         bias, batch_first, dropout, bidirectional, **kwargs)
        self.nonlinearity = nonlinearity


class LSTM(RNNBase):
    """Long short-term memory, gates (input, forget, cell, output); ``proj_size`` projects h."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0, **kwargs):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, proj_size, **kwargs)


class GRU(RNNBase):
    """Gated recurrent unit, gates (reset, update, new), ``n = tanh(.. + r * (W_hn h + b_hn))``."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, **kwargs):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, **kwargs)


# ---- the cells: one step, the same step functions ----------------------------------------

class RNNCellBase(Module):
    """One step of a recurrence on input (B, in) or unbatched (in,)."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, bias: bool = True,
                 dtype=np.float32, generator=None):
        super().__init__()
        self.mode, self.input_size, self.hidden_size = mode, input_size, hidden_size
        self.bias = bias
        gates = STEPS[mode][0]
        for name, p in _weights(gates, input_size, hidden_size, bias, 0, dtype).items():
            setattr(self, name, p)
        _reset(self, hidden_size, generator)

    def forward(self, input: Node, hx=None):  # noqa: A002 (PyTorch's name)
        if input.ndim not in (1, 2) or input.shape[-1] != self.input_size:
            raise ValueError(f"{type(self).__name__}: expected input of shape (B, "
                             f"{self.input_size}) or ({self.input_size},), got {input.shape}")
        batched = input.ndim == 2
        x = input if batched else input.unsqueeze(0)
        state = self._initial_state(hx, x, batched)
        state = STEPS[self.mode][1](_project(self, x, ""), state, _step_weights(self, ""))
        if batched:
            return state
        return tuple(s.squeeze(0) for s in state) if isinstance(state, tuple) else state.squeeze(0)

    def _initial_state(self, hx, x: Node, batched: bool):
        shape = (x.shape[0], self.hidden_size)
        n = 2 if self.mode == "LSTM" else 1
        states = (_zeros(shape, x),) * n if hx is None else (tuple(hx) if n == 2 else (hx,))
        if not batched and hx is not None:
            states = tuple(s.unsqueeze(0) for s in states)
        for s in states:
            _check_shape(f"{type(self).__name__} state", s, shape)
        return states if n == 2 else states[0]

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False")


class RNNCell(RNNCellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh", **kwargs):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity {nonlinearity!r}; select from 'tanh' or "
                             "'relu'")
        super().__init__(f"RNN_{nonlinearity.upper()}", input_size, hidden_size, bias, **kwargs)
        self.nonlinearity = nonlinearity


class LSTMCell(RNNCellBase):
    """Returns ``(h', c')``; ``hx`` is ``(h, c)``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, **kwargs):
        super().__init__("LSTM", input_size, hidden_size, bias, **kwargs)


class GRUCell(RNNCellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, **kwargs):
        super().__init__("GRU", input_size, hidden_size, bias, **kwargs)
