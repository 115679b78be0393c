"""Every ``path.py:name`` a doc page names exists, so a rename cannot leave a page
pointing at nothing (docs/mshadow_map.md is a table of them)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
REFERENCE = re.compile(r"`((?:tensor|node|nn)/[\w/]+)\.py:([\w.]+)`")


def references(text: str) -> list[tuple[str, str]]:
    return REFERENCE.findall(text)


def resolve(path: str, name: str):
    """The object ``minitorch_exp/<path>.py`` calls ``name`` (dotted: ``Class.method``)."""
    obj = importlib.import_module("minitorch_exp." + path.replace("/", "."))
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def test_reference_pattern():
    text = "see `tensor/plan.py:make_plan` and `tensor/expr.py:Dot.transpose`, not `x.py:y`"
    assert references(text) == [("tensor/plan", "make_plan"), ("tensor/expr", "Dot.transpose")]
    with pytest.raises(AttributeError):
        resolve("tensor/plan", "no_such_function")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_named_function_exists(page):
    missing = []
    for path, name in references(page.read_text()):
        try:
            resolve(path, name)
        except (ImportError, AttributeError) as err:
            missing.append(f"{path}.py:{name} ({type(err).__name__}: {err})")
    assert not missing, f"{page.name} names what does not exist: " + "; ".join(missing)


def test_the_map_names_every_seed_concept():
    text = (ROOT / "docs" / "mshadow_map.md").read_text()
    seed_names = ["kRValue", "kMapper", "kChainer", "kComplex", "MakeTensorExp", "Plan<E",
                  "REval", "MakePlan", "ExpInfo", "TypeCheck", "ShapeCheck", "StreamInfo",
                  "ExpEngine", "ExpComplexEngine", "DotEngine", "transpose_left", "beta",
                  "saveto", "F<op"]
    assert [n for n in seed_names if n not in text] == []
    assert len(references(text)) >= 30
