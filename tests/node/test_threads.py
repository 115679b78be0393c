"""Modes are per thread: grad mode, fusion, anomaly detection and capture recording.

As in PyTorch, ``no_grad()`` in one thread says nothing about another, and a
new thread starts in the default modes (grad enabled, fusion on, anomaly
detection off, not recording), whatever the thread that started it is in.
Two threads training their own models must get exactly what each gets alone.
"""

from __future__ import annotations

import importlib
import sys
import threading

import numpy as np

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.node.anomaly import is_anomaly_enabled
from minitorch_exp.node.grad_mode import fusion_enabled
from minitorch_exp.tensor import capture

F = nn.functional
node_capture = importlib.import_module("minitorch_exp.node.capture")  # mt.capture is the function

TIMEOUT = 60  # seconds a test thread may take before the test gives up on it


# ---- running code in another thread ------------------------------------------------------

def in_thread(fn, *args):
    """Start ``fn(*args)`` in a thread; the returned ``join()`` re-raises its exception
    and gives its result."""
    box = {}

    def target():
        try:
            box["result"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the joining thread
            box["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()

    def join():
        thread.join(TIMEOUT)
        assert not thread.is_alive(), "the test thread did not finish"
        if "error" in box:
            raise box["error"]
        return box["result"]

    return join


def waiting(event: threading.Event) -> None:
    assert event.wait(TIMEOUT), "the other thread never got there"


class fast_switching:  # noqa: N801 - used like a function
    """Switch threads as often as the interpreter allows, restoring the interval after."""

    def __enter__(self):
        self.saved = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)

    def __exit__(self, *exc):
        sys.setswitchinterval(self.saved)


# ---- two threads training ----------------------------------------------------------------

def train(seed: int, steps: int = 4) -> list[np.ndarray]:
    """Build an MLP from ``seed``, train it with SGD + momentum; its final parameters."""
    gen = np.random.default_rng(seed)
    model = nn.Sequential(nn.Linear(6, 12, generator=gen), nn.ReLU(),
                          nn.Linear(12, 3, generator=gen))
    opt = nn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = mt.tensor(gen.standard_normal((16, 6)).astype(np.float32))
    y = mt.tensor(gen.integers(0, 3, 16))
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return [p.numpy().copy() for p in model.parameters()]


def test_two_threads_training_get_what_each_gets_alone():
    alone = {seed: train(seed) for seed in (1, 2)}
    with fast_switching():
        for run in range(20):
            joins = {seed: in_thread(train, seed) for seed in (1, 2)}
            for seed, join in joins.items():
                got = join()
                for i, (a, b) in enumerate(zip(got, alone[seed])):
                    assert np.array_equal(a, b), f"run {run}, model {seed}, parameter {i}"


# ---- each mode in one thread leaves the other alone ---------------------------------------

def interleaved(mode, probe):
    """Thread A enters ``mode()`` and waits inside; thread B reads ``probe()`` meanwhile.
    Returns (A's reading inside, B's reading while A is inside, A's reading after)."""
    inside, read = threading.Event(), threading.Event()

    def a():
        with mode():
            seen = probe()
            inside.set()
            waiting(read)
        return seen, probe()

    def b():
        waiting(inside)
        try:
            return probe()
        finally:
            read.set()

    join_a, join_b = in_thread(a), in_thread(b)
    (a_inside, a_after), b_seen = join_a(), join_b()
    return a_inside, b_seen, a_after


def test_no_grad_in_one_thread_does_not_switch_off_another():
    assert interleaved(mt.no_grad, mt.is_grad_enabled) == (False, True, True)


def test_no_grad_in_one_thread_leaves_anothers_graph_recorded():
    w = mt.randn(3, requires_grad=True)

    def product():
        return (w * 2).requires_grad

    assert interleaved(mt.no_grad, product) == (False, True, True)


def test_fusion_off_in_one_thread_leaves_another_fusing():
    assert interleaved(lambda: mt.fusion(False), fusion_enabled) == (
        False, True, True)


def test_anomaly_detection_in_one_thread_does_not_check_another():
    assert interleaved(mt.detect_anomaly, is_anomaly_enabled) == (True, False, False)


def test_a_nan_in_another_thread_is_not_an_anomaly_of_this_one():
    x = mt.tensor(np.array([-1.0, 4.0]))

    def sqrt_is_nan():
        return bool(np.isnan(mt.sqrt(x).numpy()[0]))

    inside, read = threading.Event(), threading.Event()

    def a():
        with mt.detect_anomaly():
            inside.set()
            waiting(read)

    def b():
        waiting(inside)
        try:
            return sqrt_is_nan()
        finally:
            read.set()

    join_a, join_b = in_thread(a), in_thread(b)
    join_a()
    assert join_b() is True


def test_recording_in_one_thread_is_not_recording_in_another():
    assert interleaved(capture.recording, capture.is_recording) == (True, False, False)


def test_recording_in_one_thread_records_only_its_own_kernels():
    b = mt.tensor(np.ones(4)).value
    inside, ran = threading.Event(), threading.Event()

    def a():
        with capture.recording() as rec:
            inside.set()
            waiting(ran)
        return len(rec)

    def other():
        waiting(inside)
        try:
            (b * 3 + 1).eval()
            return capture.is_recording()
        finally:
            ran.set()

    join_a, join_b = in_thread(a), in_thread(other)
    assert join_a() == 0 and join_b() is False


def test_gradient_log_of_one_thread_does_not_see_anothers_backward():
    w = mt.randn(3, requires_grad=True)
    inside, ran = threading.Event(), threading.Event()

    def a():
        with node_capture._logging() as (log, _):
            inside.set()
            waiting(ran)
        return len(log)

    def other():
        waiting(inside)
        try:
            (w * 2).sum().backward()
        finally:
            ran.set()

    join_a, join_b = in_thread(a), in_thread(other)
    assert join_a() == 0
    join_b()


def fused(fn):
    """``fn`` with every op fused (fusion threshold 0) in whatever thread runs it: a replay
    runs fused kernels, so exact equality needs its eager twins to run them too."""
    def run(*args):
        with mt.fusion(threshold=0):
            return fn(*args)
    return run


def test_a_captured_step_and_an_eager_step_in_two_threads():
    """One thread replays a captured step while another trains eagerly: both exact."""
    def captured(seed):
        gen = np.random.default_rng(seed)
        model = nn.Sequential(nn.Linear(6, 12, generator=gen), nn.ReLU(),
                              nn.Linear(12, 3, generator=gen))
        opt = nn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x = mt.tensor(gen.standard_normal((16, 6)).astype(np.float32))
        y = mt.tensor(gen.integers(0, 3, 16))

        @mt.capture
        def step(x, y):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss

        for _ in range(4):
            step(x, y)
        return [p.numpy().copy() for p in model.parameters()]

    alone = fused(train)(1), fused(train)(2)
    with fast_switching():
        for _ in range(5):
            join_a, join_b = in_thread(fused(captured), 1), in_thread(fused(train), 2)
            for got, want in ((join_a(), alone[0]), (join_b(), alone[1])):
                assert all(np.array_equal(g, w) for g, w in zip(got, want))


# ---- a new thread starts in the default modes ---------------------------------------------

def modes():
    return (mt.is_grad_enabled(), fusion_enabled(), is_anomaly_enabled(),
            capture.is_recording())


def test_a_new_thread_starts_in_the_default_modes():
    with mt.no_grad(), mt.fusion(False), mt.detect_anomaly(), capture.recording():
        assert modes() == (False, False, True, True)
        assert in_thread(modes)() == (True, True, False, False)
    assert modes() == (True, True, False, False)


def test_set_fusion_is_per_thread():
    def switch_off():
        mt.set_fusion(False)
        return fusion_enabled()

    assert in_thread(switch_off)() is False
    assert fusion_enabled() is True


def test_one_grad_mode_object_entered_by_two_threads_restores_each_threads_mode():
    """A module-level ``enable_grad()`` object used in two threads at once: each thread
    gets back the mode it had on entering."""
    shared = mt.enable_grad()
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()

    def a():
        with mt.no_grad():
            with shared:
                a_in.set()
                waiting(b_in)
            a_out.set()
            return mt.is_grad_enabled()

    def b():
        waiting(a_in)
        with shared:
            b_in.set()
            waiting(a_out)
        return mt.is_grad_enabled()

    join_a, join_b = in_thread(a), in_thread(b)
    assert (join_a(), join_b()) == (False, True)
