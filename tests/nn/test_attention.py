"""``F.scaled_dot_product_attention`` and ``nn.MultiheadAttention``.

Values and gradients against PyTorch from the same weights, on hypothesis-drawn sizes,
heads, layouts and masks (bool, additive, causal, key padding), on both sides of the
fusion policy; float64 finite differences; dropout by its statistics; and the kernel
counts showing that the scale and the masks add no kernel to the softmax's.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
import minitorch_exp.nn.functional as F
from minitorch_exp import nn

from ..node._helpers import compare_with_torch, layouts, leaf, seeds
from ..node.test_new_elementwise import POLICIES, policy
from .module_twins import compare_modules, twin

MASKS = ("none", "bool", "float", "causal")


def normal(seed: int, *shape) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


@st.composite
def broadcast_to(draw, shape):
    """A shape that broadcasts to ``shape``: leading dims dropped, some set to 1."""
    lead = draw(st.integers(0, max(len(shape) - 2, 0)))
    return tuple(1 if draw(st.booleans()) else n for n in shape[lead:])


def sdpa_mask(kind: str, shape, seed: int) -> tuple[np.ndarray | None, bool]:
    """``attn_mask`` (as an array) and ``is_causal`` for ``kind``: a bool mask (True takes
    part) or an additive float one, of ``shape``, broadcasting to the scores."""
    rng = np.random.default_rng(seed)
    if kind in ("none", "causal"):
        return None, kind == "causal"
    return (rng.random(shape) < 0.7 if kind == "bool" else rng.standard_normal(shape)), False


def as_mask(lib, mask: np.ndarray | None):
    return None if mask is None else lib.tensor(mask)


# ---- scaled_dot_product_attention ----------------------------------------------------

@pytest.mark.parametrize("side", POLICIES)
@settings(max_examples=20)
@given(lead=st.lists(st.integers(1, 3), max_size=2).map(tuple), q_len=st.integers(1, 5),
       k_len=st.integers(1, 5), dim=st.integers(1, 4), v_dim=st.integers(1, 4),
       kind=st.sampled_from(MASKS), scale=st.sampled_from([None, 0.3]), layout=layouts,
       seed=seeds, data=st.data())
def test_sdpa_matches_torch(side, lead, q_len, k_len, dim, v_dim, kind, scale, layout, seed,
                            data):
    """Bool masks may mask a whole row: PyTorch and we give zeros there, not NaN."""
    torch = pytest.importorskip("torch")
    mask_shape = data.draw(broadcast_to(lead + (q_len, k_len)))
    arr, causal = sdpa_mask(kind, mask_shape, seed)
    mask, torch_mask = as_mask(mt, arr), as_mask(torch, arr)
    with policy(side):
        q = leaf(normal(seed, *lead, q_len, dim), layout)
        k, v = leaf(normal(seed + 1, *lead, k_len, dim)), leaf(normal(seed + 2, *lead, k_len,
                                                                       v_dim))
        compare_with_torch(
            lambda q, k, v: F.scaled_dot_product_attention(q, k, v, mask, is_causal=causal,
                                                           scale=scale),
            lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
                q, k, v, torch_mask, is_causal=causal, scale=scale),
            [q, k, v], seed=seed)


def test_sdpa_broadcasts_keys_over_heads():
    """Keys and values of (N, 1, S, E) serve every head of queries (N, H, L, E)."""
    torch = pytest.importorskip("torch")
    q, k, v = leaf(normal(0, 2, 3, 4, 5)), leaf(normal(1, 2, 1, 6, 5)), leaf(normal(2, 2, 1, 6, 3))
    compare_with_torch(F.scaled_dot_product_attention,
                       torch.nn.functional.scaled_dot_product_attention, [q, k, v])


@pytest.mark.parametrize("kind", MASKS)
def test_sdpa_gradcheck(kind):
    arr, causal = sdpa_mask(kind, (3, 4), 5)
    mask = as_mask(mt, arr)
    q, k, v = leaf(normal(0, 2, 3, 2)), leaf(normal(1, 2, 4, 2)), leaf(normal(2, 2, 4, 3))
    assert mt.gradcheck(lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, mask, is_causal=causal), [q, k, v])


def test_sdpa_refuses_a_mask_with_is_causal():
    x = mt.randn(2, 3, 4)
    with pytest.raises(ValueError, match="not both"):
        F.scaled_dot_product_attention(x, x, x, mt.ones(3, 3, dtype=mt.bool_), is_causal=True)


def test_sdpa_dropout_keeps_the_mean_and_scales_the_rest():
    """Uniform weights over 40 keys of ones: each output is the kept fraction over
    ``1 - p``, mean 1 and variance ``p / ((1 - p) S)``; with ``p = 0`` exactly 1."""
    p, keys = 0.25, 40
    q, k = mt.zeros(50, 60, 8), mt.zeros(50, keys, 8)
    v = mt.ones(50, keys, 1)
    mt.manual_seed(0)
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=p).numpy()
    assert abs(out.mean() - 1.0) < 0.01
    assert abs(out.var() / (p / ((1 - p) * keys)) - 1.0) < 0.1
    np.testing.assert_allclose(F.scaled_dot_product_attention(q, k, v).numpy(), 1.0, rtol=1e-6)


# ---- kernel counts -------------------------------------------------------------------

def _kernels(attend, q, k, v) -> tuple[dict, dict]:
    """Kernels of ``attend(q, k, v)`` forward, and of its backward."""
    upstream = mt.randn(*q.shape[:-1], v.shape[-1])
    with mt.count_kernels() as forward:
        out = attend(q, k, v).realize()
    loss = (out * upstream).sum()
    with mt.count_kernels() as backward:
        loss.backward()
    return forward.counts, backward.counts


def _plain(q, k, v):
    return mt.softmax(q @ k.transpose(-2, -1), -1) @ v


CASES = {
    "scale": lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
    "scale + causal": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    "scale + bool mask": lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, mt.randn(q.shape[-2], k.shape[-2]) > -1),
    "scale + additive mask": lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, mt.randn(q.shape[0], 1, 1, k.shape[-2])),
}


@pytest.mark.parametrize("side", POLICIES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_scale_and_masks_add_no_kernel_to_the_softmax(case, side):
    """Above the fusion threshold (8 x 4 x 64 x 64 = 131072 scores) attention costs what
    ``softmax(q @ k^T) @ v`` costs: forward 2 BLAS products + the softmax's 2 row
    reductions and 1 fused division = 5; backward 4 BLAS + 1 reduction + 2 fused = 7.
    The scale, the mask and the masked-row guard are recomputed inside those kernels.
    Below the threshold (the default, 2 x 2 x 8 x 8) nothing runs as a kernel at all."""
    for shape, kernels in (((8, 4, 64, 64), (5, 7)), ((2, 2, 8, 8), None)):
        with policy(side):
            q, k, v = (mt.randn(*shape, requires_grad=True) for _ in range(3))
            plain, fused = _kernels(_plain, q, k, v), _kernels(CASES[case], q, k, v)
        assert fused == plain
        if kernels is None and side == "default threshold":
            kernels = (0, 0)
        elif kernels is None:
            continue
        assert (fused[0]["total"], fused[1]["total"]) == kernels
        assert fused[0].get("reduce", 0) == (2 if kernels[0] else 0)


# ---- nn.MultiheadAttention -----------------------------------------------------------

@st.composite
def mha_settings(draw):
    heads, head_dim = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    embed = heads * head_dim
    cross = draw(st.booleans())
    return dict(
        heads=heads, embed=embed, cross=cross, n=draw(st.integers(1, 3)),
        q_len=draw(st.integers(1, 4)), k_len=draw(st.integers(1, 4)) if cross else None,
        kdim=draw(st.sampled_from([None, 2, 5])) if cross else None,
        vdim=draw(st.sampled_from([None, 3])) if cross else None,
        batch_first=draw(st.booleans()), batched=draw(st.booleans()),
        bias=draw(st.booleans()),
        attn_mask=draw(st.sampled_from(["none", "bool", "float", "bool 3-d", "float 3-d",
                                        "causal"])),
        padding=draw(st.sampled_from(["none", "bool", "float"])),
        need_weights=draw(st.booleans()), average=draw(st.booleans()),
        compare=draw(st.sampled_from(["output", "weights"])))


def _layout(s: dict, length: int, dim: int) -> tuple:
    if not s["batched"]:
        return (length, dim)
    return (s["n"], length, dim) if s["batch_first"] else (length, s["n"], dim)


def _mha_masks(s: dict, k_len: int, seed: int) -> dict:
    """The masks ``s`` asks for, in MultiheadAttention's form (bool True = masked out);
    key 0 is never masked, so no row is all masked (PyTorch gives NaN there when it
    returns the weights)."""
    rng, q_len = np.random.default_rng(seed), s["q_len"]
    kwargs = {}
    kind = s["attn_mask"]
    if kind == "causal":
        kwargs["attn_mask"] = np.triu(np.ones((q_len, k_len), bool), 1)
        kwargs["is_causal"] = True
    elif kind != "none":
        lead = (s["n"] * s["heads"] if s["batched"] else s["heads"],) if "3-d" in kind else ()
        kwargs["attn_mask"] = _mask_values(rng, kind, lead + (q_len, k_len))
    if s["padding"] != "none":
        kwargs["key_padding_mask"] = _mask_values(
            rng, s["padding"], (s["n"], k_len) if s["batched"] else (k_len,))
    return {k: mt.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}


def _mask_values(rng, kind: str, shape) -> np.ndarray:
    if kind.startswith("float"):
        return rng.standard_normal(shape)
    mask = rng.random(shape) < 0.4
    mask[..., 0] = False
    return mask


@pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask")  # PyTorch's
@pytest.mark.parametrize("side", POLICIES)
@settings(max_examples=25)
@given(s=mha_settings(), seed=seeds)
def test_multihead_attention_matches_torch(side, s, seed):
    torch = pytest.importorskip("torch")
    k_len = s["k_len"] or s["q_len"]
    args = dict(bias=s["bias"], batch_first=s["batch_first"], kdim=s["kdim"], vdim=s["vdim"])
    theirs = torch.nn.MultiheadAttention(s["embed"], s["heads"], **args).double()
    mine = twin(nn.MultiheadAttention(s["embed"], s["heads"], dtype=np.float64, **args), theirs)
    with policy(side):
        query = leaf(normal(seed, *_layout(s, s["q_len"], s["embed"])))
        if s["cross"]:
            key = leaf(normal(seed + 1, *_layout(s, k_len, s["kdim"] or s["embed"])))
            value = leaf(normal(seed + 2, *_layout(s, k_len, s["vdim"] or s["embed"])))
        else:
            key = value = query
        kwargs = dict(_mha_masks(s, k_len, seed), need_weights=s["need_weights"],
                      average_attn_weights=s["average"])
        pick = 1 if s["compare"] == "weights" and s["need_weights"] else 0
        compare_modules(mine, theirs, [query, key, value], kwargs, seed=seed,
                        output=lambda result: result[pick])
        assert (mine(query, key, value, **kwargs)[1] is None) == (not s["need_weights"])


def test_multihead_attention_is_causal_without_a_mask_masks_the_future():
    """PyTorch wants the mask with ``is_causal`` (a hint); here the flag alone is enough."""
    torch = pytest.importorskip("torch")
    theirs = torch.nn.MultiheadAttention(4, 2, batch_first=True).double()
    mine = twin(nn.MultiheadAttention(4, 2, batch_first=True, dtype=np.float64), theirs)
    x = leaf(normal(0, 2, 5, 4))
    causal = np.triu(np.ones((5, 5), bool), 1)
    got, weights = mine(x, x, x, is_causal=True)
    want, want_weights = theirs(*[torch.tensor(x.numpy())] * 3, attn_mask=torch.tensor(causal),
                                is_causal=True)
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(weights.numpy(), want_weights.detach().numpy(), atol=1e-12)


def test_multihead_attention_gradcheck():
    mha = nn.MultiheadAttention(4, 2, dtype=np.float64)
    x, memory = leaf(normal(0, 3, 2, 4)), leaf(normal(1, 2, 2, 4))
    padding = mt.tensor(np.array([[False, True], [False, False]]))
    assert mt.gradcheck(
        lambda x, memory, w, b: mha(x, memory, memory, key_padding_mask=padding)[0],
        [x, memory, mha.in_proj_weight, mha.out_proj.bias])


def test_multihead_attention_state_dict_keys_are_torchs():
    torch = pytest.importorskip("torch")
    for kwargs in ({}, dict(bias=False), dict(kdim=3, vdim=5)):
        theirs = torch.nn.MultiheadAttention(6, 3, **kwargs).state_dict()
        mine = nn.MultiheadAttention(6, 3, **kwargs).state_dict()
        assert {k: tuple(v.shape) for k, v in mine.items()} == \
               {k: tuple(v.shape) for k, v in theirs.items()}


def test_multihead_attention_dropout_only_in_training():
    """With ``dropout=0.5`` the returned weights are the dropped-out ones while training
    (about half zero, the rest doubled), and the softmax's rows after ``eval()``."""
    mha = nn.MultiheadAttention(8, 2, dropout=0.5, batch_first=True)
    x = mt.randn(16, 20, 8)
    weights = mha(x, x, x, average_attn_weights=False)[1].numpy()
    assert abs((weights == 0).mean() - 0.5) < 0.02
    np.testing.assert_allclose(weights.sum(-1).mean(), 1.0, atol=0.02)
    mha.eval()
    np.testing.assert_allclose(mha(x, x, x)[1].numpy().sum(-1), 1.0, rtol=1e-5)


def test_multihead_attention_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match="divisible"):
        nn.MultiheadAttention(5, 2)
    with pytest.raises(NotImplementedError, match="add_bias_kv"):
        nn.MultiheadAttention(4, 2, add_bias_kv=True)


def test_fully_masked_rows_give_zeros_as_torch_sdpa():
    torch = pytest.importorskip("torch")
    keep = np.ones((3, 4), bool)
    keep[1] = False
    q, k, v = leaf(normal(0, 2, 3, 2)), leaf(normal(1, 2, 4, 2)), leaf(normal(2, 2, 4, 3))
    compare_with_torch(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, mt.tensor(keep)),
        lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
            q, k, v, torch.tensor(keep)), [q, k, v])
    assert not math.isnan(F.scaled_dot_product_attention(q, k, v, mt.tensor(keep)).sum().item())
