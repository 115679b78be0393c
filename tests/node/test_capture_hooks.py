"""Hooks run Python, which a replay of ``mt.capture`` cannot repeat: a hook is never
skipped silently. Registering or removing one makes the next call run eagerly
(where it runs), and recording a call that runs a hook raises ``CaptureError``."""

from __future__ import annotations

import pytest

import minitorch_exp as mt
from minitorch_exp import nn


def _calls_run_or_refuse(step, x, calls: list, n: int = 4) -> int:
    """Call ``step(x)`` ``n`` times; each call must run the hook (append to ``calls``) or
    raise ``CaptureError``. Returns how many raised."""
    refused = 0
    for _ in range(n):
        before = len(calls)
        try:
            step(x)
        except mt.CaptureError as e:
            assert "hook" in str(e)
            refused += 1
            continue
        assert len(calls) == before + 1, "a replay skipped the hook"
    return refused


def _model_and_step():
    model = nn.Linear(3, 2)
    opt = nn.optim.SGD(model.parameters(), lr=0.1)

    def step(x):
        opt.zero_grad()
        loss = model(x).sum()
        loss.backward()
        opt.step()
        return loss

    return model, mt.capture(step), mt.ones(4, 3)


@pytest.mark.parametrize("kind", ["forward", "forward_pre", "full_backward", "tensor"])
def test_a_hook_registered_after_recording_is_run_or_refused(kind):
    model, step, x = _model_and_step()
    for _ in range(3):  # warm-up, recording, replay
        step(x)
    calls = []
    if kind == "forward":
        handle = model.register_forward_hook(lambda m, a, out: calls.append(1))
    elif kind == "forward_pre":
        handle = model.register_forward_pre_hook(lambda m, a: calls.append(1))
    elif kind == "full_backward":
        handle = model.register_full_backward_hook(lambda m, gi, go: calls.append(1))
    else:
        handle = model.weight.register_hook(lambda g: calls.append(1))
    assert _calls_run_or_refuse(step, x, calls) >= 1
    handle.remove()
    for _ in range(3):  # without the hook: recorded and replayed again
        step(x)


def test_removing_a_hook_stops_it_in_the_next_calls():
    model, step, x = _model_and_step()
    calls = []
    handle = model.register_forward_hook(lambda m, a, out: calls.append(1))
    step(x)                       # a warm-up runs it
    assert calls == [1]
    handle.remove()
    for _ in range(3):
        step(x)
    assert calls == [1]
    assert len(step.recordings) == 1  # recorded once without it, then replayed
