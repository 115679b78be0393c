"""PyTorch's names at the Node level, item by item (issue 21): each does what PyTorch's
does, checked against NumPy or finite differences, and against PyTorch where installed."""

from __future__ import annotations

import importlib
import math
import subprocess
import sys

import numpy as np
import pytest

import minitorch_exp as mt
import minitorch_exp.nn.functional as F
from minitorch_exp import nn
from minitorch_exp.tensor.device import cuda_available

from ..devices import DEVICES


def torch_or_skip():
    return pytest.importorskip("torch")


def arr(seed: int, *shape) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ---- 1. optim at the top level, its schedules; distributed -------------------------------------

def test_optim_and_its_scheduler_module_at_pytorchs_paths():
    from minitorch_exp import optim
    from minitorch_exp.optim.lr_scheduler import StepLR
    assert importlib.import_module("minitorch_exp.optim") is optim is mt.optim
    assert optim.SGD is nn.optim.SGD and optim.Adadelta is nn.optim.Adadelta
    assert StepLR is nn.optim.StepLR and optim.lr_scheduler.StepLR is StepLR
    assert mt.distributed is importlib.import_module("minitorch_exp.distributed")


def test_submodules_load_lazily():
    code = ("import sys, minitorch_exp as mt\n"
            "assert 'minitorch_exp.optim' not in sys.modules\n"
            "mt.optim, mt.utils.data, mt.autograd, mt.cuda, mt.accelerator\n"
            "assert 'minitorch_exp.utils.data' in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


SCHEDULES = {
    "StepLR": (dict(step_size=3, gamma=0.5), lambda e: 0.5 ** (e // 3)),
    "MultiStepLR": (dict(milestones=[2, 5], gamma=0.1), lambda e: 0.1 ** ((e >= 2) + (e >= 5))),
    "ExponentialLR": (dict(gamma=0.9), lambda e: 0.9 ** e),
    "LambdaLR": (dict(lr_lambda=lambda e: 1.0 / (e + 2)), lambda e: 1.0 / (e + 2)),
    "CosineAnnealingLR": (dict(T_max=6, eta_min=0.01),
                          lambda e: (0.01 + (0.1 - 0.01) * (1 + math.cos(math.pi * e / 6)) / 2)
                          / 0.1),
}


def lr_history(lib, name: str, kwargs: dict) -> list[float]:
    p = lib.zeros(2, requires_grad=True)
    opt = lib.optim.SGD([p], lr=0.1)
    sched = getattr(lib.optim.lr_scheduler, name)(opt, **kwargs)
    lrs = [opt.param_groups[0]["lr"]]  # the first epoch's rate, set when the schedule is made
    for _ in range(8):
        opt.step()
        sched.step()
        lrs.append(sched.get_last_lr()[0])
    return lrs


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_schedules_follow_their_formula(name):
    kwargs, factor = SCHEDULES[name]
    np.testing.assert_allclose(lr_history(mt, name, kwargs), [0.1 * factor(e) for e in range(9)],
                               rtol=1e-12)


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_schedules_match_pytorch(name):
    torch = torch_or_skip()
    kwargs, _ = SCHEDULES[name]
    np.testing.assert_allclose(lr_history(mt, name, kwargs), lr_history(torch, name, kwargs),
                               rtol=1e-12)


def test_adadelta_step_is_its_formula():
    w0, g = arr(0, 5), arr(1, 5)
    p = mt.tensor(w0, requires_grad=True)
    opt = mt.optim.Adadelta([p], lr=0.5, rho=0.8, eps=1e-3, weight_decay=0.1)
    s, a, w = np.zeros(5), np.zeros(5), w0.astype(np.float64)
    for _ in range(3):
        p.grad = mt.tensor(g)
        opt.step()
        grad = g + 0.1 * w
        s = 0.8 * s + 0.2 * grad * grad
        delta = np.sqrt(a + 1e-3) / np.sqrt(s + 1e-3) * grad
        a = 0.8 * a + 0.2 * delta * delta
        w = w - 0.5 * delta
    np.testing.assert_allclose(p.detach().numpy(), w, rtol=1e-5)
    with pytest.raises(ValueError, match="rho"):
        mt.optim.Adadelta([p], rho=1.5)


# ---- 2. creation and math functions, out= ------------------------------------------------------

def test_creation_functions():
    np.testing.assert_allclose(mt.linspace(-1, 1, 5).numpy(), np.linspace(-1, 1, 5))
    assert mt.linspace(0, 1, 3).dtype == np.float32
    assert mt.linspace(0, 1, 3, dtype=mt.float64).dtype == np.float64
    np.testing.assert_allclose(mt.logspace(0, 2, 3).numpy(), [1, 10, 100], rtol=1e-6)
    np.testing.assert_allclose(mt.logspace(0, 3, 4, base=2).numpy(), [1, 2, 4, 8])
    np.testing.assert_array_equal(mt.eye(3).numpy(), np.eye(3))
    np.testing.assert_array_equal(mt.eye(2, 3).numpy(), np.eye(2, 3))
    assert mt.zeros((2, 3)).shape == mt.zeros(2, 3).shape == mt.ones([2, 3]).shape == (2, 3)
    assert mt.full((2,), 7.0).tolist() == [7.0, 7.0]


def test_random_creation_functions():
    mt.manual_seed(0)
    x = mt.normal(2.0, 3.0, (20000,))
    assert x.shape == (20000,) and x.dtype == np.float32 and not x.requires_grad
    assert abs(x.mean().item() - 2.0) < 0.1 and abs(x.std().item() - 3.0) < 0.1
    y = mt.normal(mt.tensor([0.0, 100.0]), 0.001)
    np.testing.assert_allclose(y.numpy(), [0.0, 100.0], atol=0.01)
    r = mt.randint(3, 7, (1000,))
    assert r.dtype == np.int64 and r.min().item() >= 3 and r.max().item() <= 6
    assert mt.randint(5, (4,)).shape == (4,)
    assert mt.randint(5, (4,), dtype=mt.int32).dtype == np.int32
    assert mt.normal(mt.zeros(3, dtype=mt.float64), 1.0).dtype == np.float64
    assert mt.randperm(4, dtype=mt.int32).dtype == np.int32
    assert sorted(mt.randperm(6).tolist()) == list(range(6))
    with pytest.raises(TypeError, match="size"):
        mt.normal(0.0, 1.0)


def test_math_functions_and_their_gradients():
    x = mt.tensor([0.3, -1.2, 2.0], dtype=mt.float64, requires_grad=True)
    for name in ("sin", "cos", "tan", "tanh", "exp", "abs", "sigmoid"):
        np.testing.assert_allclose(getattr(mt, name)(x).detach().numpy(),
                                   getattr(np, name, None)(x.detach().numpy())
                                   if hasattr(np, name) else 1 / (1 + np.exp(-x.numpy())),
                                   rtol=1e-12)
        assert mt.gradcheck(getattr(mt, name), [x])
    np.testing.assert_allclose(mt.sqrt(mt.tensor([4.0])).numpy(), [2.0])


def test_clamp_forms_and_gradients():
    x = mt.tensor([-2.0, -0.5, 0.0, 0.5, 2.0], dtype=mt.float64, requires_grad=True)
    np.testing.assert_array_equal(mt.clamp(x, min=0).detach().numpy(), [0, 0, 0, 0.5, 2])
    np.testing.assert_array_equal(x.clamp(max=0.5).detach().numpy(), [-2, -0.5, 0, 0.5, 0.5])
    np.testing.assert_array_equal(x.clamp(-1, 1).detach().numpy(), [-1, -0.5, 0, 0.5, 1])
    x.clamp(min=0.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0, 0, 1, 1, 1])  # as torch: x == min passes
    with pytest.raises(ValueError, match="at least one"):
        mt.clamp(x)
    assert mt.clamp(mt.tensor([1, 5]), max=3).dtype == np.int64


def test_clamp_matches_pytorch():
    torch = torch_or_skip()
    values = [-2.0, -0.5, 0.0, 0.5, 2.0]
    for kwargs in (dict(min=0.0), dict(max=0.5), dict(min=-1.0, max=1.0)):
        x, tx = (lib.tensor(values, requires_grad=True) for lib in (mt, torch))
        for lib_x in (x, tx):
            (lib_x.clamp(**kwargs) * 2).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


def test_matmul_mm_bmm_t():
    a, b = mt.tensor(arr(0, 2, 3)), mt.tensor(arr(1, 3, 4))
    np.testing.assert_allclose(mt.mm(a, b).numpy(), a.numpy() @ b.numpy(), rtol=1e-6)
    np.testing.assert_allclose(a.mm(b).numpy(), a.matmul(b).numpy())
    np.testing.assert_array_equal(a.t().numpy(), a.numpy().T)
    np.testing.assert_array_equal(mt.t(a).numpy(), a.T.numpy())
    batch = mt.tensor(arr(2, 5, 2, 3))
    assert mt.bmm(batch, mt.tensor(arr(3, 5, 3, 4))).shape == (5, 2, 4)
    with pytest.raises(ValueError, match="mm: argument 1 must be a 2-D tensor"):
        mt.mm(batch, b)
    with pytest.raises(ValueError, match="<= 2 dimensions"):
        batch.t()


def test_out_arguments():
    a, b = mt.tensor(arr(0, 2, 3)), mt.tensor(arr(1, 2, 3))
    out = mt.empty(2, 3)
    assert mt.add(a, b, out=out) is out
    np.testing.assert_allclose(out.numpy(), a.numpy() + b.numpy())
    s = mt.empty(3)
    mt.sum(a, dim=0, out=s)
    np.testing.assert_allclose(s.numpy(), a.numpy().sum(0), rtol=1e-6)
    m = mt.empty(2, 2)
    mt.matmul(a, b.T, out=m)
    np.testing.assert_allclose(m.numpy(), a.numpy() @ b.numpy().T, rtol=1e-6)
    c = mt.empty(4, 3)
    mt.cat([a, b], dim=0, out=c)
    np.testing.assert_array_equal(c.numpy(), np.concatenate([a.numpy(), b.numpy()]))
    with pytest.raises(ValueError, match=r"out= has shape \(3,\), the result \(2, 3\)"):
        mt.add(a, b, out=s)
    w = mt.ones(2, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        mt.mul(w, 2.0, out=out)
    with mt.no_grad():
        mt.mul(w, 2.0, out=out)  # outside the graph it is allowed, as in torch
    assert out.tolist() == [[2.0] * 3] * 2


# ---- 3. methods ---------------------------------------------------------------------------------

def test_casts():
    x = mt.tensor([1.7, -2.2])
    assert x.float().dtype == np.float32 and x.double().dtype == np.float64
    assert x.long().tolist() == [1, -2] and x.long().dtype == np.int64
    assert x.int().dtype == np.int32 and x.bool().dtype == np.bool_
    assert x.type() == "torch.FloatTensor" and x.long().type() == "torch.LongTensor"
    assert x.type(mt.float64).dtype == np.float64
    assert x.type("torch.DoubleTensor").dtype == np.float64
    assert x.to(mt.double).dtype == np.float64
    assert x.to("cpu") is x and x.to(mt.device("cpu")) is x and x.to(mt.float32) is x
    assert x.to("cpu", mt.float64).dtype == np.float64
    assert x.to(dtype=mt.int64, device="cpu").dtype == np.int64
    assert x.to(mt.ones(1, dtype=mt.float64)).dtype == np.float64
    assert x.to(mt.float32, copy=True) is not x
    assert x.half().dtype == np.float16 and x.to(mt.half).type() == "torch.HalfTensor"
    with pytest.raises(TypeError, match="unknown dtype"):
        x.to(mt.uint8)  # named, not supported
    with pytest.raises(TypeError, match="expected a device"):
        x.to(3.5)


def test_casts_are_differentiable_between_floats():
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    (x.double() * 3).sum().backward()
    assert x.grad.dtype == np.float32 and x.grad.tolist() == [3.0, 3.0]
    assert x.long().grad_fn is None


def test_method_forms():
    x = mt.tensor(arr(0, 2, 3))
    np.testing.assert_allclose(x.pow(2).numpy(), x.numpy() ** 2, rtol=1e-6)
    np.testing.assert_allclose(x.mul(2).add(1).sub(0.5).div(2).numpy(),
                               (x.numpy() * 2 + 1 - 0.5) / 2, rtol=1e-6)
    assert x.eq(x).numpy().all()
    y = mt.zeros(6)
    assert x.view(-1).shape == (6,) and y.view_as(x).shape == (2, 3)
    assert x.reshape(3, -1).shape == (3, 2) and y.reshape_as(x).shape == (2, 3)
    assert x.unsqueeze(dim=0).shape == (1, 2, 3) and x.unsqueeze(0).squeeze(dim=0).shape == (2, 3)
    assert x.permute(1, 0).shape == (3, 2) and x.transpose(0, 1).shape == (3, 2)
    assert x.contiguous() is x
    t = x.t().contiguous()
    assert t is not x and t.value.is_contiguous()
    np.testing.assert_array_equal(t.numpy(), x.numpy().T)
    assert x.size() == (2, 3) and x.size(-1) == 3 and x.shape == (2, 3)
    assert x.clone().numpy().tolist() == x.numpy().tolist()
    assert x.detach().numpy().tolist() == x.numpy().tolist()
    assert mt.ones(1).expand_as(x).shape == (2, 3) and x.long().type_as(x).dtype == np.float32


@pytest.mark.parametrize("device", DEVICES)
def test_copy_takes_its_source_from_any_device(device):
    """As torch's ``copy_``: loading host values into a parameter on the GPU (the
    tutorials' weight sharing) and reading a GPU tensor back into a host one."""
    w = mt.zeros(2, 3, device=device, requires_grad=True)
    values = np.arange(6, dtype=np.float64).reshape(2, 3)
    with mt.no_grad():
        assert w.copy_(mt.tensor(values)) is w  # float64 on the cpu into float32 here
    assert str(w.device) == str(mt.device(device)) and w.dtype == np.float32
    assert w.tolist() == values.tolist()
    host = mt.zeros(2, 3)
    assert host.copy_(w.detach()) is host and host.tolist() == values.tolist()


def test_in_place_methods():
    x = mt.zeros(3)
    assert x.add_(2) is x and x.mul_(3) is x and x.sub_(1, alpha=2) is x and x.div_(2) is x
    assert x.tolist() == [2.0, 2.0, 2.0]
    assert x.fill_(5) is x and x.tolist() == [5.0] * 3
    assert x.copy_(mt.tensor([1.0, 2.0, 3.0])) is x and x.tolist() == [1.0, 2.0, 3.0]
    assert x.clamp_(max=2) is x and x.tolist() == [1.0, 2.0, 2.0]
    assert x.zero_() is x and x.tolist() == [0.0] * 3
    w = mt.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="in-place"):
        w.add_(1)
    h = w * 2
    with pytest.raises(RuntimeError, match="recorded out of place"):
        h.add_(1)  # a method form would leave h unchanged: refused, not silently wrong
    with mt.no_grad():
        w.sub_(mt.tensor([0.5, 0.25]))
    assert w.tolist() == [0.5, 0.75]


def test_masked_assignment():
    x = mt.tensor([-1.0, 2.0, -3.0, 4.0])
    x[x < 0] = 0
    assert x.tolist() == [0.0, 2.0, 0.0, 4.0]
    x[mt.tensor([0, 3])] = mt.tensor([7.0, 8.0])
    assert x.tolist() == [7.0, 2.0, 0.0, 8.0]
    y = x * 2  # a lazy value reading x keeps what it read
    x[x > 5] = -1
    assert y.tolist() == [14.0, 4.0, 0.0, 16.0] and x.tolist() == [-1.0, 2.0, 0.0, -1.0]


# ---- 4. devices ---------------------------------------------------------------------------------

def test_cuda_and_accelerator_answer_as_the_machine_is():
    assert mt.cuda.is_available() == cuda_available() == mt.accelerator.is_available()
    assert (mt.cuda.device_count() > 0) == mt.cuda.is_available()
    expected = mt.device("cuda") if cuda_available() else None
    assert mt.accelerator.current_accelerator() == expected
    mt.cuda.manual_seed(0)
    mt.cuda.manual_seed_all(0)
    mt.cuda.synchronize()


def test_device_values():
    d = mt.device("cuda:1")
    assert (d.type, d.index) == ("cuda", 1) and str(d) == "cuda:1"
    assert mt.device("cuda", 1) == d == "cuda:1" and d != "cuda:0" and d != "tpu"
    assert mt.device("cpu") == "cpu" and mt.device("cpu") == mt.zeros(1).device
    assert mt.zeros(1).device == mt.device("cpu")  # x.device == "cpu" is False, as in torch
    assert hash(mt.device("cpu")) == hash(mt.zeros(1).device)
    assert mt.device(mt.device("cuda")) == "cuda:0"
    made = mt.zeros(2, device=mt.device("cpu"))
    assert made.device == mt.device("cpu") and type(made.device) is type(mt.zeros(1).device)
    assert repr(d) == "device(type='cuda', index=1)" and repr(mt.device("cpu")) == \
        "device(type='cpu')"
    with pytest.raises(ValueError, match="unknown device"):
        mt.device("gpu")
    with pytest.raises(TypeError, match="expected a string"):
        mt.device(3)


def test_default_device_is_per_thread_and_used_by_factories():
    import threading
    assert mt.get_default_device() == "cpu"
    mt.set_default_device("cuda")
    try:
        seen = []
        thread = threading.Thread(target=lambda: seen.append(mt.get_default_device()))
        thread.start()
        thread.join()
        assert seen == ["cpu"] and mt.get_default_device() == "cuda:0"
        if cuda_available():
            assert str(mt.zeros(2).device) == str(mt.tensor([1.0]).device) == "cuda:0"
        assert str(mt.zeros(2, device="cpu").device) == "cpu"
    finally:
        mt.set_default_device(None)
    assert str(mt.zeros(2).device) == "cpu"


@pytest.mark.skipif(not cuda_available(), reason="needs a GPU: CuPy is not installed")
def test_to_cuda_and_back():
    x = mt.tensor([1.0, 2.0], requires_grad=True)
    y = x.to(mt.device("cuda:0"), mt.float64)
    assert mt.device("cuda:0") == y.device and y.dtype == np.float64 and x.cuda().is_cuda
    (y * 2).sum().backward()
    assert str(x.grad.device) == "cpu" and x.grad.tolist() == [2.0, 2.0]


# ---- 5. dim= and keepdim= ----------------------------------------------------------------------

@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin", "logsumexp"])
def test_reductions_take_dim_keepdim_and_axis_keepdims(name):
    x = mt.tensor(arr(0, 3, 4))
    a = getattr(x, name)(dim=1, keepdim=True)
    b = getattr(mt, name)(x, axis=1, keepdims=True)
    c = getattr(x, name)(1, True)
    assert a.shape == (3, 1)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_array_equal(a.numpy(), c.numpy())
    with pytest.raises(TypeError, match="both dim= and axis="):
        getattr(x, name)(dim=1, axis=1)


def test_a_0d_tensor_reduces_over_dim_0_or_minus_1():
    x = mt.tensor(2.5, requires_grad=True)
    for dim in (0, -1, (0,)):
        assert x.sum(dim).shape == () and x.mean(dim, keepdim=True).item() == 2.5
    x.amax(-1).backward()
    assert x.grad.item() == 1.0 and mt.softmax(x, -1).item() == 1.0
    with pytest.raises(IndexError, match="out of range for a 0-d tensor"):
        x.sum(1)


def test_dim_on_the_rest():
    x = mt.tensor(arr(0, 3, 4))
    np.testing.assert_array_equal(x.argmax(dim=1, keepdim=True).numpy(),
                                  np.argmax(x.numpy(), 1)[:, None])
    np.testing.assert_allclose(x.softmax(dim=0).sum(0).numpy(), np.ones(4), rtol=1e-6)
    np.testing.assert_allclose(mt.log_softmax(x, dim=1).exp().sum(1).numpy(), np.ones(3),
                               rtol=1e-6)
    assert mt.cat([x, x], dim=1).shape == (3, 8) and mt.stack([x, x], dim=2).shape == (3, 4, 2)
    assert mt.squeeze(x.unsqueeze(1), dim=1).shape == (3, 4)


def test_max_and_min_are_pytorchs():
    x = mt.tensor([[1.0, 5.0, 5.0], [7.0, 2.0, 0.0]], requires_grad=True)
    values, indices = x.max(1)
    assert values.tolist() == [5.0, 7.0] and indices.tolist() == [1, 0]
    out = mt.min(x, dim=1, keepdim=True)
    assert out.values.shape == (2, 1) and out.indices.tolist() == [[0], [2]]
    assert x.max().item() == 7.0 and mt.min(x).item() == 0.0
    np.testing.assert_array_equal(mt.max(x, mt.full((2, 3), 3.0)).detach().numpy(),
                                  [[3, 5, 5], [7, 3, 3]])
    assert x.argmin().item() == 5 and x.argmin(dim=0).tolist() == [0, 1, 1]
    values.sum().backward()  # the maximum's gradient (a tie shared, as amax)
    np.testing.assert_allclose(x.grad.numpy(), [[0, 0.5, 0.5], [1, 0, 0]])


def test_max_matches_pytorch():
    torch = torch_or_skip()
    a = arr(4, 3, 5)
    for dim, keep in ((0, False), (1, True)):
        mine, ref = mt.tensor(a).max(dim, keep), torch.tensor(a).max(dim, keep)
        np.testing.assert_array_equal(mine.values.numpy(), ref.values.numpy())
        np.testing.assert_array_equal(mine.indices.numpy(), ref.indices.numpy())
        mine, ref = mt.tensor(a).min(dim=dim, keepdim=keep), torch.tensor(a).min(dim, keep)
        np.testing.assert_array_equal(mine.indices.numpy(), ref.indices.numpy())


def test_var_and_std():
    a = arr(5, 4, 6).astype(np.float64)
    x = mt.tensor(a, requires_grad=True)
    np.testing.assert_allclose(x.var().item(), a.var(ddof=1))
    np.testing.assert_allclose(x.std(dim=1).detach().numpy(), a.std(1, ddof=1))
    np.testing.assert_allclose(mt.var(x, 0, unbiased=False).detach().numpy(), a.var(0))
    np.testing.assert_allclose(x.std(1, keepdim=True, correction=0).detach().numpy(),
                               a.std(1, keepdims=True))
    assert mt.gradcheck(lambda x: x.std(dim=0), [x])


# ---- 6. dtype names ----------------------------------------------------------------------------

def test_dtype_names():
    assert (mt.float, mt.float32, mt.double, mt.float64) == (np.float32,) * 2 + (np.float64,) * 2
    assert (mt.long, mt.int64, mt.int, mt.int32) == (np.int64,) * 2 + (np.int32,) * 2
    assert mt.bool == np.bool_ and mt.uint8 == np.uint8 and mt.half == np.float16
    assert mt.get_default_dtype() == mt.float32
    assert mt.zeros(2, dtype=mt.long).dtype == np.int64
    with pytest.raises(TypeError, match="unknown dtype"):
        mt.zeros(2, dtype=mt.uint8)
    with pytest.raises(NotImplementedError, match="float32"):
        mt.set_default_dtype(mt.float64)
    mt.set_default_dtype(mt.float32)
    star = {}
    exec("from minitorch_exp import *", star)
    assert "float" not in star and "int" not in star and "bool" not in star and "long" in star


# ---- 7. utils.data -----------------------------------------------------------------------------

def test_utils_data_at_pytorchs_path():
    from minitorch_exp.utils import data
    from minitorch_exp.utils.data import DataLoader, Dataset, Subset, TensorDataset, random_split
    assert DataLoader is nn.DataLoader and Dataset is nn.Dataset and data.Subset is Subset
    assert TensorDataset is nn.TensorDataset and callable(random_split)


def test_default_collate_makes_tensors_as_pytorch_does():
    from minitorch_exp.utils.data import default_collate
    batch = [(mt.ones(2) * i, np.full(3, i, np.float32), i, float(i), {"k": i}, "s")
             for i in range(4)]
    x, a, ints, floats, d, strings = default_collate(batch)
    assert x.shape == (4, 2) and x.dtype == np.float32 and x[:, 0].tolist() == [0, 1, 2, 3]
    assert a.shape == (4, 3) and ints.dtype == np.int64 and floats.dtype == np.float64
    assert d["k"].tolist() == [0, 1, 2, 3] and strings == ["s"] * 4
    assert all(isinstance(t, mt.Tensor) for t in (x, a, ints, floats))
    with pytest.raises(TypeError, match="found object"):
        default_collate([object(), object()])
    with pytest.raises(ValueError, match="same number of fields"):
        default_collate([(1, 2), (1,)])


def test_loader_collate_fn_and_items_reaching_a_model():
    from minitorch_exp.utils.data import DataLoader, Dataset

    class Images(Dataset):
        def __len__(self):
            return 6

        def __getitem__(self, i):
            return np.full((2, 2), i, np.float32), i  # NumPy items, as many datasets give

    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
    for x, y in DataLoader(Images(), batch_size=4):
        assert isinstance(x, mt.Tensor) and model(x).shape == (len(y), 3)
    loader = DataLoader(Images(), batch_size=3, collate_fn=lambda items: len(items),
                        num_workers=2, pin_memory=True)
    assert list(loader) == [3, 3]


def test_a_numpy_array_given_to_an_op_is_a_clear_error():
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 2))
    with pytest.raises(TypeError, match=r"reshape: argument 1 must be a tensor \(Node\), got "
                                        r"a numpy.ndarray of shape \(3, 2, 2\)"):
        model(np.ones((3, 2, 2), np.float32))
    with pytest.raises(TypeError, match="Linear: argument 1 must be a tensor"):
        nn.Linear(4, 2)(np.ones((3, 4), np.float32))
    for call in (lambda: mt.matmul(np.ones((2, 2)), mt.ones(2, 2)),
                 lambda: mt.cat([np.ones(2), mt.ones(2)]), lambda: mt.sum(np.ones(2))):
        with pytest.raises(TypeError, match="got a numpy.ndarray.*mt.tensor"):
            call()
    # an elementwise op takes one as a constant, as before
    assert (mt.ones(2) + np.ones(2, np.float32)).tolist() == [2.0, 2.0]


def test_subset_and_random_split():
    from minitorch_exp.utils.data import DataLoader, Subset, TensorDataset, random_split
    ds = TensorDataset(mt.arange(10).float(), mt.arange(10))
    sub = Subset(ds, [7, 2, 5])
    assert len(sub) == 3 and sub[0][1].item() == 7
    assert [y.tolist() for _, y in DataLoader(sub, batch_size=2)] == [[7, 2], [5]]
    mt.manual_seed(0)
    parts = random_split(ds, [0.7, 0.3])
    assert [len(p) for p in parts] == [7, 3]
    seen = sorted(int(p[i][1]) for p in parts for i in range(len(p)))
    assert seen == list(range(10))
    assert [len(p) for p in random_split(ds, [3, 3, 4], generator=np.random.default_rng(1))] \
        == [3, 3, 4]
    assert [len(p) for p in random_split(TensorDataset(mt.zeros(11)), [0.5, 0.5])] == [6, 5]
    with pytest.raises(ValueError, match="sum to 9"):
        random_split(ds, [4, 5])


# ---- 8. Python protocols on one-element tensors -----------------------------------------------

def test_python_numbers_from_tensors():
    t = mt.tensor(2.75)
    assert float(t) == 2.75 and int(t) == 2 and bool(t)
    assert format(t, "+.2f") == "+2.75" and f"{t:>6.1f}" == "   2.8"
    assert float(mt.tensor([[1.5]])) == 1.5  # one element of any shape, as in torch
    i = mt.tensor(2)
    assert [10, 20, 30][i] == 30 and list(range(i)) == [0, 1] and hex(i) == "0x2"
    assert math.isclose(math.exp(mt.tensor(1.0)), math.e, rel_tol=1e-6)
    assert format(mt.tensor([1.0, 2.0])) == str(mt.tensor([1.0, 2.0]))


def test_python_protocols_refuse_what_pytorch_refuses():
    v = mt.tensor([1.0, 2.0])
    with pytest.raises(ValueError, match="only one element tensors.*shape \\(2,\\)"):
        float(v)
    with pytest.raises(ValueError, match="only one element tensors"):
        int(v)
    with pytest.raises(TypeError, match="only integer tensors of a single element"):
        [1, 2][mt.tensor(1.0)]
    with pytest.raises(TypeError, match="only integer tensors of a single element"):
        [1, 2][mt.tensor([0, 1])]
    with pytest.raises(TypeError, match="needs a 0-d tensor"):
        format(v, ".2f")
    with pytest.raises(ValueError, match="ambiguous"):
        bool(v)


def test_tensor_type_and_legacy_constructor():
    x = mt.Tensor([1, 2])
    assert x.dtype == np.float32 and x.tolist() == [1.0, 2.0]
    assert mt.Tensor(2, 3).shape == (2, 3) and mt.Tensor((4,)).shape == (4,)
    assert isinstance(mt.zeros(1), mt.Tensor) and issubclass(mt.Node, mt.Tensor)
    assert issubclass(mt.Tensor, mt.Tensor) and not issubclass(int, mt.Tensor)
    assert not isinstance(np.zeros(1), mt.Tensor) and mt.is_tensor(x) and mt.numel(x) == 2


# ---- 9. autograd, losses --------------------------------------------------------------------

class ClampedExp(mt.autograd.Function):
    """exp(x) where x > 0, else 1: forward and backward written with tensor methods."""

    @staticmethod
    def forward(ctx, x, scale):
        y = x.clamp(min=0).exp() * scale
        ctx.save_for_backward(x, y)
        ctx.scale = scale
        return y

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        assert isinstance(x, mt.Tensor) and ctx.needs_input_grad == (True, False)
        g = grad * y
        g[x < 0] = 0
        return g, None


def test_autograd_function_sees_tensors():
    x = mt.tensor([-1.0, 0.5, 2.0], dtype=mt.float64, requires_grad=True)
    y = ClampedExp.apply(x, 3.0)
    np.testing.assert_allclose(y.detach().numpy(), 3 * np.exp(np.maximum(x.numpy(), 0)))
    assert y.grad_fn is not None and ClampedExp.apply(x.detach(), 3.0).grad_fn is None
    assert mt.autograd.gradcheck(lambda x: ClampedExp.apply(x, 3.0), (x,))
    assert isinstance(mt.autograd.Function(), mt.Function)


def test_autograd_function_setup_context_form_and_saved_tensor_checks():
    class Scale(mt.autograd.Function):
        @staticmethod
        def forward(x, k):
            return x * k

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])
            ctx.k = inputs[1]

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * ctx.k, None

    x = mt.tensor([1.0, 2.0], requires_grad=True)
    y = Scale.apply(x, 4.0)
    y.sum().backward(retain_graph=True)
    assert x.grad.tolist() == [4.0, 4.0]
    with mt.no_grad():
        x.mul_(5)  # what forward saved, written in place: backward refuses, as torch does
    with pytest.raises(RuntimeError, match="modified in place"):
        y.sum().backward()


def test_autograd_function_returning_two_values_is_refused():
    class Two(mt.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x, x

        @staticmethod
        def backward(ctx, g):
            return g

    with pytest.raises(TypeError, match="returns one tensor"):
        Two.apply(mt.ones(2, requires_grad=True))


def test_autograd_grad_leaves_grads_alone():
    a = mt.tensor([1.0, 2.0], requires_grad=True)
    b = mt.tensor([3.0, 4.0], requires_grad=True)
    a.grad = mt.ones(2)
    out = (a * b).sum() + (a * a).sum()
    ga, gb = mt.autograd.grad(out, (a, b), retain_graph=True)
    assert ga.tolist() == [5.0, 8.0] and gb.tolist() == [1.0, 2.0]
    assert a.grad.tolist() == [1.0, 1.0] and b.grad is None
    (gb2,) = mt.autograd.grad([out], [b])
    assert gb2.tolist() == [1.0, 2.0]
    c = mt.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="allow_unused"):
        mt.autograd.grad((a * 2).sum(), [a, c])
    ga, gc = mt.autograd.grad((a * 2).sum(), [a, c], allow_unused=True)
    assert gc is None
    with pytest.raises(RuntimeError, match="not a leaf"):
        mt.autograd.grad((a * 2).sum(), [a * 2])
    (g2,) = mt.autograd.grad((a * a).sum(), [a], create_graph=True)  # issue 43
    assert g2.tolist() == [2.0, 4.0] and g2.requires_grad


def test_autograd_backward_and_gradcheck_reporting():
    a = mt.tensor([1.0, 2.0], requires_grad=True)
    mt.autograd.backward([(a * 3).sum(), (a * a).sum()])
    assert a.grad.tolist() == [5.0, 7.0]

    class Wrong(mt.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * x

        @staticmethod
        def backward(ctx, g):
            return g  # should be 2 x g

    x = mt.tensor([1.5, 2.0], dtype=mt.float64, requires_grad=True)
    x.grad = mt.ones(2, dtype=mt.float64)
    assert mt.autograd.gradcheck(lambda v: v * v, x)
    assert x.grad.tolist() == [1.0, 1.0]  # as PyTorch's, it leaves .grad alone
    assert mt.autograd.gradcheck(Wrong.apply, x, raise_exception=False) is False
    with pytest.raises(AssertionError, match="central differences"):
        mt.autograd.gradcheck(Wrong.apply, (x,))


LOSSES = {
    "smooth_l1": (lambda F, x, y: F.smooth_l1_loss(x, y), None),
    "smooth_l1_beta": (lambda F, x, y: F.smooth_l1_loss(x, y, reduction="sum", beta=0.5), None),
    "smooth_l1_l1": (lambda F, x, y: F.smooth_l1_loss(x, y, beta=0.0), None),
    "l1": (lambda F, x, y: F.l1_loss(x, y, reduction="none"), None),
    "bce_logits": (lambda F, x, y: F.binary_cross_entropy_with_logits(x, y), "prob"),
    "bce_logits_pos": (lambda F, x, y: F.binary_cross_entropy_with_logits(
        x, y, reduction="sum", pos_weight=x.detach() * 0 + 2.0), "prob"),
    "bce_logits_weight": (lambda F, x, y: F.binary_cross_entropy_with_logits(
        x, y, weight=x.detach() * 0 + 0.5, reduction="none"), "prob"),
    "bce": (lambda F, x, y: F.binary_cross_entropy(x.sigmoid(), y), "prob"),
}


def loss_inputs(target: str | None):
    rng = np.random.default_rng(7)
    x = rng.normal(0, 2, (4, 3))
    y = rng.uniform(0, 1, (4, 3)) if target else x + rng.normal(0, 1, (4, 3))
    return x, y


def reference_loss(name: str, x, y):
    d = x - y
    sp = np.log1p(np.exp(-np.abs(x))) + np.maximum(-x, 0)
    return {
        "smooth_l1": np.where(abs(d) < 1, 0.5 * d * d, abs(d) - 0.5).mean(),
        "smooth_l1_beta": np.where(abs(d) < 0.5, 0.5 * d * d / 0.5, abs(d) - 0.25).sum(),
        "smooth_l1_l1": abs(d).mean(),
        "l1": abs(d),
        "bce_logits": ((1 - y) * x + sp).mean(),
        "bce_logits_pos": ((1 - y) * x + (1 + y) * sp).sum(),
        "bce_logits_weight": 0.5 * ((1 - y) * x + sp),
        "bce": (-(y * np.log(1 / (1 + np.exp(-x))) +
                  (1 - y) * np.log(1 - 1 / (1 + np.exp(-x))))).mean(),
    }[name]


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_losses_values_and_gradients(name):
    fn, target = LOSSES[name]
    x, y = loss_inputs(target)
    out = fn(F, mt.tensor(x), mt.tensor(y))
    np.testing.assert_allclose(out.numpy(), reference_loss(name, x, y), rtol=1e-6)
    assert mt.gradcheck(lambda v: fn(F, v, mt.tensor(y)), [mt.tensor(x, requires_grad=True)])


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_losses_match_pytorch(name):
    torch = torch_or_skip()
    import torch.nn.functional as TF
    fn, target = LOSSES[name]
    x, y = loss_inputs(target)
    mx, tx = mt.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    mine, ref = fn(F, mx, mt.tensor(y)), fn(TF, tx, torch.tensor(y))
    np.testing.assert_allclose(mine.detach().numpy(), ref.detach().numpy(), rtol=1e-10)
    mine.sum().backward()
    ref.sum().backward()
    np.testing.assert_allclose(mx.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_loss_modules_and_target_errors():
    x, y = mt.tensor(arr(0, 3)), mt.tensor([0.0, 1.0, 1.0])
    assert nn.SmoothL1Loss(beta=0.5)(x, y).item() == F.smooth_l1_loss(x, y, beta=0.5).item()
    assert nn.BCEWithLogitsLoss()(x, y).item() == F.binary_cross_entropy_with_logits(x, y).item()
    assert nn.BCELoss()(x.sigmoid(), y).item() == F.binary_cross_entropy(x.sigmoid(), y).item()
    assert nn.L1Loss(reduction="sum")(x, y).item() == pytest.approx(abs(x - y).sum().item())
    assert F.smooth_l1_loss(x, [0.0, 1.0, 1.0]).item() == F.smooth_l1_loss(x, y).item()
    with pytest.raises(ValueError, match=r"input shape \(3,\) != target shape \(2,\)"):
        F.l1_loss(x, mt.zeros(2))
    with pytest.raises(ValueError, match="beta must be >= 0"):
        F.smooth_l1_loss(x, y, beta=-1.0)
    assert F.binary_cross_entropy(mt.tensor([0.0, 1.0]), mt.tensor([1.0, 0.0])).item() == 100.0


def test_layers_take_pytorchs_inplace_argument():
    x = mt.tensor([-1.0, 2.0])
    assert nn.ReLU(inplace=True)(x).tolist() == [0.0, 2.0] and x.tolist() == [-1.0, 2.0]
    assert nn.LeakyReLU(0.5, inplace=True)(x).tolist() == [-0.5, 2.0]
