"""A reduction is its ``ReduceDef`` row: backends, kernel sources and explain read the
row's fields (``combine``, ``identity``, ``divide``, dtypes), never its name, so a new
reduction is one row. Two rows the package does not define show it: ``total`` (sum
under another name) and ``any`` (a fold by ``logical_or``)."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp.tensor as T
from minitorch_exp.tensor import cuda, numba_source
from minitorch_exp.tensor.explain import explain
from minitorch_exp.tensor.expr import Reduce
from minitorch_exp.tensor.ops import REDUCTIONS, ReduceDef
from minitorch_exp.tensor.plan import make_plan

TOTAL = ReduceDef("total", "total", np.sum, "add", "zero", "sum", "wide")
ANY = ReduceDef("any", "any", np.any, "logical_or", "lowest", "same", "same")
# (shape, axis): whole, one axis, two axes; large enough for NumPy's blocks and for
# numba's choice of NumPy on large inputs
CASES = [((5, 7), None), ((5, 7), 1), ((3, 4, 5), (0, 2)), ((600, 500), 0)]


@pytest.fixture(autouse=True)
def rows(monkeypatch):
    for row in (TOTAL, ANY):
        monkeypatch.setitem(REDUCTIONS, row.name, row)


def run(row, x, axis, backend):
    out = Reduce(row, x, axis)
    dst = T.empty(out.shape, dtype=out.dtype)
    with T.using_cpu_backend(backend), T.count_kernels() as ran:
        T.assign(dst, out)
    assert ran["reduce"] == 1, ran
    return dst.numpy()


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("shape,axis", CASES)
def test_a_new_row_reduces_on_every_cpu_backend(backend, shape, axis):
    if backend == "numba":
        pytest.importorskip("numba")
    a = np.random.default_rng(0).uniform(-1, 1, shape)
    x = T.from_numpy(a)
    np.testing.assert_allclose(run(TOTAL, x * 2.0, axis, backend), np.sum(a * 2.0, axis=axis))
    found = run(ANY, x > 0.99, axis, backend)
    assert found.dtype == np.bool_
    np.testing.assert_array_equal(found, np.any(a > 0.99, axis=axis))


def test_a_renamed_row_compiles_the_same_source():
    x = T.from_numpy(np.ones((4, 5), np.float32)) * 2.0
    plan = make_plan(x, 2)[0]
    total, summed = TOTAL, REDUCTIONS["sum"]
    assert numba_source.reduce_source(plan, total, 1, 1, "+=") == \
        numba_source.reduce_source(plan, summed, 1, 1, "+=")
    assert cuda.cuda_reduce_source(plan, total, 1, 1) == \
        cuda.cuda_reduce_source(plan, summed, 1, 1)


def test_a_new_fold_reaches_the_generated_source():
    x = T.from_numpy(np.ones((4, 5))) > 0.5
    plan = make_plan(x, 2)[0]
    numba_text = numba_source.reduce_source(plan, ANY, 1, 1)
    assert "acc = False" in numba_text and " or " in numba_text
    assert 'fastmath={"reassoc"}' not in numba_text  # only an add reassociates
    cuda_text = cuda.cuda_reduce_source(plan, ANY, 1, 1)
    assert "bool acc = false;" in cuda_text and "||" in cuda_text


def test_explain_describes_a_new_row():
    a = T.from_numpy(np.ones((4, 5)))
    text = explain(Reduce(TOTAL, a * 2.0, 1), backend="numpy")
    assert "total over axes (1,)" in text
    assert "np.add.reduce(vals, axis=(1,))" in text
