"""PyTorch tutorial-style scripts run on minitorch_exp with only their import lines changed.

Each script below is written as one would for PyTorch (``import torch``...). ``port``
points its import lines at minitorch_exp -- a textual change of those lines and no
other -- and the test runs it. Where PyTorch is installed the original runs too, from
the same initial weights (``share_weights`` copies them in through NumPy, the same
values for both), and the numbers must agree to float32 rounding. Without PyTorch the
comparisons skip, and each script's own check still runs: the loss falls, a gradient
has its known value.
"""

from __future__ import annotations

import functools
import importlib
import re
import textwrap

import numpy as np
import pytest

IMPORT_LINE = re.compile(r"^(\s*)(import|from)\s+torch\b(.*)$")


def port(script: str) -> str:
    """``script`` with each ``import torch...`` / ``from torch... import`` line pointed at
    minitorch_exp; every other line is left as it is."""
    lines = []
    for line in script.splitlines():
        m = IMPORT_LINE.match(line)
        if m is None:
            lines.append(line)
            continue
        indent, keyword, rest = m.groups()
        if keyword == "import" and not rest.strip():
            lines.append(f"{indent}import minitorch_exp as torch")
        else:
            lines.append(f"{indent}{keyword} minitorch_exp{rest}")
    return "\n".join(lines) + "\n"


def test_port_changes_import_lines_only():
    script = textwrap.dedent("""\
        import math
        import torch
        import torch.nn.functional as F
        from torch import nn, optim
        from torch.utils.data import DataLoader
        x = torch.zeros(3)  # import torch in a comment stays
        """)
    assert port(script).splitlines() == [
        "import math",
        "import minitorch_exp as torch",
        "import minitorch_exp.nn.functional as F",
        "from minitorch_exp import nn, optim",
        "from minitorch_exp.utils.data import DataLoader",
        "x = torch.zeros(3)  # import torch in a comment stays",
    ]


# ---- the harness -------------------------------------------------------------------------

def share_weights(lib):
    """``share_weights(model)`` for a script run on ``lib``: every parameter of the model,
    in order, gets values drawn from one fixed NumPy generator (uniform in
    +-1/sqrt(fan_in)), so both libraries start from the same weights."""
    def share(model):
        rng = np.random.default_rng(1234)
        with lib.no_grad():
            for p in model.parameters():
                bound = 1.0 / np.sqrt(p.shape[-1]) if len(p.shape) > 1 else 0.1
                values = rng.uniform(-bound, bound, tuple(p.shape)).astype(np.float32)
                p.copy_(lib.tensor(values))
    return share


@functools.cache
def mnist_subset():
    from minitorch_exp.nn.idx import load_mnist
    data = load_mnist()
    return {"TRAIN_IMAGES": data.train_images[:512], "TRAIN_LABELS": data.train_labels[:512],
            "TEST_IMAGES": data.test_images[:256], "TEST_LABELS": data.test_labels[:256]}


def run(name: str, lib: str) -> dict:
    """Run script ``name`` with ``lib`` ("torch", or "minitorch_exp": the ported text)
    and return its namespace."""
    script = SCRIPTS[name]
    module = importlib.import_module(lib)
    text = script if lib == "torch" else port(script)
    namespace = {"__name__": f"script_{name}", "share_weights": share_weights(module)}
    if name == "mnist_quickstart":
        namespace.update(mnist_subset())
    exec(compile(text, f"<{name} on {lib}>", "exec"), namespace)
    return namespace


@functools.cache
def ported(name: str) -> dict:
    return run(name, "minitorch_exp")


def as_array(x) -> np.ndarray:
    """A tensor of either library, a number or a list of them, as a float64 array."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()  # on a GPU machine both scripts run on cuda
    if isinstance(x, (list, tuple)):
        return np.array([as_array(v) for v in x], dtype=np.float64)
    return np.asarray(x, dtype=np.float64)


def compare(name: str, keys, rtol: float = 1e-4, atol: float = 1e-6) -> None:
    """The values ``keys`` of the ported run and of PyTorch's agree: each within ``rtol`` of
    its own size plus ``atol`` of the largest value under that key (a value that cancels
    to nearly 0, such as a sum of a thousand terms, keeps the rounding of its terms)."""
    pytest.importorskip("torch")
    mine, ref = ported(name), run(name, "torch")
    for key in keys:
        for k, (got, expected) in enumerate(zip(parts(mine[key]), parts(ref[key]), strict=True)):
            scale = max(float(np.abs(expected).max(initial=0.0)), 1.0)
            np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol * scale,
                                       err_msg=f"{name}: {key} [{k}]")


def parts(value) -> list[np.ndarray]:
    """A list of tensors (model weights) as one array each; anything else as one array."""
    if isinstance(value, list) and value and hasattr(value[0], "detach"):
        return [as_array(v) for v in value]
    return [as_array(value)]


# ---- the scripts ---------------------------------------------------------------------------

SCRIPTS: dict[str, str] = {}

# (a) A third-order polynomial fitted to sin(x) by hand: autograd for the gradients, the
# update written out under no_grad.
SCRIPTS["polynomial_autograd"] = """
import math
import torch

dtype = torch.float
device = torch.device("cpu")

x = torch.linspace(-math.pi, math.pi, 1000, device=device, dtype=dtype)
y = torch.sin(x)

a = torch.tensor(-0.2, device=device, dtype=dtype, requires_grad=True)
b = torch.tensor(0.5, device=device, dtype=dtype, requires_grad=True)
c = torch.tensor(0.1, device=device, dtype=dtype, requires_grad=True)
d = torch.tensor(-0.3, device=device, dtype=dtype, requires_grad=True)

learning_rate = 2e-6
losses = []
for t in range(300):
    y_pred = a + b * x + c * x ** 2 + d * x ** 3
    loss = (y_pred - y).pow(2).sum()
    losses.append(loss.item())
    if t % 100 == 99:
        print(t, f"{loss:.4f}")
    loss.backward()
    with torch.no_grad():
        a -= learning_rate * a.grad
        b -= learning_rate * b.grad
        c -= learning_rate * c.grad
        d -= learning_rate * d.grad
        a.grad = None
        b.grad = None
        c.grad.zero_()
        d.grad.zero_()

coefficients = [a.item(), b.item(), c.item(), d.item()]
print(f"y = {a.item()} + {b.item()} x + {c.item()} x^2 + {d.item()} x^3")
"""

# (b) The same fit with nn.Sequential, a loss module and an optimizer.
SCRIPTS["polynomial_nn_optim"] = """
import math
import torch
from torch import nn

x = torch.linspace(-math.pi, math.pi, 1000)
y = torch.sin(x)
p = torch.tensor([1, 2, 3])
xx = x.unsqueeze(-1).pow(p)

model = nn.Sequential(nn.Linear(3, 1), nn.Flatten(0, 1))
share_weights(model)
loss_fn = nn.MSELoss(reduction="sum")
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=50, gamma=0.5)

losses = []
for t in range(200):
    y_pred = model(xx)
    loss = loss_fn(y_pred, y)
    losses.append(loss.item())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()

linear_layer = model[0]
coefficients = [linear_layer.bias.item(), linear_layer.weight[:, 0].item(),
                linear_layer.weight[:, 1].item(), linear_layer.weight[:, 2].item()]
last_lr = scheduler.get_last_lr()[0]
print(f"y = {coefficients[0]} + {coefficients[1]} x + {coefficients[2]} x^2 + "
      f"{coefficients[3]} x^3")
"""

# (c) A custom autograd.Function: the Legendre polynomial P3 with its derivative by hand.
SCRIPTS["legendre_function"] = """
import math
import torch


class LegendrePolynomial3(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return 0.5 * (5 * input ** 3 - 3 * input)

    @staticmethod
    def backward(ctx, grad_output):
        input, = ctx.saved_tensors
        return grad_output * 1.5 * (5 * input ** 2 - 1)


x = torch.linspace(-math.pi, math.pi, 1000)
y = torch.sin(x)

a = torch.full((), 0.0, requires_grad=True)
b = torch.full((), -1.0, requires_grad=True)
c = torch.full((), 0.0, requires_grad=True)
d = torch.full((), 0.3, requires_grad=True)

learning_rate = 5e-6
losses = []
for t in range(300):
    P3 = LegendrePolynomial3.apply
    y_pred = a + b * P3(c + d * x)
    loss = (y_pred - y).pow(2).sum()
    losses.append(loss.item())
    loss.backward()
    if t == 0:
        first_grads = [a.grad.item(), b.grad.item(), c.grad.item(), d.grad.item()]
    with torch.no_grad():
        a -= learning_rate * a.grad
        b -= learning_rate * b.grad
        c -= learning_rate * c.grad
        d -= learning_rate * d.grad
        a.grad = None
        b.grad = None
        c.grad = None
        d.grad = None

coefficients = [a.item(), b.item(), c.item(), d.item()]
"""

# (d) The quickstart: a Dataset over the shipped MNIST images, DataLoaders, a model with
# Flatten, Linear and ReLU, and the train and test loops.
SCRIPTS["mnist_quickstart"] = """
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Digits(Dataset):
    def __init__(self, images, labels):
        self.images, self.labels = images, labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        image = torch.tensor(self.images[idx], dtype=torch.float32) / 255.0
        return image.unsqueeze(0), int(self.labels[idx])


training_data = Digits(TRAIN_IMAGES, TRAIN_LABELS)
test_data = Digits(TEST_IMAGES, TEST_LABELS)
batch_size = 32
train_dataloader = DataLoader(training_data, batch_size=batch_size)
test_dataloader = DataLoader(test_data, batch_size=batch_size)

for X, y in test_dataloader:
    print(f"Shape of X [N, C, H, W]: {X.shape}")
    print(f"Shape of y: {y.shape} {y.dtype}")
    break

device = torch.accelerator.current_accelerator().type if torch.accelerator.is_available() else "cpu"


class NeuralNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.linear_relu_stack = nn.Sequential(
            nn.Linear(28 * 28, 128),
            nn.ReLU(),
            nn.Linear(128, 128),
            nn.ReLU(),
            nn.Linear(128, 10),
        )

    def forward(self, x):
        x = self.flatten(x)
        logits = self.linear_relu_stack(x)
        return logits


model = NeuralNetwork().to(device)
share_weights(model)
loss_fn = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-1)
train_losses = []


def train(dataloader, model, loss_fn, optimizer):
    size = len(dataloader.dataset)
    model.train()
    for batch, (X, y) in enumerate(dataloader):
        X, y = X.to(device), y.to(device)
        pred = model(X)
        loss = loss_fn(pred, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        train_losses.append(loss.item())
        if batch % 5 == 0:
            loss, current = loss.item(), (batch + 1) * len(X)
            print(f"loss: {loss:>7f}  [{current:>5d}/{size:>5d}]")


def test(dataloader, model, loss_fn):
    size = len(dataloader.dataset)
    num_batches = len(dataloader)
    model.eval()
    test_loss, correct = 0, 0
    with torch.no_grad():
        for X, y in dataloader:
            X, y = X.to(device), y.to(device)
            pred = model(X)
            test_loss += loss_fn(pred, y).item()
            correct += (pred.argmax(1) == y).type(torch.float).sum().item()
    test_loss /= num_batches
    correct /= size
    print(f"Test Error: Accuracy: {(100 * correct):>0.1f}%, Avg loss: {test_loss:>8f}")
    return test_loss, correct


results = []
epochs = 3
for t in range(epochs):
    print(f"Epoch {t + 1}")
    train(train_dataloader, model, loss_fn, optimizer)
    results.append(test(test_dataloader, model, loss_fn))
final_weights = [p for p in model.parameters()]
"""

# (e) Scalar autograd, micrograd's way: one-element tensors through +, *, **, /, relu and
# tanh, gradients checked against each other's.
SCRIPTS["micrograd_scalars"] = """
import torch

x = torch.Tensor([-4.0]).double()
x.requires_grad = True
z = 2 * x + 2 + x
q = z.relu() + z * x
h = (z * z).relu()
y = h + q + q * x
y.backward()
first = [y.data.item(), x.grad.item()]

a = torch.Tensor([-4.0]).double()
b = torch.Tensor([2.0]).double()
a.requires_grad = True
b.requires_grad = True
c = a + b
d = a * b + b ** 3
c = c + c + 1
c = c + 1 + c + (-a)
d = d + d * 2 + (b + a).relu()
d = d + 3 * d + (b - a).relu()
e = c - d
f = e ** 2
g = f / 2.0
g = g + 10.0 / f
g = g + (a * 0.25).tanh() * b
g.backward()
second = [g.data.item(), a.grad.item(), b.grad.item()]
"""


# ---- the tests ---------------------------------------------------------------------------

def test_polynomial_autograd_learns():
    ns = ported("polynomial_autograd")
    losses = ns["losses"]
    assert losses[-1] < 0.2 * losses[0]
    assert all(later <= earlier for earlier, later in zip(losses, losses[1:]))


def test_polynomial_autograd_matches_pytorch():
    compare("polynomial_autograd", ["losses", "coefficients"])


def test_polynomial_nn_optim_learns():
    ns = ported("polynomial_nn_optim")
    assert ns["losses"][-1] < 0.05 * ns["losses"][0]
    assert ns["last_lr"] == pytest.approx(1e-2 * 0.5 ** 4)


def test_polynomial_nn_optim_matches_pytorch():
    compare("polynomial_nn_optim", ["losses", "coefficients", "last_lr"])


def test_legendre_function_learns_with_the_hand_written_derivative():
    ns = ported("legendre_function")
    assert ns["losses"][-1] < 0.5 * ns["losses"][0]
    # the first step's gradients, from the formula in float64
    x = np.linspace(-np.pi, np.pi, 1000)
    p3 = 0.5 * (5 * (0.3 * x) ** 3 - 3 * (0.3 * x))
    r = 2 * (-p3 - np.sin(x))  # d loss / d y_pred at a=c=0, b=-1, d=0.3
    dp3 = 1.5 * (5 * (0.3 * x) ** 2 - 1)
    expected = [r.sum(), (r * p3).sum(), (r * -dp3).sum(), (r * -dp3 * x).sum()]
    np.testing.assert_allclose(ns["first_grads"], expected, rtol=1e-4, atol=1e-3)  # two are 0


def test_legendre_function_matches_pytorch():
    compare("legendre_function", ["losses", "first_grads", "coefficients"])


def test_mnist_quickstart_trains():
    ns = ported("mnist_quickstart")
    (loss_1, acc_1), *_, (loss_n, acc_n) = ns["results"]
    assert loss_n < loss_1 and acc_n > 0.3  # 10 classes: chance is 0.1
    assert np.mean(ns["train_losses"][-5:]) < np.mean(ns["train_losses"][:5])


def test_mnist_quickstart_matches_pytorch():
    compare("mnist_quickstart", ["train_losses", "results", "final_weights"], rtol=2e-4,
            atol=2e-5)


def test_micrograd_scalars_known_values():
    ns = ported("micrograd_scalars")
    assert ns["first"] == [-20.0, 46.0]  # micrograd's own check
    # the second expression against central differences in float64
    def g(a, b):
        c = a + b
        d = a * b + b ** 3
        c = c + c + 1
        c = c + 1 + c + (-a)
        d = d + d * 2 + max(b + a, 0)
        d = d + 3 * d + max(b - a, 0)
        f = (c - d) ** 2
        return f / 2.0 + 10.0 / f + np.tanh(a * 0.25) * b
    h = 1e-6
    expected = [g(-4.0, 2.0), (g(-4.0 + h, 2.0) - g(-4.0 - h, 2.0)) / (2 * h),
                (g(-4.0, 2.0 + h) - g(-4.0, 2.0 - h)) / (2 * h)]
    np.testing.assert_allclose(ns["second"], expected, rtol=1e-6)


def test_micrograd_scalars_match_pytorch():
    compare("micrograd_scalars", ["first", "second"], rtol=1e-12)
