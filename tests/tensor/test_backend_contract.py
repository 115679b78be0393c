"""Every backend implements the whole written contract (``backend_contract.Backend``),
with the Protocol's signatures, and backend modules never import the engine side."""

from __future__ import annotations

import ast
import contextlib
import inspect
import types
from pathlib import Path

import numpy as np
import pytest

import minitorch_exp.tensor as T
from minitorch_exp.tensor import backend_contract, backends, caches, capture, engine
from minitorch_exp.tensor.backend_contract import Backend, EvaluatorLaunch, KernelLaunch
from minitorch_exp.tensor.cpu_numpy import NumpyBackend
from minitorch_exp.tensor.cuda import CudaBackend

TENSOR = Path(backend_contract.__file__).resolve().parent


def backend_classes():
    classes = [NumpyBackend, CudaBackend]
    try:
        from minitorch_exp.tensor.cpu_numba import NumbaBackend
    except ImportError:  # numba missing: that backend is not offered
        return classes
    return [*classes, NumbaBackend]


def protocol_methods(proto) -> list[str]:
    return sorted(name for name, value in vars(proto).items()
                  if callable(value) and not name.startswith("_"))


def parameters(fn) -> list[tuple]:
    """Names, kinds and defaults after ``self``: what a caller can rely on."""
    params = list(inspect.signature(fn).parameters.values())[1:]
    return [(p.name, p.kind, p.default) for p in params]


def test_the_protocol_names_every_method_the_engine_calls():
    assert protocol_methods(Backend) == ["accumulates_in_place", "add_rows", "column_sums", "dot",
                                         "elementwise", "flat_loop", "group_launch", "launch",
                                         "reduce"]
    assert protocol_methods(KernelLaunch) == ["run"]


@pytest.mark.parametrize("cls", backend_classes(), ids=lambda c: c.__name__)
def test_each_backend_class_has_the_protocols_signatures(cls):
    for name in protocol_methods(Backend):
        method = getattr(cls, name, None)
        assert method is not None, f"{cls.__name__} lacks {name}"
        assert parameters(method) == parameters(getattr(Backend, name)), \
            f"{cls.__name__}.{name}{inspect.signature(method)} differs from the contract"
    assert isinstance(cls.name, str)


@pytest.mark.parametrize("cls", backend_classes(), ids=lambda c: c.__name__)
def test_each_backend_instance_satisfies_the_protocol(cls):
    backend = cls.__new__(cls)  # no __init__: CudaBackend's imports CuPy
    assert isinstance(backend, Backend)


def test_a_backend_without_grouped_kernels_answers_none():
    x, dst = T.from_numpy(np.arange(6, dtype=np.float32)), T.empty(6)
    assert NumpyBackend().group_launch([dst, dst], [], [x], ["=", "="]) is None


def test_the_device_backend_satisfies_the_protocol():
    backend = backends.device_backend(T.as_device("cpu"))
    assert isinstance(backend, Backend)
    assert backend.name == backends.cpu_backend()


def test_an_evaluator_launch_satisfies_the_launch_protocol():
    assert isinstance(EvaluatorLaunch(NumpyBackend(), None, "="), KernelLaunch)


@pytest.mark.parametrize("name", ["numpy", "numba"])
def test_generation_moves_with_each_cpu_backend_change(name):
    if name == "numba":
        pytest.importorskip("numba")
    before = backends.generation()
    with backends.using_cpu_backend(name):
        assert backends.generation() > before
    assert backends.generation() > before + 1


def test_the_parallel_threshold_moves_the_generation():
    cpu_numba = pytest.importorskip("minitorch_exp.tensor.cpu_numba")
    saved, before = cpu_numba.PARALLEL_MIN, backends.generation()
    try:
        cpu_numba.set_parallel_min(1 << 20)
        assert backends.generation() > before
        assert cpu_numba.PARALLEL_MIN == 1 << 20
    finally:
        cpu_numba.set_parallel_min(saved)


#: Modules that decide, plan or record: a backend module must import none of them.
CALLER_SIDE = {"engine", "plan", "capture", "lower", "explain", "kernels", "tensor",
               "creation", "expr", "backends"}
BACKEND_MODULES = ["cpu_numpy", "cuda", "codegen", "kernel_cache", "backend_contract",
                   "cpu_numba", "numba_source", "numba_compile", "numba_launch", "backends"]


def imported_siblings(path: Path) -> set[str]:
    """The modules of ``minitorch_exp.tensor`` that ``path`` imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(a.name for a in node.names)
    return found


@pytest.mark.parametrize("module", BACKEND_MODULES)
def test_backend_modules_never_import_the_caller_side(module):
    path = TENSOR / f"{module}.py"
    if not path.exists():
        pytest.skip(f"no {module}.py")
    assert not imported_siblings(path) & (CALLER_SIDE - {module})


def test_no_backend_method_is_probed_for():
    """Callers rely on the contract: no ``getattr``/``hasattr`` on a backend's methods."""
    methods = protocol_methods(Backend)
    for path in sorted(TENSOR.glob("*.py")):
        text = path.read_text()
        for name in methods:
            for probe in (f'"{name}", None)', f"'{name}', None)", f'hasattr(backend, "{name}")'):
                assert probe not in text, f"{path.name} probes for {name}"


def contract_only(backend) -> types.SimpleNamespace:
    """``backend`` showing nothing but ``Backend``'s name and methods."""
    methods = {name: getattr(backend, name) for name in protocol_methods(Backend)}
    return types.SimpleNamespace(name=backend.name, **methods)


@contextlib.contextmanager
def seeing_only_the_contract(name: str, module, monkeypatch):
    """The CPU backend ``name`` chosen, ``module`` seeing nothing of it but the contract."""
    if name == "numba":
        pytest.importorskip("numba")
    with backends.using_cpu_backend(name):
        monkeypatch.setattr(module, "device_backend",
                            lambda device: contract_only(backends.device_backend(device)))
        yield


@pytest.mark.parametrize("name", ["numpy", "numba"])
def test_the_engine_needs_nothing_beyond_the_contract(name, monkeypatch):
    """Every kind of statement -- elementwise, grouped, BLAS, reductions plain and fused,
    a copy, and all of them recorded and replayed -- runs on a backend that has
    only the contract's methods: the engine reaches for nothing else."""
    rng = np.random.default_rng(0)
    a, b = rng.random((3, 4)), rng.random((4, 5))
    with seeing_only_the_contract(name, engine, monkeypatch):
        caches.invalidate("a backend with nothing but the contract")
        x, w = T.from_numpy(a), T.from_numpy(b)
        y, m, s, c = T.empty((3, 5)), T.empty(4), T.empty((3, 4)), T.empty((3, 4))
        with capture.recording() as rec:
            y[...] = x @ w
            m[...] = (x * 2.0).sum(0)
            T.assign_all([(s, x + 1.0), (c, s * 3.0)])
            y += (x * 1.0).max(1, keepdims=True)
            d = engine.evaluate_copy(x.T)
        assert len(rec) >= 5
        for t in (y, m, s, c, d):
            t[...] = 0.0
        rec.replay()
    want_y = a @ b + (a * 1.0).max(1, keepdims=True)
    np.testing.assert_allclose(y.numpy(), want_y)
    np.testing.assert_allclose(m.numpy(), (a * 2.0).sum(0))
    np.testing.assert_allclose(c.numpy(), (a + 1.0) * 3.0)
    np.testing.assert_allclose(d.numpy(), a.T)


@pytest.mark.parametrize("name", ["numpy", "numba"])
def test_small_work_needs_nothing_beyond_the_contract(name, monkeypatch):
    """The evaluator of small work (eager.py) -- relu's compiled loop forward and
    backward, a bias's column sums -- reaches the backend only through the contract,
    and gets NumPy's values from either backend."""
    import minitorch_exp as mt
    from minitorch_exp.tensor import eager
    rng = np.random.default_rng(1)
    a, w = rng.standard_normal((128, 64)), rng.standard_normal((8, 64))
    with seeing_only_the_contract(name, eager, monkeypatch):
        monkeypatch.setattr(eager, "COMPILED_FROM", 64)
        eager._COMPILED.clear()
        x = mt.tensor(a, requires_grad=True)
        lin = mt.nn.Linear(64, 8).double()
        lin.weight.data[...] = mt.tensor(w)
        lin(x.relu()).sum().backward()
        eager._COMPILED.clear()
    np.testing.assert_array_equal(x.grad.numpy(), (a > 0) * w.sum(0))
    np.testing.assert_allclose(lin.bias.grad.numpy(), np.full(8, 128.0))


def test_only_numba_offers_loops_for_small_work():
    from minitorch_exp.tensor import plan as P
    relu = P.make_plan(T.from_numpy(np.ones(4)).relu(), 1)[0]
    assert NumpyBackend().flat_loop(relu, np.float64) is None
    assert NumpyBackend().column_sums(np.ones((3, 2)), relu) is None
    cpu_numba = pytest.importorskip("minitorch_exp.tensor.cpu_numba")
    loop = cpu_numba.NumbaBackend().flat_loop(relu, np.float64)
    values = np.array([-1.0, 2.0, -0.0, 3.0])
    np.testing.assert_array_equal(loop((4,), [values, 0]), np.maximum(values, 0))
