"""explain(loss, backward=True): backward made visible, one gradient rule at a time.

What it shows is what runs, because it runs it: a real ``backward()`` from the
node, with a dry, recording trace (node/trace.py). Every ``.grad`` it would
write goes into a scratch tensor instead -- the same kernel, with the same
saver -- the graph is kept (``retain_graph=True``), and the kernels' debug
lines are collected (tensor/explain.py ``collect_debug``), not printed. So no
``.grad`` changes, and a ``backward()`` afterwards runs the kernels listed
(tests/node/test_explain_backward.py counts both with ``count_kernels``).
Values the pass computes and keeps, as any backward keeps them, stay computed.

For each step, in the order backward runs them: the rule (``n2 = tanh(n1)``),
the gradient expression it builds for each input (``grad(n1) = grad(n2) *
(1 - n2 * n2)``; ``+=`` where an input already had a term), and the kernels
that ran in that step -- a rule's expression usually runs later, fused with
the rules after it, in the kernel that needs its value (a matmul's operand, a
write into ``.grad``), whose debug line names the rules it computes.
"""

from __future__ import annotations

from ..tensor.explain import collect_debug, debug_names, formula, plural, wrap
from ..tensor.expr import Exp
from ..tensor.names import Names
from ..tensor.tensor import Tensor
from .backward import backward
from .explain import node_graph, node_names
from .trace import BackwardTrace, Step, explaining, rule_name


def backward_steps(root, describe=None) -> list[Step]:
    """The steps a ``backward()`` from ``root`` takes, with the kernels each one ran
    (run into scratch: no ``.grad`` changes; the graph is kept). ``describe(step,
    input, gradient)`` gives the text kept for each gradient a rule builds."""
    trace = BackwardTrace(dry=True, record=True, device=root.device.type, describe=describe)
    with explaining(trace), collect_debug() as lines:
        trace.lines = lines
        backward(root, retain_graph=True)
    return trace.steps


def explain_backward(root) -> str:
    """The gradient rules a ``backward()`` from ``root`` runs, in order, the expression
    each builds and the kernels that compute them (see the module docstring)."""
    nodes, _ = node_graph(root)
    names = Names.of_caller()
    node_name = node_names(nodes, names.known)
    for n in nodes:
        names.known[id(n)] = node_name[id(n)]
        value = n.__exp__()
        names.stops[id(value)] = node_name[id(n)]

    def describe(step: Step, inp, ig) -> str:  # as the rule builds it: nothing computed yet
        grad, label = step.grad, f"grad({node_name[id(step.node)]})"
        if type(grad) is Tensor:
            names.add_tensor(grad, label)
        elif isinstance(grad, Exp):
            names.stops[id(grad)] = label
        return _formula(ig, names)

    named = [(x, node_name[id(n)]) for n in nodes for x in (n, n.__exp__())]
    with debug_names(named):
        steps = backward_steps(root, describe)
    rules = sum(1 for s in steps if s.rule)
    lines = [f"Backward from {node_name[id(root)]}: {plural(rules, 'rule')} in the order "
             "backward() runs them, the gradient each builds, the kernels that compute them",
             "(a real pass into scratch tensors: no .grad changed, the graph is kept)", ""]
    seen: set[int] = set()
    for i, step in enumerate(steps, 1):
        lines += _step_text(i, step, node_name, seen)
    return "\n".join(lines + [""] + _total_text(steps, node_name[id(root)]))


def _step_text(i: int, step: Step, node_name, seen: set[int]) -> list[str]:
    name = node_name.get(id(step.node), "?")
    if step.rule:
        ctx = step.node.grad_fn
        args = ", ".join(node_name[id(x)] if id(x) in node_name else repr(x)
                         for x in ctx.inputs)  # repr of a Node would compute it
        head = f"{i:>3}. {name} = {rule_name(ctx)}({args})"
        body = []
        for inp, _, text in step.built:
            target = node_name.get(id(inp), "?")
            saver = "+=" if id(inp) in seen else "="
            seen.add(id(inp))
            body += wrap("       ", f"grad({target}) {saver} {text}")
    else:
        saver = "=" if step.node.grad is None else "+="
        head = f"{i:>3}. {name}.grad {saver} grad({name})"
        body = []
    kernels = [f"       {line}" for line in step.kernels]
    if not kernels and step.counts:
        kernels = [f"       {_counts_text(step.counts)} (no debug line)"]
    if not kernels and not step.rule:
        kernels = ["       no kernel: written at once with NumPy (tensor/eager.py)"]
    return [head] + body + kernels


def _formula(e, names: Names) -> str:
    if not isinstance(e, Exp):  # below the fusion threshold: an array, computed at once
        return f"{type(e).__name__} {tuple(getattr(e, 'shape', ()))}, computed at once"
    return formula(e, names)


def _counts_text(counts: dict) -> str:
    return ", ".join(f"{n} {kind}" for kind, n in counts.items())


def _total_text(steps: list[Step], root_name: str) -> list[str]:
    counts: dict[str, int] = {}
    for step in steps:
        for kind, n in step.counts.items():
            counts[kind] = counts.get(kind, 0) + n
    total = sum(counts.values())
    detail = f" ({_counts_text(counts)})" if counts else ""
    return wrap("", f"Kernels: {total}{detail}, as {root_name}.backward() runs them: a rule "
                "with none built an expression that a later kernel computes, fused with the "
                "rules after it (its debug line names them)")
