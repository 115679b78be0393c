"""Prepared assignments: re-assigning the same expression replays its bound kernel call.

The replay skips checks and planning, so every test here asks whether it is
still *right*: new data is read, another destination or saver is not confused
with the prepared one, and anything that changes how the tree evaluates (a
realized node, another CPU evaluator, an unregistered op, the debug mode)
sends the statement back through the full path.
"""

from __future__ import annotations

import numpy as np
import pytest

from minitorch_exp.tensor import (
    apply_op,
    count_kernels,
    cpu_numpy,
    from_numpy,
    register_op,
    set_debug,
    unregister_op,
    using_cpu_backend,
)
from minitorch_exp.tensor.engine import realize

ETA, LAM = 0.1, 0.01


def vectors(n=7, count=2, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(n) for _ in range(count)]


@pytest.fixture(autouse=True)
def numba_evaluator():
    with using_cpu_backend("numba"):
        yield


def test_a_built_expression_reads_the_current_data_every_time():
    wa, ga = vectors()
    w, g = from_numpy(wa.copy()), from_numpy(ga.copy())
    update = -ETA * (g + LAM * w)
    ref = wa.copy()
    for step in range(4):
        g.numpy()[...] = ga * (step + 1)  # new gradient data, same tensors
        with count_kernels() as k:
            w[...] = update
        ref = -ETA * (ga * (step + 1) + LAM * ref)
        np.testing.assert_allclose(w.numpy(), ref, rtol=1e-12)
        assert k.total == 1
        assert update.prepared is not None


def test_another_destination_or_saver_is_not_replayed_into():
    wa, ga = vectors(seed=1)
    w, g = from_numpy(wa.copy()), from_numpy(ga.copy())
    other = from_numpy(np.zeros(7))
    e = g * 2 + w
    w[...] = e
    expected_w = ga * 2 + wa
    other[...] = e  # same expression, another tensor
    np.testing.assert_allclose(other.numpy(), ga * 2 + expected_w)
    np.testing.assert_allclose(w.numpy(), expected_w)
    halves = from_numpy(np.zeros(14))
    halves[:7] = e
    halves[7:] = e  # same storage, shape and strides; another offset
    np.testing.assert_allclose(halves.numpy(), np.concatenate([ga * 2 + expected_w] * 2))
    w += e  # the same expression with another saver
    expected_w += ga * 2 + expected_w
    np.testing.assert_allclose(w.numpy(), expected_w)


def test_a_node_realized_after_preparing_is_read_as_its_remembered_value():
    a_np, b_np = vectors(seed=2)
    a, b = from_numpy(a_np.copy()), from_numpy(b_np.copy())
    doubled = a * 2
    root = doubled + b
    out = from_numpy(np.zeros(7))
    out[...] = root  # prepared: recomputes a * 2 from a
    realize(doubled)  # from now on the tree reads the remembered a * 2 ...
    a.numpy()[...] = 100.0  # ... so changing a must not show
    out[...] = root
    np.testing.assert_allclose(out.numpy(), a_np * 2 + b_np)


def test_switching_the_cpu_evaluator_is_honoured(monkeypatch):
    wa, ga = vectors(seed=3)
    w, g = from_numpy(wa.copy()), from_numpy(ga.copy())
    e = g - w
    w[...] = e
    w[...] = e  # replayed by numba
    calls = []
    real = cpu_numpy.NumpyBackend.elementwise
    monkeypatch.setattr(cpu_numpy.NumpyBackend, "elementwise",
                        lambda self, *args: calls.append(1) or real(self, *args))
    with using_cpu_backend("numpy"):
        w[...] = e
    assert calls == [1]
    expected = wa.copy()
    for _ in range(3):
        expected = ga - expected
    np.testing.assert_allclose(w.numpy(), expected)


def test_an_aliased_read_gets_a_fresh_private_copy_each_time():
    x_np = np.arange(8.0)
    x = from_numpy(x_np.copy())
    e = x[::-1] + 1  # reads x reversed while x is written: needs a copy of x
    for _ in range(3):
        x[...] = e
        x_np[...] = x_np[::-1] + 1
        np.testing.assert_allclose(x.numpy(), x_np)
    assert e.prepared is None


def scaled_by(factor):
    def fn(x, out=None):  # plain arithmetic on scalars, so numba compiles it too
        if out is None:
            return x * factor
        out[...] = x * factor
        return out
    return fn


def test_an_unregistered_and_replaced_op_is_not_replayed():
    a_np = vectors(seed=4, count=1)[0]
    a, out = from_numpy(a_np.copy()), from_numpy(np.zeros(7))
    register_op("twice_or_thrice", scaled_by(2.0), "{0} * 2")
    try:
        e = apply_op("twice_or_thrice", a)
        out[...] = e
        out[...] = e
        np.testing.assert_allclose(out.numpy(), a_np * 2)
        unregister_op("twice_or_thrice")
        register_op("twice_or_thrice", scaled_by(3.0), "{0} * 3")
        out[...] = e  # the name now means x * 3, as for a statement never run before
        np.testing.assert_allclose(out.numpy(), a_np * 3)
    finally:
        unregister_op("twice_or_thrice")


def test_debug_mode_prints_every_run(capsys):
    wa, ga = vectors(seed=5)
    w, g = from_numpy(wa.copy()), from_numpy(ga.copy())
    e = g * 0.5 + w
    w[...] = e
    set_debug(1)
    try:
        w[...] = e
        w[...] = e
    finally:
        set_debug(0)
    printed = capsys.readouterr().out
    assert len(printed.strip().splitlines()) == 2, printed


def test_evaluating_into_a_new_tensor_keeps_no_prepared_call():
    a = from_numpy(vectors(seed=6, count=1)[0])
    e = a * 3 + 1
    out = e.eval()  # a fresh temporary: nothing will assign into it again
    assert e.prepared is None
    np.testing.assert_allclose(out.numpy(), a.numpy() * 3 + 1)
