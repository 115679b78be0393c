"""explain() agrees with the engine over hypothesis-drawn Node programs.

``tests/tensor/test_lowering.py`` checks the lowering walk on tensor-level trees.
Here the trees are the ones the Node level builds -- broadcasts made explicit as
expands, reductions that keep their input for backward, matmuls, views of
non-contiguous leaves -- forward and backward:

* forward: the kernels ``y.explain()`` says realizing ``y`` runs (their number in
  its text, their kinds from the same walk, ``lower.split``) are the kernels the
  engine launches when ``y`` is realized;
* backward: the kernel total and kinds ``loss.explain(backward=True)`` lists are
  the kernels ``loss.backward()`` launches;

and values equal NumPy's (forward) and fusion turned off (gradients).

Leaves hold more elements than the fusion threshold, so ops stay lazy and fuse.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
from minitorch_exp.tensor.lower import split

from ._helpers import LAYOUTS, leaf

S = 72  # S * S = 5184 elements: above the fusion threshold (4096), so ops stay lazy


def _values(seed: int, shape) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.5, 1.5, shape)


# A program is a tree of tuples: ("leaf", seed, layout), ("vector", seed),
# (op, child) or (op, child, child). ``run`` builds it with Nodes and with NumPy.
UNARY = ["tanh", "exp_small", "sigmoid", "relu_shift", "affine", "T", "reshape",
         "sum0", "mean1", "amax1", "bias"]
BINARY = ["add", "mul", "matmul", "maximum"]

leaves = st.tuples(st.just("leaf"), st.integers(0, 3), st.sampled_from(LAYOUTS))


def _extend(children):
    return st.one_of(st.tuples(st.sampled_from(UNARY), children),
                     st.tuples(st.sampled_from(BINARY), children, children))


programs = st.recursive(leaves, _extend, max_leaves=5)


def run(program, made: dict):
    """``(node, array)`` for ``program``; ``made`` keeps each leaf Node (one per seed and
    layout, so a program may read a leaf twice)."""
    op, *args = program
    if op == "leaf":
        key = tuple(args)
        if key not in made:
            made[key] = leaf(_values(args[0], (S, S)), args[1])
        return made[key], _values(args[0], (S, S))
    if op == "bias":  # a vector broadcast along the rows: an explicit expand
        x, a = run(args[0], made)
        if ("vector",) not in made:
            made[("vector",)] = leaf(_values(9, (S,)))
        return x + made[("vector",)], a + _values(9, (S,))
    if len(args) == 1:
        return _unary(op, *run(args[0], made))
    return _binary(op, *run(args[0], made), *run(args[1], made))


def _unary(op, x, a):
    if op == "tanh":
        return x.tanh(), np.tanh(a)
    if op == "exp_small":
        return (x * 0.1).exp(), np.exp(a * 0.1)
    if op == "sigmoid":
        return x.sigmoid(), 1 / (1 + np.exp(-a))
    if op == "relu_shift":
        return (x - 1.0).relu(), np.maximum(a - 1.0, 0)
    if op == "affine":
        return x * 2.0 + 1.0, a * 2.0 + 1.0
    if op == "T":
        return x.T, a.T
    if op == "reshape":  # through a flat view and back: a copy when the input is strided
        return x.T.reshape(S * S).reshape(S, S) * 0.5, a.T.reshape(S * S).reshape(S, S) * 0.5
    if op == "sum0":  # a reduction feeding more elementwise work
        return x.sum(0, True) * 0.01 + x, a.sum(0, keepdims=True) * 0.01 + a
    if op == "mean1":
        return x - x.mean(1, True), a - a.mean(1, keepdims=True)
    assert op == "amax1"  # saves its input and output for backward
    return x / x.amax(1, True), a / a.max(1, keepdims=True)


def _binary(op, x, a, y, b):
    if op == "add":
        return x + y, a + b
    if op == "mul":
        return x * y * 0.5, a * b * 0.5
    if op == "maximum":
        return mt.maximum(x, y), np.maximum(a, b)
    return (x @ y) * (1.0 / S), (a @ b) * (1.0 / S)


def _launched(counts) -> Counter:
    return Counter({kind: n for kind, n in counts.items() if kind != "total" and n})


def _listed_backward(text: str) -> Counter:
    """The kinds and numbers of the ``Kernels: 3 (2 fused, 1 blas)`` line."""
    found = re.search(r"^Kernels: (\d+)(?: \(([^)]*)\))?", text, re.MULTILINE)
    assert found, text
    kinds = Counter()
    for part in (found.group(2) or "").split(", "):
        if part:
            n, kind = part.split(" ")
            kinds[kind] = int(n)
    assert sum(kinds.values()) == int(found.group(1))
    return kinds


def check_forward(y) -> None:
    if not y.is_lazy:
        return  # computed while the program was built: nothing left to explain
    found = re.search(r"realizing it runs (\d+) kernels?", y.explain())
    kinds = Counter(k.kind for k in split(y.__exp__()).kernels)
    assert found and int(found.group(1)) == sum(kinds.values()), (found, kinds)
    with mt.count_kernels() as ran:
        y.realize()
    assert _launched(ran.counts) == kinds


def gradients(program, fused: bool, realize_first: bool):
    made: dict = {}
    with mt.fusion(fused):
        y, want = run(program, made)
        if realize_first:
            np.testing.assert_allclose(y.numpy(), want, rtol=1e-6)
        loss = (y * y).mean()
        if fused:
            listed = _listed_backward(loss.explain(backward=True))
            with mt.count_kernels() as ran:
                loss.backward()
            assert _launched(ran.counts) == listed
        else:
            loss.backward()
    return {key: node.grad.numpy() for key, node in made.items()}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs.filter(lambda p: p[0] != "leaf"))
def test_explain_lists_the_kernels_realizing_a_node_runs(program):
    y, want = run(program, {})
    check_forward(y)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-6)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs.filter(lambda p: p[0] != "leaf"), st.booleans())
def test_explain_lists_the_kernels_backward_runs(program, realize_first):
    fused = gradients(program, True, realize_first)
    eager = gradients(program, False, realize_first)
    assert fused.keys() == eager.keys()
    for key in fused:
        np.testing.assert_allclose(fused[key], eager[key], rtol=1e-6, atol=1e-12)
