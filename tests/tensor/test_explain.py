"""explain(): sections, boundary reasons, costs, code per device; the MINITORCH_DEBUG levels."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from minitorch_exp.tensor import count_kernels, from_numpy, randn, tensor, zeros
from minitorch_exp.tensor.backends import using_cpu_backend
from minitorch_exp.tensor.explain import SECTIONS, explain
from minitorch_exp.tensor.kernels import eager_traffic, fused_traffic, human_bytes, plural
from minitorch_exp.tensor.lower import split

ETA, LAM = 0.1, 0.01


def flat(text: str) -> str:
    """The text with line wrapping undone, for phrases that may be wrapped."""
    return " ".join(text.split())


@pytest.fixture
def seed_update():
    g, w = randn(4, 5), randn(4, 5)
    return g, w, -ETA * (g + LAM * w)


# ---- the sections ---------------------------------------------------------------------

def test_seed_update_has_every_section(seed_update):
    g, w, e = seed_update
    text = explain(e, out=w)
    for heading in ("explain: w[...] = -0.1 * (g + 0.01 * w)", "Tree (K = the kernel",
                    "Kernels: 1 (eager NumPy would run 3 passes", "Plan of K1",
                    "Code of K1", "Cost against eager NumPy"):
        assert heading in text, heading
    assert "t0 = mul(s1, in1) -> float32" in text        # the Plan itself
    assert "in0 = g (4, 5) float32" in text              # leaves named as the caller named them
    assert "w is read and written by K1" in flat(text)   # aliasing with the destination


def test_explain_computes_nothing(seed_update):
    g, w, e = seed_update
    before = w.numpy().copy()
    with count_kernels() as k:
        explain(e, out=w)
        explain((g @ w.T + 1).sum(0), backend="numba")
    assert k.total == 0
    np.testing.assert_array_equal(w.numpy(), before)


def test_parts_select_sections(seed_update):
    _, w, e = seed_update
    text = explain(e, out=w, parts=["tree"])
    assert "Tree" in text and "Plan of" not in text and "Cost against" not in text
    assert set(SECTIONS) == {"tree", "kernels", "plan", "code", "cost"}


def test_method_on_expressions_matches_function(seed_update):
    _, _, e = seed_update
    assert e.explain().splitlines()[2:] == explain(e).splitlines()[2:]


# ---- boundaries and why they were cut -----------------------------------------------------

def test_dot_feeding_maps_is_cut_and_reduction_fuses_its_input():
    x, W, b = randn(3, 4), randn(4, 5), randn(5)
    text = explain((x @ W + b).relu().sum(1))
    assert "Kernels: 2" in text
    assert "K1  blas" in text and "K2  reduce" in text
    assert ("matmul runs as its own BLAS call; `add` reads its result from a temporary"
            in flat(text))
    assert "broadcast to (3, 5): strides (0, 1)" in text  # b, as the fused pass reads it
    assert "then sum over axes (1,) in the same pass" in text


def test_reduction_feeding_maps_is_cut():
    x = randn(3, 4)
    text = explain(x - x.sum(1, keepdims=True))
    assert "Kernels: 2" in text
    assert "must see all of its input before `sub` can use any result" in flat(text)


def test_reshape_that_cannot_be_a_view_is_cut_with_its_reason():
    a = randn(4, 6)
    text = explain((a.T + 1).reshape(-1) * 2)
    assert "Kernels: 2" in text
    assert ("cut: reshape: an input's strides cannot show the new shape without a copy"
            in flat(text))
    assert "K1.reshape(24,)" in text


def test_a_cast_is_not_a_boundary():
    a = randn(4, 6)
    text = explain((a.astype("float64") * 2).sum())
    assert "Kernels: 1" in text
    assert "astype(float64) is no boundary" in flat(text)


def test_matmul_operands_are_computed_first():
    a, b = randn(3, 4), randn(4, 2)
    text = explain((a * 2) @ b)
    assert "Kernels: 2" in text
    assert "BLAS reads its operands from memory" in flat(text)


def test_value_that_escaped_is_read_not_recomputed():
    from minitorch_exp.tensor.engine import realize
    a = randn(3)
    shared = a * 2
    e = shared + 1
    kept = realize(shared)          # the user asked for shared's values
    assert kept is shared.realized
    text = explain(e)
    assert "Kernels: 1" in text and "mul = kept" in text
    assert "computed earlier and kept as kept (a value that escaped to the user" in flat(text)


def test_leaf_layouts_are_described():
    a = from_numpy(np.arange(24, dtype=np.float32).reshape(4, 6))
    text = explain(a.T * 2 + a[::-1].T + a[:, ::2].T[0:3, 0:4].sum(0, keepdims=True))
    assert "transposed view, strides (1, 6)" in text
    assert "reversed view" in text


def test_tensors_and_scalars_are_trivial():
    t = randn(2, 3)
    assert "nothing to compute" in explain(t)


# ---- cost against eager NumPy ----------------------------------------------------------

def test_cost_of_seed_update(seed_update):
    g, w, e = seed_update
    eager = eager_traffic(e)
    ours = fused_traffic(split(e, w.shape).kernels, w)
    assert (eager.passes, eager.arrays, eager.read, eager.written) == (3, 3, 320, 240)
    assert (ours.passes, ours.arrays, ours.read, ours.written) == (1, 0, 160, 80)
    assert "2.3x less memory traffic" in flat(explain(e, out=w))


def test_broadcast_leaves_are_read_once():
    x, b = randn(100, 10), randn(10)
    ours = fused_traffic(split(x + b).kernels)
    assert ours.read == (1000 + 10) * 4 and ours.written == 1000 * 4


def test_saver_reads_the_destination_too(seed_update):
    g, w, e = seed_update
    assert fused_traffic(split(e, w.shape).kernels, w, "-=").read == 160 + 80


def test_small_helpers():
    assert human_bytes(80) == "80 B" and human_bytes(3 * 2**20) == "3.0 MiB"
    assert plural(1, "pass") == "1 pass" and plural(3, "pass") == "3 passes"
    assert plural(2, "temporary") == "2 temporaries"


# ---- code for each device ----------------------------------------------------------------

def test_numpy_schedule_is_pseudo_code(seed_update):
    _, w, e = seed_update
    text = explain(e, out=w, backend="numpy", parts=["code"])
    assert "NumPy schedule" in text and "np.multiply(s1, in1[blk], out=buf0)" in text


def test_numba_source_when_available(seed_update):
    numba_backend = pytest.importorskip("minitorch_exp.tensor.cpu_numba")
    if not hasattr(numba_backend, "kernel_source"):
        pytest.skip("tensor/cpu_numba.py has no kernel_source")
    _, w, e = seed_update
    text = explain(e, out=w, backend="numba", parts=["code"])
    assert "compiled by numba" in text and "def serial(" in text
    assert "x1 = out[p]" in text   # w is read where it is written: no second array


def test_cuda_source_without_a_gpu(seed_update):
    cuda = pytest.importorskip("minitorch_exp.tensor.cuda")
    if not hasattr(cuda, "cuda_source"):
        pytest.skip("tensor/cuda.py has no cuda_source")
    _, w, e = seed_update
    text = explain(e, out=w, device="cuda", parts=["code"])
    assert "CUDA C++" in text and "__global__" in text
    reduce_text = explain((e * 2).sum(1), device="cuda", parts=["code"])
    assert "__global__" in reduce_text


# ---- MINITORCH_DEBUG ---------------------------------------------------------------------

def _run_kernels():
    x, W, b = randn(3, 4), randn(4, 5), randn(5)
    return (x @ W + b).relu().sum(1).eval()


@pytest.mark.parametrize("level", [1, 2, 3, 4])
def test_debug_levels(level, debug_level, capsys):
    debug_level(level)
    with using_cpu_backend("numpy"):
        _run_kernels()
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("[mt #")]
    assert len(lines) == 2
    assert " blas " in lines[0] and "(3, 5) float32" in lines[0] and "x @ W" in lines[0]
    assert " reduce " in lines[1] and "(3,) float32" in lines[1]
    assert ("GB/s" in out) == (level >= 2)
    assert ("└─ relu" in out) == (level >= 3)
    assert ("np.add(in0[blk], in1[blk]" in out) == (level >= 4)


def test_debug_names_temporaries_by_kernel_number(debug_level, capsys):
    debug_level(1)
    _run_kernels()
    first, second = [line for line in capsys.readouterr().out.splitlines() if "[mt #" in line]
    number = first.split("#")[1].split("]")[0]
    assert f"#{number} + b" in second


def test_debug_off_prints_nothing(debug_level, capsys):
    debug_level(0)
    _run_kernels()
    assert capsys.readouterr().out == ""


def test_debug_level_from_the_environment():
    code = ("import minitorch_exp.tensor as T\n"
            "a = T.tensor([1.0, 2.0])\n"
            "(a * 2 + 1).eval()\n")
    env = {**os.environ, "MINITORCH_DEBUG": "2"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "[mt #1] fused" in proc.stdout and "GB/s" in proc.stdout


def test_debug_with_savers_and_int_destinations(debug_level, capsys):
    debug_level(2)
    counts = zeros(3, dtype="int32")
    counts += tensor([1, 2, 3], dtype="int32")
    out = capsys.readouterr().out
    assert "+= (3,) int32" in out
