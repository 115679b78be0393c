"""nn.RNN, LSTM, GRU and their cells against PyTorch's, from the same weights.

Values and gradients (of the input, the initial states and every parameter) on
hypothesis-drawn sizes and settings, on both sides of the fusion policy; a float64
gradcheck; PyTorch's state dicts loaded one to one; the kernels one step runs when
its gate arithmetic fuses.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.node.gradcheck import gradcheck

KINDS = {  # name -> (class name, constructor keywords)
    "rnn_tanh": ("RNN", {}),
    "rnn_relu": ("RNN", {"nonlinearity": "relu"}),
    "lstm": ("LSTM", {}),
    "gru": ("GRU", {}),
}
POLICIES = {"default": contextlib.nullcontext, "fuse_all": lambda: mt.fusion(threshold=0)}


def _twins(kind: str, **kw):
    """Our module and PyTorch's (float64), ours loaded from PyTorch's state dict."""
    torch = pytest.importorskip("torch")
    name, extra = KINDS[kind]
    theirs = getattr(torch.nn, name)(**extra, **kw).double()
    ours = getattr(nn, name)(**extra, **kw, dtype=np.float64)
    state = {k: v.detach().numpy() for k, v in theirs.state_dict().items()}
    assert list(ours.state_dict()) == list(state)  # PyTorch's names, in PyTorch's order
    ours.load_state_dict(state)
    return ours, theirs


def _pair(rng, shape):
    """The same float64 values as a Node and a torch tensor, both requiring grad."""
    import torch
    a = rng.standard_normal(shape)
    return mt.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)


def _weighted_sum(outputs, weights):
    """sum(out_i * w_i): every element of every output takes part in the gradients."""
    return sum((o * w).sum() for o, w in zip(outputs, weights))


def _flat(result):
    """(output, h) or (output, (h, c)) -> [output, h(, c)]."""
    out, state = result
    return [out, *state] if isinstance(state, tuple) else [out, state]


def _check(ours, theirs, ours_in, theirs_in, rng, rtol=1e-7, atol=1e-9):
    """Run both, compare every output, then the gradients of every input and parameter."""
    import torch
    got, want = _flat(ours(*ours_in)), _flat(theirs(*theirs_in))
    assert [g.shape for g in got] == [tuple(w.shape) for w in want]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.detach().numpy(), rtol=rtol, atol=atol)
    weights = [rng.standard_normal(g.shape) for g in got]
    _weighted_sum(got, [mt.tensor(w) for w in weights]).backward()
    _weighted_sum(want, [torch.tensor(w) for w in weights]).backward()
    leaves = [(a, b) for a, b in zip(_leaves(ours_in), _leaves(theirs_in))]
    leaves += [(p, dict(theirs.named_parameters())[n]) for n, p in ours.named_parameters()]
    for a, b in leaves:
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=rtol * 10, atol=atol * 10)


def _leaves(inputs):
    """The tensors among a call's arguments (a state may be a tuple)."""
    for a in inputs:
        if isinstance(a, tuple):
            yield from a
        elif a is not None:
            yield a


# ---- the layers -------------------------------------------------------------------------------

@pytest.mark.parametrize("policy", sorted(POLICIES))
@settings(max_examples=20, deadline=None)
@given(kind=st.sampled_from(sorted(KINDS)), input_size=st.integers(1, 4),
       hidden=st.integers(1, 5), layers=st.integers(1, 3), length=st.integers(1, 6),
       batch=st.integers(1, 3), batch_first=st.booleans(), bidirectional=st.booleans(),
       bias=st.booleans(), with_state=st.booleans(), seed=st.integers(0, 2**16))
def test_layers_match_pytorch(policy, kind, input_size, hidden, layers, length, batch,
                              batch_first, bidirectional, bias, with_state, seed):
    ours, theirs = _twins(kind, input_size=input_size, hidden_size=hidden, num_layers=layers,
                          bias=bias, batch_first=batch_first, bidirectional=bidirectional)
    rng = np.random.default_rng(seed)
    shape = (batch, length, input_size) if batch_first else (length, batch, input_size)
    x, tx = _pair(rng, shape)
    ours_in, theirs_in = [x], [tx]
    if with_state:
        state_shape = (layers * (2 if bidirectional else 1), batch, hidden)
        states = [_pair(rng, state_shape) for _ in range(2 if kind == "lstm" else 1)]
        mine, yours = zip(*states)
        ours_in.append(mine if kind == "lstm" else mine[0])
        theirs_in.append(yours if kind == "lstm" else yours[0])
    with POLICIES[policy]():
        _check(ours, theirs, ours_in, theirs_in, rng)


@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn_relu"])
def test_unbatched_input_matches_pytorch(kind):
    ours, theirs = _twins(kind, input_size=3, hidden_size=4, num_layers=2, bidirectional=True)
    rng = np.random.default_rng(0)
    x, tx = _pair(rng, (5, 3))
    states = [_pair(rng, (4, 4)) for _ in range(2 if kind == "lstm" else 1)]
    mine, yours = zip(*states)
    state, tstate = (mine, yours) if kind == "lstm" else (mine[0], yours[0])
    _check(ours, theirs, [x, state], [tx, tstate], rng)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_lstm_projection_matches_pytorch(bidirectional):
    ours, theirs = _twins("lstm", input_size=3, hidden_size=5, num_layers=2, proj_size=2,
                          bidirectional=bidirectional)
    assert ours.weight_hr_l0.shape == (2, 5) and ours.weight_hh_l1.shape == (20, 2)
    rng = np.random.default_rng(1)
    x, tx = _pair(rng, (4, 2, 3))
    _check(ours, theirs, [x], [tx], rng)


def test_dropout_between_layers_in_training_only():
    mt.manual_seed(0)
    lstm = nn.LSTM(3, 4, num_layers=2, dropout=0.5)
    x = mt.randn(5, 2, 3)
    a, b = lstm(x)[0].numpy(), lstm(x)[0].numpy()
    assert not np.allclose(a, b)  # a new mask each call
    lstm.eval()
    a, b = lstm(x)[0].numpy(), lstm(x)[0].numpy()
    np.testing.assert_array_equal(a, b)
    with pytest.warns(UserWarning, match="num_layers=1"):
        single = nn.GRU(3, 4, dropout=0.5)
    np.testing.assert_array_equal(single(x)[0].numpy(), single(x)[0].numpy())  # none before


def test_float32_state_dict_loads_one_to_one_and_gives_pytorch_outputs():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    theirs = torch.nn.LSTM(4, 6, num_layers=2, bidirectional=True, batch_first=True)
    ours = nn.LSTM(4, 6, num_layers=2, bidirectional=True, batch_first=True)
    keys = ours.load_state_dict(theirs.state_dict())
    assert keys.missing_keys == [] and keys.unexpected_keys == []
    x = np.random.default_rng(0).standard_normal((3, 7, 4)).astype(np.float32)
    out, (h, c) = ours(mt.tensor(x))
    tout, (th, tc) = theirs(torch.tensor(x))
    for a, b in [(out, tout), (h, th), (c, tc)]:
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_parameters_are_pytorchs_names_shapes_and_init(kind):
    torch = pytest.importorskip("torch")
    name, extra = KINDS[kind]
    kw = {"input_size": 7, "hidden_size": 16, "num_layers": 2, "bidirectional": True}
    ours, theirs = getattr(nn, name)(**extra, **kw), getattr(torch.nn, name)(**extra, **kw)
    shapes = {n: tuple(p.shape) for n, p in theirs.named_parameters()}
    assert {n: p.shape for n, p in ours.named_parameters()} == shapes
    assert [[p.shape for p in ps] for ps in ours.all_weights] == \
        [[tuple(p.shape) for p in ps] for ps in theirs.all_weights]
    values = np.concatenate([p.numpy().ravel() for p in ours.parameters()])
    assert np.abs(values).max() <= 0.25 and np.abs(values).max() > 0.24  # U(+-1/sqrt(16))
    assert repr(ours) == repr(theirs)


def test_bad_arguments_are_refused_with_the_expected_shape():
    lstm = nn.LSTM(3, 4, num_layers=2)
    with pytest.raises(ValueError, match=r"\(T, B, 3\)"):
        lstm(mt.randn(5, 2, 4))
    with pytest.raises(RuntimeError, match=r"c0: expected shape \(2, 2, 4\)"):
        lstm(mt.randn(5, 2, 3), (mt.zeros(2, 2, 4), mt.zeros(1, 2, 4)))
    with pytest.raises(ValueError, match="nonlinearity"):
        nn.RNN(3, 4, nonlinearity="sigmoid")
    with pytest.raises(ValueError, match="proj_size"):
        nn.GRU(3, 4, proj_size=2)


# ---- the cells ------------------------------------------------------------------------------

CELLS = {"rnn_tanh": ("RNNCell", {}), "rnn_relu": ("RNNCell", {"nonlinearity": "relu"}),
         "lstm": ("LSTMCell", {}), "gru": ("GRUCell", {})}


@pytest.mark.parametrize("policy", sorted(POLICIES))
@settings(max_examples=15, deadline=None)
@given(kind=st.sampled_from(sorted(CELLS)), input_size=st.integers(1, 4),
       hidden=st.integers(1, 5), batch=st.integers(0, 3), bias=st.booleans(),
       with_state=st.booleans(), seed=st.integers(0, 2**16))
def test_cells_match_pytorch(policy, kind, input_size, hidden, batch, bias, with_state, seed):
    torch = pytest.importorskip("torch")
    name, extra = CELLS[kind]
    theirs = getattr(torch.nn, name)(input_size, hidden, bias, **extra).double()
    ours = getattr(nn, name)(input_size, hidden, bias, **extra, dtype=np.float64)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    rng = np.random.default_rng(seed)
    lead = (batch,) if batch else ()  # batch 0: an unbatched input
    x, tx = _pair(rng, lead + (input_size,))
    ours_in, theirs_in = [x], [tx]
    if with_state:
        states = [_pair(rng, lead + (hidden,)) for _ in range(2 if kind == "lstm" else 1)]
        mine, yours = zip(*states)
        ours_in.append(mine if kind == "lstm" else mine[0])
        theirs_in.append(yours if kind == "lstm" else yours[0])
    with POLICIES[policy]():
        got, want = ours(*ours_in), theirs(*theirs_in)
        got, want = (got, want) if kind == "lstm" else ((got,), (want,))
        weights = [rng.standard_normal(g.shape) for g in got]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w.detach().numpy(), rtol=1e-7, atol=1e-9)
        _weighted_sum(got, [mt.tensor(w) for w in weights]).backward()
        _weighted_sum(want, [torch.tensor(w) for w in weights]).backward()
    theirs_params = dict(theirs.named_parameters())
    pairs = list(zip(_leaves(ours_in), _leaves(theirs_in)))
    pairs += [(p, theirs_params[n]) for n, p in ours.named_parameters()]
    for a, b in pairs:
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-6, atol=1e-8)


# ---- gradcheck ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["LSTM", "GRU"])
def test_gradcheck_float64(name):
    mt.manual_seed(0)
    layer = getattr(nn, name)(2, 2, num_layers=2, bidirectional=True, dtype=np.float64)
    x = mt.randn(3, 2, 2, dtype=np.float64, requires_grad=True)
    h0 = mt.randn(4, 2, 2, dtype=np.float64, requires_grad=True)
    c0 = mt.randn(4, 2, 2, dtype=np.float64, requires_grad=True)
    state = (h0, c0) if name == "LSTM" else h0
    params = list(layer.parameters())

    def run(x, *_):
        out, last = layer(x, state)
        parts = [out, *last] if name == "LSTM" else [out, last]
        return mt.cat([p.reshape(-1) for p in parts])

    assert gradcheck(run, [x, h0] + ([c0] if name == "LSTM" else []) + params)


# ---- fusion: the kernels of one step ------------------------------------------------------------

def _kernels_per_step(kind: str) -> tuple[dict, dict]:
    """Forward and backward kernels one more time step costs, by kind (threshold 0)."""
    name, extra = KINDS[kind]
    layer = getattr(nn, name)(3, 5, **extra)

    def counts(length):
        x = mt.randn(length, 4, 3, requires_grad=True)
        with mt.fusion(threshold=0):
            with mt.count_kernels() as fwd:
                loss = layer(x)[0].sum()
            with mt.count_kernels() as bwd:
                loss.backward()
        return fwd.counts, bwd.counts

    (f4, b4), (f5, b5) = counts(4), counts(5)
    diff = [{k: n - a.get(k, 0) for k, n in b.items() if n - a.get(k, 0)} for a, b in
            [(f4, f5), (b4, b5)]]
    return diff[0], diff[1]


@pytest.mark.parametrize("kind, forward, backward", [
    # One step of the sequence node (nn/recurrence.py): the recurrent product, then one
    # kernel per statement of the step's group -- on this CPU the cost model gives the
    # sigmoid/tanh statements to NumPy, which has no grouped kernels. Backward: the gate
    # gradients' group and one product; the weight's gradient is one product for all
    # steps. A GRU step reads the previous output, a row of the buffer it writes, through
    # a private copy.
    ("rnn_tanh", {"blas": 1, "fused": 1}, {"blas": 1, "fused": 1}),
    ("lstm", {"blas": 1, "fused": 5}, {"blas": 1, "fused": 6}),
    ("gru", {"blas": 1, "fused": 4, "copy": 1}, {"blas": 1, "fused": 7, "copy": 1}),
])
def test_a_time_step_runs_a_fixed_number_of_kernels(kind, forward, backward):
    fwd, bwd = _kernels_per_step(kind)
    assert {k: v for k, v in fwd.items() if k != "total"} == forward
    assert {k: v for k, v in bwd.items() if k != "total"} == backward


def test_lstm_cell_update_is_one_kernel_and_h_another():
    """After the two products and the pre-activations' sum, ``c = sigmoid(f) * c +
    sigmoid(i) * tanh(g)`` is one kernel, and ``h = sigmoid(o) * tanh(c)`` one more, run
    when something reads it."""
    cell = nn.LSTMCell(3, 5)
    x, h, c = mt.randn(4, 3), mt.randn(4, 5), mt.randn(4, 5)
    with mt.fusion(threshold=0):
        cell(x, (h, c))  # the parameters' first reads (copies out of their arrays)
        with mt.count_kernels() as k:
            h1, c1 = cell(x, (h, c))
        assert (k["blas"], k["fused"], k.total) == (2, 2, 4) and not c1.is_lazy
        assert h1.is_lazy
        with mt.count_kernels() as k:
            h1.numpy()
        assert k["fused"] == k.total == 1


# ---- the benchmark's step ---------------------------------------------------------------------

def test_benchmark_steps_match_pytorchs():
    """benchmarks/bench_rnn.py times the step it claims: without dropout, two steps of
    ours and of PyTorch's language model leave the same parameters."""
    pytest.importorskip("torch")
    folder = str(Path(__file__).resolve().parents[2] / "benchmarks")
    sys.path.insert(0, folder)
    try:
        import bench_rnn
        bench_rnn.check_same_steps(bench_rnn.initial_state(), bench_rnn.batches())
    finally:
        sys.path.remove(folder)
        sys.modules.pop("bench_rnn", None)
