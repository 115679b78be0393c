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
    assert proc.returncode == 0, f"importing minitorch_exp.tensor loaded: {proc.stdout}{proc.stderr}"


def test_tensor_sources_do_not_import_upper_levels():
    """Static check, file by file, including imports inside functions."""
    offenders = []
    for path in sorted((PACKAGE_ROOT / "tensor").glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from ..node import x / from .. import nn
                    base = "minitorch_exp" + ("" if node.level == 2 else ".tensor")
                    if node.level > 2:
                        base = ""
                    names = [f"{base}.{node.module}" if node.module else base]
                    names += [f"{names[0]}.{a.name}" for a in node.names] if not node.module \
                        else []
                else:
                    names = [node.module or ""]
            else:
                continue
            for name in names:
                if name.startswith(("minitorch_exp.node", "minitorch_exp.nn")):
                    offenders.append(f"{path.name}:{node.lineno} imports {name}")
    assert not offenders, offenders
