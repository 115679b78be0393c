"""Post-order over a DAG without recursion: shared by ``backward`` and the graph views."""

from __future__ import annotations

from collections.abc import Callable, Iterable


def post_order(root, parents: Callable[[object], Iterable]) -> list:
    """Every node reachable from ``root`` through ``parents(node)``, each after its parents.

    Iterative depth-first search, so a 10,000-op chain needs no recursion limit.
    Nodes are told apart by identity.
    """
    order: list = []
    expanded: set[int] = set()
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in expanded:
            continue
        expanded.add(id(node))
        stack.append((node, True))
        stack.extend((p, False) for p in parents(node) if id(p) not in expanded)
    return order
