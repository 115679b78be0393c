"""Tests for the formatting and writing of benchmarks/common.py's Table."""

from __future__ import annotations

import csv
import importlib.util
import io
import os
import sys
from pathlib import Path

import pytest

COMMON = Path(__file__).resolve().parents[2] / "benchmarks" / "common.py"


@pytest.fixture(scope="module")
def common():
    spec = importlib.util.spec_from_file_location("bench_common", COMMON)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


@pytest.fixture
def table(common):
    table = common.Table("add_f32", baseline="numpy")
    table.add("numpy", 1000, 2e-6)
    table.add("minitorch_exp", 1000, 1e-6)
    table.add("numpy", 10**6, 4e-4)
    table.add("torch", 10**6, 1.0e-3)
    table.add("numexpr", 10, 3.5)  # no baseline at this size
    return table


def test_ratios(table) -> None:
    assert [table.ratio(row) for row in table.rows] == [1.0, 0.5, 1.0, 2.5, None]


def test_text_is_aligned(table) -> None:
    lines = table.text().splitlines()
    assert lines[0].split() == ["name", "size", "time", "ratio"]
    assert lines[2].split() == ["minitorch_exp", "1000", "1", "us", "0.50x"]
    ratio_ends = {len(line) for line in lines if line.endswith("x")}
    assert len(ratio_ends) == 1  # right-aligned ratio column
    size_starts = {line.index(size) for line, size in zip(lines[1:], ["1000", "1000", "1000000"])}
    assert len(size_starts) == 1  # left-aligned size column


def test_markdown(table) -> None:
    md = table.markdown().splitlines()
    assert md[0] == "# add_f32" and "`numpy`" in md[2]
    body = [line for line in md if line.startswith("|")]
    assert body[0] == "| name | size | time | ratio |"
    assert body[1] == "| --- | --- | ---: | ---: |"
    assert body[4] == "| numpy | 1000000 | 400 us | 1.00x |"
    assert body[6] == "| numexpr | 10 | 3.5 s |  |"
    assert len(body) == 2 + 5


def test_csv_keeps_full_precision(common) -> None:
    table = common.Table("t", baseline="a")
    table.add("a", "n=3", 1 / 3)
    table.add("b, quoted", "n=3", 2 / 3)
    rows = list(csv.reader(io.StringIO(table.csv())))
    assert rows[0] == ["name", "size", "seconds", "ratio"]
    assert rows[2][0] == "b, quoted"
    assert float(rows[1][2]) == 1 / 3 and float(rows[2][3]) == (2 / 3) / (1 / 3)


def test_write_is_complete_and_leaves_no_temp_files(table, tmp_path) -> None:
    md, csv_path = table.write(tmp_path / "results")
    assert md.read_text() == table.markdown()
    assert csv_path.read_text() == table.csv()
    table.add("extra", 5, 1.0)
    table.write(tmp_path / "results")
    assert "extra" in md.read_text()
    assert sorted(os.listdir(tmp_path / "results")) == ["add_f32.csv", "add_f32.md"]


def test_write_failure_keeps_previous_results(table, tmp_path, monkeypatch) -> None:
    md, _ = table.write(tmp_path)
    before = md.read_text()

    def fail(src, dst):
        raise OSError("no space")

    monkeypatch.setattr(os, "replace", fail)
    table.add("extra", 5, 1.0)
    with pytest.raises(OSError, match="no space"):
        table.write(tmp_path)
    assert md.read_text() == before
    assert sorted(os.listdir(tmp_path)) == ["add_f32.csv", "add_f32.md"]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(2.5, "2.5 s"), (0.0123, "12.3 ms"), (4.56e-6, "4.56 us"), (7e-9, "7 ns")],
)
def test_format_seconds(common, seconds, text) -> None:
    assert common.format_seconds(seconds) == text


def test_bad_input_is_refused(common) -> None:
    with pytest.raises(ValueError, match="file-name-safe"):
        common.Table("../escape")
    with pytest.raises(ValueError, match="positive finite seconds"):
        common.Table("ok").add("x", 1, float("nan"))
