"""``mt.capture``: a step's kernels recorded once and replayed, checked against eager twins.

Each captured run is compared with the same code run eagerly on an identically
initialised twin (model, optimizer, random generator). On the CPU the same
kernels run either way, so losses, gradients and parameters must agree bit for
bit. Also covered: the call sequence per signature (warm-up, recording,
replays), detached results, host reads refused while recording, host-side
work that every replay repeats (random numbers, refilled factories, gathers,
scatter-adds, an optimizer step with its changing learning rate), ``.grad``
semantics, stale recordings, both CPU evaluators, and the Tensor-level
``recording()`` / ``Recording.replay()``.
"""

from __future__ import annotations

import contextlib
import functools
from collections import Counter

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import minitorch_exp as mt
import minitorch_exp.tensor as T
from minitorch_exp import nn
from minitorch_exp.tensor import capture

from ..devices import DEVICES, tolerance

F = nn.functional
# The same kernels both ways, even on tensors below the fusion threshold (tensor/eager.py
# would compute the eager twin with NumPy, equal only to rounding).
pytestmark = pytest.mark.usefixtures("fuse_all")

OPTIMIZERS = {
    "sgd_momentum": lambda params: nn.optim.SGD(params, lr=0.1, momentum=0.9),
    "adam": lambda params: nn.optim.Adam(params, lr=0.01),
}


# ---- twins and runs ------------------------------------------------------------------

def mlp(dropout: float = 0.0, device="cpu") -> nn.Sequential:
    mt.manual_seed(0)  # every twin starts from the same weights
    layers = [nn.Linear(5, 8), nn.ReLU()]
    if dropout:
        layers.append(nn.Dropout(dropout))
    return nn.Sequential(*layers, nn.Linear(8, 3)).to(device)


def twins(optimizer: str | None = "sgd_momentum", **model_kw):
    """Two identically initialised ``(model, optimizer)`` pairs: one captured, one eager."""
    pairs = []
    for _ in range(2):
        model = mlp(**model_kw)
        pairs.append((model, OPTIMIZERS[optimizer](model.parameters()) if optimizer else None))
    return pairs


def batches(sizes, seed: int = 0, device="cpu"):
    """``(x, y)`` Nodes for a batch of each size: float32 inputs, int64 class targets."""
    rng = np.random.default_rng(seed)
    return [(mt.tensor(rng.standard_normal((n, 5)).astype(np.float32), device=device),
             mt.tensor(rng.integers(0, 3, n), device=device)) for n in sizes]


def train_step(model, opt, x, y, zero_inside: bool = True, **loss_kw):
    if zero_inside:
        opt.zero_grad()
    loss = F.cross_entropy(model(x), y, **loss_kw)
    loss.backward()
    return loss


def counted_step(model, opt, body_runs: list, zero_inside: bool = True):
    """``train_step`` on ``model`` through ``mt.capture``, noting each run of its body."""
    @mt.capture
    def step(x, y):
        body_runs.append(1)
        return train_step(model, opt, x, y, zero_inside)

    return step


def snapshot(model) -> list[np.ndarray]:
    return [a.numpy().copy() for p in model.parameters()
            for a in ((p, p.grad) if p.grad is not None else (p,))]


def run(step, model, opt, data, zero_inside: bool = True, seed: int = 7) -> list:
    """Per call: the loss, then every parameter and gradient after ``opt.step()``.

    The global generator is seeded first, so that a captured run and an eager run
    draw the same random numbers (dropout)."""
    mt.manual_seed(seed)
    out = []
    for x, y in data:
        if not zero_inside:
            opt.zero_grad()
        loss = step(x, y)
        opt.step()
        out.append([loss.numpy().copy(), *snapshot(model)])
    return out


def assert_close(actual, expected, **kw):
    """Against a NumPy reference: float64 to 1e-12 (another libm, another summation order)."""
    np.testing.assert_allclose(actual, expected, rtol=1e-12, atol=1e-12, **kw)


def assert_runs_equal(captured, eager, device="cpu"):
    """Exact on the CPU (same kernels, same order); float32-level on cuda."""
    rtol, atol = tolerance(device, 0.0, 0.0)
    assert len(captured) == len(eager)
    for call, (got, want) in enumerate(zip(captured, eager)):
        assert len(got) == len(want), f"call {call}: a gradient is missing"
        for i, (a, b) in enumerate(zip(got, want)):
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol,
                                       err_msg=f"call {call}, array {i}")


def captured_vs_eager(data, optimizer="sgd_momentum", zero_inside=True, device="cpu",
                      dropout=0.0, **loss_kw):
    """Train twins on ``data``: one through ``mt.capture``, one eagerly; compare every call.
    Returns how often the captured function's body ran."""
    (m1, o1), (m2, o2) = twins(optimizer, dropout=dropout, device=device)
    body_runs = []

    @mt.capture
    def step(x, y):
        body_runs.append(x.shape)
        return train_step(m1, o1, x, y, zero_inside, **loss_kw)

    captured = run(step, m1, o1, data, zero_inside)
    eager = run(functools.partial(train_step, m2, o2, zero_inside=zero_inside, **loss_kw),
                m2, o2, data, zero_inside)
    assert_runs_equal(captured, eager, device)
    assert len(step.recordings) == sum(n >= 2 for n in Counter(body_runs).values())
    return body_runs


# ---- training equals eager training --------------------------------------------------

@pytest.mark.parametrize("zero_inside", [True, False], ids=["zero_grad_inside", "by_caller"])
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_mlp_training_equals_eager_twin(optimizer, zero_inside):
    body_runs = captured_vs_eager(batches([4] * 6), optimizer, zero_inside)
    assert len(body_runs) == 2  # warm-up and recording; the other four calls replayed


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_mlp_training_equals_eager_twin_with_the_numpy_evaluator(optimizer):
    with mt.tensor.using_cpu_backend("numpy"):
        body_runs = captured_vs_eager(batches([4] * 6), optimizer)
    assert len(body_runs) == 2


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("device", DEVICES)
def test_mlp_training_equals_eager_twin_on_device(device, optimizer):
    body_runs = captured_vs_eager(batches([4] * 6, device=device), optimizer, device=device)
    assert len(body_runs) == 2


def test_label_smoothing_and_sum_reduction_equal_eager():
    captured_vs_eager(batches([4] * 5), "adam", label_smoothing=0.1, reduction="sum")


def test_dropout_masks_equal_an_eager_twin_with_the_same_seed():
    captured_vs_eager(batches([6] * 6), "sgd_momentum", dropout=0.5)


@settings(max_examples=15, deadline=None)
@given(sizes=st.lists(st.sampled_from([2, 3, 5]), min_size=3, max_size=9),
       optimizer=st.sampled_from(sorted(OPTIMIZERS)))
def test_changing_batch_sizes_record_each_size_once(sizes, optimizer):
    body_runs = captured_vs_eager(batches(sizes, seed=len(sizes)), optimizer)
    seen = Counter(shape[0] for shape in body_runs)
    assert seen == {n: min(2, sizes.count(n)) for n in set(sizes)}


# ---- the call sequence, per signature ------------------------------------------------

def test_each_signature_warms_up_records_and_replays():
    """A new batch size, dtype, non-tensor argument or grad mode is a new signature: its
    body runs twice (warm-up, recording); an older signature keeps replaying correctly."""
    w_captured, w_eager = (nn.Parameter(np.linspace(-1.0, 1.0, 3)) for _ in range(2))

    def body(w, x, scale):
        w.grad = None
        out = (x * w * scale).sum(1)
        if mt.is_grad_enabled():
            out.sum().backward()
        return out

    runs = Counter()

    @mt.capture
    def step(x, scale):
        runs[(x.shape[0], x.dtype, scale, mt.is_grad_enabled())] += 1
        return body(w_captured, x, scale)

    base = (4, np.float64, 2.0, True)
    plan = ([base] * 3 + [(6, np.float64, 2.0, True)] * 3 + [base]
            + [(4, np.float32, 2.0, True)] * 3 + [base] + [(4, np.float64, 3.0, True)] * 3
            + [(4, np.float64, 2.0, False)] * 3 + [base] * 2)
    rng = np.random.default_rng(0)
    for n, dtype, scale, grad in plan:
        x = mt.tensor(rng.standard_normal((n, 3)).astype(dtype))
        with contextlib.nullcontext() if grad else mt.no_grad():
            got, want = step(x, scale), body(w_eager, x, scale)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        np.testing.assert_allclose(got.numpy(), (x.numpy() * w_eager.numpy() * scale).sum(1),
                                   rtol=1e-6, atol=1e-6)
        if grad:
            np.testing.assert_array_equal(w_captured.grad.numpy(), w_eager.grad.numpy())
    assert len(runs) == 5 and set(runs.values()) == {2}, runs
    assert len(step.recordings) == 5

    step.reset()  # forget every recording: warm-up and recording again
    for _ in range(3):
        step(mt.tensor(rng.standard_normal((4, 3))), 2.0)
    assert runs[(4, np.dtype(np.float64), 2.0, True)] == 4


def test_equal_arguments_of_different_types_are_different_signatures():
    """``2 == 2.0 == True`` and they hash alike, but ``x * 2`` keeps an integer dtype
    where ``x * 2.0`` is float and ``x * True`` is ``x``: each must replay its own kernels."""
    scaled = mt.capture(lambda x, s: x * s)
    x = mt.tensor(np.array([1, 2, 3]))
    for s in [2, 2, 2, 2.0, 2.0, 2.0, True, True, True]:
        got, want = scaled(x, s), x * s
        assert got.dtype == want.dtype, f"scale {s!r}"
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_signatures_are_bounded_and_results_stay_correct():
    from minitorch_exp.node.capture import MAX_SIGNATURES

    offset = mt.capture(lambda x, k: x + k)
    x = mt.tensor([1.0, 2.0])
    for k in range(MAX_SIGNATURES + 6):
        for _ in range(2):  # warm-up, then recording
            np.testing.assert_array_equal(offset(x, k).numpy(), [1.0 + k, 2.0 + k])
        assert len(offset.recordings) <= MAX_SIGNATURES


def test_wrapper_keeps_the_name_and_docstring():
    def my_step(x):
        """Doc."""
        return x

    step = mt.capture(my_step)
    assert step.__name__ == "my_step" and step.__doc__ == "Doc."


# ---- results are detached copies -----------------------------------------------------

def test_results_are_detached_copies_in_the_returned_structure():
    w = nn.Parameter(np.array([0.5, -1.0, 2.0]))

    @mt.capture
    def step(x):
        w.grad = None
        y = mt.tanh(x * w)
        loss = y.sum()
        loss.backward()
        return loss, [y, None], x, None

    rng = np.random.default_rng(1)
    kept = []
    for _ in range(5):
        xn = rng.standard_normal(3)
        out = step(mt.tensor(xn))
        assert type(out) is tuple and len(out) == 4 and out[3] is None
        assert type(out[1]) is list and len(out[1]) == 2 and out[1][1] is None
        loss, (y, _), x_back, _ = out
        for node in (loss, y, x_back):
            assert isinstance(node, mt.Node) and node.grad_fn is None
            assert not node.requires_grad
        assert_close(y.numpy(), np.tanh(xn * w.numpy()))
        np.testing.assert_array_equal(x_back.numpy(), xn)
        assert_close(w.grad.numpy(), xn * (1 - np.tanh(xn * w.numpy()) ** 2))
        kept.append((out, [loss.numpy().copy(), y.numpy().copy(), xn]))
    for (loss, (y, _), x_back, _), values in kept:  # later calls changed none of them
        for node, value in zip((loss, y, x_back), values):
            np.testing.assert_array_equal(node.numpy(), value)


def test_none_and_tensor_level_results():
    nothing = mt.capture(lambda x: None)
    as_tensor = mt.capture(lambda x: x.value * 2 + 1)
    for i in range(4):
        x = mt.tensor([float(i), 1.0])
        assert nothing(x) is None
        got = as_tensor(x)
        assert isinstance(got, T.Tensor)
        np.testing.assert_array_equal(got.numpy(), [2.0 * i + 1, 3.0])


@pytest.mark.parametrize("result", [1.5, "loss", {"loss": None}, np.ones(2)],
                         ids=["float", "str", "dict", "ndarray"])
def test_other_results_raise(result):
    step = mt.capture(lambda x: result)
    for _ in range(2):
        with pytest.raises(mt.CaptureError, match="must return Nodes"):
            step(mt.tensor([1.0]))


# ---- host reads refused while recording; the optimizer's step inside ----------------

HOST_READS = {
    "item": lambda x: x.sum().item(),
    "numpy": lambda x: x.numpy(),
    "print": print,
    "float": lambda x: float(x.sum().item()),
    "asarray": np.asarray,
    "if": lambda x: 1 if x.sum() > 0 else 0,
    "tolist": lambda x: x.tolist(),
    "boolean_mask": lambda x: x[x > 0],
}


@pytest.mark.parametrize("read", sorted(HOST_READS))
def test_host_reads_raise_on_the_recording_call(read, capsys):
    @mt.capture
    def step(x):
        HOST_READS[read](x)
        return x * 2

    x = mt.tensor([1.0, -2.0])
    np.testing.assert_array_equal(step(x).numpy(), [2.0, -4.0])  # warm-up: eager, fine
    for _ in range(2):  # the failed recording is not kept: the next call records again
        with pytest.raises(mt.CaptureError, match="to the host"):
            step(x)
        assert not capture.is_recording()
    np.testing.assert_array_equal((x * 2).numpy(), [2.0, -4.0])  # eager work still fine


def whole_step(model, opt, x, y, zero_at_end: bool = False):
    """A training step with the optimizer's step in it."""
    if not zero_at_end:
        opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    if zero_at_end:
        opt.zero_grad()
    return loss


SCHEDULES = {"none": None, "step": lambda opt: nn.optim.StepLR(opt, 2, gamma=0.5),
             "cosine": lambda opt: nn.optim.CosineAnnealingLR(opt, 5)}


@pytest.mark.parametrize("zero_at_end", [False, True], ids=["zero_first", "zero_at_end"])
@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_optimizer_step_inside_equals_eager_twin(optimizer, schedule, zero_at_end):
    """Each replay runs the optimizer's step again, with the learning rate and step
    count of that call, on the gradients the replay computed."""
    (m1, o1), (m2, o2) = twins(optimizer)
    make = SCHEDULES[schedule]
    schedulers = [make(o) for o in (o1, o2)] if make else []
    body_runs = []

    @mt.capture
    def step(x, y):
        body_runs.append(1)
        return whole_step(m1, o1, x, y, zero_at_end)

    for x, y in batches([4] * 7):
        got = step(x, y)
        want = whole_step(m2, o2, x, y, zero_at_end)
        for sched in schedulers:
            sched.step()
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        np.testing.assert_equal(snapshot(m1), snapshot(m2))
        assert o1.param_groups[0]["lr"] == o2.param_groups[0]["lr"]
    assert len(body_runs) == 2
    np.testing.assert_equal(snapshot_state(o1), snapshot_state(o2))


def snapshot_state(opt) -> list:
    return [v.numpy().copy() if isinstance(v, mt.Node) else v
            for s in opt.state_dict()["state"].values() for _, v in sorted(s.items())]


def test_lazy_values_the_optimizer_step_would_change_are_computed_before_it():
    """Results built from the forward pass and returned after ``opt.step()`` read the
    weights as they were before the step, in replays as in eager calls."""
    (m1, o1), (m2, o2) = twins("sgd_momentum")

    def body(model, opt, x, y):
        opt.zero_grad()
        logits = model(x)
        F.cross_entropy(logits, y).backward()
        opt.step()
        return (logits.argmax(1) == y).sum(), logits * 2.0

    step = mt.capture(functools.partial(body, m1, o1))
    for x, y in batches([5] * 5):
        got, want = step(x, y), body(m2, o2, x, y)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_optimizer_state_loaded_between_calls_is_used_by_replays():
    (m1, o1), (m2, o2) = twins("adam")
    step = mt.capture(functools.partial(whole_step, m1, o1))
    saved = None
    for i, (x, y) in enumerate(batches([4] * 8)):
        if i == 3:
            saved = o2.state_dict()
        if i == 5:  # back to the state after call 2, in both
            o1.load_state_dict(saved)
            o2.load_state_dict(saved)
        got = step(x, y)
        want = whole_step(m2, o2, x, y)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        np.testing.assert_equal(snapshot(m1), snapshot(m2))


def test_optimizer_step_is_one_host_op_of_the_recording():
    (model, opt), _ = twins("sgd_momentum")
    step = mt.capture(functools.partial(whole_step, model, opt))
    data = batches([6] * 4)
    counts = []
    for x, y in data:
        with mt.count_kernels() as k:
            step(x, y)
        counts.append(dict(k.counts))
    host_ops = [fn for fn, args, tally in step.recordings[0].calls if tally is None and not args]
    # the targets' range check, then the optimizer's step (fills and gathers carry arguments)
    assert [getattr(fn, "func", fn).__name__ for fn in host_ops] == ["_check_targets", "run"]
    warm_up, recording, *replays = counts
    assert all(replay == warm_up for replay in replays)  # the step's kernels ran, once each
    assert not capture.is_recording()


# ---- host-side work repeated by every replay -----------------------------------------

def test_random_numbers_are_drawn_anew_as_an_eager_twin_draws_them():
    def body(x):
        return x * mt.rand(3, 4) + mt.randn(3, 4, dtype=mt.float64)

    step = mt.capture(body)
    inputs = [mt.tensor(np.full((3, 4), float(i))) for i in range(5)]
    results = {}
    for name, fn in [("captured", step), ("eager", body)]:
        mt.manual_seed(3)
        results[name] = [fn(x).numpy().copy() for x in inputs]
    for got, want in zip(results["captured"], results["eager"]):
        np.testing.assert_array_equal(got, want)
    replays = results["captured"][2:]
    assert not any(np.array_equal(replays[0], r) for r in replays[1:])


def test_manual_seed_between_calls_reseeds_the_replays():
    """``mt.manual_seed`` after the recording: replays draw from the new generator, as
    an eager call would."""
    def body(x):
        return x + mt.rand(4)

    step = mt.capture(body)
    x = mt.zeros(4)
    for _ in range(3):
        step(x)
    for seed in (5, 6):
        mt.manual_seed(seed)
        got = step(x).numpy()
        mt.manual_seed(seed)
        np.testing.assert_array_equal(got, body(x).numpy())


def test_factories_are_refilled_on_every_replay():
    @mt.capture
    def step(x):
        z = mt.zeros(3, 4)
        z += x
        z += x
        o = mt.full((3, 4), 2.0, dtype=mt.float32)
        o *= x
        e = mt.ones_like(x)
        e -= x
        return z, o, e

    rng = np.random.default_rng(2)
    for _ in range(5):
        xn = rng.standard_normal((3, 4)).astype(np.float32)
        z, o, e = step(mt.tensor(xn))
        np.testing.assert_array_equal(z.numpy(), xn + xn)
        np.testing.assert_array_equal(o.numpy(), 2 * xn)
        np.testing.assert_array_equal(e.numpy(), 1 - xn)


HOST_DATA = {
    "tensor": lambda: mt.tensor([1.0, 2.0, 3.0]),
    "from_numpy": lambda: mt.from_numpy(np.array([1.0, 2.0, 3.0], dtype=np.float32)),
    "arange": lambda: mt.arange(1.0, 4.0),
}


@pytest.mark.parametrize("make", sorted(HOST_DATA))
def test_host_data_read_inside_replays_but_written_in_place_raises(make):
    x = mt.tensor([0.5, 1.0, 1.5])
    reading = mt.capture(lambda x: x * HOST_DATA[make]())
    for _ in range(4):
        np.testing.assert_array_equal(reading(x).numpy(), [0.5, 2.0, 4.5])

    @mt.capture
    def writing(x):
        c = HOST_DATA[make]()
        c += x
        return c

    np.testing.assert_array_equal(writing(x).numpy(), [1.5, 3.0, 4.5])  # warm-up: eager
    with pytest.raises(mt.CaptureError, match="host data"):
        writing(x)


# ---- gathers and scatter-adds --------------------------------------------------------

def test_integer_array_indexing_and_its_backward_match_eager():
    w_captured, w_eager = (nn.Parameter(np.arange(12.0).reshape(4, 3) / 10) for _ in range(2))

    def body(w, x):
        w.grad = None
        picked = w[[0, 2, 2]]   # a gather; backward scatter-adds, into row 2 twice
        rows = x[[1, 1, 0]]     # a gather from the input: replays read the new input
        loss = (picked * rows).sum() + (w[1:3] * 0.5).sum()
        loss.backward()
        return loss, rows

    step = mt.capture(functools.partial(body, w_captured))
    rng = np.random.default_rng(3)
    for _ in range(5):
        xn = rng.standard_normal((2, 3))
        x = mt.tensor(xn)
        (loss, rows), (loss_e, rows_e) = step(x), body(w_eager, x)
        np.testing.assert_array_equal(rows.numpy(), rows_e.numpy())
        np.testing.assert_array_equal(loss.numpy(), loss_e.numpy())
        np.testing.assert_array_equal(rows.numpy(), xn[[1, 1, 0]])
        np.testing.assert_array_equal(w_captured.grad.numpy(), w_eager.grad.numpy())
        ref = np.zeros((4, 3))
        ref[0] += xn[1]
        ref[2] += xn[1] + xn[0]
        ref[1:3] += 0.5
        np.testing.assert_allclose(w_captured.grad.numpy(), ref, rtol=1e-15, atol=1e-15)
        with mt.no_grad():  # replays gather from the parameter's current values
            for w in (w_captured, w_eager):
                w -= 0.1 * w.grad


# ---- .grad semantics -----------------------------------------------------------------

def test_gradients_held_when_the_caller_stops_zeroing_accumulate_as_eager():
    """Replays while the caller zeroes; a call finding gradients it would add to runs
    eagerly (the body runs again) and accumulates exactly as the eager twin does."""
    (m1, _), (m2, _) = twins(None)
    body_runs = []
    step = counted_step(m1, None, body_runs, zero_inside=False)

    expected_runs = [1, 2, 2, 3, 4, 5, 5, 5, 5]  # calls 3-5 find gradients: eager
    for i, (x, y) in enumerate(batches([4] * 9)):
        if i < 3 or i >= 6:
            m1.zero_grad()
            m2.zero_grad()
        got = step(x, y)
        want = train_step(m2, None, x, y, zero_inside=False)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        np.testing.assert_equal(snapshot(m1), snapshot(m2))
        assert len(body_runs) == expected_runs[i], f"call {i}"


def test_without_any_zeroing_the_recording_call_raises():
    (m1, _), (m2, _) = twins(None)
    step = mt.capture(lambda x, y: train_step(m1, None, x, y, zero_inside=False))
    data = batches([4] * 3)
    for i, (x, y) in enumerate(data):
        if i == 0:
            step(x, y)
        else:
            with pytest.raises(mt.CaptureError, match="zero_grad"):
                step(x, y)
        train_step(m2, None, x, y, zero_inside=False)
        # the gradients hold what eager accumulation gives (the refused call ran eagerly)
        np.testing.assert_equal(snapshot(m1), snapshot(m2))


def _two_backwards(model, opt, data):
    opt.zero_grad()
    losses = [F.cross_entropy(model(x), y) for x, y in data]
    for loss in losses:
        loss.backward()
    return losses[0]


def _zero_grad_keeping_buffers(model, opt, data):
    opt.zero_grad(set_to_none=False)
    loss = F.cross_entropy(model(data[0][0]), data[0][1])
    loss.backward()
    return loss


@pytest.mark.parametrize("body", [_two_backwards, _zero_grad_keeping_buffers],
                         ids=["two_backwards", "zero_grad_set_to_none_false"])
def test_gradients_accumulated_after_clearing_inside_the_step_equal_eager(body):
    """The step clears the gradients itself, then backward adds to them (gradient
    accumulation over micro-batches, or zeroed rather than dropped buffers): nothing
    from before the call is added to, so the captured step must equal the eager one."""
    (m1, o1), (m2, o2) = twins("sgd_momentum")
    step = mt.capture(lambda x1, y1, x2, y2: body(m1, o1, [(x1, y1), (x2, y2)]))
    data = batches([4] * 10)
    for i in range(0, len(data), 2):
        args = [*data[i], *data[i + 1]]
        got = step(*args)
        o1.step()
        want = body(m2, o2, [data[i], data[i + 1]])
        o2.step()
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        np.testing.assert_equal(snapshot(m1), snapshot(m2))


# ---- stale recordings ----------------------------------------------------------------

def test_load_state_dict_between_calls_is_seen_by_replays():
    (m1, o1), (m2, o2) = twins("adam")
    loaded = mlp()
    with mt.no_grad():
        for p in loaded.parameters():
            p *= -2.0
    body_runs = []
    step = counted_step(m1, o1, body_runs)

    for i, (x, y) in enumerate(batches([4] * 7)):
        if i == 4:  # copies into the parameters in place: same buffers, still replayed
            m1.load_state_dict(loaded.state_dict())
            m2.load_state_dict(loaded.state_dict())
        got = step(x, y)
        o1.step()
        want = train_step(m2, o2, x, y)
        o2.step()
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        np.testing.assert_equal(snapshot(m1), snapshot(m2))
    assert len(body_runs) == 2


def test_parameters_given_new_values_are_recorded_again():
    """An optimizer made after the recording moves each parameter into its flat buffer
    (a new value object): the step is recorded again, on the new buffers."""
    (m1, _), (m2, _) = twins(None)
    body_runs = []
    step = counted_step(m1, None, body_runs, zero_inside=False)

    opts = [None, None]
    for i, (x, y) in enumerate(batches([4] * 7)):
        if i == 3:
            opts = [nn.optim.SGD(m.parameters(), lr=0.5, momentum=0.5) for m in (m1, m2)]
        for m in (m1, m2):
            m.zero_grad()
        got = step(x, y)
        want = train_step(m2, None, x, y, zero_inside=False)
        for m, opt in zip((m1, m2), opts):
            if opt is None:
                with mt.no_grad():
                    for p in m.parameters():
                        p -= 0.5 * p.grad
            else:
                opt.step()
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        np.testing.assert_equal(snapshot(m1), snapshot(m2))
    assert len(body_runs) == 3  # warm-up, recording, and once more after the move


# ---- arguments -----------------------------------------------------------------------

def test_unhashable_and_requires_grad_arguments_are_refused():
    step = mt.capture(lambda x, opts: x * 2)
    x = mt.tensor([1.0])
    with pytest.raises(TypeError, match="hashable"):
        step(x, [1, 2])
    with pytest.raises(mt.CaptureError, match="requires grad"):
        step(mt.tensor([1.0], requires_grad=True), 1)


def test_tensor_level_and_lazy_arguments():
    @mt.capture
    def step(a, b):
        return (a * b + 1).sum(0), T.exp(a)

    rng = np.random.default_rng(4)
    for _ in range(5):
        an, bn = rng.standard_normal((3, 2)), rng.standard_normal((3, 2))
        s, e = step(T.from_numpy(an), T.from_numpy(bn) * 2)  # b: a lazy expression
        assert isinstance(s, T.Tensor) and isinstance(e, T.Tensor)
        assert_close(s.numpy(), (an * bn * 2 + 1).sum(0))
        assert_close(e.numpy(), np.exp(an))


def test_non_contiguous_and_lazy_node_arguments_are_read_anew():
    w_captured, w_eager = (nn.Parameter(np.linspace(-1.0, 1.0, 12).reshape(4, 3))
                           for _ in range(2))

    def body(w, x, y):
        w.grad = None
        out = mt.tanh(x @ w) * y
        out.sum().backward()
        return out

    step = mt.capture(functools.partial(body, w_captured))
    rng = np.random.default_rng(5)
    for _ in range(5):
        base = rng.standard_normal((4, 5))
        x = mt.tensor(base).transpose(0, 1)       # strides (1, 5)
        y = mt.tensor(rng.standard_normal(3)) + 1  # lazy
        assert not x.value.is_contiguous() and y.is_lazy
        got, want = step(x, y), body(w_eager, mt.tensor(base.T.copy()), y)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        np.testing.assert_array_equal(w_captured.grad.numpy(), w_eager.grad.numpy())
        assert_close(got.numpy(), np.tanh(base.T @ w_eager.numpy()) * y.numpy())


def test_the_caller_changing_its_input_afterwards_changes_no_result():
    step = mt.capture(lambda x: x * 1.0)
    for i in range(4):
        x = mt.tensor([float(i), 0.0])
        out = step(x)
        with mt.no_grad():
            x += 10.0
        np.testing.assert_array_equal(out.numpy(), [float(i), 0.0])


def test_a_captured_function_called_inside_another():
    inner_runs = []

    @mt.capture
    def inner(x):
        inner_runs.append(1)
        return mt.tanh(x) * 2

    outer = mt.capture(lambda x: inner(x) + 1)
    rng = np.random.default_rng(6)
    for _ in range(3):
        inner(mt.tensor(rng.standard_normal(3)))
    for _ in range(5):
        xn = rng.standard_normal(3)
        assert_close(outer(mt.tensor(xn)).numpy(), np.tanh(xn) * 2 + 1)
    assert len(inner_runs) == 3  # its own two, and once eagerly inside outer's recording


# ---- random op chains and reductions, both CPU evaluators ----------------------------

CHAIN_OPS = {
    "mul_w": lambda h, w, x: h * w,
    "add_x": lambda h, w, x: h + x,
    "affine": lambda h, w, x: h * 1.5 - 0.25,
    "square": lambda h, w, x: h * h,
    "tanh": lambda h, w, x: mt.tanh(h),
    "sigmoid": lambda h, w, x: mt.sigmoid(h),
    "relu": lambda h, w, x: mt.relu(h),
    "exp": lambda h, w, x: mt.exp(h * 0.5),
    "softmax": lambda h, w, x: mt.softmax(h, -1),
    "center_rows": lambda h, w, x: h - mt.mean(h, -1, keepdims=True),
    "scale_by_max": lambda h, w, x: h / (mt.amax(mt.abs(h), -1, keepdims=True) + 1.0),
}
REDUCTIONS = {
    "sum_last": lambda h: mt.sum(h, -1),
    "mean_all": lambda h: mt.mean(h),
    "logsumexp_last": lambda h: mt.logsumexp(h, -1),
}


def chain_body(ops, reduction, w, x):
    w.grad = None
    h = x * w
    for op in ops:
        h = CHAIN_OPS[op](h, w, x)
    out = REDUCTIONS[reduction](h)
    (out * out).sum().backward()
    return out


CHAINS = dict(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple),
              ops=st.lists(st.sampled_from(sorted(CHAIN_OPS)), min_size=1, max_size=5),
              reduction=st.sampled_from(sorted(REDUCTIONS)), seed=st.integers(0, 2**16))


def check_chain_replays_as_eager(shape, ops, reduction, seed):
    rng = np.random.default_rng(seed)
    w0 = rng.uniform(0.5, 1.5, shape)
    w_captured, w_eager = nn.Parameter(w0.copy()), nn.Parameter(w0.copy())
    step = mt.capture(lambda x: chain_body(ops, reduction, w_captured, x))
    for _ in range(4):  # warm-up, recording, two replays: new inputs each time
        x = mt.tensor(rng.standard_normal(shape))
        got, want = step(x), chain_body(ops, reduction, w_eager, x)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        np.testing.assert_array_equal(w_captured.grad.numpy(), w_eager.grad.numpy())


@settings(max_examples=25, deadline=None)
@given(**CHAINS)
@example(shape=(1,), ops=["affine", "square", "square", "square"], reduction="logsumexp_last",
         seed=77)  # logsumexp's max of a lazy value, which backward realizes later
def test_random_op_chains_replay_as_eager_with_the_numpy_evaluator(shape, ops, reduction, seed):
    with mt.tensor.using_cpu_backend("numpy"):
        check_chain_replays_as_eager(shape, ops, reduction, seed)


@settings(max_examples=6, deadline=None, derandomize=True)
@given(**CHAINS)
def test_random_op_chains_replay_as_eager(shape, ops, reduction, seed):
    """Derandomized: each new chain compiles new numba kernels (about a second cold),
    so the same few chains run every time, compiled once into the kernel cache."""
    check_chain_replays_as_eager(shape, ops, reduction, seed)


@pytest.mark.parametrize("evaluator", ["numba", "numpy"])
def test_reductions_of_a_value_realized_later_in_the_step(evaluator):
    """``y`` stays lazy while it is reduced (fused into the reduction), then is realized
    when returned: replays must reduce the new ``tanh(x)``, not the previous call's."""
    def body(x):
        y = mt.tanh(x)
        return mt.sum(y, 1), mt.sum(y, 0), mt.argmax(y, 1), y

    step = mt.capture(body)
    rng = np.random.default_rng(7)
    with mt.tensor.using_cpu_backend(evaluator):
        for call in range(4):
            xn = rng.standard_normal((4, 3))
            rows, cols, arg, y = step(mt.tensor(xn))
            assert_close(y.numpy(), np.tanh(xn))
            assert_close(rows.numpy(), np.tanh(xn).sum(1), err_msg=f"call {call}: row sums")
            assert_close(cols.numpy(), np.tanh(xn).sum(0), err_msg=f"call {call}: column sums")
            np.testing.assert_array_equal(arg.numpy(), np.tanh(xn).argmax(1),
                                          err_msg=f"call {call}: argmax")


def test_the_cpu_evaluator_is_part_of_the_signature():
    runs = []

    @mt.capture
    def step(x):
        runs.append(T.cpu_backend())
        return mt.tanh(x).sum(1)

    rng = np.random.default_rng(8)
    for evaluator in ["numba", "numpy", "numba"]:
        with mt.tensor.using_cpu_backend(evaluator):
            for _ in range(3):
                xn = rng.standard_normal((3, 4))
                assert_close(step(mt.tensor(xn)).numpy(), np.tanh(xn).sum(1))
    assert Counter(runs) == {"numba": 2, "numpy": 2}


# ---- the Tensor level ----------------------------------------------------------------

def test_recording_replays_kernels_on_new_input_values():
    rng = np.random.default_rng(9)
    src, m = T.from_numpy(rng.standard_normal((3, 4))), T.from_numpy(rng.standard_normal((4, 2)))
    row, prod, square, acc = (T.zeros(*s, dtype=T.float64) for s in [(3,), (3, 2), (3, 4), (3, 4)])
    shift, shifts = T.zeros(1), iter(range(1, 100))
    with capture.recording() as rec:
        assert capture.is_recording()
        capture.host_op(lambda: shift.array.__setitem__(0, next(shifts)), shift.storage)
        row[...] = (src * 2 + T.exp(src)).sum(1)  # a reduction of a fused expression
        prod[...] = T.tanh(src) @ m                # a dot of a temporary
        prod += shift                              # a host-written buffer, read
        T.assign_all([(square, src * src), (acc, square * 2, "+=")])  # one grouped kernel
    assert not capture.is_recording() and len(rec) >= 5
    expected_acc = 2 * src.numpy() ** 2
    for k in range(2, 5):
        new_src, new_m = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
        src.numpy()[...] = new_src  # in place: the buffers the recorded calls read
        m.numpy()[...] = new_m
        written = (row.storage, prod.storage, square.storage, acc.storage)
        versions = [s.version for s in written]
        rec.replay()
        assert_close(row.numpy(), (new_src * 2 + np.exp(new_src)).sum(1))
        assert_close(prod.numpy(), np.tanh(new_src) @ new_m + k)
        expected_acc = expected_acc + 2 * new_src ** 2  # a replay repeats, it does not restore
        assert_close(acc.numpy(), expected_acc)
        for storage, before in zip(written, versions):
            assert storage.version > before  # each written buffer counts a write


def test_prepared_assignments_are_recorded_too():
    """Assigning the same expression into the same tensor again takes the engine's
    prepared fast path (no plan, no checks); while recording, that call is kept too."""
    rng = np.random.default_rng(10)
    src = T.from_numpy(rng.standard_normal(6))
    dst = T.zeros(6, dtype=T.float64)
    e = src * 2 + 1
    dst[...] = e  # prepares the call
    with capture.recording() as rec:
        dst[...] = e
    assert len(rec) == 1
    for _ in range(3):
        new = rng.standard_normal(6)
        src.numpy()[...] = new
        rec.replay()
        np.testing.assert_array_equal(dst.numpy(), new * 2 + 1)


@settings(max_examples=20, deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple),
       seed=st.integers(0, 2**16))
def test_tensor_level_replays_match_numpy_for_random_shapes(shape, seed):
    rng = np.random.default_rng(seed)
    a, b = (T.from_numpy(rng.standard_normal(shape)) for _ in range(2))
    out, red = T.zeros(*shape, dtype=T.float64), T.zeros(*shape[:-1], dtype=T.float64)
    with capture.recording() as rec:
        out[...] = T.where(a > b, a * b, T.tanh(a) - b)
        red[...] = (a * b).sum(-1)
    for _ in range(3):
        an, bn = rng.standard_normal(shape), rng.standard_normal(shape)
        a.numpy()[...], b.numpy()[...] = an, bn
        rec.replay()
        assert_close(out.numpy(), np.where(an > bn, an * bn, np.tanh(an) - bn))
        assert_close(red.numpy(), (an * bn).sum(-1))


def test_recordings_do_not_nest_and_refuse_host_reads():
    src = T.from_numpy(np.arange(3.0))
    with capture.recording():
        with pytest.raises(mt.CaptureError, match="do not nest"), capture.recording():
            pass
        with pytest.raises(mt.CaptureError, match="to the host"):
            src.numpy()
        with pytest.raises(mt.CaptureError, match="to the host"):
            src.tolist()
    assert not capture.is_recording()
    np.testing.assert_array_equal(src.numpy(), [0.0, 1.0, 2.0])  # allowed again


def test_kernels_writing_host_data_made_while_recording_raise():
    src = T.from_numpy(np.arange(3.0))
    with capture.recording() as rec:
        refilled = T.zeros(3)
        refilled += src  # a factory: replays refill it
        constant = T.tensor([1.0, 2.0, 3.0])
        with pytest.raises(mt.CaptureError, match="host data"):
            constant += src
    rec.replay()
    np.testing.assert_array_equal(refilled.numpy(), [0.0, 1.0, 2.0])


@pytest.mark.parametrize("evaluator", ["numba", "numpy"])
def test_replays_count_the_kernels_an_eager_call_counts(evaluator):
    (model, opt), _ = twins()
    step = mt.capture(functools.partial(train_step, model, opt))
    data = batches([6] * 4)
    counts = []
    with T.using_cpu_backend(evaluator):
        for x, y in data:
            with mt.count_kernels() as k:
                step(x, y)
            counts.append(dict(k.counts))
    warm_up, recording, *replays = counts
    assert warm_up["total"] > 5
    assert recording == {**warm_up, "fused": warm_up["fused"] + 2,  # copying in x and y
                         "total": warm_up["total"] + 2}
    assert all(replay == warm_up for replay in replays)
