"""Layers against PyTorch (values, input and weight gradients) and finite differences;
nn.init statistics and seeding."""

from __future__ import annotations

import math

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp import nn
from minitorch_exp.nn import init

from ..devices import DEVICES, tolerance

RNG = np.random.default_rng(0)


def arr(*shape, dtype=np.float32, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(dtype)


def node(a, requires_grad=True, device="cpu"):
    return mt.tensor(a, requires_grad=requires_grad, device=device)


def set_param(p, values):
    """Overwrite a parameter's values in place."""
    with mt.no_grad():
        p[...] = mt.tensor(np.asarray(values, dtype=p.dtype))


def float64_params(module):
    """Replace every parameter by a float64 copy (for gradcheck)."""
    for mod in module.modules():
        for name, value in list(vars(mod).items()):
            if isinstance(value, nn.Parameter):
                setattr(mod, name, nn.Parameter(value.numpy().astype(np.float64)))
    return module


# ---- PyTorch comparisons -----------------------------------------------------------

def torch_twin(torch, layer):
    """The equivalent torch layer with the same weights."""
    tnn = torch.nn
    if isinstance(layer, nn.Linear):
        t = tnn.Linear(layer.in_features, layer.out_features, bias=layer.bias is not None)
    elif isinstance(layer, nn.LayerNorm):
        t = tnn.LayerNorm(layer.normalized_shape, eps=layer.eps,
                          elementwise_affine=layer.weight is not None)
    elif isinstance(layer, nn.Sequential):
        return tnn.Sequential(*(torch_twin(torch, sub) for sub in layer))
    else:
        t = {
            nn.ReLU: lambda: tnn.ReLU(),
            nn.Tanh: lambda: tnn.Tanh(),
            nn.Sigmoid: lambda: tnn.Sigmoid(),
            nn.GELU: lambda: tnn.GELU(approximate=getattr(layer, "approximate", "none")),
            nn.LeakyReLU: lambda: tnn.LeakyReLU(getattr(layer, "negative_slope", 0.01)),
            nn.Softmax: lambda: tnn.Softmax(dim=getattr(layer, "dim", -1)),
            nn.LogSoftmax: lambda: tnn.LogSoftmax(dim=getattr(layer, "dim", -1)),
            nn.Flatten: lambda: tnn.Flatten(getattr(layer, "start_dim", 1),
                                            getattr(layer, "end_dim", -1)),
        }[type(layer)]()
    with torch.no_grad():
        for name, p in layer.named_parameters():
            getattr(t, name).copy_(torch.from_numpy(p.numpy().copy()))
    return t


LAYERS = [
    ("linear", lambda: nn.Linear(5, 4), (3, 5)),
    ("linear_nobias", lambda: nn.Linear(5, 4, bias=False), (3, 5)),
    ("linear_3d", lambda: nn.Linear(5, 4), (2, 3, 5)),
    ("relu", nn.ReLU, (4, 6)),
    ("tanh", nn.Tanh, (4, 6)),
    ("sigmoid", nn.Sigmoid, (4, 6)),
    ("gelu", nn.GELU, (4, 6)),
    ("gelu_tanh", lambda: nn.GELU("tanh"), (4, 6)),
    ("leaky_relu", lambda: nn.LeakyReLU(0.2), (4, 6)),
    ("softmax", lambda: nn.Softmax(1), (4, 6)),
    ("softmax_dim0", lambda: nn.Softmax(0), (4, 6)),
    ("log_softmax", lambda: nn.LogSoftmax(-1), (4, 6)),
    ("flatten", nn.Flatten, (2, 3, 4)),
    ("flatten_range", lambda: nn.Flatten(0, 1), (2, 3, 4)),
    ("layer_norm", lambda: nn.LayerNorm(6), (4, 6)),
    ("layer_norm_2d", lambda: nn.LayerNorm((3, 4)), (2, 3, 4)),
    ("layer_norm_noaffine", lambda: nn.LayerNorm(6, elementwise_affine=False), (4, 6)),
    ("sequential", lambda: nn.Sequential(nn.Linear(5, 7), nn.GELU(), nn.Linear(7, 3),
                                         nn.LogSoftmax(1)), (4, 5)),
]


def randomize(layer):
    """Non-trivial weights (LayerNorm starts at ones/zeros)."""
    for p in layer.parameters():
        set_param(p, arr(*p.shape))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,make,shape", LAYERS, ids=[x[0] for x in LAYERS])
def test_layer_matches_torch(device, name, make, shape):
    torch = pytest.importorskip("torch")
    mt.manual_seed(0)
    layer = make()
    randomize(layer)
    twin = torch_twin(torch, layer)
    layer.to(device)
    assert all(p.device == mt.tensor.as_device(device) for p in layer.parameters())
    x_np = arr(*shape, scale=2.0)
    x = node(x_np, device=device)
    xt = torch.from_numpy(x_np.copy()).requires_grad_(True)
    y, yt = layer(x), twin(xt)
    assert y.device == x.device
    rtol, atol = tolerance(device, 1e-5, 1e-5)
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=rtol, atol=atol)
    g_np = arr(*y.shape)
    y.backward(mt.tensor(g_np, device=device))
    yt.backward(torch.from_numpy(g_np))
    rtol, atol = tolerance(device, 1e-4, 1e-5)
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=rtol, atol=atol)
    tparams = dict(twin.named_parameters())
    for pname, p in layer.named_parameters():
        assert p.grad.device == p.device, pname
        np.testing.assert_allclose(p.grad.numpy(), tparams[pname].grad.numpy(),
                                   rtol=rtol, atol=atol, err_msg=pname)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,make,shape", LAYERS, ids=[x[0] for x in LAYERS])
def test_layer_gradcheck(device, name, make, shape):
    layer = float64_params(make())
    randomize(layer)
    layer.to(device)
    params = list(layer.parameters())
    assert all(p.dtype == np.float64 for p in params)
    x = node(arr(*shape, dtype=np.float64), device=device)

    def fn(x, *ps):
        return layer(x)

    assert mt.gradcheck(fn, [x, *params])


def test_gradcheck_catches_a_wrong_layer():
    """The check above can fail: a layer with a wrong backward is caught."""

    class Wrong(mt.Function):
        @staticmethod
        def forward(ctx, x):
            return mt.tensor.expr.as_exp(x) * 2.0

        @staticmethod
        def backward(ctx, g):
            return (g * 3.0,)

    x = node(arr(3, dtype=np.float64))
    with pytest.raises(AssertionError, match="gradcheck"):
        mt.gradcheck(lambda x: Wrong.apply(x), [x])


def test_linear_float64_weights_and_shapes():
    lin = nn.Linear(3, 2, dtype=np.float64)
    assert lin.weight.dtype == np.float64 and lin.bias.dtype == np.float64
    assert lin.weight.shape == (2, 3) and lin.bias.shape == (2,)
    y = lin(node(arr(4, 3, dtype=np.float64)))
    assert y.shape == (4, 2) and y.dtype == np.float64


@pytest.mark.parametrize("device", DEVICES)
def test_linear_manual_values(device):
    lin = nn.Linear(2, 2)
    set_param(lin.weight, [[1.0, 2.0], [3.0, 4.0]])
    set_param(lin.bias, [0.5, -0.5])
    lin.to(device)
    y = lin(mt.tensor([[1.0, 1.0]], device=device))
    np.testing.assert_allclose(y.numpy(), [[3.5, 6.5]])


@pytest.mark.parametrize("device", DEVICES)
def test_linear_on_one_vector_and_its_gradients(device):
    w, b = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), np.array([0.5, -0.5, 1.0])
    x_np, g = np.array([1.0, -2.0]), np.array([1.0, 10.0, 100.0])
    x = mt.tensor(x_np, dtype=mt.float64, device=device, requires_grad=True)
    weight = mt.tensor(w, dtype=mt.float64, device=device, requires_grad=True)
    bias = mt.tensor(b, dtype=mt.float64, device=device, requires_grad=True)
    y = nn.functional.linear(x, weight, bias)
    np.testing.assert_allclose(y.numpy(), w @ x_np + b)
    (y * mt.tensor(g, dtype=mt.float64, device=device)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), w.T @ g)
    np.testing.assert_allclose(weight.grad.numpy(), np.outer(g, x_np))
    np.testing.assert_allclose(bias.grad.numpy(), g)


def test_linear_names_mismatched_shapes():
    with pytest.raises(ValueError, match=r"input of shape \(4, 3\) and weight of shape \(2, 5\)"):
        nn.functional.linear(node(arr(4, 3)), node(arr(2, 5)))


@pytest.mark.parametrize("device", DEVICES)
def test_leaky_relu_and_gelu_known_values(device):
    x = mt.tensor([-2.0, 0.0, 3.0], device=device)
    rtol, _ = tolerance(device, 1e-6, 0.0)
    np.testing.assert_allclose(nn.LeakyReLU(0.1)(x).numpy(), [-0.2, 0.0, 3.0], rtol=rtol)
    phi = 0.5 * (1 + math.erf(1 / math.sqrt(2)))
    np.testing.assert_allclose(nn.GELU()(mt.tensor([1.0], device=device)).numpy(), [phi],
                               rtol=rtol)
    with pytest.raises(ValueError, match="approximate"):
        nn.GELU("fast")(x)


@pytest.mark.parametrize("device", DEVICES)
def test_softmax_rows_sum_to_one_and_is_stable(device):
    x = mt.tensor([[1000.0, 0.0, -1000.0], [1.0, 1.0, 1.0]], device=device)
    rtol, _ = tolerance(device, 1e-6, 0.0)
    p = nn.Softmax(1)(x).numpy()
    assert np.isfinite(p).all()
    np.testing.assert_allclose(p.sum(1), [1, 1], rtol=rtol)
    lp = nn.LogSoftmax(1)(x).numpy()
    assert np.isfinite(lp).all()
    np.testing.assert_allclose(lp[0], [0.0, -1000.0, -2000.0], rtol=rtol)


@pytest.mark.parametrize("device", DEVICES)
def test_layer_norm_normalizes(device):
    ln64 = nn.LayerNorm(4, dtype=np.float64)
    assert ln64.weight.dtype == ln64.bias.dtype == np.float64
    assert nn.LayerNorm(4).weight.dtype == np.float32
    ln = nn.LayerNorm(64).to(device)
    y = ln(node(arr(8, 64, scale=5.0) + 3, device=device)).numpy()
    np.testing.assert_allclose(y.mean(1), 0, atol=1e-5)
    np.testing.assert_allclose(y.std(1), 1, atol=1e-3)


# ---- Dropout -----------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_dropout_eval_is_identity_and_keeps_the_graph(device):
    d = nn.Dropout(0.7).eval()
    x = node(arr(5, 5), device=device)
    y = d(x)
    np.testing.assert_array_equal(y.numpy(), x.numpy())
    mt.sum(y * 2.0).backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((5, 5), 2.0, np.float32))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout_train_statistics_and_scaling(device, p):
    mt.manual_seed(123)
    d = nn.Dropout(p)
    n = 200_000
    x = node(np.ones(n, np.float32), device=device)
    y = d(x).numpy()
    kept = y != 0
    rtol, _ = tolerance(device, 1e-6, 0.0)
    np.testing.assert_allclose(y[kept], 1.0 / (1.0 - p), rtol=rtol)  # survivors scaled
    frac = kept.mean()
    assert abs(frac - (1 - p)) < 5 * math.sqrt(p * (1 - p) / n)  # ~5 sigma
    assert abs(y.mean() - 1.0) < 0.02  # expectation preserved
    # the gradient uses the same mask and scale
    y2 = d(x)
    mt.sum(y2).backward()  # x is ones, so the gradient is the output itself
    np.testing.assert_array_equal(x.grad.numpy(), y2.numpy())


def test_dropout_masks_differ_between_calls_and_follow_the_seed():
    d = nn.Dropout(0.5)
    x = mt.ones(1000)
    mt.manual_seed(7)
    a, b = d(x).numpy().copy(), d(x).numpy().copy()
    assert not np.array_equal(a, b)
    mt.manual_seed(7)
    np.testing.assert_array_equal(d(x).numpy(), a)


def test_dropout_rejects_bad_p():
    for p in (-0.1, 1.0, 1.5):
        with pytest.raises(ValueError, match="dropout probability"):
            nn.Dropout(p)
    assert nn.Dropout(0.0)(mt.ones(3)).numpy().tolist() == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("device", DEVICES)
def test_flatten_sequential_shapes(device):
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 2)).to(device)
    out = model(node(arr(5, 3, 4), device=device))
    assert out.shape == (5, 2) and out.device == mt.tensor.as_device(device)
    assert nn.Flatten(0, -1)(node(arr(2, 3), device=device)).shape == (6,)


# ---- nn.init ---------------------------------------------------------------------

FAN_OUT, FAN_IN = 400, 600  # 240,000 samples: std estimates within ~0.3%


def weight(dtype=np.float32):
    return nn.Parameter(np.zeros((FAN_OUT, FAN_IN), dtype))


def check_uniform(values, bound):
    assert values.min() >= -bound and values.max() <= bound
    assert values.min() < -0.99 * bound and values.max() > 0.99 * bound  # fills the range
    np.testing.assert_allclose(values.std(), bound / math.sqrt(3), rtol=0.01)
    assert abs(values.mean()) < 0.01 * bound


def check_normal(values, std):
    np.testing.assert_allclose(values.std(), std, rtol=0.01)
    assert abs(values.mean()) < 0.01 * std
    assert np.abs(values).max() > 3.5 * std  # unbounded tails, not a uniform


@pytest.mark.parametrize("mode,nonlinearity,a,gain,fan", [
    ("fan_in", "relu", 0.0, math.sqrt(2), FAN_IN),
    ("fan_out", "relu", 0.0, math.sqrt(2), FAN_OUT),
    ("fan_in", "leaky_relu", 0.0, math.sqrt(2), FAN_IN),
    ("fan_in", "leaky_relu", 0.2, math.sqrt(2 / 1.04), FAN_IN),
    ("fan_in", "tanh", 0.0, 5 / 3, FAN_IN),
    ("fan_in", "linear", 0.0, 1.0, FAN_IN),
])
def test_kaiming(mode, nonlinearity, a, gain, fan):
    w = init.kaiming_uniform_(weight(), a=a, mode=mode, nonlinearity=nonlinearity)
    check_uniform(w.numpy(), gain * math.sqrt(3 / fan))
    w = init.kaiming_normal_(weight(), a=a, mode=mode, nonlinearity=nonlinearity)
    check_normal(w.numpy(), gain / math.sqrt(fan))


@pytest.mark.parametrize("gain", [1.0, 2.5])
def test_xavier(gain):
    w = init.xavier_uniform_(weight(), gain=gain)
    check_uniform(w.numpy(), gain * math.sqrt(6 / (FAN_IN + FAN_OUT)))
    w = init.xavier_normal_(weight(), gain=gain)
    check_normal(w.numpy(), gain * math.sqrt(2 / (FAN_IN + FAN_OUT)))


def test_receptive_field_counts_in_fans():
    w = nn.Parameter(np.zeros((64, 32, 3, 3), np.float32))
    init.kaiming_normal_(w, nonlinearity="relu", generator=np.random.default_rng(0))
    check_normal(w.numpy(), math.sqrt(2) / math.sqrt(32 * 9))


def test_uniform_normal_constant():
    w = init.uniform_(weight(), -2.0, 3.0).numpy()
    assert w.min() >= -2 and w.max() <= 3 and abs(w.mean() - 0.5) < 0.02
    w = init.normal_(weight(), 1.0, 0.5).numpy()
    assert abs(w.mean() - 1.0) < 0.01 and abs(w.std() - 0.5) < 0.01
    assert (init.constant_(weight(), 0.25).numpy() == 0.25).all()
    assert (init.ones_(weight()).numpy() == 1).all()
    assert (init.zeros_(init.ones_(weight())).numpy() == 0).all()


def test_init_keeps_dtype_and_identity():
    w = weight(np.float64)
    out = init.kaiming_uniform_(w)
    assert out is w and w.dtype == np.float64 and w.requires_grad and w.is_leaf


def test_seeding_is_reproducible():
    mt.manual_seed(42)
    a = init.xavier_uniform_(weight()).numpy().copy()
    b = init.xavier_uniform_(weight()).numpy().copy()
    mt.manual_seed(42)
    c = init.xavier_uniform_(weight()).numpy()
    np.testing.assert_array_equal(a, c)
    assert not np.array_equal(a, b)
    g1, g2 = np.random.default_rng(5), np.random.default_rng(5)
    np.testing.assert_array_equal(init.normal_(weight(), generator=g1).numpy(),
                                  init.normal_(weight(), generator=g2).numpy())
    mt.manual_seed(3)
    l1 = nn.Linear(20, 10)
    mt.manual_seed(3)
    l2 = nn.Linear(20, 10)
    np.testing.assert_array_equal(l1.weight.numpy(), l2.weight.numpy())
    np.testing.assert_array_equal(l1.bias.numpy(), l2.bias.numpy())


def test_linear_default_init_bound():
    lin = nn.Linear(FAN_IN, FAN_OUT)
    bound = 1 / math.sqrt(FAN_IN)
    check_uniform(lin.weight.numpy(), bound)
    b = lin.bias.numpy()
    assert np.abs(b).max() <= bound and np.abs(b).max() > 0.9 * bound


def test_bad_arguments():
    with pytest.raises(ValueError, match="at least 2 dims"):
        init.xavier_uniform_(nn.Parameter(np.zeros(5, np.float32)))
    with pytest.raises(ValueError, match="unknown nonlinearity"):
        init.kaiming_uniform_(weight(), nonlinearity="swish")
    with pytest.raises(ValueError, match="mode"):
        init.kaiming_uniform_(weight(), mode="fan_avg")
