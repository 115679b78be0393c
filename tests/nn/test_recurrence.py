"""The whole-sequence node of a recurrent layer (nn/recurrence.py) against its steps as ops.

``Sequence`` must give the numbers of ``run_steps`` -- the same step functions the cells
run -- for values and every gradient, in every mode and direction, with and without a
bias, on both sides of the fusion policy; differentiate twice through its op-by-op
rule; and make a layer one graph node per direction instead of some 15 per step.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.nn import recurrence as R
from minitorch_exp.node.backward import topological_order

MODES = ["RNN_TANH", "RNN_RELU", "LSTM", "GRU"]
POLICIES = {"default": contextlib.nullcontext, "fuse_all": lambda: mt.fusion(threshold=0)}


def _inputs(rng, mode, steps, batch, size, bias):
    gates = R.STEPS[mode][0]
    leaf = lambda *shape: mt.tensor(rng.standard_normal(shape) * 0.7, requires_grad=True)  # noqa: E731
    gx, h0 = leaf(steps, batch, gates * size), leaf(batch, size)
    state = (h0, leaf(batch, size)) if mode == "LSTM" else h0
    return gx, state, R.Weights(leaf(gates * size, size), leaf(gates * size) if bias else None)


def _outputs(outs, last):
    return [outs, *last] if isinstance(last, tuple) else [outs, last]


def _leaves(gx, state, w):
    return [gx, *(state if isinstance(state, tuple) else (state,)), w.hh] + (
        [] if w.b_hh is None else [w.b_hh])


@settings(max_examples=40, deadline=None)
@given(mode=st.sampled_from(MODES), reverse=st.booleans(), bias=st.booleans(),
       steps=st.integers(1, 5), batch=st.integers(1, 3), size=st.integers(1, 4),
       policy=st.sampled_from(sorted(POLICIES)), seed=st.integers(0, 2**16))
def test_sequence_node_matches_the_steps_as_ops(mode, reverse, bias, steps, batch, size,
                                                policy, seed):
    rng = np.random.default_rng(seed)
    gx, state, w = _inputs(rng, mode, steps, batch, size, bias)
    leaves = _leaves(gx, state, w)
    results, weights = [], []
    with POLICIES[policy]():
        for run in (R.run, R.run_steps):
            for p in leaves:
                p.grad = None
            outs = _outputs(*run(mode, gx, state, w, reverse))
            weights = weights or [rng.standard_normal(o.shape) for o in outs]  # both runs'
            sum((o * mt.tensor(v)).sum() for o, v in zip(outs, weights)).backward()
            results.append(([o.numpy() for o in outs], [p.grad.numpy() for p in leaves]))
    (got, got_grads), (want, want_grads) = results
    for a, b in zip(got + got_grads, want + want_grads):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_run_takes_the_sequence_node_only_where_it_applies():
    rng = np.random.default_rng(0)
    gx, state, w = _inputs(rng, "LSTM", 3, 2, 4, True)
    outs, _ = R.run("LSTM", gx, state, w, False)
    assert any(n.grad_fn is not None and n.grad_fn.fn is R.Sequence
               for n in topological_order(outs))
    projected = R.Weights(mt.randn(16, 3, dtype=np.float64), w.b_hh,
                          mt.randn(3, 4, dtype=np.float64))  # proj_size 3: the steps as ops
    outs, _ = R.run("LSTM", gx, (mt.randn(2, 3, dtype=np.float64), state[1]), projected, False)
    assert not any(n.grad_fn is not None and n.grad_fn.fn is R.Sequence
                   for n in topological_order(outs))


@pytest.mark.parametrize("name", ["LSTM", "GRU", "RNN"])
def test_a_layer_is_one_graph_node_per_direction_whatever_the_length(name):
    layer = getattr(nn, name)(3, 4, num_layers=2, bidirectional=True)

    def graph_size(steps):
        out, _ = layer(mt.randn(steps, 2, 3, requires_grad=True))
        return len(topological_order(out))

    assert graph_size(9) == graph_size(3)  # op by op, each step added some 15 nodes


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("reverse", [False, True])
def test_second_derivatives_through_the_sequence_node(mode, reverse):
    rng = np.random.default_rng(3)
    gx, state, w = _inputs(rng, mode, 3, 2, 2, True)
    if mode == "RNN_RELU":  # away from relu's kink, where finite differences disagree
        gx = mt.tensor(np.abs(gx.numpy()) + 0.5, requires_grad=True)
    leaves = _leaves(gx, state, w)

    def f(*xs):
        n = 2 if mode == "LSTM" else 1
        st_ = tuple(xs[1:1 + n]) if n == 2 else xs[1]
        weights = R.Weights(xs[1 + n], xs[2 + n])
        return mt.cat([o.reshape(-1) for o in _outputs(*R.run(mode, xs[0], st_, weights,
                                                               reverse))])

    assert mt.autograd.gradgradcheck(f, leaves)


def test_float32_layer_keeps_float32_and_matches_float64():
    layer = nn.LSTM(5, 6, num_layers=2)
    x = np.random.default_rng(1).standard_normal((7, 3, 5)).astype(np.float32)
    out, (h, c) = layer(mt.tensor(x))
    assert out.dtype == h.dtype == c.dtype == np.float32
    wide = nn.LSTM(5, 6, num_layers=2, dtype=np.float64)
    wide.load_state_dict({k: v.numpy().astype(np.float64)
                          for k, v in layer.state_dict().items()})
    ref, _ = wide(mt.tensor(x.astype(np.float64)))
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)
