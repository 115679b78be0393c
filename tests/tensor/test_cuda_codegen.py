"""CUDA code generation, checked without a GPU by compiling with nvcc.

Every generated kernel -- each built-in op at each dtype, casts, scalars,
broadcasts, every saver, the reduction pair, a user op -- goes into ONE .cu
file compiled once per run with ``nvcc --ptx`` and warnings as errors (skipped
with the reason when nvcc is absent). Tests marked ``cuda`` run the kernels on
a GPU through CuPy and compare with the CPU; they skip when there is none.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

import minitorch_exp.tensor as mt
from minitorch_exp.tensor import cuda as K
from minitorch_exp.tensor.expr import as_exp
from minitorch_exp.tensor.ops import OPS, REDUCTIONS
from minitorch_exp.tensor.plan import make_plan

from ..devices import requires_gpu

DTYPES = ("float16", "float32", "float64", "int32", "int64", "bool")
SAVERS = ("=", "+=", "-=", "*=", "/=")


def leaf(dtype, shape=(2, 3)):
    return mt.from_numpy(np.ones(shape, dtype=dtype))


def _applicable(name: str, dtype: str) -> bool:
    """Ops NumPy itself refuses for a dtype (e.g. ``-`` on bool) are not generated."""
    x = np.ones(2, dtype=dtype)
    try:
        with np.errstate(all="ignore"):
            OPS[name].numpy(*[x] * OPS[name].arity)
    except TypeError:
        return False
    return True


def elementwise_cases():
    """(label, plan, ndim, saver, dst dtype) for a broad set of Plans."""
    cases = []
    for dtype in DTYPES:
        for name, op in sorted(OPS.items()):
            if not op.builtin or not _applicable(name, dtype):
                continue
            e = mt.apply_op(name, *[leaf(dtype) for _ in range(op.arity)])
            cases.append((f"{name}_{dtype}", e, 2, "="))
        for target in DTYPES:
            cases.append((f"cast_{dtype}_{target}", leaf(dtype).astype(target), 1, "="))
    x, b = leaf("float32"), leaf("float32", (3,))
    cases += [
        ("scalars", -0.1 * (x + 0.01 * x) + 3 + True, 1, "="),
        ("int_scalar_into_float", leaf("int32") * 2.5, 1, "="),
        ("broadcast_bias", (x + b).tanh() * (x > 0), 2, "="),
        ("mixed", leaf("int64") / leaf("float32") + leaf("bool"), 3, "="),
        ("where", mt.where(x > b, x, 2), 2, "="),
        ("only_scalar", as_exp(1.5), 1, "+="),
        ("copy", leaf("float64"), 4, "="),
    ]
    cases += [(f"saver_{i}", x * 2 + b, 2, s) for i, s in enumerate(SAVERS)]
    return [(label, make_plan(e, ndim)[0], ndim, saver) for label, e, ndim, saver in cases]


def reduce_cases():
    cases = []
    for op in (name for name, row in REDUCTIONS.items() if row.combine is not None):
        for dtype in DTYPES:
            e = leaf(dtype) if dtype == "bool" else leaf(dtype) * 2
            plan = make_plan(e, e.ndim)[0]
            for n_kept, n_reduced, saver in ((0, 1, "="), (1, 1, "+="), (2, 3, "*=")):
                cases.append((f"{op}_{dtype}_{n_kept}{n_reduced}", plan, REDUCTIONS[op],
                              n_kept, n_reduced, saver))
    return cases


def rename(source: str, label: str) -> str:
    """Give a module's kernels unique names so many can share one .cu file."""
    return re.sub(r"\bminitorch_(ew|partial|finish)\b", rf"\g<0>_{label}", source)


@pytest.fixture(scope="module")
def user_op():
    mt.register_op("cu_softplus", lambda x, out=None: np.log1p(np.exp(x), out=out),
                   "log1p(exp({0}))", result="float")
    yield "cu_softplus"
    mt.unregister_op("cu_softplus")


@pytest.fixture(scope="module")
def all_sources(user_op):
    sources = [rename(K.cuda_source(plan, ndim, saver), label)
               for label, plan, ndim, saver in elementwise_cases()]
    sources += [rename(K.cuda_reduce_source(plan, op, k, r, saver), label)
                for label, plan, op, k, r, saver in reduce_cases()]
    x = leaf("float32")
    plan = make_plan(mt.apply_op(user_op, x) * 2, 2)[0]
    sources.append(rename(K.cuda_source(plan, 2, "+="), "user_op"))
    return sources


def test_sources_are_built_without_cupy(all_sources):
    assert len(all_sources) > 150
    assert all('extern "C" __global__' in s for s in all_sources)


def test_elementwise_source_reads_strides_and_scalars():
    x, b = leaf("float32"), leaf("float32", (3,))
    plan = make_plan(-0.5 * (x + b), 2)[0]
    src = K.cuda_source(plan, 2, "+=")
    assert "in1[in1_o + i0 * in1_s0 + i1 * in1_s1]" in src
    assert "const double s0" in src and "out[p] = ((float)(out[p] + t1));" in src


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (CUDA toolkit) is not installed")
def test_every_generated_kernel_compiles_with_nvcc(all_sources, tmp_path):
    path = tmp_path / "kernels.cu"
    path.write_text("\n".join(all_sources))
    result = subprocess.run(
        ["nvcc", "-arch=sm_90", "--ptx", "-std=c++17", "--Werror", "all-warnings",
         "-o", str(tmp_path / "kernels.ptx"), str(path)],
        capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
    ptx = (tmp_path / "kernels.ptx").read_text()
    assert ptx.count(".entry") == sum(s.count("__global__") for s in all_sources)


# ---- on a GPU ----------------------------------------------------------------

def on_both(build):
    """``build(device)`` on cpu and on cuda, each as a NumPy array."""
    return build("cpu"), build("cuda")


@pytest.mark.cuda
@requires_gpu
@pytest.mark.parametrize("saver", SAVERS)
def test_gpu_elementwise_matches_cpu(saver):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 6)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)

    def build(device):
        x = mt.tensor(a, device=device)
        y = mt.tensor(b, device=device)
        mt.assign(x[:, ::-2], (x[:, ::-2] * 2 + y[::2]).sigmoid() + 1, saver)
        x[1:] = x[:-1] + 1  # overlaps dst at another layout: read through a copy
        return x.numpy()
    cpu, cuda = on_both(build)
    np.testing.assert_allclose(cuda, cpu, rtol=1e-5)


@pytest.mark.cuda
@requires_gpu
@pytest.mark.parametrize("op", ["sum", "mean", "max", "min", "argmax"])
@pytest.mark.parametrize("axis", [None, 0, 1, (0, 2)])
def test_gpu_reduce_matches_cpu(op, axis):
    if op == "argmax" and isinstance(axis, tuple):
        pytest.skip("argmax takes one axis")
    a = np.random.default_rng(1).standard_normal((7, 300, 5))

    def build(device):
        x = mt.tensor(a, device=device)
        return getattr((x * 2).tanh().exp(), op)(axis=axis).numpy()
    cpu, cuda = on_both(build)
    np.testing.assert_allclose(cuda, cpu, rtol=1e-10)


@pytest.mark.cuda
@requires_gpu
@pytest.mark.parametrize("saver", ["=", "+=", "-="])
def test_gpu_dot_matches_cpu(saver):
    rng = np.random.default_rng(2)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((4, 5), (5, 3), (4, 3)))

    def build(device):
        out = mt.tensor(c, device=device)
        mt.assign(out, mt.tensor(a, device=device) @ mt.tensor(b, device=device), saver)
        return out.numpy()
    cpu, cuda = on_both(build)
    np.testing.assert_allclose(cuda, cpu, rtol=1e-5)
