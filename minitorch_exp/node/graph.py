"""Pictures of the Node graph: DOT text for graphviz, or a PNG drawn with matplotlib alone.

Each box is one Node: its name (your variable name when it has one), the op
that made it, shape, dtype and state, its gradient after backward (a leaf's,
or one kept by ``retain_grad()``: shape, dtype and norm), and -- for a lazy
node -- the expression it will compute, in which other nodes appear by name.
Lazy nodes that will run as one kernel are grouped: a dashed cluster in DOT, a
shaded band in the PNG.
Arrows follow the data, from inputs to the ops that read them.

``draw`` needs no graphviz: layers are the longest path from an input, boxes
sit side by side in their layer, and matplotlib draws boxes and arrows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..tensor.explain import Names, caller_names
from .explain import (
    fused_groups,
    node_graph,
    node_inputs,
    node_names,
    node_op,
    node_shape,
    node_state,
    node_tree,
    node_values,
)

MAX_TREE_LINES = 8
FILL = {"lazy": "#fff4d6", "leaf": "#e3ecfa", "other": "#ffffff"}
GROUP_COLORS = ["#f2b134", "#6aa84f", "#9b6fc4", "#4a90c2", "#d9665b"]


@dataclass
class GraphView:
    """Everything both pictures need: nodes in order, names, labels, edges, fused groups."""

    nodes: list
    names: dict[int, str]
    labels: dict[int, list[str]]
    edges: list[tuple[int, int]]        # (input index, consumer index)
    groups: list[list[int]]             # node indices, one list per fused kernel

    def fill(self, i: int) -> str:
        n = self.nodes[i]
        if n.is_lazy:
            return FILL["lazy"]
        return FILL["leaf"] if n.grad_fn is None else FILL["other"]


def graph_view(root, known: dict[int, str] | None = None) -> GraphView:
    nodes, consumers = node_graph(root)
    known = caller_names() if known is None else known
    names = node_names(nodes, known)
    index = {id(n): i for i, n in enumerate(nodes)}
    labels = {id(n): node_label(n, nodes, names, known) for n in nodes}
    edges = [(index[id(p)], index[id(n)]) for n in nodes for p in node_inputs(n)]
    groups = [[index[id(m)] for m in g] for g in fused_groups(nodes, consumers)]
    return GraphView(nodes, names, labels, edges, groups)


def node_label(n, nodes: list, names: dict[int, str], known: dict[int, str]) -> list[str]:
    """Name and op, shape and state, its gradient once backward filled one, then (lazy
    nodes) the expression tree."""
    lines = [f"{names[id(n)]}: {node_op(n)}", f"{node_shape(n)} · {node_state(n)}"]
    if n.grad is not None:
        lines.append(grad_text(n.grad))
    if n.is_lazy:
        stop = node_values(nodes, names, n)
        tree = [r.text for r in node_tree(n, Names({**known, **stop}), stop)]
        if len(tree) > MAX_TREE_LINES:
            tree = tree[:MAX_TREE_LINES - 1] + [f"… {len(tree) - MAX_TREE_LINES + 1} more"]
        lines += tree
    return lines


def grad_text(grad) -> str:
    """``grad (96, 80) float32 · norm 3.21``: a gradient's shape, dtype and L2 norm
    (computed with NumPy on a copy's worth of memory: no kernel is run or counted)."""
    values = np.asarray(grad.numpy(writable=False), dtype=np.float64)
    return f"grad {node_shape(grad)} · norm {float(np.linalg.norm(values)):.4g}"


# ---- DOT ---------------------------------------------------------------------------

def to_dot(node) -> str:
    """Graphviz DOT text of the graph that produced ``node`` (render: ``dot -Tpng``)."""
    view = graph_view(node, caller_names())
    out = ["digraph minitorch {",
           "  rankdir=TB;",
           '  node [shape=box, style="rounded,filled", fontname="monospace", fontsize=10];',
           '  edge [color="#555555"];']
    for g, members in enumerate(view.groups):
        out += [f"  subgraph cluster_{g} {{",
                '    label="one kernel"; style=dashed; color="#b07d00"; fontname="monospace";',
                "    " + " ".join(f'"{view.names[id(view.nodes[i])]}";' for i in members),
                "  }"]
    for i, n in enumerate(view.nodes):
        text = "".join(_dot_escape(line) + "\\l" for line in view.labels[id(n)])
        out.append(f'  "{view.names[id(n)]}" [label="{text}", fillcolor="{view.fill(i)}"];')
    name = [view.names[id(n)] for n in view.nodes]
    out += [f'  "{name[a]}" -> "{name[b]}";' for a, b in view.edges]
    out.append("}")
    return "\n".join(out) + "\n"


def _dot_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("{", "\\{").replace("}", "\\}")


# ---- PNG with matplotlib -------------------------------------------------------------

FONT = 8.0                       # points
CHAR_W, LINE_H, PAD, GAP = 0.6 * FONT, 1.35 * FONT, 6.0, 28.0


@dataclass
class Box:
    x: float
    y: float
    w: float
    h: float


def layers(view: GraphView) -> list[list[int]]:
    """Node indices by layer: a node sits one layer below its deepest input."""
    depth = [0] * len(view.nodes)
    for a, b in sorted(view.edges, key=lambda e: e[1]):  # inputs come first in view.nodes
        depth[b] = max(depth[b], depth[a] + 1)
    rows: list[list[int]] = [[] for _ in range(max(depth, default=0) + 1)]
    group_of = {i: g for g, members in enumerate(view.groups) for i in members}
    for i in sorted(range(len(view.nodes)), key=lambda i: (group_of.get(i, -1), i)):
        rows[depth[i]].append(i)
    return rows


def layout(view: GraphView) -> tuple[dict[int, Box], float, float]:
    """A box per node (points, y downwards) and the picture's width and height."""
    size = {}
    for i, n in enumerate(view.nodes):
        lines = view.labels[id(n)]
        size[i] = (max(len(s) for s in lines) * CHAR_W + 2 * PAD, len(lines) * LINE_H + 2 * PAD)
    rows = layers(view)
    widths = [sum(size[i][0] for i in row) + GAP * (len(row) - 1) for row in rows]
    width = max(widths) + 2 * GAP
    boxes, y = {}, GAP * 1.5
    for row, row_w in zip(rows, widths):
        x = (width - row_w) / 2
        for i in row:
            w, h = size[i]
            boxes[i] = Box(x, y, w, h)
            x += w + GAP
        y += max(size[i][1] for i in row) + GAP * 1.4
    return boxes, width, y


def draw(node, path, dpi: int = 150):
    """Render the graph of ``node`` to a PNG at ``path`` (matplotlib only); returns ``path``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import FancyBboxPatch

    view = graph_view(node, caller_names())
    boxes, width, height = layout(view)
    fig = Figure(figsize=(width / 72, height / 72))
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    ax.axis("off")
    ax.text(GAP / 2, GAP / 2, f"graph of {view.names[id(node)]}: shaded nodes run as one kernel",
            fontsize=FONT, va="center", family="monospace", color="#444444")
    _draw_groups(ax, view, boxes, FancyBboxPatch)
    for i, n in enumerate(view.nodes):
        b = boxes[i]
        ax.add_patch(FancyBboxPatch((b.x, b.y), b.w, b.h, boxstyle="round,pad=0,rounding_size=4",
                                    facecolor=view.fill(i), edgecolor="#333333", linewidth=0.8,
                                    zorder=2))
        ax.text(b.x + PAD, b.y + PAD, "\n".join(view.labels[id(n)]), family="monospace",
                fontsize=FONT, va="top", ha="left", linespacing=1.2, zorder=3)
    for a, c in view.edges:
        _arrow(ax, boxes[a], boxes[c])
    fig.savefig(path, dpi=dpi)
    return path


def _arrow(ax, src: Box, dst: Box) -> None:
    """Input to consumer; an edge that skips layers leaves and enters by the right side."""
    style = {"arrowstyle": "-|>", "color": "#555555", "lw": 0.8, "shrinkA": 0, "shrinkB": 0}
    if dst.y - (src.y + src.h) > 2 * GAP:
        start, end = (src.x + src.w, src.y + src.h / 2), (dst.x + dst.w, dst.y + dst.h / 2)
        style["connectionstyle"] = "arc3,rad=-0.35"
    else:
        start, end = (src.x + src.w / 2, src.y + src.h), (dst.x + dst.w / 2, dst.y)
    ax.annotate("", xy=end, xytext=start, arrowprops=style, zorder=4)


def _draw_groups(ax, view: GraphView, boxes: dict[int, Box], patch) -> None:
    for g, members in enumerate(view.groups):
        color = GROUP_COLORS[g % len(GROUP_COLORS)]
        x0 = min(boxes[i].x for i in members) - PAD
        y0 = min(boxes[i].y for i in members) - PAD
        x1 = max(boxes[i].x + boxes[i].w for i in members) + PAD
        y1 = max(boxes[i].y + boxes[i].h for i in members) + PAD
        ax.add_patch(patch((x0, y0), x1 - x0, y1 - y0, boxstyle="round,pad=0,rounding_size=6",
                           facecolor=color, alpha=0.18, edgecolor=color, linestyle="--",
                           linewidth=1.0, zorder=0))
        ax.text(x1 + 4, y0 + PAD, "one\nkernel", color=color, fontsize=FONT - 1, ha="left",
                va="top", family="monospace", zorder=3)
