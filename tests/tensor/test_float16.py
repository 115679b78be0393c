"""float16 tensors: stored as float16, computed in float32, rounded once when stored.

The reference for every value is NumPy computing in float32 from the float16
inputs and rounding the result to float16 once -- what PyTorch's CPU kernels do
for half. A fused Plan (the NumPy evaluator: numba has no float16) gives exactly
those bits; an op computed at once gives NumPy's float16 ufunc, which rounds after
each op, so chains are compared within float16's precision (about 1e-3).
Inputs are drawn by hypothesis with broadcasting and non-contiguous strides.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
import minitorch_exp.tensor as T
from minitorch_exp.nn.safetensors import load_file, save_file
from minitorch_exp.tensor import cpu_numba, dtypes, engine
from minitorch_exp.tensor import cuda as K
from minitorch_exp.tensor.backends import using_cpu_backend
from minitorch_exp.tensor.ops import REDUCTIONS
from minitorch_exp.tensor.plan import make_plan

from ..devices import requires_gpu
from .strategies import arrays, broadcastable_to, shapes

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
HALF_TOL = dict(rtol=2e-3, atol=2e-3)  # float16's eps is 9.8e-4
#: Fusing every op (threshold 0) or computing every op at once (a huge threshold).
PATHS = {"fused": 0, "at once": 1 << 40}


def rounded(fn, *arrays_):
    """``fn`` of the arrays in float32, rounded to float16 once: the reference."""
    return np.asarray(fn(*[np.asarray(a, F32) for a in arrays_])).astype(F16)


# ---- the dtype, its names and promotion -----------------------------------------

def test_float16_is_a_supported_dtype_under_its_names():
    assert mt.float16 is mt.half is dtypes.float16 and dtypes.float16 in dtypes.SUPPORTED
    assert dtypes.as_dtype("half") == dtypes.as_dtype("float16") == dtypes.as_dtype(np.float16)
    for make in (mt.zeros, mt.ones, mt.empty, mt.randn):
        assert make(2, 3, dtype=mt.float16).dtype == F16
    assert mt.tensor(np.ones(2, F16)).dtype == F16 and mt.randn(3).half().dtype == F16


def test_from_numpy_shares_float16_memory_and_numpy_gives_it_back():
    arr = np.arange(6, dtype=F16).reshape(2, 3)
    t = mt.from_numpy(arr)
    assert t.dtype == F16 and np.shares_memory(t.numpy(), arr)
    arr[0, 0] = 7
    assert t.numpy()[0, 0] == 7 and t.numpy().dtype == F16


OTHERS = st.sampled_from(["float16", "float32", "float64", "int32", "int64", "bool"])


@given(OTHERS, OTHERS, st.sampled_from([None, 0.5, 3, True]))
@settings(max_examples=60, deadline=None)
def test_promotion_is_numpy_s(a, b, scalar):
    x, y = T.from_numpy(np.ones(2, a)), T.from_numpy(np.ones(2, b))
    assert (x + y).dtype == np.result_type(np.dtype(a), np.dtype(b))
    if scalar is not None and a != "bool":
        assert (x * scalar).dtype == np.result_type(np.dtype(a), scalar)


def test_promotion_of_float16_as_pytorch_users_expect():
    h = T.from_numpy(np.ones(2, F16))
    assert (h + T.from_numpy(np.ones(2, F32))).dtype == F32
    assert (h * 0.5).dtype == F16 and (h * 2).dtype == F16
    assert (T.from_numpy(np.ones(2, bool)) + h).dtype == F16
    # NumPy's rule, not PyTorch's float16: float16 cannot hold every int32
    assert (T.from_numpy(np.ones(2, np.int32)) + h).dtype == np.float64
    assert h.sum().dtype == F16 and h.mean().dtype == F16 and h.max().dtype == F16


# ---- elementwise values -----------------------------------------------------------

@st.composite
def broadcast_trios(draw):
    """Three float16 arrays (maybe strided) broadcasting to a shape, and that shape."""
    shape = draw(shapes(max_side=5))
    return [draw(arrays(draw(broadcastable_to(shape)), F16)) for _ in range(3)], shape


def _chain(x, y, z, exp, tanh):
    return tanh(x * 0.1 + y) * exp(z * 0.5) - x / (z * z + 1.5)


@given(broadcast_trios(), st.sampled_from(sorted(PATHS)))
@settings(max_examples=60, deadline=None)
def test_a_chain_is_computed_in_float32_and_rounded(case, path):
    (a, b, c), _ = case
    with mt.fusion(threshold=PATHS[path]):
        got = _chain(*map(T.from_numpy, (a, b, c)), T.exp, T.tanh).eval().numpy()
    want = rounded(lambda x, y, z: _chain(x, y, z, np.exp, np.tanh), a, b, c)
    assert got.dtype == F16 and got.shape == want.shape
    if path == "fused":  # one Plan: every step in float32, one rounding
        np.testing.assert_array_equal(got, want)
    else:  # NumPy's float16 ufuncs: a rounding after each op
        np.testing.assert_allclose(got.astype(F32), want.astype(F32), **HALF_TOL)


@given(arrays((3, 4), F16), st.sampled_from(sorted(PATHS)))
@settings(max_examples=30, deadline=None)
def test_one_op_gives_numpy_s_bits_on_both_paths(a, path):
    with mt.fusion(threshold=PATHS[path]):
        x = T.from_numpy(a)
        for got, want in [((x * x).eval(), a * a), ((x + 1.0).eval(), a + np.float16(1.0)),
                          (T.exp(x).eval(), np.exp(a)), ((x / 3).eval(), a / np.float16(3))]:
            assert got.dtype == F16
            np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("path", sorted(PATHS))
def test_comparing_with_a_number_compares_with_its_float16(path):
    """``x == 0.1`` holds for x = float16(0.1), as in NumPy and PyTorch: the fused Plan
    rounds a compared scalar to float16 (a dropped rounding compares with float32's 0.1)."""
    a = np.array([0.1, 0.2, 1 / 3, 0.5], F16)
    with mt.fusion(threshold=PATHS[path]):
        x = T.from_numpy(a)
        assert (x == 0.1).numpy().tolist() == (a == 0.1).tolist() == [True, False, False, False]
        assert ((x * 1) < 0.2).numpy().tolist() == (a < 0.2).tolist()


def test_a_cast_to_float16_inside_a_plan_rounds():
    a = np.array([1 / 3, 2049.0, 1e-8], F32)
    with mt.fusion(threshold=0):
        got = (T.from_numpy(a).astype(F16).astype(F32) * 3).numpy()
    np.testing.assert_array_equal(got, a.astype(F16).astype(F32) * 3)


def test_large_statements_and_updates_run_in_blocks(monkeypatch):
    """Over several NumPy blocks, whose intermediates go to scratch buffers (float32
    ones: a float16 buffer would round each step), with an in-place saver."""
    monkeypatch.setattr(T.cpu_numpy, "BLOCK", 1000)
    rng = np.random.default_rng(0)
    w, g = rng.standard_normal((2, 5000)).astype(F16)
    want = rounded(lambda w, g: w - 0.01 * (g + 0.1 * w), w, g)
    with mt.fusion(threshold=0):
        tw, tg = T.from_numpy(w.copy()), T.from_numpy(g)
        engine.assign(tw, 0.01 * (tg + 0.1 * tw), "-=")
    np.testing.assert_array_equal(tw.numpy(), want)


# ---- numba never sees float16 --------------------------------------------------------

def test_numba_runs_no_plan_that_reads_or_writes_float16():
    h, f = T.from_numpy(np.ones(4, F16)), T.from_numpy(np.ones(4, F32))
    assert not cpu_numba.compiles(make_plan(h * 2, 1)[0], F16)
    assert not cpu_numba.compiles(make_plan(f * 2, 1)[0], F16)  # written into float16
    assert not cpu_numba.compiles(make_plan(f.astype(F16) * 2, 1)[0], F32)
    assert cpu_numba.compiles(make_plan(f * 2, 1)[0], F32)


def test_on_the_numba_backend_every_path_takes_float16():
    """Statements, a group of them, reductions and a relu over thousands of elements
    (numba's flat loop) all run: numba would raise ``NotImplementedError: float16``."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((64, 300)).astype(F16)
    with using_cpu_backend("numba"), mt.fusion(threshold=0):
        x = T.from_numpy(a.copy())
        np.testing.assert_array_equal((x * 2 + 1).numpy(), rounded(lambda v: v * 2 + 1, a))
        m, v = T.zeros_like(x), T.zeros_like(x)
        engine.assign_all([(m, 0.9 * m + 0.1 * x), (v, 0.5 * v + x * x)])
        np.testing.assert_array_equal(m.numpy(), rounded(lambda v: 0.1 * v, a))
        for name in ("sum", "mean", "max", "min"):
            got = getattr(x, name)(1).numpy()
            want = getattr(a.astype(np.float64), name)(1).astype(F16)
            np.testing.assert_allclose(got.astype(F32), want.astype(F32), **HALF_TOL)
    with using_cpu_backend("numba"):
        r = mt.tensor(np.tile(a, (2, 1)), requires_grad=True)  # 38400 >= COMPILED_FROM
        r.relu().sum().backward()
        assert r.grad.dtype == F16
        np.testing.assert_array_equal(r.relu().numpy(), np.maximum(np.tile(a, (2, 1)), 0))


# ---- reductions and products -----------------------------------------------------------

@given(st.sampled_from(["sum", "mean", "max", "min"]), st.sampled_from(sorted(PATHS)),
       st.sampled_from([(0,), (1,), (0, 1), None]), arrays((7, 5), F16))
@settings(max_examples=60, deadline=None)
def test_reductions_accumulate_wide_and_return_float16(name, path, axes, a):
    with mt.fusion(threshold=PATHS[path]):
        x = T.from_numpy(a)
        got = getattr(x, name)(axes).numpy() if axes is not None else getattr(x, name)().numpy()
    want = getattr(np, name)(a.astype(np.float64), axis=axes).astype(F16)
    assert got.dtype == F16
    np.testing.assert_allclose(got.astype(F32), want.astype(F32), **HALF_TOL)


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_sum_is_not_accumulated_in_float16(path, monkeypatch):
    """2048, then a 1 in each block of 64 that the NumPy evaluator cuts a large input
    into: added to a float16 total each 1 rounds away (2049 -> 2048); in float32 the
    total is 2048 + 64 = 2112."""
    monkeypatch.setattr(T.cpu_numpy, "BLOCK", 64)
    a = np.zeros((2, 4096), F16)
    a[:, 0], a[:, 1::64] = 2048, 1
    with mt.fusion(threshold=PATHS[path]):
        x = T.from_numpy(a)
        assert (x * 1).sum(1).numpy().tolist() == [2112, 2112]
        assert (x * 1).sum().item() == 4224 and x.mean().item() == np.float16(4224 / 8192)


@given(st.integers(1, 40), st.integers(1, 70), st.integers(1, 40), st.booleans())
@settings(max_examples=30, deadline=None)
def test_matmul_sums_in_float32_and_rounds_once(m, k, n, transposed):
    rng = np.random.default_rng(m * 10_000 + k * 100 + n)
    a = rng.standard_normal((m, k)).astype(F16)
    b = rng.standard_normal((n, k) if transposed else (k, n)).astype(F16)
    b = b.T if transposed else b
    want = (a.astype(F32) @ b.astype(F32)).astype(F16)
    for threshold in PATHS.values():
        with mt.fusion(threshold=threshold):
            got = (T.from_numpy(a) @ T.from_numpy(b)).eval().numpy()
        assert got.dtype == F16
        np.testing.assert_allclose(got.astype(F32), want.astype(F32), rtol=1e-3, atol=1e-3)
    mixed = (T.from_numpy(a) @ T.from_numpy(b.astype(F32))).eval()
    assert mixed.dtype == F32


def test_no_float16_product_reaches_numpy_s_matmul(monkeypatch):
    """NumPy's float16 matmul has no BLAS (a plain loop, far slower than BLAS in
    float32): every float16 product is BLAS's in float32."""
    matmul = np.matmul

    def float32_only(a, b, **kwargs):
        assert F16 not in (a.dtype, b.dtype), "a float16 operand reached np.matmul"
        return matmul(a, b, **kwargs)
    monkeypatch.setattr(T.blas.np, "matmul", float32_only)
    a = np.ones((3, 4), F16)
    for threshold in PATHS.values():
        with mt.fusion(threshold=threshold):
            assert (T.from_numpy(a) @ T.from_numpy(a.T)).numpy().tolist() == [[4.0] * 3] * 3


# ---- gradients and files ---------------------------------------------------------------

def test_casts_between_float16_and_float32_are_differentiable():
    x = mt.tensor([1.0, 2.5, -3.0], requires_grad=True)
    y = (x.half() * 3).float().sum()
    y.backward()
    assert x.grad.dtype == F32 and x.grad.numpy().tolist() == [3.0, 3.0, 3.0]
    h = mt.tensor(np.array([0.5, 2.0], F16), requires_grad=True)
    (h * h).sum().backward()
    assert h.grad.dtype == F16 and h.grad.numpy().tolist() == [1.0, 4.0]


def test_pytorch_half_tensors_are_shared_both_ways_by_dlpack():
    torch = pytest.importorskip("torch")
    t = torch.tensor([0.1, 2.5], dtype=torch.half)
    x = mt.from_dlpack(t)
    t[0] = 7  # the same memory
    assert x.dtype == F16 and x.numpy().tolist() == [7.0, 2.5]
    back = torch.from_dlpack(mt.tensor(np.array([1.5, 3], F16)))
    assert back.dtype == torch.float16 and back.tolist() == [1.5, 3.0]


def test_safetensors_keeps_float16_as_f16(tmp_path):
    arr = np.array([[0.1, -2.5], [65504, 6e-8]], F16)
    save_file({"h": arr}, tmp_path / "h.safetensors")
    assert b'"F16"' in (tmp_path / "h.safetensors").read_bytes()[:200]
    got = load_file(tmp_path / "h.safetensors")["h"]
    assert got.dtype == F16
    np.testing.assert_array_equal(got, arr)


# ---- CUDA source -------------------------------------------------------------------------

def _cuda_sources():
    """A float16 elementwise Plan, a float16 reduction and a float16/float32 mix."""
    h = T.from_numpy(np.ones((2, 3), F16))
    f = T.from_numpy(np.ones((2, 3), F32))
    elementwise = make_plan(T.tanh(h * 0.5 + 1) > 0.1, 2)[0]
    mixed = make_plan(h * f + f.astype(F16), 2)[0]
    reduced = make_plan(h * h, 2)[0]
    return {
        "ew": K.cuda_source(elementwise, 2, "="),
        "mixed": K.cuda_source(mixed, 2, "+=", F16),
        "sum": K.cuda_reduce_source(reduced, REDUCTIONS["sum"], 1, 1, "=", F16),
        "max": K.cuda_reduce_source(reduced, REDUCTIONS["max"], 1, 1, "*=", F16),
    }


def test_cuda_source_loads_half_computes_float_and_rounds_on_store():
    src = _cuda_sources()
    assert all("#include <cuda_fp16.h>" in s for s in src.values())
    assert "const float x0 = __half2float(in0[" in src["mixed"]
    assert "const __half* in0" in src["mixed"] and "const float* in1" in src["mixed"]
    assert "out[p] = __float2half((float)((__half2float(out[p]) + " in src["mixed"]
    assert "__half2float(__float2half((float)(x2)))" in src["mixed"]  # the cast rounds
    assert "__half2float(__float2half((float)(s2)))" in src["ew"]  # the compared 0.1
    assert "double* partial" in src["sum"] and "float* partial" in src["max"]
    assert "__half" not in K.cuda_source(make_plan(T.from_numpy(np.ones(2, F32)) * 2, 1)[0], 1)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (CUDA toolkit) is not installed")
def test_cuda_float16_sources_compile_with_nvcc(tmp_path):
    path = tmp_path / "half.cu"
    path.write_text("\n".join(s.replace("minitorch_", f"minitorch_{label}_")
                              for label, s in _cuda_sources().items()))
    result = subprocess.run(
        ["nvcc", "-arch=sm_90", "--ptx", "-std=c++17", "--Werror", "all-warnings",
         "-o", str(tmp_path / "half.ptx"), str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
    assert (tmp_path / "half.ptx").read_text().count(".entry") == 6


def test_explain_shows_what_runs_a_float16_plan():
    """The NumPy schedule, converting float16 to float32, not numba code that never runs."""
    x = T.from_numpy(np.ones((300, 400), F16))
    with using_cpu_backend("numba"):
        text = mt.explain(T.tanh(x * 2 + 1) + x)
    assert "NumPy schedule for cpu" in text and "@njit" not in text
    assert "f0 = in0[blk].astype(np.float32)" in text
    assert "t0 = mul(in0, s0) -> float32" in text


@pytest.mark.cuda
@requires_gpu
def test_gpu_float16_kernels_match_the_cpu():
    """Elementwise (a mixed plan and a saver), reductions and a product on a GPU, to
    float16's precision (the kernels compute in float32 as the CPU does)."""
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((2, 64, 48)).astype(F16)

    def build(device):
        x, y = mt.tensor(a, device=device), mt.tensor(b, device=device)
        z = (x * 0.5 + y.float()).tanh().half()
        z += x * y
        return [v.numpy() for v in (z, z.sum(0), z.mean(), z.amax(1), x @ y.transpose(0, 1))]
    for cpu, gpu in zip(build("cpu"), build("cuda")):
        assert gpu.dtype == cpu.dtype == F16
        np.testing.assert_allclose(gpu.astype(F32), cpu.astype(F32), rtol=2e-3, atol=2e-2)


def test_the_numba_backend_offers_no_float16_loop_or_column_sums():
    """The backend contract's fast paths for small work decline float16 (None: NumPy)."""
    h = T.from_numpy(np.ones((4, 3), F16))
    backend = cpu_numba.NumbaBackend()
    assert backend.flat_loop(make_plan(T.relu(h), 2)[0], F16) is None
    assert backend.column_sums(h.numpy(), make_plan(h, 2)[0]) is None


def test_explain_of_an_op_at_once_names_numpy_for_float16():
    """relu on 10000 elements below the threshold: numba's loop for float32, NumPy's
    form for float16 (the loop would not compile)."""
    with using_cpu_backend("numba"):
        for dtype in (F32, F16):
            x = mt.tensor(np.ones(10_000, dtype), requires_grad=True)
            decision = mt.explain(mt.relu(x)).split("\n")[1]
            assert decision.startswith("computed eagerly")
            assert ("by one compiled loop" in decision) == (dtype == F32)
