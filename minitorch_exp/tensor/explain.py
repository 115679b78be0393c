"""explain(): what an expression computes, which kernels run it, and what fusion saves.

``explain(e)`` turns a lazy expression into text for a person learning how it
will run:

* the **tree**, one node per line, with shape and dtype; each computing node is
  tagged with the kernel (``K1``, ``K2``...) that computes it, and each leaf
  says how it is laid out in memory (contiguous, transposed, broadcast...);
* the **kernels**, in the order they run, and for every boundary the reason it
  was cut: a dot or reduction whose result feeds more elementwise work, or a
  reshape that cannot be pushed to the leaves (``ViewExp.reason``). A dtype
  change is never a boundary: a cast is one more step per element;
* each kernel's **Plan** and its **code**: the NumPy block schedule as
  pseudo-code, or the numba / CUDA source the other backends compile;
* the **cost** against eager NumPy, which runs op by op and allocates a new
  array for every op.

The kernels come from ``lower.split``: the walk the engine itself takes,
with a visitor that computes nothing. ``debug_run`` prints each kernel as it
runs when ``MINITORCH_DEBUG`` is set; a level above may collect those lines
(``collect_debug``) or say what each kernel is for (``kernel_notes``).
Leaves are named by tensor/names.py: the user's names, views of them (``x.T``),
names given to memory (``W.grad``, a kernel's ``#n``), else a number never reused.

A level above joins in through two methods, so this module knows nothing of it:
an object holding an expression offers ``__exp__()`` (the expression as held,
nothing evaluated: leaves are called by the names of the objects holding them)
and ``explain()``, which ``explain`` hands it to. node/explain.py explains a
Node's graph that way, with the Exp-level pieces here (``Names``, ``TreeView``,
``render_rows``, ``split_named``).
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import textwrap
import threading
import time
from dataclasses import dataclass

from . import counters
from . import layout as L
from .backends import cpu_backend, device_backend
from .device import as_device
from .expr import (
    RVALUE,
    Cast,
    Dot,
    Exp,
    Map,
    Reduce,
    Scalar,
    ViewExp,
    as_exp,
    describe,
    use_explainer,
)
from .kernels import (
    body_leaves,
    compiled_source,
    eager_traffic,
    fused_traffic,
    human_bytes,
    numpy_schedule,
    plural,
    product_temporary,
    realized,
)
from .lower import Kernel, Splitter, split, unique
from .names import Names, name_storage
from .names import caller_names as caller_names  # also imported from here by node/
from .names import held_exp as held_exp
from .tensor import Tensor

# ---- names: call leaves what the user called them (tensor/names.py) -------------------


def _explains_itself(x) -> bool:
    """An object of a level above holding an expression (a Node): it explains itself."""
    return not isinstance(x, Exp) and hasattr(type(x), "__exp__") and hasattr(x, "explain")


def split_named(e: Exp, names: Names, loop_shape=None) -> Splitter:
    """``kernels.split``, with the temporaries it invents (``K1``...) added to ``names``."""
    s = split(e, loop_shape)
    names.known.update(s.labels)
    return s


# ---- one-line formulas ------------------------------------------------------------


_INFIX = {"add": ("+", 1), "sub": ("-", 1), "mul": ("*", 2), "div": ("/", 2),
          "pow": ("**", 4), "eq": ("==", 0), "ne": ("!=", 0), "lt": ("<", 0),
          "le": ("<=", 0), "gt": (">", 0), "ge": (">=", 0)}


def formula(e: Exp, names: Names, prec: int = 0) -> str:
    """Infix text of an expression, parenthesized only where needed; an expression in
    ``names.stops`` is written by its name."""
    stop = names.stops.get(id(e))
    if stop is not None:
        return stop
    if type(e) is Scalar:
        return repr(e.value)
    if e.kind == RVALUE:
        return names(e)
    if realized(e) is not None:
        return names(realized(e))
    if type(e) is Map and e.op.name in _INFIX:
        sym, p = _INFIX[e.op.name]
        a, b = e.args
        text = f"{formula(a, names, p)} {sym} {formula(b, names, p + 1)}"
        return f"({text})" if p < prec else text
    if type(e) is Map and e.op.name == "neg":
        return f"-{formula(e.args[0], names, 3)}"
    if type(e) is Map:
        return f"{e.op.name}({', '.join(formula(a, names) for a in e.args)})"
    if type(e) is Dot:
        text = f"{formula(e.a, names, 2)} @ {formula(e.b, names, 3)}"
        return f"({text})" if prec > 2 else text
    inner = formula(e.children()[0], names, 5)
    return f"{inner}.{_method(e)}"


def _method(e: Exp) -> str:
    if type(e) is Cast:
        return f"astype({e.dtype.name})"
    if type(e) is Reduce:
        axes = e.axes[0] if len(e.axes) == 1 else e.axes
        return f"{e.op}({axes}{', keepdims=True' if e.keepdims else ''})"
    return e.what  # ViewExp


def _short(text: str, width: int = 90) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


# ---- the tree ---------------------------------------------------------------------


def shape_str(e) -> str:
    if type(e) is Scalar:
        return "scalar"
    return f"{tuple(e.shape)} {e.dtype.name}"


def layout_note(t: Tensor, loop_shape=None) -> str:
    """How a leaf sits in memory and how a kernel walking ``loop_shape`` reads it."""
    if t.storage is None:
        return "temporary (written by an earlier kernel)"
    lay = t.layout
    if loop_shape is not None and tuple(loop_shape) != t.shape:
        lay = L.broadcast_layout(lay, tuple(loop_shape))
        return f"broadcast to {tuple(loop_shape)}: strides {lay.strides}"
    return f"{_layout_kind(lay)}, strides {lay.strides}" + (
        f", offset {lay.offset}" if lay.offset else "")


def _layout_kind(lay: L.Layout) -> str:
    moving = [(n, s) for n, s in zip(lay.shape, lay.strides) if n > 1]
    if any(s == 0 for _, s in moving):
        return "broadcast view (stride 0)"
    if any(s < 0 for _, s in moving):
        return "reversed view"
    if L.is_contiguous(lay.shape, lay.strides):
        return "contiguous"
    steps = [abs(s) for _, s in moving]
    return "transposed view" if steps != sorted(steps, reverse=True) else "strided view"


@dataclass
class Row:
    tag: str
    text: str
    info: str
    note: str


class TreeView:
    """Renders a tree with kernel tags; ``stop`` names nodes drawn as leaves (graph nodes)."""

    def __init__(self, names: Names, splitter: Splitter | None = None, stop=None, aliases=None):
        self.names = names
        self.kernel_of = splitter.kernel_of if splitter else {}
        self.stop = stop or {}
        self.aliases = aliases or {}

    def rows(self, e: Exp) -> list[Row]:
        out: list[Row] = []
        self._walk(e, "", "", None, out, set())
        return out

    def _walk(self, e, lead, branch, loop, out, seen) -> None:
        k = self.kernel_of.get(id(e))
        repeat = id(e) in seen and self.children(e)
        out.append(Row(k.name if k else "", lead + self.label(e),
                       shape_str(e), "shared: same node as above" if repeat else
                       self.note(e, k, loop)))
        if repeat:
            return
        seen.add(id(e))
        loop = (None if type(e) is Dot else k.loop_shape) if k else loop
        kids = self.children(e)
        for i, c in enumerate(kids):
            last = i == len(kids) - 1
            self._walk(c, branch + ("└─ " if last else "├─ "),
                       branch + ("   " if last else "│  "), loop, out, seen)

    def children(self, e) -> tuple:
        if self._stopped(e) or e.kind == RVALUE or type(e) is Scalar or realized(e) is not None:
            return ()
        return e.children()

    def _stopped(self, e) -> bool:
        return id(e) in self.stop or id(realized(e)) in self.stop

    def label(self, e) -> str:
        if self._stopped(e):
            return self.stop.get(id(e)) or self.stop[id(realized(e))]
        if type(e) is Scalar:
            return repr(e.value)
        if e.kind == RVALUE:
            return self.names(e)
        if realized(e) is not None:
            return f"{describe(e)} = {self.names(realized(e))}"
        alias = self.aliases.get(id(e))
        return f"{describe(e)} [{alias}]" if alias else describe(e)

    def note(self, e, k: Kernel | None, loop) -> str:
        if self._stopped(e) or type(e) is Scalar:
            return ""
        if e.kind == RVALUE:
            return layout_note(e, loop)
        if realized(e) is not None:
            return "computed earlier and kept: read, not recomputed"
        if k is not None and k.node is e:
            return {"blas": "BLAS", "reduce": "reduction, input fused into its pass",
                    "fused": "one fused pass"}[k.kind] + (" ✂ → temporary" if k.cut else "")
        if type(e) is Cast:
            return "a cast fuses: one more step per element"
        if type(e) is ViewExp:
            return "a view of the temporary below (no copy)"
        return ""


def render_rows(rows: list[Row], indent: str = "  ", tags: bool = True) -> list[str]:
    """Rows as aligned text: kernel tag, tree, shape and dtype, note."""
    text_w = min(48, max(len(r.text) for r in rows))
    info_w = max(len(r.info) for r in rows)
    tag_w = max((len(r.tag) for r in rows), default=0) if tags else 0
    tag = (lambda r: f"{r.tag:<{tag_w}}  ") if tag_w else (lambda r: "")
    return [f"{indent}{tag(r)}{r.text:<{text_w}}  {r.info:<{info_w}}  {r.note}".rstrip()
            for r in rows]


# ---- plans and code ---------------------------------------------------------------


def plan_text(k: Kernel, names: Names) -> list[str]:
    plan, leaves, scalars = k.planned()
    inputs = [f"in{i} = {names(t)} {shape_str(t)}" for i, t in enumerate(leaves)]
    inputs += [f"s{i} = {v!r}" for i, v in enumerate(scalars)]
    head = (f"Plan of {k.name} ({plural(len(plan.instrs), 'instruction')}, "
            f"{plural(plan.n_leaves, 'tensor input')}; cached by structure, never by data)")
    body = plan.describe().splitlines()
    if k.kind == "reduce":
        body.append(f"  then {k.body.op} over axes {k.body.axes} in the same pass")
    return [head, "  inputs: " + ";  ".join(inputs)] + body


def kernel_code(k: Kernel, device, backend: str, dst=None, saver: str = "=",
                names: Names | None = None) -> list[str]:
    """Title and lines of the code that runs ``k`` on ``device`` with ``backend``."""
    if k.kind == "blas":
        lib = "cupy" if device.type == "cuda" else "np"
        operands = ", ".join((names or Names())(x) for x in (k.body.a, k.body.b))
        title = f"Code of {k.name}: one BLAS call ({'cuBLAS' if lib == 'cupy' else 'NumPy'})"
        if saver != "=" and dst is not None:
            out = (names or Names())(dst)
            if not product_temporary([k], saver, dst):
                gemm = "cublas.gemm" if lib == "cupy" else "sgemm/dgemm"
                return [title, f"  {gemm}({operands}, out={out}, alpha="
                               f"{'1' if saver == '+=' else '-1'}, beta=1)   # added into "
                               f"{out} as computed: no temporary"]
            return [title, f"  tmp = {lib}.matmul({operands})   # a temporary the size of "
                           f"{out}: BLAS cannot apply {saver} to it in place",
                    f"  {out} {saver} tmp"]
        return [title, f"  {lib}.matmul({operands}, out=...)   # writes {k.name}'s result"]
    if device.type == "cuda":
        source = compiled_source(k, dst, saver, "cuda")
        if source is not None:
            return [f"Code of {k.name}: CUDA C++ for cuda (compiled once per structure)"] + source
        note = " (tensor/cuda.py offers no source yet; NumPy schedule shown)"
    elif backend == "numba":
        source = compiled_source(k, dst, saver, "numba")
        if source is not None:
            return [f"Code of {k.name}: Python compiled by numba for cpu"] + source
        note = " (no numba kernel for it, e.g. over float16; NumPy schedule shown)"
    else:
        note = ""
    return [f"Code of {k.name}: NumPy schedule for cpu{note}"] + numpy_schedule(k, saver)


# ---- cost against eager NumPy -------------------------------------------------------


def cost_text(e: Exp, kernels: list[Kernel], out, saver: str, dst_name: str) -> list[str]:
    eager, ours = eager_traffic(e), fused_traffic(kernels, out, saver)
    rows = [("passes over memory", eager.passes, ours.passes),
            ("arrays allocated", eager.arrays, ours.arrays),
            ("bytes read", human_bytes(eager.read), human_bytes(ours.read)),
            ("bytes written", human_bytes(eager.written), human_bytes(ours.written)),
            ("bytes moved", human_bytes(eager.moved), human_bytes(ours.moved))]
    lines = ["Cost against eager NumPy (op by op, a new array per op)",
             f"  {'':<20}{'eager NumPy':>14}{'minitorch_exp':>16}"]
    lines += [f"  {label:<20}{a:>14}{b:>16}" for label, a, b in rows]
    ratio = eager.moved / ours.moved if ours.moved else 1.0
    eager_temps = plural(max(eager.arrays - 1, 0), "temporary")
    product_temp = product_temporary(kernels, saver, out)
    ours_temps = plural(len(kernels) - 1 + product_temp, "temporary")
    saving = f"{ratio:.1f}x less memory traffic" if ratio >= 1.05 else "about the same traffic"
    into = (f"the product is applied to {dst_name} ({saver}) from its temporary" if product_temp
            else f"the result goes straight into {dst_name}")
    return lines + wrap("  ", f"eager NumPy allocates {eager_temps} and the result; here "
                        f"{ours_temps}, and {into}: {saving}")


# ---- explain ----------------------------------------------------------------------


SECTIONS = ("tree", "kernels", "plan", "code", "cost")


def explain(e, device=None, backend: str | None = None, out=None, saver: str = "=",
            parts=None, **options) -> str:
    """Explain how ``e`` will be evaluated: tree, kernels and cuts, Plans, code, cost.

    Nothing is evaluated. Leaves are called by your variable names when the
    caller has them.

    Args:
        e: an expression or a Tensor; an object of a level above that holds one (a
            Node) answers with its own ``explain()``.
        device: whose code to show (default: the expression's device). ``'cuda'``
            shows the generated CUDA source even on a machine without a GPU.
        backend: the CPU evaluator to show, ``'numpy'`` or ``'numba'`` (default:
            the current one, see ``set_cpu_backend``).
        out: the tensor the result will be written into (``out[...] = e``).
        saver: ``'='``, ``'+='``, ``'-='``, ``'*='`` or ``'/='``.
        parts: which sections to include, from ``SECTIONS`` (default: all).
        options: for an object that explains itself (a Node takes ``backward=True``).
    """
    if _explains_itself(e):
        given = {"device": device, "backend": backend, "out": out, "parts": parts,
                 "saver": None if saver == "=" else saver}
        return e.explain(**{k: v for k, v in given.items() if v is not None}, **options)
    if options:
        raise TypeError(f"explain() of an expression takes no {', '.join(options)} "
                        "(backward= is for a Node)")
    parts = SECTIONS if parts is None else parts
    e = as_exp(e)
    names = Names.of_caller()
    device = as_device(device or e.device or "cpu")
    backend = "cuda" if device.type == "cuda" else (backend or cpu_backend())
    trivial = _trivial(e, names)
    if trivial:
        return trivial
    s = split_named(e, names, out.shape if out is not None else None)
    chosen = [section(part, e, s, names, device, backend, out, saver) for part in parts]
    return "\n".join([_headline(e, names, out, saver, device, backend)] +
                     [line for block in chosen if block for line in [""] + block])


def section(part: str, e, s: Splitter, names, device, backend, out=None,
            saver: str = "=") -> list[str]:
    """The lines of one of ``SECTIONS`` for ``e``, split by ``s`` (``split_named``)."""
    dst_name = names(out) if out is not None else "a new tensor"
    last = s.kernels[-1]
    if part == "tree":
        return ["Tree (K = the kernel computing each node)"] + render_rows(
            TreeView(names, s).rows(e))
    if part == "kernels":
        return (kernels_text(s.kernels, names, dst_name) + reused_text(s, names)
                + alias_text(last, out, names))
    if part == "plan":
        return _join([plan_text(k, names) for k in s.kernels if k.kind != "blas"])
    if part == "code":  # only the last kernel writes into ``out``, with the saver
        return _join([kernel_code(k, device, backend, out if k is last else None,
                                  saver if k is last else "=", names) for k in s.kernels])
    if part == "cost":
        return cost_text(e, s.kernels, out, saver, dst_name)
    raise ValueError(f"explain: unknown part {part!r}; choose from {SECTIONS}")


def _join(blocks: list[list[str]]) -> list[str]:
    return [line for i, block in enumerate(blocks) for line in ([""] if i else []) + block]


def _headline(e, names, out, saver, device, backend) -> str:
    target = f"{names(out)}[...] {saver} " if out is not None else "result = "
    return (f"explain: {_short(target + formula(e, names))}\n"
            f"  -> {shape_str(e)} on {device}, {backend} backend")


def _trivial(e: Exp, names: Names) -> str | None:
    if type(e) is Scalar:
        return f"explain: the scalar {e.value!r}: nothing to compute until it meets a tensor"
    if e.kind == RVALUE:
        return (f"explain: {names(e)} is a tensor {shape_str(e)}, {layout_note(e)}: "
                "nothing to compute; evaluating it returns the tensor itself")
    if realized(e) is not None:
        return (f"explain: {describe(e)} {shape_str(e)} was computed earlier and is kept; "
                "using it again reads memory and runs no kernel")
    return None


def kernels_text(kernels: list[Kernel], names: Names, dst_name: str) -> list[str]:
    eager = eager_traffic(kernels[-1].node).passes
    lines = [f"Kernels: {len(kernels)} (eager NumPy would run {plural(eager, 'pass')}, "
             "one per op)"]
    for k in kernels:
        lines.append(f"  {k.name}  {k.kind:<6} {_short(_kernel_summary(k, names), 72)}")
        lines.append(f"      -> {'temporary ' + k.name if k.cut else dst_name}; "
                     f"{plural(len(k.members), 'node')} in one pass")
        if k.cut:
            lines += wrap("      cut: ", k.cut)
    casts = [m for k in kernels for m in k.members if type(m) is Cast]
    if casts:
        lines += wrap("  note: ", f"{describe(casts[0])} is no boundary: a dtype change is one "
                      "more step per element, so it fuses")
    return lines


def wrap(prefix: str, text: str, width: int = 92) -> list[str]:
    """``prefix`` + ``text`` wrapped, continuation lines indented under the text."""
    return textwrap.wrap(text, width, initial_indent=prefix,
                         subsequent_indent=" " * len(prefix)) or [prefix.rstrip()]


def reused_text(s: Splitter, names: Names) -> list[str]:
    """Values computed before (kept by the user, or shared): a boundary that costs nothing."""
    lines = []
    for e in unique(s.reused_nodes):
        lines += wrap("  note: ", f"{describe(e)} was computed earlier and kept as "
                      f"{names(realized(e))} (a value that escaped to the user, or a shared "
                      "one): it is read from memory here, not recomputed")
    return lines


def alias_text(k: Kernel, out, names: Names) -> list[str]:
    """What happens when the destination is also read by the kernel writing it."""
    if out is None or k.kind == "blas":
        return []
    x = k.body.x if k.kind == "reduce" else k.body
    lines = []
    for t in body_leaves(x):
        if t.storage is not out.storage:
            continue
        if t.layout == out.layout and k.kind != "reduce":
            lines += wrap("  note: ", f"{names(t)} is read and written by {k.name}: each "
                          "element is read before the same element is written, so no copy is "
                          "needed")
        else:
            lines += wrap("  note: ", f"{names(t)} overlaps the destination at other positions: "
                          "the engine copies it first (one extra pass), as NumPy's result needs")
    return lines


def _kernel_summary(k: Kernel, names: Names) -> str:
    if k.kind == "reduce":
        return f"{k.body.op} over axes {k.body.axes} of {formula(k.body.x, names)}"
    return formula(k.body, names)


# ---- MINITORCH_DEBUG: print each kernel as it runs ----------------------------------


_RUNS = itertools.count(1)


class _Local(threading.local):
    """This thread's collectors, notes and names (``collect_debug``, ``kernel_notes``,
    ``debug_names``): another thread's kernels are not part of them."""

    def __init__(self):
        self.collecting: list[list[str]] = []
        self.notes: list = []
        self.names: list = []


_LOCAL = _Local()
_RAISED = {"count": 0, "level": 0}  # collect_debug blocks running (any thread), level before
_RAISED_LOCK = threading.Lock()


@contextlib.contextmanager
def collect_debug():
    """Run the block at debug level 1 or more and collect this thread's kernels' debug
    lines in the list yielded instead of printing them. What runs is what runs without
    debug (the same kernels, counted the same), so a level above can show what ran."""
    lines: list[str] = []
    with _RAISED_LOCK:  # no set_debug: nothing kept at level 0 goes stale
        if not _RAISED["count"]:
            _RAISED["level"] = counters.DEBUG
        _RAISED["count"] += 1
        counters.DEBUG = max(counters.DEBUG, 1)
    _LOCAL.collecting.append(lines)
    try:
        yield lines
    finally:
        _LOCAL.collecting.remove(lines)
        with _RAISED_LOCK:
            _RAISED["count"] -= 1
            if not _RAISED["count"]:
                counters.DEBUG = _RAISED["level"]


@contextlib.contextmanager
def kernel_notes(note):
    """``note(e) -> str`` adds ``(text)`` to the debug line of each kernel computing ``e``
    inside the block (this thread's): a level above says what it is for (``backward of
    tanh, mul``)."""
    _LOCAL.notes.append(note)
    try:
        yield
    finally:
        _LOCAL.notes.remove(note)


@contextlib.contextmanager
def debug_names(named: list[tuple[object, str]]):
    """Debug lines of the kernels run inside (this thread's) call each object of the
    ``(object, name)`` pairs by its name (a tensor's views too: ``n2.T``)."""
    _LOCAL.names.append(named)
    try:
        yield
    finally:
        _LOCAL.names.remove(named)


def _debug_names() -> Names:
    names = Names.of_caller()
    for named in _LOCAL.names:
        for x, name in named:
            names.known[id(x)] = name
            if type(x) is Tensor:
                names.add_tensor(x, name)
    return names


def _emit(text: str) -> None:
    if _LOCAL.collecting:
        _LOCAL.collecting[-1].append(text)
    elif not _RAISED["count"] or _RAISED["level"]:  # not only raised by another's collect
        print(text, flush=True)


def _note(e) -> str:
    notes = _LOCAL.notes
    text = notes[-1](e) if notes else ""
    return f"  ({text})" if text else ""


def debug_run(run, dst, e: Exp, saver: str) -> None:
    """Run one kernel (``run(dst, e, saver)``) and print it at the current debug level.

    1: one line (kind, device/backend, destination, formula); 2: plus time,
    bytes moved and GB/s, marked when the call compiled its kernel; 3: plus the
    expression tree; 4: plus the source. A temporary made by an earlier kernel
    is named by that kernel's ``#n`` (tensor/names.py names the rest).
    """
    number = next(_RUNS)
    name_storage(dst, f"#{number}", replace=False)
    names = _debug_names()
    s = split_named(e, names, dst.shape)
    compiles = _compiles(s.kernels[-1])
    seconds = _timed(dst.device, lambda: run(dst, e, saver))
    compiled = _compiles(s.kernels[-1]) != compiles
    _emit(debug_text(counters.DEBUG, number, dst, e, saver, seconds, names, s, compiled))


def debug_group(run, items) -> None:
    """Run one grouped kernel (``assign_all``) and print it: one line for the kernel,
    naming each statement it runs, in order."""
    dst = items[0][0]
    number = next(_RUNS)
    compiles = _compiles(None)
    seconds = _timed(dst.device, run)
    names = _debug_names()
    parts = "; ".join(f"{names(d)} {saver} {_short(formula(e, names), 40)}"
                      for d, e, saver in items)
    line = (f"[mt #{number}] fused  {dst.device}/{device_backend(dst.device).name:<5} "
            f"{len(items)} statements over {shape_str(dst)}  {parts}")
    if counters.DEBUG >= 2:
        line += f"  | {seconds * 1e3:.3f} ms{_compile_mark(_compiles(None) != compiles)}"
    for d, _, _ in items:
        name_storage(d, f"#{number}", replace=False)
    _emit(line)


def _timed(device, run) -> float:
    sync = _synchronize(device)
    sync()
    start = time.perf_counter()
    run()
    sync()
    return time.perf_counter() - start


def _synchronize(device):
    if device.type != "cuda":
        return lambda: None
    return lambda: device.xp.cuda.get_current_stream().synchronize()


def _compiles(k: Kernel | None) -> tuple:
    """What grows when a call compiles a kernel: numba's count of kernels generated and
    compiled, and the compiled forms kept on ``k``'s Plan (a CUDA module)."""
    numba = sys.modules.get(__package__ + ".numba_compile")
    stats = numba.compile_stats() if numba is not None else {}
    planned = k.planned() if k is not None else None
    kept = 0 if planned is None else sum(key != "numpy" for key in planned[0].compiled)
    return stats.get("generated", 0), stats.get("compiled", 0), kept


def _compile_mark(compiled: bool) -> str:
    return " (includes compile)" if compiled else ""


def debug_text(level: int, number: int, dst, e: Exp, saver: str, seconds: float,
               names: Names | None = None, s: Splitter | None = None,
               compiled: bool = False) -> str:
    """The debug lines of kernel ``number``, which wrote ``e`` into ``dst`` in ``seconds``."""
    names = names or _debug_names()
    s = s or split_named(e, names, dst.shape)
    k = s.kernels[-1]
    backend = device_backend(dst.device).name
    line = (f"[mt #{number}] {k.kind:<6} {dst.device}/{backend:<5} {names(dst)} {saver} "
            f"{shape_str(dst)}  {_short(formula(e, names), 60)}{_note(e)}")
    if level >= 2:
        moved = fused_traffic([k], dst, saver).moved
        line += (f"  | {seconds * 1e3:.3f} ms{_compile_mark(compiled)}  {human_bytes(moved)}"
                 f"  {moved / max(seconds, 1e-9) / 1e9:.2f} GB/s")
    lines = [line]
    if level >= 3:
        lines += render_rows(TreeView(names, s).rows(e), indent="    ", tags=False)
    if level >= 4:
        code = kernel_code(k, dst.device, backend, dst, saver, names)
        code[0] = code[0].replace(f"Code of {k.name}", "Code", 1)
        lines += ["    " + x for x in code]
    return "\n".join(lines)


# The lowering core calls these without importing this module (tensor/__init__.py does).
use_explainer(explain)
counters.use_debug_printers(debug_run, debug_group)
