"""Docs never drift from the code.

* Every ```python block in ``docs/*.md`` and ``README.md`` runs; the blocks of
  one file run in order in one namespace. A block right after a
  ``<!-- skip -->`` line is skipped (for code that needs a GPU or the network).
* ``docs/api.md`` equals what ``docs/gen_api.py`` writes today.
* The tours in ``examples/`` run top to bottom and leave their files.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from minitorch_exp.tensor import counters
from minitorch_exp.tensor.backends import cpu_backend, set_cpu_backend

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
SKIP = re.compile(r"<!--\s*skip\s*-->\s*$")


def python_blocks(text: str) -> list[tuple[int, str, bool]]:
    """``(line number, code, skipped)`` for each python block, in order."""
    blocks = []
    for m in FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        line = text.count("\n", 0, m.start()) + 2
        blocks.append((line, m.group(1), bool(SKIP.search(before))))
    return blocks


def test_block_parser_sees_skips_and_order():
    text = ("intro\n```python\na = 1\n```\n<!-- skip -->\n```python\nboom()\n```\n"
            "```sh\nls\n```\n```python\nb = a + 1\n```\n")
    blocks = python_blocks(text)
    assert [(code, skipped) for _, code, skipped in blocks] == [
        ("a = 1\n", False), ("boom()\n", True), ("b = a + 1\n", False)]
    assert blocks[0][0] == 3


@pytest.fixture
def clean_state(tmp_path, monkeypatch):
    """Each docs file starts in an empty folder, debug off, the default CPU backend."""
    monkeypatch.chdir(tmp_path)
    level, backend = counters.DEBUG, cpu_backend()
    yield
    counters.set_debug(level)
    set_cpu_backend(backend)


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: p.name)
def test_python_blocks_run(path, clean_state):
    namespace = {"__name__": f"docs.{path.stem}"}
    for line, code, skipped in python_blocks(path.read_text()):
        if skipped:
            continue
        try:
            exec(compile(code, f"{path.name}:{line}", "exec"), namespace)
        except Exception as err:
            raise AssertionError(f"{path.name}, the python block at line {line} failed: "
                                 f"{type(err).__name__}: {err}") from err


def test_api_md_is_current():
    spec = importlib.util.spec_from_file_location("gen_api", ROOT / "docs" / "gen_api.py")
    gen_api = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen_api)
    current = (ROOT / "docs" / "api.md").read_text()
    assert current == gen_api.render(), (
        "docs/api.md is out of date with the public API: run `python docs/gen_api.py`")


TOURS = {
    "tour_expression_templates.py": (["--n", "50000"],
                                     ["eager_vs_fused.png", "update_numba.py", "update_cuda.cu"]),
    "tour_autograd.py": ([], ["graph.png", "graph.dot"]),
}


@pytest.mark.parametrize("script", sorted(TOURS))
def test_tour_runs(script, tmp_path):
    args, files = TOURS[script]
    env = {**os.environ, "MPLBACKEND": "Agg", "MINITORCH_DEBUG": "0"}
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / script),
                           "--out", str(tmp_path), *args],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Done" in proc.stdout
    for name in files:
        if name.endswith(("numba.py", ".cu")) and not (tmp_path / name).exists():
            continue  # a backend's source generator may be absent; the tour says so
        assert (tmp_path / name).stat().st_size > 0, name
