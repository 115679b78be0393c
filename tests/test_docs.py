"""Docs never drift from the code.

* Every ```python block in ``README.md`` runs on its own, in a fresh namespace
  and an empty folder, as a reader who pastes just that block runs it.
* The pages in ``docs/`` are walkthroughs, read top to bottom: the blocks of
  one page run in order in one namespace (each page in a fresh one).
* Anywhere, a block right after a ``<!-- skip -->`` line is skipped (for code
  that needs a GPU or the network).
* ``docs/api.md`` equals what ``docs/gen_api.py`` writes today.
* The tours in ``examples/`` run top to bottom and leave their files.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from minitorch_exp.node.grad_mode import get_fusion_threshold, set_fusion_threshold
from minitorch_exp.tensor import counters
from minitorch_exp.tensor.backends import cpu_backend, set_cpu_backend

from ._scripts import load_script

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
WALKTHROUGHS = sorted((ROOT / "docs").glob("*.md"))
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
    """Each block starts in an empty folder, debug off, the default CPU backend and
    fusion threshold."""
    monkeypatch.chdir(tmp_path)
    level, backend, threshold = counters.DEBUG, cpu_backend(), get_fusion_threshold()
    yield
    counters.set_debug(level)
    set_cpu_backend(backend)
    set_fusion_threshold(threshold)


def readme_blocks() -> list:
    """One ``pytest.param(path, line, code)`` per README python block that runs,
    named ``README.md:line``."""
    return [pytest.param(README, line, code, id=f"README.md:{line}")
            for line, code, skipped in python_blocks(README.read_text()) if not skipped]


def run_block(path: Path, line: int, code: str, namespace: dict | None = None,
              alone: bool = True) -> dict:
    """Run one block, in a fresh namespace unless one is given; returns the namespace."""
    if namespace is None:
        namespace = {"__name__": f"docs.{path.stem}"}
    try:
        exec(compile(code, f"{path.name}:{line}", "exec"), namespace)
    except Exception as err:
        how = " on its own (each block must paste and run alone)" if alone else ""
        raise AssertionError(f"{path.name}, the python block at line {line} failed{how}: "
                             f"{type(err).__name__}: {err}") from err
    return namespace


@pytest.mark.parametrize(("path", "line", "code"), readme_blocks())
def test_readme_block_runs_alone(path, line, code, clean_state):
    run_block(path, line, code)


@pytest.mark.parametrize("path", WALKTHROUGHS, ids=lambda p: p.name)
def test_walkthrough_blocks_run_in_order(path, clean_state):
    namespace = {"__name__": f"docs.{path.stem}"}
    for line, code, skipped in python_blocks(path.read_text()):
        if not skipped:
            run_block(path, line, code, namespace, alone=False)


def test_a_block_using_a_name_from_an_earlier_block_fails(tmp_path, clean_state):
    text = "```python\nimport numpy as np\n```\n\n```python\nx = np.ones(3)\n```\n"
    first, second = python_blocks(text)
    run_block(tmp_path / "a.md", first[0], first[1])
    with pytest.raises(AssertionError, match=r"a\.md, the python block at line 6 failed on "
                                             r"its own.*NameError: name 'np'"):
        run_block(tmp_path / "a.md", second[0], second[1])


def test_api_md_is_current():
    gen_api = load_script("docs/gen_api.py", "gen_api")
    current = (ROOT / "docs" / "api.md").read_text()
    assert current == gen_api.render(), (
        "docs/api.md is out of date with the public API: run `python docs/gen_api.py`")


def check_expression_tour(stdout: str, out: Path) -> None:
    """The numba source is printed once: in section 3's listing per device, not also
    in the explain() report before it."""
    if (out / "update_numba.py").exists():
        assert stdout.count("def serial(") == 1, stdout


def check_autograd_tour(stdout: str, out: Path) -> None:
    """The picture names each node as the text's explain() did (the add node is n2 in
    both, never the MatMul in one and the add in the other)."""
    graph = stdout[stdout.index("Graph ("):stdout.index("Fusion (")]
    in_text = {op: name for name, op in re.findall(r"[─ ] (\w+): (\w+)", graph)}
    in_picture = {op: name for name, op in
                  re.findall(r'^  "(\w+)" \[label="\1: (\w+)', (out / "graph.dot").read_text(),
                             re.M)}
    ops = {"add", "MatMul", "tanh", "mul"}  # one node each (leaves are several)
    assert ops <= in_text.keys() & in_picture.keys()
    for op in ops:
        assert in_text[op] == in_picture[op], (op, in_text, in_picture)


TOURS = {
    "tour_expression_templates.py": (["--n", "50000"],
                                     ["eager_vs_fused.png", "update_numba.py", "update_cuda.cu"],
                                     check_expression_tour),
    "tour_autograd.py": ([], ["graph.png", "graph.dot"], check_autograd_tour),
}


@pytest.mark.parametrize("script", sorted(TOURS))
def test_tour_runs(script, tmp_path):
    args, files, check = TOURS[script]
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
    check(proc.stdout, tmp_path)


def load_example(name: str):
    return load_script(f"examples/{name}", f"example_{Path(name).stem}")


def test_eager_vs_fused_chart_labels_every_bar():
    """The fused passes allocate nothing: their memory bars have height 0, so only a
    label shows them."""
    tour = load_example("tour_expression_templates.py")
    results = {"eager NumPy": {"peak": 12 * 2**20, "time": 3e-3},
               "fused (numpy)": {"peak": 0, "time": 1e-3},
               "fused (numba)": {"peak": 0, "time": 5e-4}}
    memory, time = tour.chart(results).axes
    assert [t.get_text() for t in memory.texts] == ["12.0 MiB", "0.0 MiB", "0.0 MiB"]
    assert [t.get_text() for t in time.texts] == ["3.00 ms", "1.00 ms", "0.50 ms"]
    assert memory.get_ylim()[1] > 12  # room above the tallest bar for its label


CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def test_torch_is_installed_only_as_its_cpu_build():
    """On Linux the default index's torch is the CUDA build with GBs of NVIDIA packages:
    every torch install the README shows asks for the +cpu build, which only PyTorch's
    CPU index has, and .ci/run does the same, then refuses any NVIDIA, CUDA or triton
    package."""
    installs = [line for line in README.read_text().splitlines()
                if re.search(r"pip3? install\b.*\btorch\b", line)]
    assert installs, "the README no longer says how to install PyTorch's CPU build"
    for line in installs:
        assert f"--extra-index-url {CPU_INDEX}" in line and "torch==2.13.0+cpu" in line, line
    ci = (ROOT / ".ci" / "run").read_text()
    assert f"TORCH_CPU_INDEX={CPU_INDEX}" in ci and "TORCH_REQ=torch==2.13.0+cpu" in ci
    assert '--extra-index-url "$TORCH_CPU_INDEX" "$TORCH_REQ"' in ci
    assert "grep -iE '^(nvidia|cuda)[-_]|^triton='" in ci
