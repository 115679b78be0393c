"""Transformer layers, stacks and ``nn.Transformer`` against PyTorch's from the same weights.

Both libraries build the module with the same call (the constructors are PyTorch's),
our copy loads PyTorch's state dict -- the keys equal, in order -- and the outputs and
every gradient agree, on hypothesis-drawn sizes, ``batch_first``, ``norm_first``,
activations, biases, layer counts and masks (causal, bool, additive, key padding), on
both sides of the fusion policy (the default threshold and 0).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
from minitorch_exp import nn

from ..node._helpers import leaf, seeds
from .module_twins import compare_modules, twin

KINDS = ("encoder layer", "decoder layer", "encoder", "decoder", "transformer")
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "callable": lambda x: x.tanh()}


def build(lib, kind: str, s: dict):
    """``kind`` built from ``lib`` (``torch.nn`` or ``minitorch_exp.nn``) with the same
    arguments, in float64, dropout 0."""
    d, h = s["d_model"], s["nhead"]
    settings = dict(dim_feedforward=s["ff"], dropout=0.0,
                    activation=ACTIVATIONS[s["activation"]], layer_norm_eps=s["eps"],
                    batch_first=s["batch_first"], norm_first=s["norm_first"], bias=s["bias"])
    if kind == "transformer":
        return lib.Transformer(d, h, s["layers"], s["layers"], **settings).double()
    layer_class = lib.TransformerEncoderLayer if "encoder" in kind else lib.TransformerDecoderLayer
    layer = layer_class(d, h, **settings)
    if kind.endswith("layer"):
        return layer.double()
    stack = lib.TransformerEncoder if kind == "encoder" else lib.TransformerDecoder
    return stack(layer, s["layers"], lib.LayerNorm(d) if s["final_norm"] else None).double()


@st.composite
def transformer_settings(draw):
    nhead = draw(st.integers(1, 2))
    return dict(
        nhead=nhead, d_model=nhead * draw(st.integers(1, 3)), ff=draw(st.integers(1, 6)),
        eps=draw(st.sampled_from([1e-5, 1e-3])),
        activation=draw(st.sampled_from(sorted(ACTIVATIONS))),
        batch_first=draw(st.booleans()), norm_first=draw(st.booleans()),
        bias=draw(st.booleans()), layers=draw(st.integers(1, 2)), final_norm=draw(st.booleans()),
        batched=draw(st.booleans()), n=draw(st.integers(1, 2)), tgt_len=draw(st.integers(1, 4)),
        src_len=draw(st.integers(1, 4)),
        self_mask=draw(st.sampled_from(["none", "causal", "is_causal", "bool", "float"])),
        memory_mask=draw(st.sampled_from(["none", "bool", "float"])),
        padding=draw(st.booleans()))


def sequence(s: dict, length: int, seed: int) -> mt.Node:
    shape = ((s["n"], length) if s["batch_first"] else (length, s["n"])) if s["batched"] \
        else (length,)
    return leaf(np.random.default_rng(seed).standard_normal(shape + (s["d_model"],)))


def attn_mask(kind: str, rows: int, cols: int, rng) -> np.ndarray | None:
    """MultiheadAttention's forms: bool True masks out (key 0 never, so no row is all
    masked), float is added; causal is the float -inf triangle above the diagonal."""
    if kind in ("causal", "is_causal"):
        return np.triu(np.full((rows, cols), -np.inf), 1)
    if kind == "bool":
        mask = rng.random((rows, cols)) < 0.4
        mask[:, 0] = False
        return mask
    return rng.standard_normal((rows, cols)) if kind == "float" else None


def padding_mask(s: dict, length: int, rng) -> np.ndarray | None:
    if not s["padding"]:
        return None
    mask = rng.random((s["n"], length) if s["batched"] else (length,)) < 0.4
    mask[..., 0] = False
    return mask


def call(kind: str, s: dict, seed: int) -> tuple[list, dict]:
    """The inputs and the keyword arguments (masks) of ``kind``'s forward."""
    rng = np.random.default_rng(seed)
    tgt, src = sequence(s, s["tgt_len"], seed), sequence(s, s["src_len"], seed + 1)
    self_len = s["src_len"] if kind.startswith("encoder") else s["tgt_len"]
    masks = {"self": attn_mask(s["self_mask"], self_len, self_len, rng),
             "self padding": padding_mask(s, self_len, rng),
             "memory": attn_mask(s["memory_mask"], s["tgt_len"], s["src_len"], rng),
             "memory padding": padding_mask(s, s["src_len"], rng)}
    masks = {k: None if v is None else mt.tensor(v) for k, v in masks.items()}
    causal = s["self_mask"] == "is_causal"
    if kind.startswith("encoder"):
        mask_name = "src_mask" if kind == "encoder layer" else "mask"
        return [src], {mask_name: masks["self"], "src_key_padding_mask": masks["self padding"],
                       "is_causal": causal}
    kwargs = {"tgt_mask": masks["self"], "memory_mask": masks["memory"],
              "tgt_key_padding_mask": masks["self padding"],
              "memory_key_padding_mask": masks["memory padding"], "tgt_is_causal": causal}
    if kind == "transformer":
        return [src, tgt], {**kwargs, "src_key_padding_mask": masks["memory padding"]}
    return [tgt, src], kwargs


def matches_torch(kind: str, s: dict, seed: int) -> None:
    torch = pytest.importorskip("torch")
    theirs = build(torch.nn, kind, s)
    mine = twin(build(nn, kind, s), theirs)
    inputs, kwargs = call(kind, s, seed)
    compare_modules(mine, theirs, inputs, kwargs, rtol=1e-6, atol=1e-8, seed=seed)


@pytest.mark.filterwarnings("ignore::UserWarning")  # PyTorch's nested-tensor and mask notes
@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=15)
@given(s=transformer_settings(), seed=seeds)
def test_matches_torch(kind, s, seed):
    """At the default fusion threshold: these small sizes run op by op, at once."""
    matches_torch(kind, s, seed)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=5)
@given(s=transformer_settings(), seed=seeds)
def test_matches_torch_fused(kind, s, seed):
    """At threshold 0 every op is a lazy expression, fused; fewer examples, as each new
    structure compiles its kernels."""
    with mt.fusion(threshold=0):
        matches_torch(kind, s, seed)


@pytest.mark.parametrize("kind", KINDS)
def test_state_dict_keys_are_torchs_without_torch(kind):
    """PyTorch's keys, written out, so the layout is pinned where PyTorch is absent."""
    s = dict(d_model=4, nhead=2, ff=8, eps=1e-5, activation="relu", batch_first=False,
             norm_first=False, bias=True, layers=2, final_norm=True)
    keys = list(build(nn, kind, s).state_dict())
    layer = ["self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
             "self_attn.out_proj.bias"]
    if "decoder" in kind:
        layer += [k.replace("self_attn", "multihead_attn") for k in layer]
    layer += ["linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias"]
    layer += [f"norm{i}.{p}" for i in range(1, 3 + ("decoder" in kind)) for p in ("weight",
                                                                                   "bias")]
    if kind.endswith("layer"):
        assert keys == layer
    elif kind in ("encoder", "decoder"):
        assert keys == [f"layers.{i}.{k}" for i in range(2) for k in layer] + \
               ["norm.weight", "norm.bias"]
    else:
        assert keys[0] == "encoder.layers.0.self_attn.in_proj_weight"
        assert "decoder.layers.1.multihead_attn.out_proj.bias" in keys
        assert keys[-2:] == ["decoder.norm.weight", "decoder.norm.bias"]


def test_without_bias_the_norms_have_no_bias():
    layer = nn.TransformerEncoderLayer(4, 2, 8, bias=False)
    assert not [k for k in layer.state_dict() if k.endswith("bias")]


def test_generate_square_subsequent_mask_is_torchs():
    want = np.triu(np.full((4, 4), -np.inf, np.float32), 1)
    got = nn.Transformer.generate_square_subsequent_mask(4)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got.numpy(), want)
    torch = pytest.importorskip("torch")
    np.testing.assert_array_equal(
        got.numpy(), torch.nn.Transformer.generate_square_subsequent_mask(4).numpy())


@pytest.mark.parametrize("kind", ["encoder layer", "decoder layer"])
def test_each_dropout_runs_once(kind):
    """PyTorch's wiring: ``dropout`` inside the feed-forward block, ``dropoutN`` after
    sub-block N."""
    s = dict(d_model=4, nhead=2, ff=8, eps=1e-5, activation="relu", batch_first=False,
             norm_first=False, bias=True)
    layer = build(nn, kind, s)
    calls = []
    for name, module in layer.named_modules():
        if isinstance(module, nn.Dropout):
            module.register_forward_hook(lambda m, args, out, name=name: calls.append(name))
    x = mt.randn(3, 2, 4)
    layer(x) if kind == "encoder layer" else layer(x, x)
    assert sorted(calls) == sorted(n for n, m in layer.named_modules()
                                   if isinstance(m, nn.Dropout))


def test_dropout_only_in_training():
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.5)
    plain = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0)
    plain.load_state_dict(layer.state_dict())
    x = mt.randn(5, 3, 8)
    first, second = layer(x).numpy(), layer(x).numpy()
    assert not np.allclose(first, second)
    layer.eval()
    np.testing.assert_allclose(layer(x).numpy(), plain(x).numpy(), rtol=1e-6)


def test_activation_must_be_known_or_callable():
    with pytest.raises(ValueError, match="'relu', 'gelu' or a callable"):
        nn.TransformerEncoderLayer(4, 2, activation="tanh")
