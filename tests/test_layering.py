"""Layers in spirit, not only by the letter: tensor/ knows nothing of Nodes, node/ nothing of
nn, and nothing above node/ touches a Node's private state.

That importing ``minitorch_exp.tensor`` loads neither ``node`` nor ``nn`` (and that no
tensor source imports them) is checked in tests/tensor/test_import_layers.py; these tests
go on from there: the Node level does the same for nn, and the sources are scanned for
what imports cannot show -- a lower level recognising a Node by its attribute names, or
an upper level reaching into one.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import minitorch_exp

PACKAGE = Path(minitorch_exp.__file__).resolve().parent
REPO = PACKAGE.parent

#: Words that only a Node (or its graph) has: a tensor-level source naming one reads Nodes.
NODE_WORDS = re.compile(r"\b(grad_fn|requires_grad|_value)\b")
#: explain.py in particular once recognised Nodes by these.
EXPLAIN_WORDS = re.compile(r"\b(grad_fn|requires_grad|_value|ctx|Elementwise)\b")
#: A Node's private state: only node/ may read or write it.
NODE_PRIVATE = {"_value", "_grad", "_lazy_ops", "_reads", "_guard", "_grad_sink", "grad_slot"}


def sources(*folders: str) -> list[Path]:
    return sorted(p for f in folders for p in (PACKAGE / f).glob("*.py"))


def above_node() -> list[Path]:
    """Every source outside tensor/ and node/: nn/, the top-level modules (api.py...)."""
    return sorted(p for p in PACKAGE.rglob("*.py")
                  if p.relative_to(PACKAGE).parts[0] not in ("tensor", "node"))


def private_node_access(text: str, filename: str = "<text>") -> list[str]:
    """``line: expression`` for each attribute access to a Node's private state."""
    hits = [n for n in ast.walk(ast.parse(text, filename))
            if isinstance(n, ast.Attribute) and n.attr in NODE_PRIVATE]
    hits.sort(key=lambda n: (n.lineno, n.col_offset))
    return [f"{n.lineno}: {ast.unparse(n)}" for n in hits]


def loaded_by(statement: str) -> list[str]:
    """The minitorch_exp modules a fresh interpreter has loaded after ``statement``."""
    code = (f"import sys\n{statement}\n"
            "print('\\n'.join(m for m in sys.modules if m.startswith('minitorch_exp')))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


# ---- imports point down ---------------------------------------------------------------------

def test_importing_the_node_level_loads_no_nn():
    loaded = loaded_by("import minitorch_exp.node, minitorch_exp.node.explain, "
                       "minitorch_exp.node.graph")
    assert "minitorch_exp.node.node" in loaded
    assert not [m for m in loaded if m.startswith("minitorch_exp.nn")], loaded


def test_the_tensor_level_still_loads_nothing_above_it():
    loaded = loaded_by("import minitorch_exp.tensor, minitorch_exp.tensor.explain")
    assert "minitorch_exp.tensor.explain" in loaded
    assert not [m for m in loaded if m.startswith(("minitorch_exp.node", "minitorch_exp.nn"))]


def test_node_sources_do_not_import_nn():
    offenders = []
    for path in sources("node"):
        for n in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in n.names] if isinstance(n, ast.Import) else []
            if isinstance(n, ast.ImportFrom):
                names = [("." * n.level) + (n.module or "")] + [a.name for a in n.names]
            offenders += [f"{path.name}:{n.lineno} {x}" for x in names
                          if re.match(r"(minitorch_exp\.nn|\.\.nn)\b|nn$", x)]
    assert not offenders, offenders


# ---- tensor/ knows nothing of Nodes -----------------------------------------------------------

def test_no_tensor_source_names_a_node_attribute():
    found = [f"{p.name}:{i}: {line.strip()}" for p in sources("tensor")
             for i, line in enumerate(p.read_text().splitlines(), 1) if NODE_WORDS.search(line)]
    assert not found, found


def test_tensor_explain_does_not_recognise_nodes():
    text = (PACKAGE / "tensor" / "explain.py").read_text()
    assert not EXPLAIN_WORDS.findall(text), sorted(set(EXPLAIN_WORDS.findall(text)))


def test_the_word_scan_is_whole_words():
    assert NODE_WORDS.search("x._value") and NODE_WORDS.search("if n.grad_fn is None")
    assert not NODE_WORDS.search("lazy_value(e) and fill_value and saver_value")


# ---- nothing above node/ reaches into a Node --------------------------------------------------

def test_nn_and_top_level_use_no_private_node_state():
    found = [f"{p.relative_to(PACKAGE)}:{hit}" for p in above_node()
             for hit in private_node_access(p.read_text(), str(p))]
    assert not found, found


def test_the_private_access_scan_sees_reads_and_writes():
    code = ("p._value = t\nv = grad._value.device\np.grad_slot = s\nq._lazy_ops += 1\n"
            "ok = p.value\nalso_ok = p.grad\n")
    assert private_node_access(code) == ["1: p._value", "2: grad._value", "3: p.grad_slot",
                                         "4: q._lazy_ops"]
