"""The CUDA evaluator: one generated kernel per Plan, compiled by CuPy.

An elementwise Plan over ``ndim`` merged dims becomes one ``__global__``
function. Each thread takes flat output indices in a grid-stride loop, turns
an index into coordinates over the merged shape, and from those finds each
operand's position with that operand's own offset and strides (0 on broadcast
dims), so views and broadcasts need no copies::

    extern "C" __global__ void minitorch_ew(long long n, long long n0, long long n1,
            float* out, long long out_o, long long out_s0, long long out_s1,
            const float* in0, long long in0_o, long long in0_s0, long long in0_s1,
            double s0) {
      for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
           i += (long long)blockDim.x * gridDim.x) {
        long long rest = i;
        const long long i1 = rest % n1; rest /= n1;
        const long long i0 = rest;
        const long long p = out_o + i0 * out_s0 + i1 * out_s1;
        const float x0 = in0[in0_o + i0 * in0_s0 + i1 * in0_s1];
        const float t0 = (x0 * ((float)s0));
        out[p] = t0;
      }
    }

The per-element body comes from ``codegen.render_body`` with the ops' ``cuda``
templates; sizes, strides and scalars are arguments, so a kernel is compiled
once per structure (Plan key, ndim, saver, dst dtype) and kept in memory;
CuPy keeps the compiled binaries on disk.

A reduction runs as two kernels of one module: ``minitorch_partial`` gives
each (output, split) pair one block, whose threads stride over the reduced
elements and combine their accumulators in shared memory; ``minitorch_finish``
folds each output's splits, finishes a mean and applies the saver. Splitting
keeps the GPU busy when there are few outputs (a full sum).

CuPy is imported only when a cuda backend is first used; ``cuda_source`` and
``cuda_reduce_source`` need neither CuPy nor a GPU (``explain()`` and the
nvcc tests use them). ``CudaBackend`` implements ``backend_contract.Backend``
and imports nothing of the engine, the planner or capture.
"""

from __future__ import annotations

import math

import numpy as np

from . import codegen as C
from . import dtypes
from . import layout as L
from .backend_contract import EvaluatorLaunch, Lowered, whole_tensor
from .counters import count
from .cpu_numpy import numpy_axis, overlaps
from .ops import OPS, SAVER_ROWS, ReduceDef

THREADS = 256            # threads per block; a power of two (shared-memory tree)
MAX_BLOCKS = 65535
REDUCE_TARGET_BLOCKS = 1024

_INDEX = "long long"


# ---- elementwise source ------------------------------------------------------

def cuda_source(plan, ndim: int, saver: str = "=", dst_dtype=None) -> str:
    """CUDA C++ source of the elementwise kernel ``minitorch_ew`` for ``plan``."""
    dst_dtype = np.dtype(dst_dtype or plan.dtype)
    params = [f"const {_INDEX} n"] + [f"const {_INDEX} n{d}" for d in range(ndim)]
    params += _array_params("out", dst_dtype, ndim, const=False)
    for i, dt in enumerate(plan.leaf_dtypes):
        params += _array_params(f"in{i}", dt, ndim, const=True)
    params += _scalar_params(plan)
    body = [
        *_unravel("i", "i", "n", ndim),
        f"const {_INDEX} p = {_position('out', 's', ndim, 'i')};",
    ]
    for i, dt in enumerate(plan.leaf_dtypes):
        body.append(C.CUDA.load(f"x{i}", dt, f"in{i}[{_position(f'in{i}', 's', ndim, 'i')}]"))
    lines, result, result_dtype = C.render_body(plan, C.CUDA)
    value = C.saver_value(C.CUDA, plan, result, result_dtype, dst_dtype)
    body += lines + [_store(saver, value, dst_dtype)]
    return _kernel("minitorch_ew", params, _grid_stride("i", "n", body), plan)


def _array_params(name: str, dtype, ndim: int, const: bool) -> list[str]:
    qualifier = "const " if const else ""
    return ([f"{qualifier}{C.CUDA.type_name(dtype)}* {name}", f"const {_INDEX} {name}_o"]
            + [f"const {_INDEX} {name}_s{d}" for d in range(ndim)])


def _scalar_params(plan) -> list[str]:
    kinds = [C.SCALAR_DTYPES[t] for t in plan.scalar_types]
    return [f"const {C.CUDA.type_name(dt)} {name}"
            for dt, name in zip(kinds, C.scalar_names(plan))]


def _unravel(flat: str, index: str, sizes: str, ndim: int) -> list[str]:
    """Coordinates ``{index}0..`` of the row-major index ``flat`` over sizes ``{sizes}0..``."""
    rest = f"rest_{index}"
    lines = [f"{_INDEX} {rest} = {flat};"] if ndim else []
    for d in range(ndim - 1, 0, -1):
        lines.append(f"const {_INDEX} {index}{d} = {rest} % {sizes}{d}; {rest} /= {sizes}{d};")
    if ndim:
        lines.append(f"const {_INDEX} {index}0 = {rest};")
    return lines


def _position(arr: str, stride: str, ndim: int, index: str, base: str | None = None) -> str:
    terms = [base or f"{arr}_o"] + [f"{index}{d} * {arr}_{stride}{d}" for d in range(ndim)]
    return " + ".join(terms)


def _store(saver: str, value: str, dst_dtype) -> str:
    new = C.saved_expr(C.CUDA, saver, C.CUDA.read("out[p]", dst_dtype), value)
    return f"out[p] = {C.CUDA.convert(new, dst_dtype)};"


def _grid_stride(index: str, size: str, body: list[str], depth: int = 1) -> list[str]:
    pad = "  " * depth
    head = (f"{pad}for ({_INDEX} {index} = blockIdx.x * ({_INDEX})blockDim.x + threadIdx.x; "
            f"{index} < {size}; {index} += ({_INDEX})blockDim.x * gridDim.x) {{")
    return [head] + [pad + "  " + line for line in body] + [pad + "}"]


# NumPy raises integers to integer powers exactly (wrapping on overflow);
# CUDA's pow would go through double. These exact overloads win overload
# resolution over any library template. A negative exponent gives 0.
_PRELUDE = """\
#ifndef MINITORCH_PRELUDE
#define MINITORCH_PRELUDE
template <typename I> __device__ __forceinline__ I minitorch_ipow(I base, I exp) {
  I result = 1;
  if (exp < 0) return (base == 1) ? 1 : (base == -1 ? ((exp & 1) ? -1 : 1) : 0);
  while (exp) { if (exp & 1) result *= base; base *= base; exp >>= 1; }
  return result;
}
__device__ __forceinline__ int pow(int b, int e) { return minitorch_ipow(b, e); }
__device__ __forceinline__ long long pow(long long b, long long e) { return minitorch_ipow(b, e); }
#endif"""


def _kernel(name: str, params: list[str], lines: list[str], plan) -> str:
    header = ["// Generated by minitorch_exp.tensor.cuda -- do not edit.", "// Plan:"]
    header += ["//" + line for line in plan.describe().splitlines()]
    if any("__half" in text for text in (*params, *lines)):
        header.append("#include <cuda_fp16.h>")
    header.append(_PRELUDE)
    signature = f'extern "C" __global__ void {name}(\n    ' + ",\n    ".join(params) + ") {"
    return "\n".join(header + [signature] + lines + ["}"]) + "\n"


# ---- reduction source --------------------------------------------------------

def cuda_reduce_source(plan, reduction: ReduceDef, n_kept: int, n_reduced: int,
                       saver: str = "=", dst_dtype=None) -> str:
    """CUDA source of the two kernels of ``reduction`` (a row of ``ops.REDUCTIONS`` with a
    ``combine``: sum, mean, max, min), from the row's fields alone."""
    result_dtype = reduction.result_dtype(plan.dtype)
    dst_dtype = np.dtype(dst_dtype or result_dtype)
    acc = reduction.accumulator_dtype(plan.dtype)
    partial = _partial_kernel(plan, reduction, n_kept, n_reduced, acc)
    finish = _finish_kernel(plan, reduction, n_kept, saver, acc, result_dtype, dst_dtype)
    return partial + "\n" + finish


#: Infinities by (dtype, positive), as bit patterns: CUDA C has no portable literal.
_INFINITIES = {
    (dtypes.float32, True): "__int_as_float(0x7f800000)",
    (dtypes.float32, False): "__int_as_float(0xff800000)",
    (dtypes.float64, True): "__longlong_as_double(0x7ff0000000000000LL)",
    (dtypes.float64, False): "__longlong_as_double(0xfff0000000000000ULL)",
}


def _identity(reduction: ReduceDef, dtype) -> str:
    """The accumulator's first value (``ReduceDef.identity_value``) as a CUDA literal."""
    value = reduction.identity_value(dtype)
    if dtype == dtypes.bool_:
        return "true" if value else "false"
    if dtype.kind == "f" and np.isinf(value):
        return _INFINITIES[dtype, bool(value > 0)]
    suffix = "LL" if dtype == dtypes.int64 else ""
    if dtype.kind == "i" and value == np.iinfo(dtype).max:
        return f"({value}{suffix})"
    if dtype.kind == "i" and value == np.iinfo(dtype).min:
        return f"({value + 1}{suffix} - 1)"  # the lowest has no literal: -(max) - 1
    number = int(value) if float(value).is_integer() else float(value)
    return f"(({C.CUDA.type_name(dtype)}){number!r})"


def _combine(reduction: ReduceDef, a: str, b: str, acc) -> str:
    """``a`` and ``b`` folded together by the row's ``combine`` op."""
    return OPS[reduction.combine].cuda.format(a, b, T=C.CUDA.type_name(acc))


def _partial_kernel(plan, reduction, n_kept, n_reduced, acc) -> str:
    acc_t = C.CUDA.type_name(acc)
    params = [f"const {_INDEX} n_out", f"const {_INDEX} n_red", f"const {_INDEX} splits"]
    params += [f"const {_INDEX} k{d}" for d in range(n_kept)]
    params += [f"const {_INDEX} r{d}" for d in range(n_reduced)]
    params += [f"{acc_t}* partial"]
    for i, dt in enumerate(plan.leaf_dtypes):
        params += [f"const {C.CUDA.type_name(dt)}* in{i}", f"const {_INDEX} in{i}_o"]
        params += [f"const {_INDEX} in{i}_k{d}" for d in range(n_kept)]
        params += [f"const {_INDEX} in{i}_r{d}" for d in range(n_reduced)]
    params += _scalar_params(plan)
    element = _unravel("r", "j", "r", n_reduced)
    for i, dt in enumerate(plan.leaf_dtypes):
        pos = _position(f"in{i}", "r", n_reduced, "j", base=f"in{i}_p")
        element.append(C.CUDA.load(f"x{i}", dt, f"in{i}[{pos}]"))
    lines, result, _ = C.render_body(plan, C.CUDA)
    element += lines + [f"acc = {_combine(reduction, 'acc', C.CUDA.convert(result, acc), acc)};"]
    block = [
        f"const {_INDEX} split = b % splits;",
        *_unravel("b / splits", "i", "k", n_kept),
    ]
    block += [f"const {_INDEX} in{i}_p = {_position(f'in{i}', 'k', n_kept, 'i')};"
              for i in range(plan.n_leaves)]
    block += [
        f"{acc_t} acc = {_identity(reduction, acc)};",
        f"for ({_INDEX} r = split * ({_INDEX})blockDim.x + threadIdx.x; r < n_red; "
        f"r += splits * ({_INDEX})blockDim.x) {{",
        *["  " + line for line in element],
        "}",
        "shared[threadIdx.x] = acc;",
        "__syncthreads();",
        "for (unsigned int half = blockDim.x / 2; half > 0; half >>= 1) {",
        "  if (threadIdx.x < half) {",
        f"    shared[threadIdx.x] = "
        f"{_combine(reduction, 'shared[threadIdx.x]', 'shared[threadIdx.x + half]', acc)};",
        "  }",
        "  __syncthreads();",
        "}",
        "if (threadIdx.x == 0) partial[b] = shared[0];",
        "__syncthreads();  // shared[] is reused by the next b",
    ]
    loop = [f"  for ({_INDEX} b = blockIdx.x; b < n_out * splits; b += gridDim.x) {{"]
    loop += ["    " + line for line in block] + ["  }"]
    lines = [f"  __shared__ {acc_t} shared[{THREADS}];"] + loop
    return _kernel("minitorch_partial", params, lines, plan)


def _finish_kernel(plan, reduction, n_kept, saver, acc, result_dtype, dst_dtype) -> str:
    acc_t = C.CUDA.type_name(acc)
    params = [f"const {_INDEX} n_out", f"const {_INDEX} splits"]
    params += [f"const {_INDEX} k{d}" for d in range(n_kept)]
    params += [f"const {acc_t}* partial"] + _array_params("out", dst_dtype, n_kept, const=False)
    params += ["const double count"]
    value = "acc / count" if reduction.divide else "acc"
    body = [
        f"{acc_t} acc = {_identity(reduction, acc)};",
        f"for ({_INDEX} s = 0; s < splits; ++s) {{",
        f"  acc = {_combine(reduction, 'acc', 'partial[o * splits + s]', acc)};",
        "}",
        *_unravel("o", "i", "k", n_kept),
        f"const {_INDEX} p = {_position('out', 's', n_kept, 'i')};",
        C.CUDA.declare("value", result_dtype, value),
        _store(saver, "value", dst_dtype),
    ]
    return _kernel("minitorch_finish", params, _grid_stride("o", "n_out", body), plan)


# ---- the backend -------------------------------------------------------------

class CudaBackend:
    """Evaluates Plans on a CUDA device with generated kernels (through CuPy)."""

    name = "cuda"

    def __init__(self):
        import cupy
        self.cp = cupy

    def flat_loop(self, plan, dtype) -> None:
        """None: nothing is computed at once on a GPU (every op there is a launch)."""
        return None

    def column_sums(self, x, plan) -> None:
        """None: nothing is computed at once on a GPU."""
        return None

    def add_rows(self, out, index, src) -> None:
        """CuPy's ``add.at`` (atomic adds: repeated rows add up in no fixed order)."""
        self.cp.add.at(out, index, src)

    def elementwise(self, plan, dst, leaves, scalars, saver: str):
        """Launch the Plan's kernel; return ``(kernel, launch args)`` that repeat exactly
        this launch (a prepared assignment, engine.py), or None when a leaf was read
        through a copy."""
        count("cuda", "fused")
        n = dst.numel()
        if n == 0:
            return None
        layouts, arrays = self._operands(dst, leaves, dst.shape)
        shape, strides, offsets = C.iteration_layout(dst.shape, layouts)
        kernel = self._module(("ew", len(shape), saver, dst.dtype.char), plan,
                              lambda: cuda_source(plan, len(shape), saver, dst.dtype)
                              ).get_function("minitorch_ew")
        args = [np.int64(n), *map(np.int64, shape)]
        for arr, st, off in zip(arrays, strides, offsets):
            args += [arr, np.int64(off), *map(np.int64, st)]
        args += _scalar_args(plan, scalars)
        launch = ((min(MAX_BLOCKS, -(-n // THREADS)),), (THREADS,), tuple(args))
        kernel(*launch)
        copied = any(a is not t.storage.data for a, t in zip(arrays[1:], leaves))
        return None if copied else (kernel, launch)

    def launch(self, plan, dst, leaves, saver: str) -> EvaluatorLaunch:
        """Each run goes through ``elementwise``, which returns the repeating call."""
        return EvaluatorLaunch(self, plan, saver)

    def group_launch(self, dsts, plans, leaves, savers) -> None:
        """None: no grouped kernels on CUDA yet; the statements run one at a time."""
        return None

    def reduce(self, dst, e, saver: str, lowered: Lowered) -> None:
        """Two kernels (``cuda_reduce_source``); a row without a ``combine`` (argmax)
        through CuPy's function of its NumPy name. Always None."""
        reduction = e.reduction
        if reduction.combine is None:
            self._through_cupy(dst, e, saver, lowered)
            return None
        count("cuda", "reduce")
        if dst.numel() == 0:
            return None
        x = e.x
        plan, leaves, scalars = lowered
        target = dst._try_view_reshape(e.kept_shape)
        out_layout = L.broadcast_layout(target.layout, x.shape)
        layouts, arrays = self._operands(dst, leaves, x.shape)
        kshape, rshape, kstrides, rstrides = C.reduce_layout(
            x.shape, e.axes, [out_layout, *layouts[1:]])
        n_out, n_red = math.prod(kshape), math.prod(rshape)
        module = self._module(
            ("reduce", reduction.name, len(kshape), len(rshape), saver, dst.dtype.char), plan,
            lambda: cuda_reduce_source(plan, reduction, len(kshape), len(rshape), saver,
                                       dst.dtype))
        splits = max(1, min(-(-REDUCE_TARGET_BLOCKS // n_out), -(-n_red // (THREADS * 4))))
        acc = self.cp.empty(n_out * splits, reduction.accumulator_dtype(plan.dtype))
        args = [np.int64(n_out), np.int64(n_red), np.int64(splits)]
        args += [*map(np.int64, kshape), *map(np.int64, rshape), acc]
        for arr, lay, ks, rs in zip(arrays[1:], layouts[1:], kstrides[1:], rstrides):
            args += [arr, np.int64(lay.offset), *map(np.int64, ks), *map(np.int64, rs)]
        args += _scalar_args(plan, scalars)
        blocks = min(MAX_BLOCKS, n_out * splits)
        module.get_function("minitorch_partial")((blocks,), (THREADS,), tuple(args))
        finish = [np.int64(n_out), np.int64(splits), *map(np.int64, kshape), acc,
                  target.storage.data, np.int64(out_layout.offset),
                  *map(np.int64, kstrides[0]), np.float64(C.reduce_count(x.shape, e.axes))]
        blocks = min(MAX_BLOCKS, -(-n_out // THREADS))
        module.get_function("minitorch_finish")((blocks,), (THREADS,), tuple(finish))
        return None

    def dot(self, dst, a, b, saver: str) -> None:
        """cuBLAS through CuPy. Always None: CuPy's matmul is no bound kernel call."""
        count("cuda", "blas")
        cp = self.cp
        if saver == "=" and dst.dtype == np.result_type(a.dtype, b.dtype) and not (
                _overlaps(dst, a) or _overlaps(dst, b)):
            cp.matmul(a.array, b.array, out=dst.array)
        elif self.accumulates_in_place(dst, a, b, saver):
            from cupy import cublas  # beta=1: cuBLAS adds into dst, no temporary
            cublas.gemm("N", "N", a.array, b.array, out=dst.array,
                        alpha=1.0 if saver == "+=" else -1.0, beta=1.0)
        else:
            _save(cp, dst.array, cp.matmul(a.array, b.array), saver)

    def accumulates_in_place(self, dst, a, b, saver: str) -> bool:
        """Whether ``dot`` adds (``+=``) or subtracts (``-=``) the product into ``dst`` by
        cuBLAS's ``beta = 1``: 2-D float operands of ``dst``'s dtype, ``dst``
        contiguous and no operand overlapping it."""
        return (saver in ("+=", "-=") and dst.dtype == np.result_type(a.dtype, b.dtype)
                and not (_overlaps(dst, a) or _overlaps(dst, b)) and _gemm_ok(dst, a, b))

    def _through_cupy(self, dst, e, saver, lowered: Lowered) -> None:
        count("cuda", "reduce")
        values = self._values(lowered, e.x)
        reduce = getattr(self.cp, e.reduction.numpy.__name__)  # cp.argmax for np.argmax
        r = reduce(values, axis=numpy_axis(e)).reshape(dst.shape)
        _save(self.cp, dst.array, r, saver)

    def _values(self, lowered: Lowered, x):
        """A lowered input's values as an array of ``x``'s shape and dtype (a tensor:
        itself; else one elementwise kernel into a new array)."""
        t = whole_tensor(lowered, x.shape)
        if t is not None:
            return t.array
        out = _Scratch(self.cp.empty(math.prod(x.shape), x.dtype), x.shape)
        plan, leaves, scalars = lowered
        self.elementwise(plan, out, leaves, scalars, "=")
        return out.storage.data.reshape(x.shape)

    def _operands(self, dst, leaves, shape):
        """Leaves broadcast to ``shape``, each copied first if it overlaps dst elsewhere."""
        layouts, arrays = [dst.layout], [dst.storage.data]
        for t in leaves:
            lay = L.broadcast_layout(t.layout, shape)
            data = t.storage.data
            if _overlaps(dst, t, lay):
                count("cuda", "copy")
                data = t.array.copy(order="C").reshape(-1)
                lay = L.broadcast_layout(L.contiguous(t.shape), shape)
            layouts.append(lay)
            arrays.append(data)
        return layouts, arrays

    def _module(self, key: tuple, plan, source):
        key = ("cuda", *key)
        module = plan.compiled.get(key)
        if module is None:
            module = plan.compiled[key] = self.cp.RawModule(code=source(),
                                                            options=("--std=c++17",))
        return module


def _scalar_args(plan, scalars) -> list:
    return [np.dtype(C.SCALAR_DTYPES[t]).type(v) for t, v in zip(plan.scalar_types, scalars)]


def _overlaps(dst, t, layout=None) -> bool:
    return overlaps(dst, t.storage, layout or t.layout)


class _Scratch:
    """A new contiguous array standing in for a destination tensor (what
    ``elementwise`` reads of one): nothing else shares its memory."""

    __slots__ = ("storage", "layout", "shape", "dtype")

    def __init__(self, flat, shape):
        self.storage = _FlatStorage(flat)
        self.layout = L.contiguous(tuple(shape))
        self.shape, self.dtype = self.layout.shape, flat.dtype

    def numel(self) -> int:
        return self.layout.numel


class _FlatStorage:
    __slots__ = ("data",)

    def __init__(self, data):
        self.data = data


def _gemm_ok(dst, a, b) -> bool:
    return (dst.ndim == a.ndim == b.ndim == 2 and dst.dtype.kind == "f"
            and a.dtype == b.dtype == dst.dtype and dst.is_contiguous())


def _save(cp, dst, value, saver: str) -> None:
    if saver == "=":
        cp.copyto(dst, value, casting="unsafe")
    else:
        ufunc = getattr(cp, OPS[SAVER_ROWS[saver]].numpy.__name__)  # the row's, in CuPy
        ufunc(dst, value, out=dst, casting="unsafe")


_BACKEND: list[CudaBackend] = []


def cuda_backend() -> CudaBackend:
    """The process's CUDA backend (imports CuPy on first use)."""
    if not _BACKEND:
        _BACKEND.append(CudaBackend())
    return _BACKEND[0]
