"""draw_graph and to_dot show gradients after backward (issue 25): a leaf's, and one kept
by ``retain_grad()``, with shape, dtype and norm; pictures run no kernel."""

from __future__ import annotations

import numpy as np

import minitorch_exp as mt
from minitorch_exp.node.graph import graph_view


def _graph():
    x = mt.randn(64, 96)
    W = mt.randn(96, 80, requires_grad=True)  # noqa: N806
    h = (x @ W).tanh()
    h.retain_grad()
    return x, W, h, (h * h).mean()


def _label(view, name: str) -> list[str]:
    return next(view.labels[id(n)] for n in view.nodes if view.names[id(n)] == name)


def test_labels_show_grads_after_backward():
    x, W, h, loss = _graph()
    assert not any("grad " in line for lines in graph_view(loss).labels.values()
                   for line in lines)
    loss.backward(retain_graph=True)  # the graph stays, to be drawn
    view = graph_view(loss)
    norm = np.linalg.norm(W.grad.numpy().astype(np.float64))
    assert f"grad (96, 80) float32 · norm {norm:.4g}" in _label(view, "W")
    assert any(line.startswith("grad (64, 80) float32 · norm ") for line in _label(view, "h"))
    assert not any(line.startswith("grad ") for line in _label(view, "x"))
    assert not any(line.startswith("grad ") for line in _label(view, "loss"))


def test_dot_and_png_after_backward_run_no_kernel(tmp_path):
    x, W, h, loss = _graph()
    loss.backward(retain_graph=True)
    with mt.count_kernels() as k:
        dot = mt.to_dot(loss)
        path = mt.draw_graph(loss, tmp_path / "graph.png")
    assert k.total == 0
    assert "grad (96, 80) float32 · norm " in dot
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_graph_freed_by_backward_says_so():
    *_, loss = _graph()
    loss.backward()
    assert "its inputs were freed by backward()" in mt.to_dot(loss)
