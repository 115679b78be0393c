"""Hooks (module and tensor), nn.utils, and the autograd surface PyTorch scripts use:
``p.data`` as a tensor, ``inference_mode``, ``grad_fn.next_functions``, ``detach_`` --
compared with PyTorch where it is installed, with literal expectations otherwise."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
from minitorch_exp import nn, optim


def _torch():
    return pytest.importorskip("torch")


def _twins(torch):
    """Linear(3, 2) in both libraries with the same weights, and an input."""
    mine = nn.Linear(3, 2)
    theirs = torch.nn.Linear(3, 2)
    theirs.load_state_dict({k: torch.from_numpy(v.numpy().copy())
                            for k, v in mine.state_dict().items()})
    x = np.random.default_rng(1).normal(size=(4, 3)).astype(np.float32)
    return mine, theirs, x


# ---- tensor hooks ------------------------------------------------------------------------

@pytest.mark.parametrize("threshold", [0, None], ids=["fused", "eager"])
def test_tensor_hooks_see_and_replace_gradients(threshold):
    old = mt.get_fusion_threshold()
    mt.set_fusion_threshold(threshold)
    try:
        x = mt.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = x * x
        seen = []
        y.register_hook(lambda g: seen.append(g.numpy().copy()))
        x.register_hook(lambda g: g * 10)
        y.sum().backward()
    finally:
        mt.set_fusion_threshold(old)
    np.testing.assert_array_equal(seen[0], [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(x.grad.numpy(), [20.0, 40.0, 60.0])


def test_a_hook_on_an_intermediate_changes_what_flows_on_and_removes():
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    handle = y.register_hook(lambda g: g * 0)
    (y * y).sum().backward(retain_graph=True)
    assert x.grad.tolist() == [0.0, 0.0]
    handle.remove()
    handle.remove()  # a second remove does nothing
    x.grad = None
    (y * y).sum().backward()
    assert x.grad.tolist() == [18.0, 36.0]


def test_hooks_run_in_order_and_prepend_goes_first():
    x = mt.tensor([1.0], requires_grad=True)
    order = []
    x.register_hook(lambda g: order.append("a"))
    x.register_hook(lambda g: order.append("b"))
    x.register_hook(lambda g: order.append("first"), prepend=True)
    x.sum().backward()
    assert order == ["first", "a", "b"]


def test_register_hook_needs_a_tensor_that_requires_grad_and_a_matching_result():
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        mt.zeros(2).register_hook(print)
    x = mt.ones(2, requires_grad=True)
    x.register_hook(lambda g: mt.zeros(3))
    with pytest.raises(RuntimeError, match="shape"):
        x.sum().backward()


def test_tensor_hooks_match_torch():
    torch = _torch()
    results = []
    for lib in (mt, torch):
        x = lib.tensor([1.0, -2.0, 3.0], requires_grad=True)
        y = (x * 2).tanh()
        y.register_hook(lambda g: g * 3)
        x.register_hook(lambda g: g + 1)
        (y * y).sum().backward()
        results.append(x.grad.numpy().copy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6)


# ---- module hooks ------------------------------------------------------------------------

def test_forward_hooks_match_torch():
    torch = _torch()
    mine, theirs, x = _twins(torch)
    logs = []
    for model, lib in ((mine, mt), (theirs, torch)):
        log = []
        model.register_forward_pre_hook(lambda m, args, log=log: log.append(args[0].shape)
                                        or (args[0] * 2,))
        h = model.register_forward_hook(lambda m, args, out, log=log: out + 1)
        out = model(lib.tensor(x))
        h.remove()
        log.append(out.detach().numpy().copy())
        log.append(model(lib.tensor(x)).detach().numpy().copy())  # the pre-hook alone
        logs.append(log)
    assert tuple(logs[0][0]) == tuple(logs[1][0])
    for a, b in zip(logs[0][2:], logs[1][2:]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_forward_hooks_with_kwargs_and_a_single_value_from_the_pre_hook():
    class Scale(nn.Module):
        def forward(self, x, factor=1.0):
            return x * factor
    m = Scale()
    m.register_forward_pre_hook(lambda mod, args: args[0] + 1)  # not a tuple: wrapped
    m.register_forward_pre_hook(lambda mod, args, kwargs: (args, {"factor": 3.0}),
                                with_kwargs=True)
    m.register_forward_hook(lambda mod, args, kwargs, out: out - kwargs["factor"],
                            with_kwargs=True)
    assert m(mt.tensor([1.0])).tolist() == [3.0]


def test_full_backward_hook_matches_torch():
    torch = _torch()
    mine, theirs, x = _twins(torch)
    got = []
    for model, lib in ((mine, mt), (theirs, torch)):
        seen = {}

        def hook(module, grad_input, grad_output, seen=seen):
            seen["in"] = [g.numpy().copy() for g in grad_input]
            seen["out"] = [g.numpy().copy() for g in grad_output]
            return (grad_input[0] * 2,)
        model.register_full_backward_hook(hook)
        xi = lib.tensor(x, requires_grad=True)
        (model(xi) ** 2).sum().backward()
        got.append((seen, xi.grad.numpy().copy(), model.weight.grad.numpy().copy()))
    (a, ga, wa), (b, gb, wb) = got
    for key in ("in", "out"):
        for u, v in zip(a[key], b[key]):
            np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ga, gb, rtol=1e-5, atol=1e-6)  # doubled by the hook
    np.testing.assert_allclose(wa, wb, rtol=1e-5, atol=1e-6)  # weights: not affected


def test_full_backward_hook_on_a_first_layer_gets_none_for_its_input():
    model = nn.Linear(2, 1)
    seen = []
    handle = model.register_full_backward_hook(
        lambda m, gi, go: seen.append((gi, go[0].shape)))
    model(mt.randn(3, 2)).sum().backward()
    assert seen == [((None,), (3, 1))]
    handle.remove()
    model(mt.randn(3, 2)).sum().backward()
    assert len(seen) == 1


def test_module_hooks_do_not_change_a_model_without_them():
    model = nn.Linear(2, 2)
    assert "_hooks" not in vars(model)
    h = model.register_forward_hook(lambda m, a, o: None)
    h.remove()
    x = mt.randn(3, 2)
    np.testing.assert_array_equal(model(x).numpy(), nn.functional.linear(x, model.weight,
                                                                         model.bias).numpy())


# ---- nn.utils ----------------------------------------------------------------------------

def _params_with_grads(rng, shapes):
    params = []
    for s in shapes:
        p = nn.Parameter(mt.tensor(rng.normal(size=s).astype(np.float32)))
        p.grad = mt.tensor(rng.normal(size=s).astype(np.float32))
        params.append(p)
    return params


@settings(max_examples=25, deadline=None)
@given(shapes=st.lists(st.lists(st.integers(1, 4), max_size=3).map(tuple), min_size=1,
                       max_size=3),
       norm_type=st.sampled_from([1.0, 2.0, 3.0, math.inf]), max_norm=st.floats(0.01, 10),
       seed=st.integers(0, 2**16))
def test_clip_grad_norm_against_numpy(shapes, norm_type, max_norm, seed):
    params = _params_with_grads(np.random.default_rng(seed), shapes)
    grads = [p.grad.numpy().astype(np.float64) for p in params]
    flat = np.concatenate([g.ravel() for g in grads])
    want = np.abs(flat).max() if norm_type == math.inf else \
        (np.abs(flat) ** norm_type).sum() ** (1 / norm_type)
    total = nn.utils.clip_grad_norm_(params, max_norm, norm_type=norm_type)
    assert total.shape == () and total.dtype == mt.float32
    assert float(total) == pytest.approx(want, rel=1e-5)
    scale = min(1.0, max_norm / (want + 1e-6))
    for p, g in zip(params, grads):
        np.testing.assert_allclose(p.grad.numpy(), g * scale, rtol=1e-5, atol=1e-7)


def test_clip_grad_utils_match_torch():
    torch = _torch()
    rng = np.random.default_rng(3)
    shapes = [(3, 2), (2,)]
    mine = _params_with_grads(rng, shapes)
    theirs = [torch.nn.Parameter(torch.from_numpy(p.numpy().copy())) for p in mine]
    for p, q in zip(mine, theirs):
        q.grad = torch.from_numpy(p.grad.numpy().copy())
    for lib, ps in ((mt, mine), (torch, theirs)):
        lib.nn.utils.clip_grad_value_(ps, 0.5)
    for p, q in zip(mine, theirs):
        np.testing.assert_array_equal(p.grad.numpy(), q.grad.numpy())
    a = nn.utils.clip_grad_norm_(mine, 0.3, norm_type=1)
    b = torch.nn.utils.clip_grad_norm_(theirs, 0.3, norm_type=1)
    assert float(a) == pytest.approx(b.item(), rel=1e-6)
    for p, q in zip(mine, theirs):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-6)
    v = nn.utils.parameters_to_vector(mine)
    np.testing.assert_array_equal(v.numpy(),
                                  torch.nn.utils.parameters_to_vector(theirs).detach().numpy())


def test_clip_grad_norm_nonfinite_and_the_flat_optimizer():
    p = nn.Parameter(mt.ones(2))
    p.grad = mt.tensor([math.inf, 1.0])
    with pytest.raises(RuntimeError, match="inf"):
        nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
    model = nn.Linear(3, 2)
    opt = optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):  # the second step writes gradients into the optimizer's flat buffer
        opt.zero_grad()
        (model(mt.randn(4, 3)) * 100).sum().backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        assert float(nn.utils.get_total_norm([q.grad for q in model.parameters()])) == \
            pytest.approx(1.0, rel=1e-5)
        opt.step()


def test_parameters_to_vector_and_back():
    model = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
    v = nn.utils.parameters_to_vector(model.parameters())
    assert v.shape == (13,) and v.requires_grad
    v.sum().backward()
    assert all(np.all(p.grad.numpy() == 1) for p in model.parameters())
    new = mt.arange(13, dtype=mt.float32)
    nn.utils.vector_to_parameters(new, model.parameters())
    assert model[0].weight.tolist() == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    new[0] = 7.0  # sharing memory with the vector, as PyTorch's
    assert model[0].weight.numpy()[0, 0] == 7.0
    with pytest.raises(ValueError, match="13"):
        nn.utils.vector_to_parameters(mt.zeros(12), model.parameters())


# ---- the autograd surface ----------------------------------------------------------------

def test_p_data_is_a_tensor_outside_the_graph_sharing_memory():
    p = nn.Parameter(mt.tensor([1.0, 2.0]))
    d = p.data
    assert isinstance(d, mt.Tensor) and not d.requires_grad and d.grad_fn is None
    version = p.value.storage.version
    g = mt.tensor([0.5, 0.5])
    for write in (lambda: p.data.add_(-2.0 * g), lambda: p.data.mul_(2.0),
                  lambda: p.data.copy_(mt.tensor([4.0, 6.0])), lambda: p.data.sub_(g, alpha=2),
                  lambda: p.data.div_(3.0), lambda: p.data.fill_(5.0), lambda: p.data.zero_()):
        write()
        assert p.value.storage.version > version  # saved-for-backward checks see it
        version = p.value.storage.version
    assert p.tolist() == [0.0, 0.0] and p.requires_grad


def test_a_hand_written_sgd_step_through_data_matches_torch():
    torch = _torch()
    results = []
    for lib in (mt, torch):
        w = lib.tensor([1.0, -1.0, 2.0], requires_grad=True)
        for _ in range(3):
            loss = ((w * w).sum() - 1.0) ** 2
            loss.backward()
            w.data.add_(-0.01 * w.grad)
            w.grad.data.zero_()
        results.append(w.detach().numpy().copy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6)


def test_inference_mode_as_context_and_decorator():
    x = mt.ones(2, requires_grad=True)
    with mt.inference_mode():
        assert not (x * 2).requires_grad
    with mt.inference_mode(False):
        assert (x * 2).requires_grad

    @mt.inference_mode()
    def f(t):
        return t * 2

    @mt.inference_mode
    def g(t):
        return t * 2
    assert not f(x).requires_grad and not g(x).requires_grad and (x * 2).requires_grad


def test_grad_fn_next_functions_and_name_match_torch_s_shape():
    torch = _torch()
    walks = []
    for lib in (mt, torch):
        a = lib.tensor([1.0], requires_grad=True)
        b = lib.tensor([2.0])
        out = (a * b).sum()
        fn = out.grad_fn
        (mul, _), = fn.next_functions
        (leaf, _), (none, _) = mul.next_functions
        walks.append((leaf.name(), none, leaf.variable is a, isinstance(fn.name(), str)))
    assert walks[0][1:] == walks[1][1:] == (None, True, True)
    assert walks[0][0] == "AccumulateGrad" and walks[1][0].endswith("AccumulateGrad")


def test_detach_in_place():
    x = mt.ones(2, requires_grad=True)
    y = x * 2
    assert y.detach_() is y and not y.requires_grad and y.grad_fn is None
    assert x.detach_() is x and not x.requires_grad
