"""The Node graph as DOT and PNG, fusion groups, explain on Nodes, and detect_anomaly."""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp.node.anomaly import AnomalyError, is_anomaly_enabled
from minitorch_exp.node.explain import fused_groups, node_graph
from minitorch_exp.node.graph import graph_view, layers


def _mlp():
    x = mt.randn(3, 4)
    W = mt.randn(4, 5, requires_grad=True)
    b = mt.zeros(5, requires_grad=True)
    h = (x @ W + b).relu()
    y = h * 2 + 1
    return x, W, b, h, y


def has(nodes, node) -> bool:
    """Membership by identity (``in`` would compare Nodes elementwise)."""
    return any(n is node for n in nodes)


# ---- the graph and its fusion groups ------------------------------------------------------

def test_node_graph_lists_inputs_before_consumers():
    *_, h, y = _mlp()
    nodes, consumers = node_graph(y)
    index = {id(n): i for i, n in enumerate(nodes)}
    for n in nodes:
        for user in consumers.get(id(n), []):
            assert index[id(n)] < index[id(user)]
    assert nodes[-1] is y


@pytest.mark.usefixtures("fuse_all")  # lazy values on tiny tensors
def test_lazy_chain_is_one_group():
    *_, h, y = _mlp()
    nodes, consumers = node_graph(y)
    groups = fused_groups(nodes, consumers)
    assert len(groups) == 1
    group = groups[0]
    assert group[-1] is y and has(group, h)
    assert all(n.is_lazy for n in group)


def test_value_read_by_two_kernels_joins_neither():
    a = mt.randn(4, requires_grad=True)
    shared = a.exp()                    # lazy, read by two separately realized sums
    s1, s2 = (shared * 2).sum(), (shared + 1).sum()
    total = s1 + s2
    nodes, consumers = node_graph(total)
    groups = fused_groups(nodes, consumers)
    assert not any(has(g, shared) for g in groups)


@pytest.mark.usefixtures("fuse_all")  # lazy values on tiny tensors
def test_value_read_twice_inside_one_kernel_joins_it():
    a = mt.randn(4, requires_grad=True)
    t = a.tanh()
    y = t * (t + 1)                     # both readers of t are in y's kernel
    nodes, consumers = node_graph(y)
    (group,) = fused_groups(nodes, consumers)
    assert has(group, t) and has(group, y)


# ---- DOT ---------------------------------------------------------------------------------

@pytest.mark.usefixtures("fuse_all")  # lazy values on tiny tensors
def test_to_dot_structure():
    x, W, b, h, y = _mlp()
    dot = mt.to_dot(y)
    assert dot.startswith("digraph minitorch {") and dot.rstrip().endswith("}")
    assert dot.count("subgraph cluster_") == 1 and 'label="one kernel"' in dot
    for name in ("x", "W", "b", "h", "y"):
        assert f'"{name}" [label="{name}: ' in dot
    view = graph_view(y)
    assert dot.count(" -> ") == len(view.edges)
    assert '"x" -> ' in dot and '"W" -> ' in dot
    assert "relu\\l└─ " in dot               # a lazy node carries its expression tree
    assert re.search(r'"W" \[label="W: leaf\\l\(4, 5\) float32', dot)


def test_to_dot_escapes_quotes_and_braces():
    from minitorch_exp.node.graph import _dot_escape
    assert _dot_escape('a"b{c}\\') == 'a\\"b\\{c\\}\\\\'


# ---- PNG ---------------------------------------------------------------------------------

def test_draw_writes_a_png(tmp_path):
    *_, y = _mlp()
    loss = (y * y).mean()
    path = mt.draw_graph(loss, tmp_path / "graph.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000


def test_layers_put_each_node_below_its_inputs():
    *_, y = _mlp()
    view = graph_view(y)
    depth = {i: d for d, row in enumerate(layers(view)) for i in row}
    assert sorted(depth) == list(range(len(view.nodes)))
    assert all(depth[a] < depth[b] for a, b in view.edges)


# ---- explain on a Node ------------------------------------------------------------------------

@pytest.mark.usefixtures("fuse_all")  # lazy values on tiny tensors
def test_explain_node_shows_graph_groups_and_expression():
    x, W, b, h, y = _mlp()
    text = y.explain()
    assert text.startswith("explain y: add -> (3, 5) float32, lazy")
    assert "Graph (4 levels of inputs)" in text
    assert "h: relu" in text and "lazy; fuses into" in text
    assert "Fusion (each group runs as one kernel)" in text
    assert "-> one kernel producing y (will run when it is realized)" in text
    assert "Expression of y: realizing it runs 1 kernel" in text
    assert "relu [h]" in text
    assert mt.explain(y) == text


@pytest.mark.usefixtures("fuse_all")  # lazy values on tiny tensors
def test_explain_node_after_a_reduction_ran():
    *_, y = _mlp()
    loss = y.mean()
    text = loss.explain()
    assert "in memory" in text and "(already ran)" in text


# ---- detect_anomaly ------------------------------------------------------------------------

def _line_of(fragment: str) -> int:
    lines, start = inspect.getsourcelines(inspect.currentframe().f_back.f_code)
    return start + next(i for i, line in enumerate(lines) if fragment in line)


def test_nan_in_forward_names_op_shapes_and_line():
    x = mt.tensor([1.0, -1.0], requires_grad=True)
    with np.errstate(invalid="ignore"), pytest.raises(AnomalyError) as err:
        with mt.detect_anomaly():
            x.log()  # the anomaly
    message = str(err.value)
    assert "log (Elementwise)" in message and "forward" in message
    assert "inputs:  (2,) float32" in message and "1 NaN" in message
    assert f"{__file__}:{_line_of('x.log()  # the anomaly')}" in message
    assert "x.log()  # the anomaly" in message
    assert not is_anomaly_enabled()


def test_nan_in_backward_names_op_and_where_it_was_created():
    x = mt.tensor([0.0, 1.0], dtype=mt.float64, requires_grad=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        with mt.detect_anomaly():
            y = (x.sqrt() * 0.0).sum()  # sqrt made here
            with pytest.raises(AnomalyError) as err:
                y.backward()
    message = str(err.value)
    assert "the backward of sqrt (Elementwise)" in message and "gradient for input 0" in message
    assert "1 NaN" in message and "(2,) float64" in message
    assert f"{__file__}:{_line_of('# sqrt made here')}" in message


def test_anomaly_error_is_a_runtime_error_and_mode_nests():
    assert issubclass(AnomalyError, RuntimeError)
    with mt.detect_anomaly():
        with mt.detect_anomaly():
            assert is_anomaly_enabled()
        assert is_anomaly_enabled()
    assert not is_anomaly_enabled()


def test_without_anomaly_mode_nan_passes_silently():
    x = mt.tensor([-1.0], requires_grad=True)
    with np.errstate(invalid="ignore"):
        assert np.isnan(x.log().numpy()).all()


def test_anomaly_mode_gives_the_same_values_and_gradients():
    def run():
        mt.manual_seed(3)
        x = mt.randn(4, 3, dtype=mt.float64, requires_grad=True)
        loss = ((x * 2).tanh() @ mt.randn(3, 2, dtype=mt.float64)).sigmoid().mean()
        loss.backward()
        return loss.item(), x.grad.numpy()
    plain = run()
    with mt.detect_anomaly():
        checked = run()
    assert plain[0] == pytest.approx(checked[0])
    np.testing.assert_allclose(plain[1], checked[1])


def test_anomaly_as_decorator():
    @mt.detect_anomaly()
    def f(x):
        return (x - 5).sqrt()

    with np.errstate(invalid="ignore"), pytest.raises(AnomalyError, match="sqrt"):
        f(mt.tensor([1.0], requires_grad=True))
