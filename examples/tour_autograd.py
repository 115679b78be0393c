"""A guided tour of autograd in minitorch_exp, runnable top to bottom.

    python examples/tour_autograd.py [--out runs/tours]

A small graph is built one step at a time and drawn (``graph.png``, and
``graph.dot`` for graphviz users); ``backward()`` fills the gradients, which
``gradcheck`` compares with finite differences; a chain of elementwise backward
rules fuses into single kernels (counted with and without ``mt.fusion``);
``no_grad`` keeps an update out of the graph; a custom ``Function`` joins in;
``detect_anomaly`` points at the line that made a NaN; and
``explain(loss, backward=True)`` shows each gradient rule and the kernels that
compute them, with ``retain_grad`` keeping an intermediate gradient.
"""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

import numpy as np

import minitorch_exp as mt
from minitorch_exp.node import topological_order


def section(title: str) -> None:
    print(f"\n{'=' * 78}\n{title}\n{'=' * 78}")


def say(text: str) -> None:
    print(textwrap.dedent(text).strip() + "\n")


# ---- 1. a graph, step by step ------------------------------------------------------

def build_graph():
    section("1. Building a small graph, one step at a time")
    mt.manual_seed(0)
    x = mt.randn(4, 3, dtype=mt.float64)
    W = mt.randn(3, 2, dtype=mt.float64, requires_grad=True)
    b = mt.zeros(2, dtype=mt.float64, requires_grad=True)
    say("""
        x (4, 3) is data; W (3, 2) and b (2,) are parameters (requires_grad=True).
        Each op returns a Node that remembers the Function call that made it.""")
    with mt.count_kernels() as k:
        z = x @ W
    print(f"  z = x @ W          -> {z.grad_fn!r:<22} lazy={z.is_lazy}   kernels run: {k.total}")
    with mt.count_kernels() as k:
        h = (z + b).tanh()
    print(f"  h = (z + b).tanh() -> {h.grad_fn!r:<22} lazy={h.is_lazy}    kernels run: {k.total}")
    with mt.count_kernels() as k:
        loss = (h * h).mean()
    print(f"  loss = (h*h).mean()-> {loss.grad_fn!r:<22} lazy={loss.is_lazy}   "
          f"kernels run: {k.total}\n")
    say("""
        The matmul ran at once (BLAS), the add and tanh stayed lazy, and the mean --
        a reduction -- ran add, tanh, the square and the sum as one pass over z.
        explain() shows the graph around a node and what fused:""")
    print(mt.explain(loss))
    return x, W, b, z, h, loss


def draw(loss, out: Path) -> None:
    section("2. The graph as a picture")
    png = mt.draw_graph(loss, out / "graph.png")
    (out / "graph.dot").write_text(mt.to_dot(loss))
    say(f"""
        Saved {png} (drawn with matplotlib: boxes, arrows, fused groups shaded)
        and {out / 'graph.dot'} (render it with graphviz: dot -Tpng graph.dot).
        Each box holds the node's op and, for a lazy node, its expression tree.
        Nodes are named as explain() named them above: after the variables that
        hold them where the picture is drawn (z, h, loss), the rest n1, n2, ...""")


# ---- 3. backward and gradcheck ---------------------------------------------------------

def backward(x, W, b, loss) -> None:
    section("3. backward() and gradcheck")
    with mt.count_kernels() as k:
        loss.backward()
    print(f"  loss = {loss.item():.6f}; backward ran {k.total} kernels "
          f"({', '.join(f'{n} {kind}' for kind, n in k.counts.items() if n and kind != 'total')})")
    print(f"  dloss/db = {np.round(b.grad.numpy(), 6)}")
    h = np.tanh(x.numpy() @ W.numpy() + b.numpy())
    by_hand = (2 * h * (1 - h * h) / h.size).sum(0)
    assert np.allclose(b.grad.numpy(), by_hand)
    print("  the same as NumPy by hand: sum over rows of 2h(1 - h^2) / n\n")
    ok = mt.gradcheck(lambda W, b: ((x @ W + b).tanh() ** 2).mean(), [W, b])
    say(f"""
        gradcheck compares every element of every gradient with central finite
        differences in float64: {ok}.""")


# ---- 4. the backward chain fuses ----------------------------------------------------------

def chain(x):
    return ((x * 1.5 + 0.5).sigmoid() * x).tanh().sum()


def fusion_counts() -> None:
    section("4. Elementwise backward rules fuse, like the forward")
    counts = {}
    for fused in (False, True):
        x = mt.randn(1000, dtype=mt.float64, requires_grad=True)
        with mt.fusion(fused):
            with mt.count_kernels() as fwd:
                y = chain(x)
            rules = sum(1 for n in topological_order(y) if n.grad_fn is not None)
            with mt.count_kernels() as bwd:
                y.backward()
        counts[fused] = (fwd.total, bwd.total)
    say(f"""
        y = ((x * 1.5 + 0.5).sigmoid() * x).tanh().sum(): five elementwise ops and a sum.
                                  forward kernels   backward kernels
          mt.fusion(False)               {counts[False][0]:>2}                 {counts[False][1]:>2}
          mt.fusion(True)                {counts[True][0]:>2}                 {counts[True][1]:>2}
        mt.fusion(False) realizes every forward op as it is made; with fusion the
        forward is one reduction pass. Backward rules always build expressions, so
        the {rules} backward rules run as {counts[True][1]} kernels either way: one where the
        gradient splits to reach x twice (x * 1.5 and * x), one when it reaches x.""")


# ---- 5. no_grad -----------------------------------------------------------------------

def sgd_step(W, b) -> None:
    section("5. no_grad: an update that builds no graph")
    say("""
        with mt.no_grad(): W -= 0.1 * W.grad, and the same for b. MINITORCH_DEBUG=1
        (here mt.set_debug(1)) prints every kernel as it runs:""")
    mt.set_debug(1)
    try:
        with mt.no_grad():
            with mt.count_kernels() as k:
                W -= 0.1 * W.grad
                b -= 0.1 * b.grad
            probe = W * 2
    finally:
        mt.set_debug(0)
    extra = k.total - 2
    why = (f", and {extra} that compute 0.1 * W.grad and 0.1 * b.grad first: gradcheck read "
           "the gradients with .numpy(), and a lazy value does not wait to read memory that "
           "NumPy may write unannounced") if extra else ""
    say(f"""

        {k.total} kernels: one fused saver pass per parameter{why}.
        Inside no_grad results record nothing: (W * 2).requires_grad =
        {probe.requires_grad}, grad_fn = {probe.grad_fn}.""")


# ---- 6. a custom Function -----------------------------------------------------------------

class Cube(mt.Function):
    """x ** 3, with its derivative written by hand."""

    lazy = True  # elementwise: return an expression and let it fuse with its neighbours

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3 * x * x


def custom_function() -> None:
    section("6. A custom Function")
    x = mt.tensor([-1.0, 0.5, 2.0], dtype=mt.float64, requires_grad=True)
    with mt.count_kernels() as k:
        y = (Cube.apply(x) + 1).sum()
    y.backward()
    say(f"""
        class Cube(mt.Function) has a forward (x * x * x, kept lazy) and a backward
        (grad * 3 * x * x). (Cube(x) + 1).sum() ran {k.total} kernel; the gradient is
        {x.grad.numpy()} = 3 x^2, and gradcheck agrees:
        {mt.gradcheck(lambda a: Cube.apply(a).tanh(), [x])}.""")


# ---- 7. detect_anomaly ----------------------------------------------------------------------

def anomaly() -> None:
    section("7. detect_anomaly: where did the NaN come from?")
    x = mt.tensor([4.0, 1.0, 9.0], requires_grad=True)
    try:
        with mt.detect_anomaly(), np.errstate(invalid="ignore"):
            y = (x - 2).log()  # log of -1: NaN
            y.sum().backward()
    except RuntimeError as err:
        print(textwrap.indent(str(err), "  "))
    say("""

        Inside detect_anomaly every value is realized and checked as it is made
        (forward) and as each backward rule returns (backward), so the error names
        the op, its inputs and the line of your code that created it.""")


# ---- 8. backward made visible --------------------------------------------------------------

def backward_visible() -> None:
    section("8. Backward made visible: explain(loss, backward=True) and retain_grad")
    mt.manual_seed(0)
    x = mt.randn(256, 64, dtype=mt.float64)  # large enough to stay lazy and fuse
    W = mt.randn(64, 32, dtype=mt.float64, requires_grad=True)  # noqa: N806
    h = (x @ W).tanh()
    h.retain_grad()
    loss = (h * h).mean()
    say("""
        h = (x @ W).tanh(); h.retain_grad(); loss = (h * h).mean(). explain(loss,
        backward=True) runs the backward into scratch tensors and lists each rule in
        the order backward runs it, the gradient expression it builds, and the
        kernels each step ran (their debug lines name the rules they compute):""")
    print(mt.explain(loss, backward=True))
    untouched = W.grad is None and h.grad is None
    with mt.count_kernels() as k:
        loss.backward()
    by_hand = 2 * h.numpy() / h.numel()
    say(f"""

        The dry run left every .grad as it was (W.grad and h.grad still None: {untouched});
        loss.backward() then ran {k.total} kernels, the ones listed. h.grad, kept by
        retain_grad(), equals d(loss)/dh = 2h / n: {np.allclose(h.grad.numpy(), by_hand)}.""")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/tours"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    # Every op stays lazy, so fusion shows on tensors small enough to print: by default a
    # CPU op on fewer elements than mt.get_fusion_threshold() is computed at once with
    # NumPy, which is faster there (docs/eager.md).
    mt.set_fusion_threshold(0)
    # z and h stay named here: draw_graph, like explain, names nodes after the
    # variables of its callers, so the picture and the text above agree.
    x, W, b, z, h, loss = build_graph()
    draw(loss, args.out)
    backward(x, W, b, loss)
    fusion_counts()
    sgd_step(W, b)
    custom_function()
    anomaly()
    backward_visible()
    section("Done")
    print(f"Files written to {args.out}/")


if __name__ == "__main__":
    main()
