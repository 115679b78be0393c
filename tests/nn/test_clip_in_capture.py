"""``nn.utils.clip_grad_norm_`` reads nothing on the host, so a captured step clips
each replay by that replay's own norm, as the eager step does."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp import nn


def _run(captured: bool, scales: list[float]) -> list[np.ndarray]:
    mt.manual_seed(0)
    model = nn.Linear(4, 3)
    opt = nn.optim.SGD(model.parameters(), lr=0.1)

    def step(x, k):
        opt.zero_grad()
        ((model(x) ** 2).sum() * k).backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return norm

    run = mt.capture(step) if captured else step
    out = []
    x = mt.tensor(np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4))
    for s in scales:  # gradients far above the bound and below it, in turn
        norm = run(x, mt.tensor(np.float32(s)))
        out += [norm.numpy().copy(), model.weight.numpy().copy()]
    return out


@pytest.mark.parametrize("threshold", [None, 0])
def test_captured_clipping_equals_eager(threshold):
    scales = [10.0, 0.001, 5.0, 0.002, 20.0, 0.001]
    with mt.fusion(threshold=threshold):
        eager, captured = _run(False, scales), _run(True, scales)
    for a, b in zip(eager, captured):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    norms = eager[0::2]
    assert max(norms) > 1.0 > min(norms)  # both sides of the bound were exercised


def test_the_norm_and_clipping_match_pytorch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    grads = [rng.standard_normal(s).astype(np.float32) * 3 for s in ((3, 4), (3,))]
    for norm_type in (2.0, 1.0, float("inf")):
        ours = [nn.Parameter(np.zeros_like(g)) for g in grads]
        theirs = [torch.zeros(g.shape, requires_grad=True) for g in grads]
        for p, t, g in zip(ours, theirs, grads):
            p.grad, t.grad = mt.tensor(g), torch.tensor(g)
        n1 = nn.utils.clip_grad_norm_(ours, 1.5, norm_type=norm_type)
        n2 = torch.nn.utils.clip_grad_norm_(theirs, 1.5, norm_type=norm_type)
        np.testing.assert_allclose(n1.numpy(), n2.numpy(), rtol=1e-5)
        for p, t in zip(ours, theirs):
            np.testing.assert_allclose(p.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-7)
