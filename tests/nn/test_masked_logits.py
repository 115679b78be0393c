"""Cross-entropy and NLL where a logit that is not the target is -inf (a masked class).

PyTorch reads the target's term by a gather, so a -inf elsewhere in the row leaves
the loss finite; a product with the one-hot row would make it ``0 * -inf = nan``.
"""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt

LOGITS = np.array([[1.0, -np.inf, 2.0, 0.5], [0.5, 0.1, -np.inf, -np.inf],
                   [-np.inf, 3.0, 1.0, 0.0]])
TARGETS = np.array([0, 1, 2])
IGNORED = np.array([0, -100, 2])


def _loss(lib, what: str, z, copies: int, dtype):
    f, t = lib.nn.functional, lambda a: lib.tensor(np.tile(a, copies))
    if what == "cross_entropy":
        return f.cross_entropy(z, t(TARGETS))
    if what == "cross_entropy, sum":
        return f.cross_entropy(z, t(TARGETS), reduction="sum")
    if what == "cross_entropy, class weights":
        return f.cross_entropy(z, t(TARGETS), weight=lib.tensor(np.array([1.0, 2, 0.5, 1], dtype)))
    if what == "cross_entropy, ignore_index":
        return f.cross_entropy(z, t(IGNORED))
    return f.nll_loss(f.log_softmax(z, 1), t(TARGETS))


WHAT = ["cross_entropy", "cross_entropy, sum", "cross_entropy, class weights",
        "cross_entropy, ignore_index", "nll_loss"]


@pytest.mark.parametrize("what", WHAT)
@pytest.mark.parametrize("copies", [1, 100])  # computed at once, and kept lazy to fuse
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_masked_logit_leaves_the_loss_finite(what, copies, dtype):
    z = np.tile(LOGITS, (copies, 1)).astype(dtype)
    x = mt.tensor(z, requires_grad=True)
    with mt.fusion(threshold=0 if copies > 1 else 1 << 20):
        loss = _loss(mt, what, x, copies, dtype)
        loss.backward()
    assert np.isfinite(loss.item()) and np.isfinite(x.grad.numpy()).all()
    torch = pytest.importorskip("torch")
    xt = torch.tensor(z, requires_grad=True)
    lt = _loss(torch, what, xt, copies, dtype)
    lt.backward()
    np.testing.assert_allclose(loss.item(), lt.item(), rtol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-7)
