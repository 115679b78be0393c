"""GroupNorm, InstanceNorm1d/2d and LayerNorm's switches: values, gradients and running
statistics against PyTorch from the same state dict, over drawn shapes; gradcheck in
float64; both sides of the fusion policy; errors naming the argument."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.nn.functional import group_norm, instance_norm

from .module_twins import compare_modules, twin

POLICIES = {"default": contextlib.nullcontext, "fuse_all": lambda: mt.fusion(threshold=0)}


def _x(rng, shape):
    return mt.tensor(rng.standard_normal(shape) * 2 + 0.5, requires_grad=True)


@settings(max_examples=20, deadline=None)
@given(groups=st.integers(1, 3), per_group=st.integers(1, 3), n=st.integers(1, 3),
       spatial=st.lists(st.integers(1, 4), max_size=2), affine=st.booleans(),
       seed=st.integers(0, 2**16))
def test_group_norm_matches_pytorch(groups, per_group, n, spatial, affine, seed):
    torch = pytest.importorskip("torch")
    channels = groups * per_group
    if per_group * int(np.prod(spatial)) < 2:
        spatial = [2]
    rng = np.random.default_rng(seed)
    mine = nn.GroupNorm(groups, channels, eps=1e-4, affine=affine, dtype=np.float64)
    theirs = torch.nn.GroupNorm(groups, channels, eps=1e-4, affine=affine).double()
    if affine:
        with torch.no_grad():
            theirs.weight.uniform_(0.5, 1.5)
            theirs.bias.uniform_(-1, 1)
    twin(mine, theirs)
    compare_modules(mine, theirs, [_x(rng, (n, channels, *spatial))], rtol=1e-9, atol=1e-10,
                    seed=seed)


@settings(max_examples=20, deadline=None)
@given(dims=st.sampled_from([1, 2]), n=st.integers(1, 3), c=st.integers(1, 3),
       affine=st.booleans(), track=st.booleans(), unbatched=st.booleans(),
       momentum=st.sampled_from([0.1, 0.5, None]), seed=st.integers(0, 2**16))
def test_instance_norm_matches_pytorch_over_steps(dims, n, c, affine, track, unbatched,
                                                  momentum, seed):
    """Two training steps (running statistics move), then one in eval mode."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    name = f"InstanceNorm{dims}d"
    kwargs = dict(eps=1e-4, momentum=momentum, affine=affine, track_running_stats=track)
    mine = getattr(nn, name)(c, dtype=np.float64, **kwargs)
    theirs = getattr(torch.nn, name)(c, **kwargs).double()
    twin(mine, theirs)
    shape = (c, *(3,) * dims) if unbatched else (n, c, *(3,) * dims)
    for training in (True, True, False):
        mine.train(training)
        theirs.train(training)
        compare_modules(mine, theirs, [_x(rng, shape)], rtol=1e-9, atol=1e-10)
        for key, value in theirs.state_dict().items():
            np.testing.assert_allclose(mine.state_dict()[key].numpy(), value.numpy(),
                                       rtol=1e-12, atol=1e-14, err_msg=key)


@pytest.mark.parametrize("elementwise_affine, bias", [(True, True), (True, False),
                                                      (False, True)])
def test_layer_norm_switches_match_pytorch(elementwise_affine, bias):
    torch = pytest.importorskip("torch")
    mine = nn.LayerNorm((3, 4), elementwise_affine=elementwise_affine, bias=bias,
                        dtype=np.float64)
    theirs = torch.nn.LayerNorm((3, 4), elementwise_affine=elementwise_affine, bias=bias).double()
    if elementwise_affine:
        with torch.no_grad():
            theirs.weight.uniform_(0.5, 1.5)
    twin(mine, theirs)  # the keys match: no 'bias' without one
    compare_modules(mine, theirs, [_x(np.random.default_rng(0), (2, 3, 4))], rtol=1e-10,
                    atol=1e-12)


def test_gradcheck_in_float64():
    rng = np.random.default_rng(1)
    x = _x(rng, (2, 4, 3))
    w, b = (mt.tensor(rng.uniform(0.5, 1.5, 4), requires_grad=True) for _ in range(2))
    assert mt.gradcheck(lambda x, w, b: group_norm(x, 2, w, b), [x, w, b])
    assert mt.gradcheck(lambda x, w, b: instance_norm(x, weight=w, bias=b), [x, w, b])
    running = [mt.tensor(rng.uniform(0.5, 1.5, 4)) for _ in range(2)]
    assert mt.gradcheck(lambda x: instance_norm(x, *running, use_input_stats=False), [x])


@pytest.mark.parametrize("policy", POLICIES)
def test_both_sides_of_the_fusion_policy(policy):
    """Small layers: op by op under the default threshold, fused with threshold 0; both
    give PyTorch's values and gradients."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    with POLICIES[policy]():
        for mine, theirs in ((nn.GroupNorm(2, 4, dtype=np.float64), torch.nn.GroupNorm(2, 4)),
                             (nn.InstanceNorm2d(4, affine=True, dtype=np.float64),
                              torch.nn.InstanceNorm2d(4, affine=True))):
            twin(mine, theirs.double())
            compare_modules(mine, theirs, [_x(rng, (2, 4, 3, 3))], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("layer", [nn.GroupNorm(2, 8), nn.InstanceNorm2d(8, affine=True)])
def test_norms_are_two_reductions_and_few_fused_passes(layer):
    """Mean and variance are reductions; centering, scaling and the affine rows fuse
    into a few passes (not one per op)."""
    x = mt.randn(4, 8, 16, 16)
    with mt.fusion(threshold=0), mt.count_kernels("cpu") as k:
        out = layer(x).numpy()
    assert out.shape == x.shape
    assert k["reduce"] == 2 and k["fused"] <= 3


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="GroupNorm: num_groups must be positive"):
        nn.GroupNorm(0, 4)
    with pytest.raises(ValueError, match="num_channels=5 must be divisible by num_groups=2"):
        nn.GroupNorm(2, 5)
    with pytest.raises(ValueError, match="group_norm: expected input .* num_groups=3"):
        group_norm(mt.zeros(2, 4, 3), 3)
    with pytest.raises(ValueError, match=r"InstanceNorm2d: expected input of shape \(N, C, H, W\)"):
        nn.InstanceNorm2d(3)(mt.zeros(2, 3))
    with pytest.raises(ValueError, match="InstanceNorm1d: expected input with 3 channels"):
        nn.InstanceNorm1d(3, affine=True)(mt.zeros(2, 4, 5))
    with pytest.warns(UserWarning, match="num_features is not used without affine"):
        nn.InstanceNorm1d(3)(mt.randn(2, 4, 5))
    with pytest.raises(ValueError, match="more than 1 spatial element"):
        instance_norm(mt.zeros(2, 3, 1))
