"""Backward made visible (issue 25): ``explain(loss, backward=True)`` lists each gradient
rule in the order backward runs it, the expression it builds and the kernels that
compute it -- by running that backward into scratch, so the kernels listed are the
ones a real ``backward()`` runs, and no ``.grad`` changes.

Every op is kept lazy (the ``fuse_all`` fixture: fusion threshold 0), so elementwise
work fuses as it does on tensors above the threshold.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp.node import topological_order
from minitorch_exp.node.explain_backward import backward_steps
from minitorch_exp.node.trace import rule_name

pytestmark = pytest.mark.usefixtures("fuse_all")


def _mlp():
    x = mt.randn(64, 96)
    W = mt.randn(96, 80, requires_grad=True)  # noqa: N806
    b = mt.randn(80, requires_grad=True)
    h = (x @ W + b).tanh()
    return x, W, b, h, (h ** 2).mean()


def _shared():
    a = mt.randn(64, 80, requires_grad=True)
    e = a.exp()                       # read by two consumers: its gradient sums two terms
    return a, (e * a).sum() + (e.sigmoid() * 3).sum()


def _retained():
    x, W, b, h, loss = _mlp()
    h.retain_grad()
    return W, loss


def _accumulating():
    x, W, b, h, loss = graph = _mlp()
    loss.backward(retain_graph=True)   # W.grad and b.grad exist: the next pass adds (+=)
    return graph


def _counted(steps) -> dict[str, int]:
    counts: dict[str, int] = {}
    for step in steps:
        for kind, n in step.counts.items():
            counts[kind] = counts.get(kind, 0) + n
    return counts


@pytest.mark.parametrize("graph", [_mlp, _shared, _retained, _accumulating])
def test_the_kernels_listed_are_the_kernels_backward_runs(graph):
    *_, loss = graph()
    listed = _counted(backward_steps(loss))
    with mt.count_kernels() as real:
        loss.backward()
    assert listed == {kind: n for kind, n in real.counts.items() if n and kind != "total"}
    assert sum(listed.values()) > 0


def test_rules_in_the_order_backward_runs_them():
    *_, loss = _mlp()
    rules = [step.rule for step in backward_steps(loss) if step.rule]
    order = [rule_name(n.grad_fn) for n in topological_order(loss) if n.grad_fn is not None]
    assert rules == order == ["Mean", "pow", "tanh", "add", "MatMul"]


def test_a_dry_run_changes_no_grad_and_frees_nothing():
    x, W, b, h, loss = _accumulating()
    grads = {id(p): (p.grad, p.grad.numpy().copy()) for p in (W, b)}

    class Sink:  # an optimizer's flat gradient buffer would be asked for memory here
        taken = 0

        def take(self, device):
            Sink.taken += 1

        def holds(self, value):
            return False

    fresh = mt.randn(96, 80, requires_grad=True)
    fresh.set_grad_sink(Sink())
    text = mt.explain(loss + (x @ fresh).sum(), backward=True)
    assert "fresh.grad = grad(fresh)" in text
    assert fresh.grad is None and Sink.taken == 0 and h.grad is None
    for p in (W, b):
        grad, values = grads[id(p)]
        assert p.grad is grad and np.array_equal(p.grad.numpy(), values)
    assert not loss.grad_fn.freed
    loss.backward()  # the graph is whole: a real pass still runs
    assert np.allclose(W.grad.numpy(), 2 * grads[id(W)][1], rtol=1e-5)


def test_the_text_shows_rules_expressions_and_kernels():
    x, W, b, h, loss = _mlp()
    text = mt.explain(loss, backward=True)
    lines = text.splitlines()
    assert lines[0].startswith("Backward from loss: 5 rules in the order backward() runs them")
    assert "no .grad changed, the graph is kept" in lines[1]
    for expected in ("1. loss = Mean(n3)", "grad(n3) = grad(loss).expand(64, 80) * ",
                     "2. n3 = pow(h, 2)", "grad(h) = grad(n3) * 2 * h",
                     "3. h = tanh(n2)", "grad(n2) = grad(h) * (1 - h * h)",
                     "4. n2 = add(n1, b)", "grad(b) = grad(n2).sum(0)",
                     "5. n1 = MatMul(x, W)", "grad(W) = x.T @ grad(n1)",
                     "6. W.grad = grad(W)"):
        assert expected in text, expected
    fused = next(line for line in lines if " fused " in line)
    assert fused.endswith("(backward of Mean, pow, tanh)")
    blas = next(line for line in lines if " blas " in line)
    assert "W.grad = (96, 80) float32  x.T @ " in blas and blas.endswith("(backward of MatMul)")
    with mt.count_kernels() as real:
        loss.backward()
    assert re.search(rf"^Kernels: {real.total} \(", text, re.M)


def test_the_method_and_the_function_agree_and_compute_no_forward_value():
    x, W, b, h, loss = _mlp()

    def numbers(text):
        return re.sub(r"#\d+", "#", text)

    assert numbers(loss.explain(backward=True)) == numbers(mt.explain(loss, backward=True))
    assert h.is_lazy  # its value is computed inside the backward kernels, never kept


def test_a_node_that_does_not_require_grad_is_refused():
    with pytest.raises(RuntimeError, match="does not require grad"):
        mt.explain(mt.randn(64, 80).sum(), backward=True)


def test_an_expression_takes_no_backward():
    with pytest.raises(TypeError, match="backward= is for a Node"):
        mt.explain(mt.randn(64, 80).__exp__() * 2, backward=True)


def test_another_threads_backward_is_real_while_one_explains(capsys):
    import threading

    reached, release = threading.Event(), threading.Event()

    class Wait(mt.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            reached.set()
            release.wait(30)
            return g

    a = mt.randn(64, 80, requires_grad=True)
    waiting = Wait.apply(a).sum()
    explained = []
    thread = threading.Thread(target=lambda: explained.append(waiting.explain(backward=True)))
    thread.start()
    assert reached.wait(30)          # the explaining thread is inside its dry backward
    x, W, b, h, loss = _mlp()
    loss.backward()                  # this thread's: real, silent
    release.set()
    thread.join(30)
    assert W.grad is not None and a.grad is None
    assert capsys.readouterr().out == ""
    assert re.search(r"\d\. n1\.grad = grad\(n1\)", explained[0])  # a: no name in that thread
