"""The tensor level stands alone: it never imports the Node or nn levels."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import minitorch_exp

PACKAGE_ROOT = Path(minitorch_exp.__file__).resolve().parent
REPO_ROOT = PACKAGE_ROOT.parent


def test_importing_the_tensor_level_loads_neither_node_nor_nn():
    code = (
        "import sys\n"
        "import minitorch_exp.tensor\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('minitorch_exp.node',"
        " 'minitorch_exp.nn')))\n"
        "print(loaded)\n"
        "sys.exit(1 if loaded else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=120)
    assert proc.returncode == 0, \
        f"importing minitorch_exp.tensor loaded: {proc.stdout}{proc.stderr}"


def imported_modules(node: ast.AST) -> list[str]:
    """Absolute names an import statement in ``minitorch_exp/tensor/*.py`` can load."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level == 0:
        base = node.module or ""
    else:  # relative to minitorch_exp.tensor: level 1 is the package itself
        parts = ["minitorch_exp", "tensor"][: max(0, 3 - node.level)]
        base = ".".join(parts + ([node.module] if node.module else []))
    # ``from .. import nn`` loads a submodule named like the imported name.
    return [base] + [f"{base}.{a.name}" for a in node.names]


def test_tensor_sources_do_not_import_upper_levels():
    """Static check, file by file, including imports inside functions."""
    offenders = []
    for path in sorted((PACKAGE_ROOT / "tensor").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            for name in imported_modules(node):
                if name.startswith(("minitorch_exp.node", "minitorch_exp.nn")):
                    offenders.append(f"{path.name}:{node.lineno} imports {name}")
    assert not offenders, offenders


def test_the_static_check_sees_relative_imports():
    for text, bad in [("from ..node import Node", True), ("from .. import nn", True),
                      ("import minitorch_exp.nn.layers", True), ("from .expr import Exp", False),
                      ("from ..tensor import layout", False), ("from . import ops", False)]:
        names = imported_modules(ast.parse(text).body[0])
        assert any(n.startswith(("minitorch_exp.node", "minitorch_exp.nn")) for n in names) == bad


# ---- import circles inside the tensor level ------------------------------------------


def sibling_imports(path: Path, siblings: set[str]) -> set[str]:
    """The modules of ``minitorch_exp.tensor`` that ``path`` imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        for name in imported_modules(node):
            parts = name.split(".")
            if parts[:2] == ["minitorch_exp", "tensor"] and len(parts) > 2 and parts[2] in siblings:
                found.add(parts[2])
    return found


def import_circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of ``graph`` (modules that import each other in a
    loop), by Tarjan's algorithm without recursion."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                circle = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    circle.add(w)
                    if w == v:
                        break
                circles.append(circle)
    return circles


def test_import_circles_are_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert sorted(map(sorted, import_circles(graph))) == [["a", "b", "c"], ["d"], ["e"]]


#: Modules that must stay out of any import circle: the registry, the cache owner, the
#: backends and what they are built from. They are called, and never import back.
OUTSIDE_CIRCLES = {"ops", "caches", "tokens", "dtypes", "layout", "counters", "device",
                   "backend_contract", "backends", "cpu_numpy", "cpu_numba", "numba_source",
                   "numba_compile", "numba_launch", "codegen", "cuda", "kernel_cache"}


def test_no_import_circle_is_wider_than_the_lowering_core():
    """Imports inside ``tensor/`` (inside functions too) form no loop wider than the
    core types: ``expr`` and ``tensor``, which make each other. The engine is built on
    them and hands them its entry points at import (``expr.ENGINE``) -- two, down from
    seven when tensor.py and Exp.eval imported the engine (issue 38), eighteen when the
    registry imported the engine and backends imported capture, and nine when
    Exp.explain and the debug printer imported explain (issue 19)."""
    files = {p.stem: p for p in (PACKAGE_ROOT / "tensor").glob("*.py") if p.stem != "__init__"}
    graph = {name: sibling_imports(path, set(files)) for name, path in files.items()}
    largest = max(import_circles(graph), key=len)
    assert sorted(largest) == ["expr", "tensor"], sorted(largest)
    for circle in import_circles(graph):
        assert not circle & OUTSIDE_CIRCLES or len(circle) == 1, sorted(circle)
