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
