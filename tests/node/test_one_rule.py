"""Every built-in Function keeps one gradient rule, which serves both levels.

A Function's backward runs as written on Tensors in a first backward and on Nodes
under ``create_graph`` (``backward_on_nodes``, calling ``forms.of(g)``'s functions),
or the Function gives its forward again as recorded ops (``as_ops``: the recurrent
sequence), or it is a registry row's (``Elementwise`` and the reductions), whose
row's derivative runs at both levels. None has a second body.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
import minitorch_exp.nn  # noqa: F401  (its Functions are among those checked)
from minitorch_exp import nn
from minitorch_exp.node import forms, higher_order
from minitorch_exp.node.function import Function

from ._helpers import assert_penalties_match_torch

F = nn.functional

#: Functions with no rule on Nodes, refused by name when a second derivative meets them.
NO_NODE_RULE = {"_SyncPoint"}  # DistributedDataParallel's anchor: a first backward only


def _built_in_functions() -> list[type]:
    found, todo = set(), [Function]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if sub.__module__.startswith("minitorch_exp.") and "forward" in vars(sub):
                found.add(sub)
    return sorted(found, key=lambda c: (c.__module__, c.__name__))


def _rule_kind(cls) -> str | None:
    if cls.backward_on_nodes:
        return "one body"
    if hasattr(cls, "as_ops"):
        return "forward as ops"
    if cls in higher_order.RULES or issubclass(cls, mt.node.ops.Reduction):
        return "registry row"
    return None


def test_no_built_in_function_has_a_second_rule_body():
    classes = _built_in_functions()
    assert len(classes) > 20  # the walk found them: ops, library rows, nn's
    assert [c.__name__ for c in classes if hasattr(c, "graph_backward")] == []
    without = {c.__name__ for c in classes if _rule_kind(c) is None}
    assert without == NO_NODE_RULE
    assert set(higher_order.RULES) == {mt.node.ops.Elementwise, "reduction"}


def test_every_form_has_both_levels():
    """``forms.add`` registers a function at both levels; the Node level also has the
    registry's elementwise functions, which ``_e(g)`` finds there."""
    tensor_names = set(vars(forms.TENSORS))
    assert tensor_names <= set(vars(forms.NODES))
    assert {"matmul", "sum_to", "getitem", "place_at_index", "window_scatter",
            "gather"} <= tensor_names
    with pytest.raises(ValueError, match="already registered"):
        forms.add({"matmul": None}, {"matmul": None})
    with pytest.raises(ValueError, match="different functions"):
        forms.add({"a_new_name": None}, {})


def _leaf(rng, *shape):
    return mt.tensor(rng.standard_normal(shape), requires_grad=True)


def _cases():
    rng = np.random.default_rng(3)
    x3, w, b = _leaf(rng, 2, 3, 4), _leaf(rng, 5, 4), _leaf(rng, 5)
    z, soft = _leaf(rng, 3, 5), mt.tensor(rng.dirichlet(np.ones(5), 3))
    x = _leaf(rng, 4, 3)
    rows = np.array([2, 0, 2, 3])
    return {
        "linear, every operand, 3-D input": (
            lambda x, w, b: F.linear(x.tanh(), w, b).sigmoid(), [x3, w, b]),
        "linear without bias": (lambda x, w: F.linear(x, w) ** 2, [x3, w]),
        "cross-entropy, soft targets": (
            lambda z: mt.node.ops.softmax_cross_entropy(z * z, soft).sum(), [z]),
        "cross-entropy through a linear": (
            lambda w, b: F.cross_entropy(F.linear(x3.reshape(6, 4), w, b),
                                         mt.tensor(np.arange(6) % 5)), [w, b]),
        "cat of three": (lambda x: mt.cat([x, x * x, x.sin()], 0).tanh() * 2, [x]),
        "repeated rows": (lambda x: x[rows] * x[rows].exp(), [x]),
        "a strided slice, twice": (lambda x: x[::2, 1:][::-1] * x[1::2, :2], [x]),
        "to the same device": (lambda x: x.to("cpu").exp() * x, [x]),
        "embedding with padding": (
            lambda w: F.embedding(mt.tensor(np.array([[3, 2], [1, 3]])), w,
                                  padding_idx=0).sin() * w[:2, :2].sum(), [x]),
    }


@pytest.mark.parametrize("what", list(_cases()))
def test_the_one_body_rules_pass_gradgradcheck(what):
    fn, args = _cases()[what]
    assert mt.autograd.gradgradcheck(fn, args)


@pytest.mark.parametrize("mode", ["RNN_TANH", "LSTM", "GRU"])
def test_a_recurrent_layer_passes_gradgradcheck(mode):
    """The fused sequence's forward again as op-by-op steps (``as_ops``)."""
    rng = np.random.default_rng(5)
    layer = {"RNN_TANH": nn.RNN, "LSTM": nn.LSTM, "GRU": nn.GRU}[mode](3, 2).double()
    x = _leaf(rng, 3, 2, 3)
    assert mt.autograd.gradgradcheck(lambda x: (layer(x)[0] ** 2).sum(), [x])


@settings(max_examples=20, deadline=None)
@given(groups=st.integers(1, 2), c=st.integers(1, 2), o=st.integers(1, 2),
       size=st.tuples(st.integers(2, 4), st.integers(2, 4)),
       kernel=st.tuples(st.integers(1, 3), st.integers(1, 3)), stride=st.integers(1, 2),
       padding=st.integers(0, 1), dilation=st.integers(1, 2), extra=st.integers(0, 1),
       seed=st.integers(0, 2**31))
def test_transposed_convolution_penalties_match_pytorch_on_drawn_shapes(
        groups, c, o, size, kernel, stride, padding, dilation, extra, seed):
    """The weight's and bias's gradients of ``|d score / d x|^2`` through a transposed
    convolution, against PyTorch, for shapes and windows hypothesis draws."""
    output_padding = extra if extra < max(stride, dilation) else 0
    rng = np.random.default_rng(seed)
    values = [rng.standard_normal((2, c * groups, *size)),
              rng.standard_normal((c * groups, o, *kernel)), rng.standard_normal(o * groups)]

    def penalty(lib, tensor):
        x, w, b = xs = [tensor(a, requires_grad=True) for a in values]
        h = lib.nn.functional.conv_transpose2d(x, w, b, stride=stride, padding=padding,
                                               output_padding=output_padding,
                                               groups=groups, dilation=dilation).tanh()
        g, = lib.autograd.grad((h.sin() * h).sum(), x, create_graph=True)
        (g ** 2).sum().backward()
        return [t.grad.numpy() for t in xs[1:]]

    assert_penalties_match_torch(penalty)


def test_a_first_backward_still_computes_a_small_linear_at_once():
    """The one body on Tensors: below the threshold a product is computed now (a
    Tensor); a large weight's gradient stays a lazy product, which backward writes
    straight into the gradient buffer."""
    rng = np.random.default_rng(0)
    for n_in, n_out, kind in ((256, 10, "Tensor"), (784, 256, "Dot")):
        w = mt.tensor(rng.standard_normal((n_out, n_in)).astype(np.float32),
                      requires_grad=True)
        y = F.linear(mt.tensor(rng.standard_normal((32, n_in)).astype(np.float32)), w)
        gx, gw = y.grad_fn.fn.backward(y.grad_fn, mt.ones_like(y).value)
        assert gx is None and type(gw).__name__ == kind
        np.testing.assert_allclose(
            mt.tensor(gw.eval() if kind == "Dot" else gw).numpy(),
            np.ones((32, n_out), np.float32).T @ y.grad_fn.saved_tensors[0].numpy(),
            rtol=1e-5)


def _cross_entropy_context(loss):
    todo = [loss.grad_fn]
    while todo:
        ctx = todo.pop()
        if ctx.fn is mt.node.ops.SoftmaxCrossEntropy:
            return ctx
        todo += [f for f, _ in ctx.next_functions if hasattr(f, "next_functions")]
    raise AssertionError("no SoftmaxCrossEntropy in the graph")


@pytest.mark.parametrize("batch", [8, 512])  # the softmax computed now, and kept lazy
def test_backward_frees_what_a_function_kept_on_its_context(batch):
    """Cross-entropy keeps its forward's softmax on ctx for a first backward (a lazy one
    holds the logits' tree); backward drops it with the saved tensors, unless the graph
    is retained for a second backward, which then gives the same gradient."""
    rng = np.random.default_rng(batch)
    z = mt.tensor(rng.standard_normal((batch, 300)), requires_grad=True)
    y = mt.tensor(rng.integers(0, 300, batch))
    loss = F.cross_entropy(z * 2, y)
    ctx = _cross_entropy_context(loss)
    assert "softmax" in vars(ctx)
    loss.backward(retain_graph=True)
    first = z.grad.numpy().copy()
    assert "softmax" in vars(ctx)
    loss.backward()
    assert "softmax" not in vars(ctx) and ctx.freed
    np.testing.assert_allclose(z.grad.numpy(), 2 * first, rtol=1e-12)
