"""How one layer of an RNN, LSTM or GRU runs over a sequence, in one direction.

Each step is defined once as plain ops on Nodes (``_tanh_step``, ``_lstm_step``...,
PyTorch's gate order): the cells run it, and so does any case the sequence Function
below does not take. Recorded op by op, a sequence of T steps is some 15 T graph
nodes, each with its bookkeeping, and backward makes one small product per step for
the recurrent weight's gradient. ``Sequence`` computes the same numbers as one node,
the way cuDNN's RNN does:

* forward, per step: the recurrent product ``h @ W_hh.T`` (BLAS) into the step's rows
  of a gate buffer, then the gates' activations and the state update as one group of
  statements of the expression engine (``assign_all``: one kernel where the backend
  groups them, every statement at once in NumPy when small). The activations are kept;
* backward, per step in reverse: the gates' gradients from the kept activations (one
  group again), then ``dGates @ W_hh`` for the previous state's gradient;
* after the loop, the recurrent weight's gradient is one product over every step,
  ``dW_hh = dGates(T*B, G*H).T @ H_prev(T*B, H)``, and its bias's one sum.

Its output packs the step outputs (T, B, H) -- an LSTM's also its last cell state, as
row T -- so the final states are views of one node. With ``create_graph`` the
op-by-op steps run again on the inputs (``Sequence.as_ops``) and are differentiated
as recorded, so second derivatives are those of the steps above.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

from ..node import ops
from ..node.function import Function
from ..node.node import Node
from ..node.views import chunk, unbind
from ..tensor import creation
from ..tensor.engine import assign_all, evaluate_copy, realize
from ..tensor.expr import Dot
from . import functional as F


class Weights(NamedTuple):
    """What a step reads besides its input: the recurrent weight and bias, and the LSTM's
    projection ``W_hr`` (None without ``proj_size``)."""

    hh: Node
    b_hh: Node | None
    hr: Node | None = None


# ---- one time step of each kind, as ops: gx is the step's input projection, (B, gates * H) ----

def _recurrent(h: Node, w: Weights) -> Node:
    return F.linear(h, w.hh, w.b_hh)


def _tanh_step(gx: Node, h: Node, w: Weights) -> Node:
    return ops.tanh(gx + _recurrent(h, w))


def _relu_step(gx: Node, h: Node, w: Weights) -> Node:
    return ops.relu(gx + _recurrent(h, w))


def _lstm_step(gx: Node, state: tuple[Node, Node], w: Weights) -> tuple[Node, Node]:
    h, c = state
    i, f, g, o = chunk(gx + _recurrent(h, w), 4, -1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    c.realize()  # read by h and by the next step: one kernel, not recomputed in each
    h = o.sigmoid() * c.tanh()
    return (h if w.hr is None else F.linear(h, w.hr)), c


def _gru_step(gx: Node, h: Node, w: Weights) -> Node:
    xr, xz, xn = chunk(gx, 3, -1)
    hr, hz, hn = chunk(_recurrent(h, w), 3, -1)  # b_hn stays inside r * (.), as PyTorch's
    r, z = (xr + hr).sigmoid(), (xz + hz).sigmoid()
    n = (xn + r * hn).tanh()
    return n + z * (h - n)  # (1 - z) * n + z * h


#: mode -> (gates, step)
STEPS = {"RNN_TANH": (1, _tanh_step), "RNN_RELU": (1, _relu_step),
         "LSTM": (4, _lstm_step), "GRU": (3, _gru_step)}


def _hidden(state):
    """The hidden state ``h`` of a step's state (an LSTM's is ``(h, c)``)."""
    return state[0] if isinstance(state, tuple) else state


def _time_steps(gx: Node) -> list[Node]:
    """``unbind(gx, 0)``: a view per time step (backward adds each step's gradient into
    one buffer: backward.py ``_add_slice``)."""
    return list(unbind(gx, 0))


def run_steps(mode: str, gx: Node, state, w: Weights, reverse: bool):
    """One direction over the sequence, op by op: gx (T, B, gates * H) -> (outputs
    (T, B, H), last state)."""
    step = STEPS[mode][1]
    steps = _time_steps(gx)
    hs = [None] * len(steps)
    for t in reversed(range(len(hs))) if reverse else range(len(hs)):
        state = step(steps[t], state, w)
        hs[t] = _hidden(state)
    return ops.stack(hs, 0), state


def run(mode: str, gx: Node, state, w: Weights, reverse: bool):
    """``run_steps``' outputs and last state, from one ``Sequence`` node where it applies:
    no projection, one dtype, a sequence of at least one step."""
    weights = (w.hh,) if w.b_hh is None else (w.hh, w.b_hh)
    if w.hr is not None or gx.shape[0] == 0 or len({
            v.dtype for v in (gx, *weights, *_states(state))}) != 1:
        return run_steps(mode, gx, state, w, reverse)
    inputs = (gx, *_states(state), *weights)
    packed = Sequence.apply(*inputs, mode=mode, reverse=reverse, bias=w.b_hh is not None)
    steps = gx.shape[0]
    out = packed[:steps] if mode == "LSTM" else packed
    h = out[0] if reverse else out[steps - 1]
    return out, ((h, packed[steps]) if mode == "LSTM" else h)


def _states(state) -> tuple:
    return state if isinstance(state, tuple) else (state,)


# ---- the whole sequence as one node -------------------------------------------------------

def _new(like, *shape):
    """An uninitialized buffer of ``like``'s dtype and device."""
    return creation.new_empty(shape, like.dtype, like.device)


def _gate(t, k: int, size: int):
    """Gate ``k`` of the rows ``t`` (B, gates * size): a view."""
    return t[:, k * size:(k + 1) * size]


def _bias(b, k: int, size: int):
    return 0 if b is None else b[k * size:(k + 1) * size]


class Sequence(Function):
    """One direction of one recurrent layer over the whole sequence (module docstring).

    Inputs: the input projection ``gx`` (T, B, G*H), the initial ``h0`` (B, H) (and an
    LSTM's ``c0``), ``W_hh`` (G*H, H) and, with ``bias``, ``b_hh`` (G*H,). Output: the
    step outputs (T, B, H), an LSTM's with its last cell state appended as row T."""

    keyword_attributes = True

    @staticmethod
    def forward(ctx, gx, h0, *rest, mode: str, reverse: bool, bias: bool):
        lstm = mode == "LSTM"
        x, h0 = realize(gx), realize(h0)
        c0 = realize(rest[0]) if lstm else None
        w = realize(rest[1 if lstm else 0])
        b = realize(rest[-1]) if bias else None
        steps, batch, width = x.shape
        size = h0.shape[-1]
        order = range(steps - 1, -1, -1) if reverse else range(steps)
        new = partial(_new, x)
        out = new(steps + lstm, batch, size)
        acts = new(steps, batch, width)  # the gates' activations (a GRU's r, z, n)
        cells = new(steps, batch, size) if lstm else None
        hh = new(steps, batch, width) if mode == "GRU" else None  # h @ W_hh.T, kept
        # W_hh.T copied to rows once, for every step's product: OpenBLAS multiplies a
        # few rows by a matrix read as its transpose more slowly (docs/attention.md)
        wt = evaluate_copy(w.transpose(0, 1)) if steps > 2 else w.transpose(0, 1)
        if lstm:  # every step's input projection and bias, in one pass
            acts[...] = x if b is None else x + b
        h, c = h0, c0
        for t in order:
            if mode == "GRU":
                hh[t][...] = Dot(h, wt)
                assign_all(_gru_forward(x[t], hh[t], b, h, acts[t], out[t], size))
            elif lstm:
                a = acts[t]
                a += Dot(h, wt)
                assign_all(_lstm_forward(a, c, cells[t], out[t], size))
                c = cells[t]
            else:
                out[t][...] = Dot(h, wt)
                act = out[t] + x[t] if b is None else out[t] + x[t] + b
                out[t][...] = act.tanh() if mode == "RNN_TANH" else act.relu()
            h = out[t]
        if lstm:
            out[steps][...] = c
        ctx.save_for_backward(x, h0, c0, w, b, acts, cells, hh, out)
        return out

    @staticmethod
    def backward(ctx, g):
        x, h0, c0, w, b, acts, cells, hh, out = ctx.saved_tensors
        mode, reverse = ctx.attrs["mode"], ctx.attrs["reverse"]
        steps, batch, width = x.shape
        order = range(steps) if reverse else range(steps - 1, -1, -1)  # forward's, reversed
        before = 1 if reverse else -1  # the step whose output is a step's previous state
        new = partial(_new, x)
        dout = new(*g.shape)  # each output's gradient, the recurrence's added in place
        dout[...] = g
        dh0 = creation.zeros(h0.shape, dtype=x.dtype, device=x.device)
        dx = new(steps, batch, width)  # the gates' pre-activations' gradients: gx's
        dhh = new(steps, batch, width) if mode == "GRU" else dx  # h @ W_hh.T's
        dc = dout[steps] if mode == "LSTM" else None  # the cell's, carried back
        for t in order:
            first = t == order[-1]
            dh_prev = dh0 if first else dout[t + before]
            if mode == "LSTM":
                c_prev = c0 if first else cells[t + before]
                assign_all(_lstm_backward(dout[t], acts[t], cells[t], c_prev, dc, dx[t],
                                          h0.shape[-1]))
            elif mode == "GRU":
                h_prev = h0 if first else out[t + before]
                assign_all(_gru_backward(dout[t], acts[t], hh[t], b, h_prev, dx[t], dhh[t],
                                         dh_prev, h0.shape[-1]))
            else:
                h = out[t]
                dx[t][...] = dout[t] * (1 - h * h) if mode == "RNN_TANH" else dout[t] * (h > 0)
            dh_prev += Dot(dhh[t], w)
        grads = [dx, dh0] + ([dc] if mode == "LSTM" else [])
        grads.append(_weight_grad(dhh, out, h0, reverse))
        if b is not None:
            grads.append(realize(dhh.reshape(-1, width).sum((0,))))
        return tuple(gr if need else None for gr, need in zip(grads, ctx.needs_input_grad))

    @staticmethod
    def as_ops(ctx) -> Node:
        """The forward again as the op-by-op steps on the inputs (``run_steps``), packed
        as ``forward`` packs them: with ``create_graph`` the gradients are the steps'
        (node/higher_order.py), so they can be differentiated again."""
        mode, reverse = ctx.attrs["mode"], ctx.attrs["reverse"]
        inputs = ctx.inputs
        lstm = mode == "LSTM"
        gx, state = inputs[0], (tuple(inputs[1:3]) if lstm else inputs[1])
        w = inputs[3 if lstm else 2]
        b = inputs[-1] if ctx.attrs["bias"] else None
        outs, last = run_steps(mode, gx, state, Weights(w, b), reverse)
        return ops.cat([outs, last[1].unsqueeze(0)], 0) if lstm else outs


def _lstm_forward(a, c, cell, out, size) -> list:
    """One LSTM step once ``a`` holds its pre-activations: the gates' activations in
    place (the sigmoids of i and f in one statement), then c' and h' -- statements that
    read only the element they write."""
    i, f, g, o = (_gate(a, k, size) for k in range(4))
    i_f = a[:, :2 * size]
    return [(i_f, i_f.sigmoid()), (g, g.tanh()), (o, o.sigmoid()),
            (cell, f * c + i * g), (out, o * cell.tanh())]


def _lstm_backward(dh, a, cell, c_prev, dc, da, size) -> list:
    """One LSTM step back: the gates' pre-activation gradients into ``da`` and the cell's
    gradient carried in ``dc`` (first through this step's c', last to c)."""
    i, f, g, o = (_gate(a, k, size) for k in range(4))
    di, df, dg, do = (_gate(da, k, size) for k in range(4))
    tc = cell.tanh()
    return [(do, dh * tc * o * (1 - o)), (dc, dc + dh * o * (1 - tc * tc)),
            (di, dc * g * i * (1 - i)), (df, dc * c_prev * f * (1 - f)),
            (dg, dc * i * (1 - g * g)), (dc, dc * f)]


def _gru_forward(x, hh, b, h, a, out, size) -> list:
    """One GRU step after ``hh = h @ W_hh.T``: r, z and n into ``a``, then h'."""
    r, z, n = (_gate(a, k, size) for k in range(3))
    pre = [_gate(x, k, size) + _gate(hh, k, size) + _bias(b, k, size) for k in range(2)]
    hn = _gate(hh, 2, size) + _bias(b, 2, size)
    return [(r, pre[0].sigmoid()), (z, pre[1].sigmoid()),
            (n, (_gate(x, 2, size) + r * hn).tanh()), (out, n + z * (h - n))]


def _gru_backward(dh, a, hh, b, h_prev, dx, dhh, dh_prev, size) -> list:
    """One GRU step back: the pre-activation gradients of the input's gates into ``dx``,
    of the recurrent product's into ``dhh`` (they differ in n: ``r * hn``), and the
    direct part of the previous state's gradient, ``dh * z``, added to ``dh_prev``."""
    r, z, n = (_gate(a, k, size) for k in range(3))
    dr, dz, dn = (_gate(dx, k, size) for k in range(3))
    hn = _gate(hh, 2, size) + _bias(b, 2, size)
    return [(dn, dh * (1 - z) * (1 - n * n)), (dz, dh * (h_prev - n) * z * (1 - z)),
            (dr, dn * hn * r * (1 - r)), (_gate(dhh, 0, size), dr), (_gate(dhh, 1, size), dz),
            (_gate(dhh, 2, size), dn * r), (dh_prev, dh_prev + dh * z)]


def _weight_grad(dhh, out, h0, reverse: bool):
    """``sum_t dhh[t].T @ h_prev(t)`` as one product over the steps whose previous state
    is an output, plus the first step's with ``h0``."""
    steps, width = dhh.shape[0], dhh.shape[-1]
    first = steps - 1 if reverse else 0
    gw = realize(Dot(dhh[first].transpose(0, 1), h0))
    if steps > 1:
        rest, prev = (slice(0, steps - 1), slice(1, steps)) if reverse else \
            (slice(1, steps), slice(0, steps - 1))
        gw += Dot(dhh[rest].reshape(-1, width).transpose(0, 1),
                  out[prev].reshape(-1, out.shape[-1]))
    return gw
