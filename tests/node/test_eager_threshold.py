"""The fusion threshold: how it is set, where it does not apply, and what explain() says.

``MINITORCH_FUSION_THRESHOLD`` or the measured default starts every thread;
``mt.set_fusion_threshold`` and ``mt.fusion(threshold=)`` change it for the calling
thread only, as grad mode. Nothing is computed at once while a capture records (a
replay repeats kernels only). Computed at once or fused, user ops, anomaly mode and
NaN-producing ops behave the same.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.node.grad_mode import MEASURED_FUSION_THRESHOLD, THRESHOLD_ENV


def test_the_default_is_the_measured_threshold_and_set_changes_it():
    assert mt.get_fusion_threshold() == MEASURED_FUSION_THRESHOLD
    try:
        mt.set_fusion_threshold(10)
        assert mt.get_fusion_threshold() == 10
        assert not (mt.ones(9, requires_grad=True) * 2).is_lazy
        assert (mt.ones(10, requires_grad=True) * 2).is_lazy
    finally:
        mt.set_fusion_threshold(None)
    assert mt.get_fusion_threshold() == MEASURED_FUSION_THRESHOLD


def test_fusion_with_a_threshold_restores_it_after():
    with mt.fusion(threshold=0):
        assert mt.get_fusion_threshold() == 0
        assert (mt.ones(2, requires_grad=True) * 2).is_lazy
        with mt.fusion(False):  # the threshold stays; fusion itself is off
            assert mt.get_fusion_threshold() == 0
    assert mt.get_fusion_threshold() == MEASURED_FUSION_THRESHOLD


@pytest.mark.parametrize("bad", [-1, 2.5, "many", [3]])
def test_a_threshold_that_is_not_a_count_of_elements_is_refused(bad):
    with pytest.raises(ValueError, match=r"set_fusion_threshold: the fusion threshold is a "
                                         r"whole number of elements >= 0"):
        mt.set_fusion_threshold(bad)
    with pytest.raises(ValueError, match=r"fusion\(threshold=...\): .* got"):
        with mt.fusion(threshold=bad):
            pass
    assert mt.get_fusion_threshold() == MEASURED_FUSION_THRESHOLD


def _python(code: str, value: str):
    env = {**os.environ, THRESHOLD_ENV: value}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)


def test_the_environment_variable_sets_every_thread_s_default():
    code = ("import threading, minitorch_exp as mt\n"
            "seen = []\n"
            "t = threading.Thread(target=lambda: seen.append(mt.get_fusion_threshold()))\n"
            "t.start(); t.join()\n"
            "print(mt.get_fusion_threshold(), seen[0], (mt.ones(3) * 2).is_lazy)")
    proc = _python(code, "0")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "0", "True"]


def test_a_bad_environment_variable_names_itself():
    proc = _python("import minitorch_exp as mt; mt.ones(1) * 2", "lots")
    assert proc.returncode != 0
    assert f"{THRESHOLD_ENV}='lots'" in proc.stderr and "whole number" in proc.stderr


def test_the_threshold_belongs_to_the_thread_that_sets_it():
    seen = {}

    def worker():
        seen["start"] = mt.get_fusion_threshold()
        mt.set_fusion_threshold(5)
        seen["set"] = mt.get_fusion_threshold()

    with mt.fusion(threshold=0):
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        assert mt.get_fusion_threshold() == 0
    assert seen == {"start": MEASURED_FUSION_THRESHOLD, "set": 5}


# ---- explain ------------------------------------------------------------------------------------

def test_explain_says_why_a_value_was_computed_at_once_or_kept_lazy():
    x = mt.ones(2, 2, requires_grad=True)
    y = x * 3
    report = y.explain()
    assert (f"computed eagerly: 4 elements, below the fusion threshold of "
            f"{MEASURED_FUSION_THRESHOLD}") in report
    with mt.fusion(threshold=4):
        z = x * 3
        assert ("kept lazy to fuse: 4 elements, at or above the fusion threshold of 4"
                in z.explain())
    assert "fusion threshold" not in x.explain()  # a leaf was made, not computed


# ---- where nothing is computed at once ---------------------------------------------------------

def test_a_captured_step_records_fused_kernels_and_trains_as_eagerly():
    """While a capture records, small ops stay lazy so that they become kernels a replay
    repeats; the eager calls before (at once, NumPy) give the same numbers to rounding."""
    def make():
        gen = np.random.default_rng(0)
        model = nn.Sequential(nn.Linear(6, 8, generator=gen), nn.ReLU(),
                              nn.Linear(8, 3, generator=gen))
        return model, nn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    gen = np.random.default_rng(1)
    x = mt.tensor(gen.standard_normal((16, 6)).astype(np.float32))
    y = mt.tensor(gen.integers(0, 3, 16))
    (m1, o1), (m2, o2) = make(), make()

    def step(model, opt):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    captured = mt.capture(lambda: step(m1, o1))
    with mt.count_kernels() as k:
        for _ in range(5):
            captured()
            step(m2, o2)
    assert k.total > 0  # the recorded and replayed kernels
    for p, q in zip(m1.parameters(), m2.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-6)


# ---- the same behaviour either way ----------------------------------------------------------

def test_nan_and_infinity_at_once_are_silent_as_the_compiled_kernels_are():
    """NumPy's "divide by zero encountered" warnings are filtered for the ops computed at
    once, in a script as a user runs it (a filter put in front, ``-W error``, still sees
    them; pytest sets the filters of each test afresh, hence the subprocess)."""
    code = ("import numpy as np, minitorch_exp as mt\n"
            "x = mt.tensor([0.0, -1.0, 1.0], requires_grad=True)\n"
            "y = x.log()\n"
            "(y * 0 + x / x).sum().backward()\n"
            "print(y.numpy()[0], np.isnan(y.numpy()[1]), x.grad.numpy()[0])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["-inf", "True", "nan"]
    assert "RuntimeWarning" not in proc.stderr, proc.stderr


def test_a_user_op_computes_at_once_with_its_numpy_form_and_its_derivative():
    mt.register_op("cube_eager", lambda x, out=None: np.power(x, 3, out=out), "({0}*{0}*{0})",
                   derivative=lambda g, out, a: (g * 3 * a * a,))
    try:
        x = mt.tensor([1.0, -2.0, 0.5], dtype=mt.float64, requires_grad=True)
        with mt.count_kernels() as k:
            y = mt.op("cube_eager", x)
            y.sum().backward()
        assert k.total == 0 and not y.is_lazy
        np.testing.assert_allclose(y.numpy(), [1.0, -8.0, 0.125])
        np.testing.assert_allclose(x.grad.numpy(), [3.0, 12.0, 0.75])
        assert mt.gradcheck(lambda v: mt.op("cube_eager", v), [x])
    finally:
        mt.unregister_op("cube_eager")


def test_a_user_op_returning_its_input_gets_a_copy():
    mt.register_op("same_eager", lambda x, out=None: x if out is None else np.copyto(out, x),
                   "({0})", derivative=lambda g, out, a: (g,))
    try:
        x = mt.tensor([1.0, 2.0])
        y = mt.op("same_eager", x)
        with mt.no_grad():
            x += 10
        np.testing.assert_array_equal(y.numpy(), [1.0, 2.0])
    finally:
        mt.unregister_op("same_eager")


def test_anomaly_mode_points_at_the_op_computed_at_once():
    x = mt.tensor([1.0, -1.0], requires_grad=True)
    with mt.detect_anomaly(), pytest.raises(Exception, match=r"sqrt.*non-finite"):
        x.sqrt()
