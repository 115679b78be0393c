"""``mt.multinomial`` and ``mt.Generator``: draws judged by statistics, seeded and fixed.

Counts over many draws are held to a chi-square bound (the seeds are fixed, so the
tests are deterministic; the bound is far out in the tail, so they would pass for
almost any seed). Without replacement, the first draw follows the weights and the
second the weights left, as drawing one at a time does. Also: PyTorch's errors,
reproducibility through ``generator=`` in every factory and in ``RandomSampler``,
``get_state``/``set_state``, and replays of a capture drawing anew.
"""

from __future__ import annotations

import numpy as np
import pytest

import minitorch_exp as mt
from minitorch_exp.nn.samplers import RandomSampler

from .test_new_elementwise import POLICIES, policy

#: The 99.99th percentile of chi-square with up to 9 degrees of freedom is below 34.
CHI2_BOUND = 34.0


def chi_square(counts: np.ndarray, p: np.ndarray) -> float:
    expected = counts.sum() * p / p.sum()
    keep = expected > 0
    assert not counts[~keep].any(), "a zero-weight category was drawn"
    return float((((counts - expected) ** 2)[keep] / expected[keep]).sum())


@pytest.mark.parametrize("side", POLICIES)
@pytest.mark.parametrize("dtype", [mt.float32, mt.float64])
def test_with_replacement_counts_follow_the_weights(side, dtype):
    weights = np.array([[1.0, 0.0, 3.0, 6.0, 0.5], [2.0, 2.0, 2.0, 0.0, 4.0]])
    g = mt.Generator().manual_seed(0)
    with policy(side):
        x = mt.tensor(weights, dtype=dtype)
        samples = mt.multinomial(x, 20000, replacement=True, generator=g)
    assert samples.shape == (2, 20000) and samples.dtype == mt.int64
    for row, w in zip(samples.numpy(), weights):
        assert chi_square(np.bincount(row, minlength=5), w) < CHI2_BOUND


def test_without_replacement_draws_distinct_categories_one_at_a_time():
    """First draw ~ w; second draw ~ w with the first removed (summed over the first)."""
    w = np.array([1.0, 2.0, 3.0, 4.0])
    g = mt.Generator().manual_seed(1)
    rows = mt.tensor(np.tile(w, (20000, 1)))
    samples = mt.multinomial(rows, 2, generator=g).numpy()
    assert (samples[:, 0] != samples[:, 1]).all()
    p = w / w.sum()
    second = np.array([sum(p[i] * p[j] / (1 - p[i]) for i in range(4) if i != j)
                       for j in range(4)])
    assert chi_square(np.bincount(samples[:, 0], minlength=4), p) < CHI2_BOUND
    assert chi_square(np.bincount(samples[:, 1], minlength=4), second) < CHI2_BOUND


def test_without_replacement_all_categories_is_a_permutation_skipping_no_one():
    samples = mt.multinomial(mt.tensor([0.1, 5.0, 0.3, 1.0, 2.0]), 5).numpy()
    assert sorted(samples.tolist()) == [0, 1, 2, 3, 4]


def test_zero_weights_come_last_when_too_few_are_positive():
    """As PyTorch 2's CPU multinomial: no error, the positive weights first."""
    out = mt.multinomial(mt.tensor([[0.0, 2.0, 0.0, 1.0]] * 50), 3).numpy()
    assert set(map(tuple, out[:, :2].tolist())) == {(1, 3), (3, 1)} and (out[:, 2] == 0).all()


def test_a_one_dimensional_input_gives_one_row():
    out = mt.multinomial(mt.tensor([0.0, 1.0, 0.0]), 4, True)
    assert out.shape == (4,) and out.tolist() == [1, 1, 1, 1]


BAD = [
    ([0.5, -0.1], 1, True, "element < 0"),
    ([0.5, float("inf")], 1, True, "inf"),
    ([0.5, float("nan")], 1, True, "nan"),
    ([0.0, 0.0], 1, True, "sum of probabilities <= 0"),
    ([1.0, 1.0], 3, False, "n_sample > prob_dist.size"),
    ([1.0, 1.0], 0, True, "n_sample <= 0"),
]


@pytest.mark.parametrize("weights, n, replacement, message", BAD)
def test_bad_weights_raise_as_pytorch(weights, n, replacement, message):
    with pytest.raises(RuntimeError, match=message.replace("(", r"\(")):
        mt.multinomial(mt.tensor(weights), n, replacement)
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError):
        torch.multinomial(torch.tensor(weights), n, replacement)


def test_a_three_dimensional_input_is_refused():
    with pytest.raises(RuntimeError, match="1-D or 2-D"):
        mt.multinomial(mt.ones(2, 2, 2), 1)


# ---- Generator ------------------------------------------------------------------------

def draws(g):
    return [mt.multinomial(mt.tensor([1.0, 2.0, 3.0]), 6, True, generator=g).tolist(),
            mt.rand(3, generator=g).tolist(), mt.randn(3, generator=g).tolist(),
            mt.randint(0, 10, (4,), generator=g).tolist(),
            mt.randperm(5, generator=g).tolist(),
            list(RandomSampler(range(7), generator=g)),
            list(RandomSampler(range(7), replacement=True, generator=g))]


def test_a_seeded_generator_repeats_its_draws_everywhere():
    a, b = mt.Generator().manual_seed(42), mt.Generator().manual_seed(42)
    assert draws(a) == draws(b)
    assert draws(a) != draws(mt.Generator().manual_seed(43))


def test_get_state_and_set_state_go_back_in_the_stream():
    g = mt.Generator().manual_seed(7)
    mt.rand(2, generator=g)
    state = g.get_state()
    assert isinstance(state, mt.Tensor) and state.shape == (6,)
    first = draws(g)
    g.set_state(state)
    assert draws(g) == first
    assert mt.Generator().set_state(state.numpy()).initial_seed() == 67280421310721


def test_seed_initial_seed_and_the_default_stream():
    g = mt.Generator()
    assert g.initial_seed() == 67280421310721  # PyTorch's seed of a new Generator
    s = g.seed()
    assert g.initial_seed() == s
    assert mt.manual_seed(5).initial_seed() == 5 == mt.initial_seed()
    one = mt.multinomial(mt.tensor([1.0, 1.0, 1.0]), 10, True).tolist()
    state = mt.get_rng_state()
    two = mt.rand(3).tolist()
    mt.manual_seed(5)
    assert mt.multinomial(mt.tensor([1.0, 1.0, 1.0]), 10, True).tolist() == one
    mt.set_rng_state(state)
    assert mt.rand(3).tolist() == two


def test_a_generator_is_a_numpy_generator_too():
    assert isinstance(mt.Generator(), np.random.Generator)
    assert mt.Generator(device="cpu").device.type == "cpu"


def test_capture_replays_draw_anew_as_eager_calls_would(fuse_all):
    probs = mt.tensor([[1.0, 1.0, 1.0, 1.0]] * 8)

    def step(p):
        return mt.multinomial(p.softmax(-1), 3, generator=g)

    g = mt.Generator().manual_seed(3)
    eager = [step(probs).tolist() for _ in range(4)]
    g.manual_seed(3)
    captured = mt.capture(step)
    assert [captured(probs).tolist() for _ in range(4)] == eager
