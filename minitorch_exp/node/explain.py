"""explain() for a Node: the graph around it, which lazy nodes fuse, and its expression.

``Node.explain()`` (and ``mt.explain(node)``) answer here. The Node-aware part --
walking ``grad_fn``, naming the op that made each node, telling lazy from
realized -- lives at this level; the text is drawn with tensor/explain.py's
Exp-level pieces (``Names``, ``TreeView``, ``render_rows``, ``split_named``),
which know nothing of Nodes. node/graph.py draws the same graph as a picture.
"""

from __future__ import annotations

import itertools

from ..tensor import eager
from ..tensor.backends import cpu_backend
from ..tensor.device import as_device
from ..tensor.explain import (
    Names,
    Row,
    TreeView,
    caller_names,
    plural,
    render_rows,
    section,
    shape_str,
    split_named,
)
from ..tensor.expr import RVALUE, Map, Reduce, as_exp, describe
from ..tensor.graphwalk import post_order
from ..tensor.ops import OPS
from .node import Node
from .ops import Elementwise


def _unique(items: list) -> list:
    """``items`` without repeats (by identity), each where it first appears."""
    seen: dict[int, object] = {}
    for x in items:
        seen.setdefault(id(x), x)
    return list(seen.values())


# ---- the graph -------------------------------------------------------------------------------

def node_graph(root: Node) -> tuple[list, dict[int, list]]:
    """Nodes reachable from ``root`` through ``grad_fn``, inputs before their consumers.

    Returns ``(nodes, consumers)``; ``consumers[id(n)]`` lists the nodes reading ``n``.
    """
    order = post_order(root, node_inputs)
    consumers: dict[int, list] = {}
    for node in order:
        for parent in node_inputs(node):
            consumers.setdefault(id(parent), []).append(node)
    return order, consumers


def node_inputs(node: Node) -> list:
    ctx = node.grad_fn
    return [] if ctx is None else _unique([x for x in ctx.inputs if isinstance(x, Node)])


def fused_groups(nodes: list, consumers: dict[int, list]) -> list[list]:
    """Lazy nodes grouped with the nodes that read them: each group is one kernel.

    A lazy value is computed inside its consumer's kernel (a realized consumer
    already ran it that way). When all of its consumers end up in one group,
    it joins that group; when they are in different kernels, each of them
    recomputes it, so it joins none. ``nodes`` must list inputs before consumers.
    """
    group = {id(n): [n] for n in nodes}
    for n in reversed(nodes):  # consumers first: their groups are final
        users = consumers.get(id(n), [])
        targets = _unique([group[id(u)] for u in users])
        if n.is_lazy and len(targets) == 1:
            target = targets[0]
            target.extend(group[id(n)])
            for m in group[id(n)]:
                group[id(m)] = target
    rank = {id(n): i for i, n in enumerate(nodes)}
    groups = [sorted(g, key=lambda m: rank[id(m)]) for g in _unique(list(group.values()))]
    return [g for g in groups if len(g) > 1]


# ---- one node ----------------------------------------------------------------------------------

def node_op(node: Node) -> str:
    """The op that made ``node``: an elementwise op's name, else the Function's name."""
    ctx = node.grad_fn
    if ctx is None:
        if node.is_lazy:
            return f"{describe(node._value)} (not recorded: no input requires grad)"
        return "leaf" if node.requires_grad else "tensor"
    name, attrs = ctx.fn.__name__, ctx.attrs
    if ctx.fn is Elementwise:
        return attrs["op"]
    shown = {k: attrs[k] for k in ("axes", "shape", "dims", "axis", "op") if k in attrs}
    args = ", ".join(f"{k}={v}" for k, v in shown.items())
    return f"{name}({args})" if args else name


def node_state(node: Node) -> str:
    """``lazy`` (an expression not computed yet), ``in memory``, a view, or a leaf."""
    if node.is_lazy:
        return "lazy"
    if node.grad_fn is None:
        return "leaf, requires grad" if node.requires_grad else "constant"
    if node.grad_fn.freed:  # backward() without retain_graph dropped the links to inputs
        return "in memory; its inputs were freed by backward()"
    value = node._value
    if value.kind == RVALUE and any(getattr(p._value, "storage", None) is value.storage
                                    for p in node_inputs(node)):
        return "in memory (a view of its input)"
    return "in memory"


def node_shape(node: Node) -> str:
    """Shape and dtype, read without computing a lazy value."""
    return shape_str(node._value)


def node_tree(node: Node, names: Names, stop: dict[int, str]) -> list[Row]:
    """Rows of a lazy node's expression, the graph's other nodes (``stop``) drawn by name."""
    return TreeView(names, stop=stop).rows(node._value)


# ---- names ---------------------------------------------------------------------------------------

def node_names(nodes: list, known: dict[int, str]) -> dict[int, str]:
    """The user's variable name for each node, else ``n1``, ``n2``... (never a user's name)."""
    names = {id(n): known[id(n)] for n in nodes if id(n) in known}
    taken = set(known.values())
    counter = itertools.count(1)
    for node in nodes:
        if id(node) not in names:
            name = next(f"n{i}" for i in counter if f"n{i}" not in taken)
            names[id(node)] = name
    return names


def node_values(nodes: list, names: dict[int, str], skip) -> dict[int, str]:
    """``id(value) -> node name`` for the values of every node but ``skip``."""
    return {id(n._value): names[id(n)] for n in nodes if n is not skip}


# ---- explain_node --------------------------------------------------------------------------------

#: What ``explain(node, parts=...)`` can show; ``graph``, ``fusion`` and ``tree`` by default.
NODE_SECTIONS = ("graph", "fusion", "tree", "plan", "code")


def explain_node(node: Node, depth: int = 4, parts=None, backward: bool = False,
                 device=None, backend: str | None = None) -> str:
    """The graph around ``node`` (``depth`` levels of inputs), its fusion groups, its
    expression; ``parts`` picks from ``NODE_SECTIONS`` (``plan`` and ``code``: each
    fusion group's Plan and the code that runs it on ``device`` with ``backend``).
    ``backward=True``: what a ``backward()`` from ``node`` runs (node/explain_backward.py)."""
    if backward:
        from .explain_backward import explain_backward
        return explain_backward(node)
    parts = NODE_SECTIONS[:3] if parts is None else tuple(parts)
    unknown = [p for p in parts if p not in NODE_SECTIONS]
    if unknown:
        raise ValueError(f"explain: unknown part {unknown[0]!r} for a Node; choose from "
                         f"{NODE_SECTIONS}")
    nodes, consumers = node_graph(node)
    known = caller_names()
    names = node_names(nodes, known)
    groups = fused_groups(nodes, consumers)
    lines = [f"explain {names[id(node)]}: {node_op(node)} -> {node_shape(node)}, "
             f"{node_state(node)}"]
    if node.grad_fn is not None or node.is_lazy:  # an op's result: was it fused?
        lines.append(eager.decision(_work(node), node_op(node)))
    if "graph" in parts:
        lines += ["", f"Graph ({depth} levels of inputs)"]
        lines += render_rows(_graph_rows(node, names, consumers, depth))
    if "fusion" in parts:
        lines += [""] + _groups_text(groups, names)
    if "tree" in parts and node.is_lazy:
        lines += [""] + _expression_text(node, nodes, names, known)
    shown = [p for p in parts if p in ("plan", "code")]
    if shown:
        where = as_device(device or node.device)
        how = "cuda" if where.type == "cuda" else (backend or cpu_backend())
        for group in _kernel_groups(node, groups):
            lines += [""] + _group_kernels(group, nodes, names, known, shown, where, how)
    return "\n".join(lines)


def _kernel_groups(node: Node, groups: list[list]) -> list[list]:
    """The fusion groups, and ``node`` alone when it is in none of them: lazy, or an
    op the engine computed at once."""
    if (node.is_lazy or _at_once(node)) and not any(g[-1] is node for g in groups):
        return groups + [[node]]
    return groups


def _at_once(node: Node) -> bool:
    """Whether ``node`` is a registry op or reduction the engine's policy computed at
    once (tensor/eager.py) rather than in a kernel."""
    ctx = node.grad_fn
    if node.is_lazy or ctx is None or ctx.freed or not ctx.inputs:
        return False
    if ctx.fn is not Elementwise and getattr(ctx.fn, "reduction", None) is None:
        return False
    return eager.computes_now(_work(node))


def _work(node: Node):
    """What the policy weighed for ``node``'s op: a reduction's input, else the result."""
    ctx = node.grad_fn
    if ctx is not None and getattr(ctx.fn, "reduction", None) is not None and ctx.inputs \
            and isinstance(ctx.inputs[0], Node):
        return ctx.inputs[0]._value
    return node._value


def _group_kernels(group: list, nodes, names, known, parts, device, backend) -> list[str]:
    """The Plan and code of the kernels that compute ``group`` (its sink's expression)."""
    sink = group[-1]
    members = ", ".join(names[id(n)] for n in group)
    e = group_expression(sink)
    if e is None:
        return [f"Group {members} -> {names[id(sink)]}: already ran; its Plan is not kept "
                "(explain it before it runs, or run with MINITORCH_DEBUG=4)"]
    leaf_names = Names({**known, **node_values(nodes, names, sink)})
    s = split_named(e, leaf_names)
    if _at_once(sink):
        n, op = _work(sink).numel(), node_op(sink)
        compiled = eager.by_compiled_loop(n, op, _work(sink).dtype)
        backend = "numba" if compiled else "numpy"
        how = "one compiled loop, no kernel launch" if compiled else \
            "one NumPy call per op of this Plan, no kernel"
        lines = [f"Group {members} -> {names[id(sink)]}: computed at once ({n} elements, "
                 f"below the fusion threshold of {eager.threshold()}) by the {backend} "
                 f"evaluator of small work (tensor/eager.py): {how}"]
    else:
        when = "will run when it is realized" if sink.is_lazy else "already ran"
        lines = [f"Group {members} -> {names[id(sink)]} ({when}): "
                 f"{plural(len(s.kernels), 'kernel')}"]
    for part in parts:
        lines += ["  " + x if x else x for x in [""] + section(part, e, s, leaf_names, device,
                                                                backend)]
    return lines


def group_expression(sink: Node):
    """What the kernel of a fusion group computes: its lazy sink's expression; for a
    reduction that already ran, that reduction of its input's expression (the walk the
    engine took then); for a registry op computed at once, its op over its inputs'
    values; None for any other sink that ran."""
    if sink.is_lazy:
        return sink._value
    ctx = sink.grad_fn
    if _at_once(sink) and ctx.fn is Elementwise:
        return Map(OPS[ctx.attrs["op"]], tuple(
            as_exp(x._value if isinstance(x, Node) else x) for x in ctx.inputs))
    reduction = getattr(ctx.fn, "reduction", None) if ctx is not None else None
    if reduction is None or not ctx.inputs:
        return None
    return Reduce(reduction, ctx.inputs[0]._value, ctx.attrs["axes"], ctx.attrs["keepdims"])


def _expression_text(node: Node, nodes: list, names: dict, known: dict) -> list[str]:
    values = node_values(nodes, names, node)
    leaf_names = Names({**known, **values})
    s = split_named(node._value, leaf_names)
    head = [f"Expression of {names[id(node)]}: realizing it runs "
            f"{plural(len(s.kernels), 'kernel')}; [name] = a node of the graph"]
    return head + render_rows(TreeView(leaf_names, s, aliases=values).rows(node._value))


def _graph_rows(root: Node, names, consumers, depth) -> list[Row]:
    rows: list[Row] = []
    seen: set[int] = set()

    def walk(n, lead, branch, level):
        repeat = id(n) in seen
        note = "see above" if repeat else _fusion_note(n, names, consumers)
        rows.append(Row("", f"{lead}{names[id(n)]}: {node_op(n)}", node_shape(n),
                        f"{node_state(n)}{'; ' + note if note else ''}"))
        seen.add(id(n))
        kids = [] if repeat else node_inputs(n)
        if kids and level >= depth:
            rows.append(Row("", f"{branch}└─ … {plural(len(kids), 'more input')}", "", ""))
            return
        for i, c in enumerate(kids):
            last = i == len(kids) - 1
            walk(c, branch + ("└─ " if last else "├─ "), branch + ("   " if last else "│  "),
                 level + 1)

    walk(root, "", "", 0)
    return rows


def _fusion_note(n: Node, names, consumers) -> str:
    users = consumers.get(id(n), [])
    if not n.is_lazy or not users:
        return ""
    if len(users) > 1:
        return f"read by {', '.join(names[id(u)] for u in users)}"
    return f"fuses into {names[id(users[0])]}"


def _groups_text(groups: list[list], names) -> list[str]:
    if not groups:
        return ["Fusion: no lazy chains here; every node above is its own kernel or a leaf"]
    lines = ["Fusion (each group runs as one kernel)"]
    for g in groups:
        sink = g[-1]
        when = "will run when it is realized" if sink.is_lazy else "already ran"
        members = ", ".join(names[id(n)] for n in g)
        lines.append(f"  {members}  -> one kernel producing {names[id(sink)]} ({when})")
    return lines
