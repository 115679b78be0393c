"""Draw the benchmark tables in benchmarks/results/ as PNGs in docs/img/.

    python docs/plot_benchmarks.py
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
IMG = ROOT / "docs" / "img"


def read(name: str) -> dict[str, dict[str, float]]:
    """``{row name: {size: ratio}}`` from one results CSV."""
    table: dict[str, dict[str, float]] = defaultdict(dict)
    with open(RESULTS / f"{name}.csv", newline="") as f:
        for row in csv.DictReader(f):
            table[row["name"]][row["size"]] = float(row["ratio"])
    return table


def plot(name: str, title: str, xlabel: str) -> Path:
    table = read(name)
    sizes = list(next(iter(table.values())))
    fig, ax = plt.subplots(figsize=(8, 4.2))
    width = 0.8 / len(table)
    colors = plt.get_cmap("tab20").colors  # one color per row: the default cycle has ten
    for i, (row, ratios) in enumerate(table.items()):
        xs = [k + i * width for k in range(len(sizes))]
        ax.bar(xs, [ratios.get(s, float("nan")) for s in sizes], width, label=row,
               color=colors[i % len(colors)])
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(sizes))], sizes, rotation=20,
                  ha="right")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set(yscale="log", ylabel="time / baseline (lower is faster)", xlabel=xlabel,
           title=title)
    ax.legend(fontsize=7, ncols=2)
    fig.tight_layout()
    path = IMG / f"{name}.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def main() -> None:
    IMG.mkdir(parents=True, exist_ok=True)
    print(plot("update_seed", "w = -eta * (g + lam * w), float32", "elements"))
    print(plot("update_adam", "Adam update (m, v, w), float32", "elements"))
    print(plot("mlp_train_t1", "MLP training step, 1 thread", "model and batch"))


if __name__ == "__main__":
    main()
