"""Honest debug output (issue 25): stable names, first calls marked when they compiled,
lines a level above can collect or annotate. Names are tested through explain and
the debug lines that use them (tensor/names.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from minitorch_exp.tensor import count_kernels, counters, randn
from minitorch_exp.tensor import layout as L
from minitorch_exp.tensor.explain import collect_debug, explain, kernel_notes
from minitorch_exp.tensor.names import Names, name_after, view_suffix


def _lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("[mt #")]


# ---- names -----------------------------------------------------------------------------

def test_views_of_named_tensors_are_named_after_them(debug_level, capsys):
    debug_level(1)
    x, g, b = randn(64, 96), randn(64, 80), randn(80)
    (x.T @ g).eval()
    (g + b.broadcast_to((64, 80))).eval()
    first, second = _lines(capsys.readouterr().out)
    assert "x.T @ g" in first
    assert "g + b.expand(64, 80)" in second


def test_anonymous_tensors_keep_one_number_and_never_share_it(debug_level, capsys):
    debug_level(1)
    held = [randn(64, 80)]  # in a list: no variable names it
    (randn(64, 80) * 2).eval()  # an anonymous tensor, dropped after its line
    (held[0] * 3).eval()
    (held[0] * 4).eval()
    first, second, third = _lines(capsys.readouterr().out)
    anonymous = [re.search(r"(tensor#\d+) \* (\d)", line).group(1)
                 for line in (first, second, third)]
    assert anonymous[1] == anonymous[2]     # the same memory, the same name
    assert anonymous[0] != anonymous[1]     # other memory, another name, though freed


def test_a_kernels_destination_is_its_number_until_named(debug_level, capsys):
    debug_level(1)
    a = randn(64, 80)
    ((a @ randn(80, 70)) + 1).eval()
    blas, fused = _lines(capsys.readouterr().out)
    number = re.match(r"\[mt (#\d+)\]", blas).group(1)
    assert f" {number} = (64, 70)" in blas and f"{number} + 1" in fused


def test_name_after_names_memory_after_its_owner_where_the_caller_names_it():
    class Owner:  # an object of a level above holding an expression (a Node)
        def __exp__(self):
            return value

    value = randn(4, 3)
    W = Owner()  # noqa: N806  (the caller's name is what is shown)
    held = [randn(4, 3)]  # in a list: no variable names it
    name_after(held[0], W, "{}.grad")
    names = Names.of_caller()
    assert names(held[0]) == "W.grad" and names(held[0].T) == "W.grad.T"
    assert Names()(held[0]).startswith("tensor#")  # W not named here: a number


@pytest.mark.parametrize("view, base, expected", [
    (L.Layout((3, 4), (1, 3)), L.contiguous((4, 3)), ".T"),
    (L.Layout((64, 5), (0, 1)), L.contiguous((5,)), ".expand(64, 5)"),
    (L.contiguous((12,)), L.contiguous((4, 3)), ".reshape(12,)"),
    (L.contiguous((4, 3)), L.contiguous((4, 3)), ""),
    (L.Layout((2, 3), (3, 1), 3), L.contiguous((4, 3)), None),   # rows 1-2: no such name
    (L.Layout((3, 4), (1, 3)), None, ".T"),
    (L.Layout((2, 2), (6, 1)), None, "[view]"),
])
def test_view_suffix(view, base, expected):
    assert view_suffix(view, base) == expected


def test_explain_names_views_too():
    x, g = randn(64, 96), randn(64, 80)
    text = explain(x.T @ g, parts=["tree"])
    assert text.startswith("explain: result = x.T @ g")


# ---- what a level above uses --------------------------------------------------------------

def test_collect_debug_takes_the_lines_and_runs_the_same_kernels(debug_level, capsys):
    debug_level(0)
    a = randn(64, 80)
    with count_kernels() as plain:
        (a @ randn(80, 70) + a.sum()).eval()
    with collect_debug() as lines, count_kernels() as collected:
        (a @ randn(80, 70) + a.sum()).eval()
    assert capsys.readouterr().out == "" and counters.DEBUG == 0
    assert len(lines) == collected.total == plain.total == 3
    assert lines[0].startswith("[mt #") and " blas " in lines[0]


def test_kernel_notes_annotate_each_line(debug_level, capsys):
    debug_level(1)
    a = randn(64, 80)
    with kernel_notes(lambda e: f"for {e.shape}"):
        (a * 2).eval()
    (a * 3).eval()
    noted, plain = _lines(capsys.readouterr().out)
    assert noted.endswith("(for (64, 80))") and "(for" not in plain


# ---- first calls: the time includes compiling ------------------------------------------

def test_first_call_that_compiled_is_marked():
    code = ("import minitorch_exp.tensor as T\n"
            "a = T.randn(64, 80, dtype='float64')\n"
            "for _ in range(2):\n"
            "    ((a * 3).exp() - a).abs().eval()\n"
            "T.set_cpu_backend('numpy')\n"
            "for _ in range(2):\n"
            "    ((a * 5).exp() - a).sqrt().eval()\n")
    env = {**os.environ, "MINITORCH_DEBUG": "2", "MINITORCH_CPU_BACKEND": "numba"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    numba_first, numba_again, numpy_first, numpy_again = _lines(proc.stdout)
    assert "(includes compile)" in numba_first
    assert "(includes compile)" not in numba_again
    assert "(includes compile)" not in numpy_first + numpy_again  # NumPy compiles nothing
