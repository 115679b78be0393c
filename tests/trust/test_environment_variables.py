"""Every environment variable the package reads is parsed by ``tensor/environment.py``.

A value it cannot use is a ValueError naming the variable, the value and what is
accepted -- never a bare ``int()`` error. Whole numbers are written in digits:
``1e9`` is a float's spelling and is refused (with the digits to write instead),
the same for every numeric variable.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import minitorch_exp
from minitorch_exp.tensor import environment as env

PACKAGE = Path(minitorch_exp.__file__).resolve().parent
NAME = "MINITORCH_TEST_VARIABLE"


def _error(monkeypatch, value: str, read):
    monkeypatch.setenv(NAME, value)
    with pytest.raises(ValueError) as info:
        read()
    text = str(info.value)
    assert f"{NAME}={value!r}" in text and "expected" in text
    return text


# ---- the helpers ---------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["abc", "1e9", "-1", "1.5", "0x10", "2 3", "nan"])
def test_whole_number_refuses_what_is_not_digits(monkeypatch, value):
    text = _error(monkeypatch, value, lambda: env.whole_number(NAME, 7, what="elements"))
    assert "a whole number >= 0 in digits (elements)" in text


def test_a_float_spelling_is_refused_with_the_digits_to_write(monkeypatch):
    text = _error(monkeypatch, "1e9", lambda: env.whole_number(NAME, 7))
    assert "write 1e9 as 1000000000" in text


def test_whole_number_below_its_least_is_refused(monkeypatch):
    text = _error(monkeypatch, "0", lambda: env.whole_number(NAME, 7, least=1))
    assert ">= 1" in text


@pytest.mark.parametrize("value, want", [(None, 7), ("", 7), ("  ", 7), ("42", 42),
                                         (" 3 ", 3), ("0", 0), ("1_000", 1000)])
def test_whole_number_reads_digits_and_defaults_when_unset(monkeypatch, value, want):
    if value is None:
        monkeypatch.delenv(NAME, raising=False)
    else:
        monkeypatch.setenv(NAME, value)
    assert env.whole_number(NAME, 7) == want


@pytest.mark.parametrize("value, want", [("1", True), ("0", False), ("true", True),
                                         ("False", False), ("yes", True), ("no", False),
                                         ("ON", True), ("off", False)])
def test_switch_reads_the_usual_spellings(monkeypatch, value, want):
    monkeypatch.setenv(NAME, value)
    assert env.switch(NAME, not want) is want


def test_switch_refuses_anything_else(monkeypatch):
    text = _error(monkeypatch, "maybe", lambda: env.switch(NAME, True))
    assert "0" in text and "1" in text


def test_choice_refuses_what_is_not_listed(monkeypatch):
    text = _error(monkeypatch, "torch", lambda: env.choice(NAME, "numba", ("numba", "numpy")))
    assert "'numba' or 'numpy'" in text
    monkeypatch.setenv(NAME, " numpy ")
    assert env.choice(NAME, "numba", ("numba", "numpy")) == "numpy"


def test_seconds_takes_a_positive_number(monkeypatch):
    monkeypatch.setenv(NAME, "2.5")
    assert env.seconds(NAME) == 2.5
    monkeypatch.delenv(NAME)
    assert env.seconds(NAME) is None
    for bad in ("abc", "0", "-3", "inf", "nan"):
        assert "a number of seconds > 0" in _error(monkeypatch, bad, lambda: env.seconds(NAME))


# ---- the package reads each variable through them -----------------------------------------

IMPORT_EVERYTHING = """
import importlib, pkgutil, minitorch_exp
for m in pkgutil.walk_packages(minitorch_exp.__path__, "minitorch_exp."):
    importlib.import_module(m.name)
"""


@pytest.mark.parametrize("name, value", [
    ("MINITORCH_PARALLEL_MIN", "abc"), ("MINITORCH_PARALLEL_MIN", "1e9"),
    ("MINITORCH_DEBUG", "abc"), ("MINITORCH_DEBUG", "-1"),
    ("MINITORCH_BLAS_PARALLEL_MIN", "1e6"), ("MINITORCH_BLOCK", "0"),
    ("MINITORCH_FUSION_THRESHOLD", "1e9"), ("MINITORCH_CPU_BACKEND", "torch"),
    ("MINITORCH_LOAD_AWARE", "maybe"),
])
def test_a_bad_value_is_an_error_naming_the_variable(name, value):
    environ = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home()), name: value}
    proc = subprocess.run([sys.executable, "-c", IMPORT_EVERYTHING], capture_output=True,
                          text=True, env=environ, cwd=PACKAGE.parent, timeout=120)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError: ") and f"{name}={value!r}" in last, proc.stderr


#: Reads of the environment outside environment.py: ``NAME in os.environ`` (is it set?)
#: and writes are not reads; anything else is.
READ = re.compile(r"os\.getenv|os\.environ\.get|os\.environ\[[^\]]+\](?!\s*=[^=])")
#: kernel_cache.py imports only the standard library and numba (test_cache_trust.py), and
#: reads two directories: any text names one, so there is nothing to refuse.
PATHS_ONLY = {"tensor/kernel_cache.py"}


def test_nothing_else_reads_the_environment():
    readers = [f"{p.relative_to(PACKAGE)}:{n}: {line.strip()}"
               for p in sorted(PACKAGE.rglob("*.py")) if p.name != "environment.py"
               and str(p.relative_to(PACKAGE)) not in PATHS_ONLY
               for n, line in enumerate(p.read_text().splitlines(), 1) if READ.search(line)]
    assert readers == []
