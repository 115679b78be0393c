"""Dropout2d zeroes whole channels; Embedding looks rows up (padding_idx gets no gradient);
the functional names a CNN script uses (log_softmax(dim=1), nll_loss(reduction='sum'))."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.nn import functional as F


def test_dropout2d_zeroes_whole_channels_and_scales_the_rest():
    mt.manual_seed(0)
    layer = nn.Dropout2d(0.25)
    x = mt.tensor(np.random.default_rng(0).uniform(1, 2, (64, 8, 3, 3)))
    out = layer(x).numpy() / x.numpy()
    per_channel = out.reshape(64, 8, 9)
    np.testing.assert_allclose(per_channel, per_channel[..., :1].repeat(9, -1), rtol=1e-12)
    kept = per_channel[..., 0]  # one decision per (sample, channel)
    assert np.all((kept == 0) | np.isclose(kept, 1 / 0.75, rtol=1e-12))
    assert 0.15 < (kept == 0).mean() < 0.35
    layer.eval()
    assert layer(x) is x


def test_dropout2d_gradient_follows_the_mask():
    mt.manual_seed(1)
    x = mt.randn(4, 5, 2, 2, requires_grad=True)
    out = F.dropout2d(x, 0.5)
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), out.numpy() / x.numpy(), rtol=1e-6)


def test_dropout2d_refuses_other_shapes_and_probabilities():
    with pytest.raises(ValueError, match=r"\(N, C, H, W\) or \(N, C, L\), got shape \(4, 5\)"):
        F.dropout2d(mt.randn(4, 5))
    with pytest.raises(ValueError, match=r"in \[0, 1\), got 1.0"):
        nn.Dropout2d(1.0)


def test_embedding_matches_pytorch_and_padding_row_gets_no_gradient():
    torch = pytest.importorskip("torch")
    mt.manual_seed(2)
    emb = nn.Embedding(10, 4, padding_idx=-1)
    assert emb.padding_idx == 9 and not emb.weight.numpy()[9].any()
    twin = torch.nn.Embedding(10, 4, padding_idx=9)
    with torch.no_grad():
        twin.weight.copy_(torch.from_numpy(emb.weight.numpy().copy()))
    idx = np.array([[1, 9, 3], [3, 3, 0]])
    out, tout = emb(mt.tensor(idx)), twin(torch.from_numpy(idx))
    np.testing.assert_array_equal(out.numpy(), tout.detach().numpy())
    g = np.random.default_rng(3).standard_normal((2, 3, 4)).astype(np.float32)
    out.backward(mt.tensor(g))
    tout.backward(torch.from_numpy(g))
    np.testing.assert_allclose(emb.weight.grad.numpy(), twin.weight.grad.numpy(), rtol=1e-6)
    assert not emb.weight.grad.numpy()[9].any()


def test_embedding_init_and_errors():
    mt.manual_seed(4)
    w = nn.Embedding(1000, 16).weight.numpy()
    assert abs(w.mean()) < 0.02 and abs(w.std() - 1) < 0.02  # N(0, 1), as PyTorch
    emb = nn.Embedding(5, 2)
    with pytest.raises(IndexError, match=r"indices must be in \[0, 5\), got range \[0, 7\]"):
        emb(mt.tensor([0, 7]))
    with pytest.raises(TypeError, match="indices must be integers"):
        emb(mt.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="padding_idx must be within"):
        nn.Embedding(5, 2, padding_idx=5)
    frozen = nn.Embedding.from_pretrained(mt.tensor(np.eye(3, dtype=np.float32)))
    assert not frozen.weight.requires_grad
    np.testing.assert_array_equal(frozen(mt.tensor([2])).numpy(), [[0, 0, 1]])


def test_log_softmax_takes_dim_and_nll_loss_sums():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(5).standard_normal((6, 4))
    y = np.array([0, 3, 1, 1, 2, 0])
    out = F.nll_loss(F.log_softmax(mt.tensor(x), dim=1), mt.tensor(y), reduction="sum")
    ref = torch.nn.functional.nll_loss(torch.log_softmax(torch.from_numpy(x), dim=1),
                                       torch.from_numpy(y), reduction="sum")
    assert out.item() == pytest.approx(ref.item(), rel=1e-12)
    np.testing.assert_allclose(F.softmax(mt.tensor(x), dim=0).numpy(),
                               torch.softmax(torch.from_numpy(x), dim=0).numpy(), rtol=1e-12)
    np.testing.assert_allclose(F.log_softmax(mt.tensor(x), axis=1).numpy(),
                               F.log_softmax(mt.tensor(x), 1).numpy())
    with pytest.warns(UserWarning, match="Implicit dimension choice for log_softmax"):
        implicit = F.log_softmax(mt.tensor(x))
    np.testing.assert_allclose(implicit.numpy(), F.log_softmax(mt.tensor(x), 1).numpy())
