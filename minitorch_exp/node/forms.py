"""The functions a gradient rule calls, at the level the rule runs at: one body, two levels.

A Function's backward is written once. In a first backward it runs on Tensors and
expressions and calls the Tensor level's functions (``TENSORS``): each computes
now where the engine's policy says and otherwise builds a lazy expression that
fuses. With ``create_graph`` the same body runs on Nodes (node/higher_order.py)
and calls the Node level's functions (``NODES``), each a recorded op whose own
rule makes the result differentiable again. ``of(g)`` picks the set by the kind
of gradient the rule was handed; each module registers the pairs its rules call
(``add``) beside the Functions that use them.
"""

from __future__ import annotations

import types

TENSORS = types.SimpleNamespace()
NODES = types.SimpleNamespace()


def of(g) -> types.SimpleNamespace:
    """The functions for a rule handed the gradient ``g``: those its type names as its
    own (``Node.rule_forms`` is ``NODES``), else the Tensor level's."""
    return getattr(type(g), "rule_forms", TENSORS)


def add(tensor_forms: dict, node_forms: dict) -> None:
    """Register functions by name, each with its form at both levels."""
    if tensor_forms.keys() != node_forms.keys():
        raise ValueError(f"forms: the levels name different functions: "
                         f"{sorted(tensor_forms.keys() ^ node_forms.keys())}")
    clash = set(tensor_forms) & set(vars(TENSORS))
    if clash:
        raise ValueError(f"forms: {sorted(clash)} already registered")
    vars(TENSORS).update(tensor_forms)
    vars(NODES).update(node_forms)
