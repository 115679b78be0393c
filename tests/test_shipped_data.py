"""The data files shipped in data/ are the ones their README describes."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent.parent / "data"
TABLE_ROW = re.compile(r"^\| `([\w.-]+)` \| ([\d,]+) \| `([0-9a-f]{64})` \|", re.M)


def _rows(section: str) -> list[tuple[str, int, str]]:
    """(file, size, sha256) of each row of the table in data/README.md's ``section``."""
    text = (DATA / "README.md").read_text()
    body = text.split(f"## `{section}/`", 1)[1].split("\n## ", 1)[0]
    return [(name, int(size.replace(",", "")), digest)
            for name, size, digest in TABLE_ROW.findall(body)]


@pytest.mark.parametrize("section", ["mnist", "shakespeare"])
def test_each_shipped_file_has_the_size_and_digest_the_readme_gives(section):
    rows = _rows(section)
    assert rows, f"no file table under {section}/ in data/README.md"
    for name, size, digest in rows:
        data = (DATA / section / name).read_bytes()
        assert len(data) == size, f"{section}/{name}: {len(data)} bytes, README says {size}"
        assert hashlib.sha256(data).hexdigest() == digest, f"{section}/{name}: sha256 differs"


def test_the_corpus_is_ascii_text_with_its_readme_beside_it():
    text = (DATA / "shakespeare" / "shakespeare.txt").read_text(encoding="ascii")
    assert len(set(text)) == 78
    assert "public domain" in (DATA / "shakespeare" / "README.md").read_text()
