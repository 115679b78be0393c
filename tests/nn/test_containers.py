"""ModuleList, ModuleDict, ParameterList, ParameterDict, Identity; Module.apply, the
casts (double/float/to(dtype)) and zero_grad(set_to_none=) -- as PyTorch's, compared
with it where it is installed (state-dict keys, parameter order, apply's order)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
from minitorch_exp import nn, optim


def _torch():
    return pytest.importorskip("torch")


class Net:
    """The same model built by either library: a ModuleList, a ModuleDict, a
    ParameterList and a ParameterDict inside a Module."""

    @staticmethod
    def build(lib):
        class Model(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = lib.nn.ModuleList([lib.nn.Linear(3, 4), lib.nn.ReLU()])
                self.layers.append(lib.nn.Linear(4, 2))
                self.heads = lib.nn.ModuleDict({"a": lib.nn.Linear(2, 1), "b": lib.nn.Identity()})
                self.scales = lib.nn.ParameterList([lib.nn.Parameter(lib.ones(2))])
                self.extra = lib.nn.ParameterDict({"shift": lib.nn.Parameter(lib.zeros(1))})

            def forward(self, x):
                for layer in self.layers:
                    x = layer(x)
                x = x * self.scales[0]
                return self.heads["a"](self.heads["b"](x)) + self.extra["shift"]
        return Model()


def test_state_dict_keys_and_parameter_order_match_torch():
    torch = _torch()
    mine, theirs = Net.build(mt), Net.build(torch)
    assert list(mine.state_dict()) == list(theirs.state_dict())
    assert [n for n, _ in mine.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert "layers.2.weight" in mine.state_dict()


def test_forward_and_backward_match_torch_from_the_same_weights():
    torch = _torch()
    mine, theirs = Net.build(mt), Net.build(torch)
    theirs.load_state_dict({k: torch.from_numpy(v.numpy().copy())
                            for k, v in mine.state_dict().items()})
    x = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    out, ref = mine(mt.tensor(x)), theirs(torch.from_numpy(x))
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    out.sum().backward()
    ref.sum().backward()
    for (name, p), (_, q) in zip(mine.named_parameters(), theirs.named_parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=name)


# each op applied to a Python list and to a ModuleList holding the same modules
LIST_OPS = st.lists(st.one_of(
    st.tuples(st.just("append")), st.tuples(st.just("insert"), st.integers(-4, 4)),
    st.tuples(st.just("del"), st.integers(-4, 4)), st.tuples(st.just("set"), st.integers(-4, 4)),
    st.tuples(st.just("pop")), st.tuples(st.just("extend"), st.integers(0, 2))), max_size=8)


@settings(max_examples=40, deadline=None)
@given(ops=LIST_OPS)
def test_module_list_behaves_as_a_list(ops):
    ref, ml = [], nn.ModuleList()
    for op in ops:
        new = nn.Identity()
        if op[0] == "append":
            ref.append(new)
            assert ml.append(new) is ml
        elif op[0] == "insert":
            ref.insert(op[1], new)
            ml.insert(op[1], new)
        elif op[0] == "extend":
            more = [nn.Identity() for _ in range(op[1])]
            ref.extend(more)
            ml.extend(more)
        elif not ref:
            continue
        elif op[0] == "pop":
            assert ml.pop() is ref.pop()
        elif -len(ref) <= op[1] < len(ref):
            if op[0] == "del":
                del ref[op[1]]
                del ml[op[1]]
            else:
                ref[op[1]] = new
                ml[op[1]] = new
    assert len(ml) == len(ref) and list(ml) == ref
    assert [name for name, _ in ml.named_children()] == [str(i) for i in range(len(ref))]
    assert list(ml[1:]) == ref[1:] and isinstance(ml[::2], nn.ModuleList)
    assert all(ml[i] is ref[i] for i in range(-len(ref), len(ref)))


def test_module_list_errors():
    ml = nn.ModuleList([nn.ReLU()])
    with pytest.raises(IndexError, match="out of range"):
        ml[1]
    with pytest.raises(TypeError, match="Modules"):
        ml.append(mt.zeros(2))
    with pytest.raises(NotImplementedError):
        ml(mt.zeros(2))


def test_module_dict_behaves_as_a_dict():
    a, b, c = nn.ReLU(), nn.Tanh(), nn.Identity()
    md = nn.ModuleDict({"a": a})
    md.update([("b", b)])
    md["c"] = c
    assert list(md) == md.keys() == ["a", "b", "c"] and md.values() == [a, b, c]
    assert "b" in md and md.pop("b") is b and "b" not in md and len(md) == 2
    assert md.items() == [("a", a), ("c", c)]
    with pytest.raises(KeyError):
        md["b"]
    with pytest.raises(KeyError, match="attribute"):
        md["training"] = nn.ReLU()  # as in torch: a key may not shadow an attribute
    md.clear()
    assert len(md) == 0 and list(md.named_children()) == []


def test_parameter_containers_wrap_tensors_and_register_them():
    pl = nn.ParameterList([mt.zeros(2), nn.Parameter(mt.ones(3))])
    pd = nn.ParameterDict({"w": mt.zeros(1)})
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in [*pl, *pd.values()])
    assert [n for n, _ in pl.named_parameters()] == ["0", "1"]
    assert list(pd.state_dict()) == ["w"]
    opt = optim.SGD([*pl.parameters(), *pd.parameters()], lr=1.0)
    (pl[0].sum() * 2 + pd["w"].sum()).backward()
    opt.step()
    np.testing.assert_array_equal(pl[0].numpy(), [-2.0, -2.0])
    np.testing.assert_array_equal(pd["w"].numpy(), [-1.0])


def test_identity_returns_its_input_and_takes_any_arguments():
    x = mt.randn(2, 3)
    assert nn.Identity(54, unused="yes")(x) is x


def test_changing_a_container_moves_the_structure_version():
    from minitorch_exp.nn.module import structure_version
    ml = nn.ModuleList()
    before = structure_version()
    ml.append(nn.Linear(2, 2))
    assert structure_version() != before


# ---- Module.apply, casts, zero_grad ------------------------------------------------------

def test_apply_visits_children_before_their_parent_as_torch():
    torch = _torch()
    orders = []
    for lib in (mt, torch):
        model = lib.nn.Sequential(lib.nn.Linear(2, 2), lib.nn.Sequential(lib.nn.ReLU(),
                                                                          lib.nn.Tanh()))
        seen = []
        assert model.apply(lambda m, seen=seen: seen.append(type(m).__name__)) is model
        orders.append(seen)
    assert orders[0] == orders[1] == ["Linear", "ReLU", "Tanh", "Sequential", "Sequential"]


def test_apply_initialises_weights():
    def init(m):
        if isinstance(m, nn.Linear):
            nn.init.constant_(m.weight, 0.5)
    model = nn.Sequential(nn.Linear(2, 3), nn.ModuleList([nn.Linear(3, 1)]))
    model.apply(init)
    assert all(np.all(p.numpy() == 0.5) for n, p in model.named_parameters() if "weight" in n)


@pytest.mark.parametrize("cast, dtype", [(lambda m: m.double(), mt.float64),
                                         (lambda m: m.to(mt.float64), mt.float64),
                                         (lambda m: m.to("cpu", mt.float64), mt.float64),
                                         (lambda m: m.to(dtype=mt.float64), mt.float64),
                                         (lambda m: m.to(mt.zeros(1, dtype=mt.float64)),
                                          mt.float64),
                                         (lambda m: m.double().float(), mt.float32)])
def test_casts_change_float_parameters_and_buffers_only(cast, dtype):
    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    assert cast(model) is model
    for name, value in model.state_dict().items():
        kind = before[name].dtype.kind
        assert value.dtype == (dtype if kind == "f" else before[name].dtype), name
        np.testing.assert_array_equal(value.numpy(), before[name].astype(value.dtype))
    out = model(mt.randn(4, 3, dtype=dtype))
    out.sum().backward()
    assert all(p.grad.dtype == dtype for p in model.parameters())


def test_a_cast_after_backward_casts_the_gradients_and_trains():
    model = nn.Linear(2, 1)
    model(mt.randn(3, 2)).sum().backward()
    model.double()
    assert model.weight.grad.dtype == mt.float64
    opt = optim.SGD(model.parameters(), lr=0.1)
    opt.step()
    assert model.weight.dtype == mt.float64


def test_half_converts_parameters_and_int8_is_refused_with_the_dtype_named():
    assert nn.Linear(2, 2).half().weight.dtype == mt.float16  # tests/nn/test_half_modules.py
    with pytest.raises((TypeError, ValueError), match="int8"):
        nn.Linear(2, 2).to(mt.int8)


@pytest.mark.parametrize("opt_cls", [optim.SGD, optim.Adam])
@pytest.mark.parametrize("set_to_none", [True, False])
def test_zero_grad_on_module_and_optimizer_with_the_flat_step(opt_cls, set_to_none):
    torch = pytest.importorskip("torch") if set_to_none else None
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    opt = opt_cls(model.parameters(), lr=0.1)
    x, y = mt.randn(5, 3), mt.tensor([0, 1, 1, 0, 1])
    for zero in (model.zero_grad, opt.zero_grad, model.zero_grad):
        zero(set_to_none=set_to_none)
        grads = [p.grad for p in model.parameters()]
        if set_to_none:
            assert grads == [None] * 4
        else:
            assert all(g is None or not np.any(g.numpy()) for g in grads)
        with mt.count_kernels() as k:
            nn.functional.cross_entropy(model(x), y).backward()
            before = [p.numpy().copy() for p in model.parameters()]
            opt.step()
        assert k.total > 0
        assert all(not np.array_equal(b, p.numpy()) for b, p in zip(before, model.parameters()))
    if torch is not None:
        t = torch.nn.Linear(2, 2)
        t(torch.ones(1, 2)).sum().backward()
        t.zero_grad()
        assert t.weight.grad is None  # PyTorch's default, which ours follows


def test_zero_grad_without_set_to_none_keeps_the_gradient_tensor():
    model = nn.Linear(2, 2)
    model(mt.randn(3, 2)).sum().backward()
    grad = model.weight.grad
    model.zero_grad(set_to_none=False)
    assert model.weight.grad is grad and not np.any(grad.numpy())
