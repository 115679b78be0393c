"""One engine at every size (issue 38): node/ decides nothing about how values are
computed. Below the fusion threshold an op runs at once in the engine's evaluator of
small work (tensor/eager.py); node/ holds no NumPy arithmetic of its own, and every
gradient backward carries is a Tensor or an expression, never an array."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import numpy as np

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.tensor import eager

backward_module = importlib.import_module("minitorch_exp.node.backward")
NODE = Path(backward_module.__file__).resolve().parent
#: node/'s op machinery: Functions, backward, contexts, Nodes, hooks
MACHINERY = ["ops.py", "backward.py", "function.py", "node.py", "hooks.py"]
#: NumPy names node/ may still use: type tests, the inverse of a permutation, an index's
#: arrays (``index_key``) and a Node's repr
ALLOWED_NP = {"ndarray", "generic", "dtype", "argsort", "asarray", "array2string"}


def numpy_uses(path: Path) -> list[str]:
    """``np.<name>`` uses outside ``ALLOWED_NP``, ``blas`` imports, and ``.array`` reads
    outside a ``capture.host_op`` call (a library call on the host, recorded as one)."""
    tree = ast.parse(path.read_text())
    host_calls = {id(n) for call in ast.walk(tree) if isinstance(call, ast.Call)
                  and getattr(call.func, "attr", "") == "host_op" for n in ast.walk(call)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == "np" and node.attr not in ALLOWED_NP:
            found.append(f"np.{node.attr} at line {node.lineno}")
        elif isinstance(node, ast.Attribute) and node.attr == "array" \
                and id(node) not in host_calls:
            found.append(f".array at line {node.lineno}")
        elif isinstance(node, ast.ImportFrom) and any(a.name == "blas" for a in node.names):
            found.append(f"imports blas at line {node.lineno}")
    return found


def test_node_machinery_holds_no_numpy_arithmetic():
    for name in MACHINERY:
        assert numpy_uses(NODE / name) == [], name


def test_the_check_finds_numpy_arithmetic(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import numpy as np\nfrom ..tensor import blas\n"
                   "def f(t):\n    return np.exp(t.array) + blas.matmul(t, t)\n")
    assert numpy_uses(bad) == ["imports blas at line 2", "np.exp at line 4",
                               ".array at line 4"]


def test_an_mlp_step_at_batch_32_computes_in_the_engine_s_evaluator():
    """The 784-256-10 step at batch 32 -- every op below the threshold -- is computed by
    tensor/eager.py's functions, each gradient handed between rules as a Tensor."""
    rng = np.random.default_rng(0)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    x, y = mt.tensor(rng.standard_normal((32, 784)).astype(np.float32)), mt.tensor(
        rng.integers(0, 10, 32))
    called, gradients = set(), []
    eager_file = eager.__file__
    real_accumulate = backward_module._accumulate

    def watch(frame, event, arg):
        if event == "call" and frame.f_code.co_filename == eager_file:
            called.add(frame.f_code.co_name)

    def accumulate(leaf, g, trace=None):
        gradients.append(type(g))
        return real_accumulate(leaf, g, trace)

    backward_module._accumulate = accumulate
    sys.setprofile(watch)
    try:
        nn.functional.cross_entropy(model(x), y).backward()
    finally:
        sys.setprofile(None)
        backward_module._accumulate = real_accumulate
    assert {"linear", "apply", "softmax_cross_entropy", "matmul", "sum_to",
            "derivative"} <= called
    # the four parameters': Tensors, and a lazy product for the large first weight,
    # written straight into its gradient buffer
    assert sorted(g.__name__ for g in gradients) == ["Dot", "Tensor", "Tensor", "Tensor"]


def test_every_elementwise_op_asks_the_engine_once_whatever_its_size_or_dtypes(monkeypatch):
    """One path for an elementwise op: small or large, one dtype or mixed (promotion
    converts first), with a NumPy array or a number, it asks ``eager.apply`` once, and
    a None from it keeps the op lazy; node/ computes nothing itself."""
    asked = []
    real_apply = eager.apply

    def apply(row, values):
        asked.append(row.name)
        return real_apply(row, values)

    monkeypatch.setattr(eager, "apply", apply)
    small = mt.randn(3, requires_grad=True)
    large = mt.randn(eager.threshold() + 1, requires_grad=True)
    ops = [lambda: small * small, lambda: small.double() * small, lambda: 2.0 ** small,
           lambda: small + np.ones(3, np.float32), lambda: small.relu(),
           lambda: large * large, lambda: mt.where(small > 0, small, 0.0)]
    for op in ops:
        del asked[:]
        out = op()
        assert asked[-1] in {"mul", "pow", "add", "relu", "where"}, asked
        assert asked.count(asked[-1]) == 1, asked
        assert out.is_lazy == (out.numel() >= eager.threshold())
    from minitorch_exp.node import function
    from minitorch_exp.node import ops as node_ops
    for name in ("pair_now", "single_now", "apply_now", "reduce_now", "linear_now",
                 "elementwise_general"):
        assert not hasattr(node_ops, name), name
    assert not hasattr(function.Context, "computed")
