"""Memory along a long elementwise chain grows linearly, never quadratically.

Every map used to carry its ancestors' plan tokens and scalars even past the
point where the chain is cut and realized (``MAX_FUSED_OPS``): 4k ops of
``y = y * 1.00001 + 0.0`` on 8 elements held ~900 MB, 100k were killed.
"""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest

import minitorch_exp as mt
import minitorch_exp.tensor as T


def retained_bytes(n: int, requires_grad: bool) -> int:
    """Bytes still allocated after building an ``n``-op chain (its end kept alive)."""
    gc.collect()
    tracemalloc.start()
    y = mt.ones(8, requires_grad=requires_grad)
    for _ in range(n):
        y = y * 1.00001 + 0.0
    y.numpy()
    gc.collect()
    size, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del y
    return size


@pytest.mark.parametrize("requires_grad", [False, True])
def test_memory_along_a_chain_is_linear(requires_grad):
    retained_bytes(200, requires_grad)  # warm every cache the chain fills
    small = retained_bytes(500, requires_grad)
    large = retained_bytes(2000, requires_grad)
    # 4x the ops: linear growth gives ~4x; quadratic gave ~16x.
    assert large < 6 * small + (1 << 20), (small, large)


def test_the_chain_still_computes_the_right_value():
    y = mt.ones(8, requires_grad=True)
    for _ in range(100):
        y = y * 1.5 + 0.0
    np.testing.assert_allclose(y.numpy(), np.full(8, 1.5**100, np.float32), rtol=1e-5)
    y.sum().backward()


def test_a_deep_tensor_level_tree_holds_bounded_tokens():
    """At the tensor level a tree is only as big as the user builds it; each map's
    token stays bounded (no map carries its whole ancestry)."""
    y = T.ones(8)
    maps = []
    for _ in range(400):
        y = y * 1.00001 + 0.0
        maps.append(y)
    longest = max(len(m.token.plan_tokens or ()) + len(m.scalars) for m in maps)
    assert longest <= 4 * T.expr.MAX_PLAN_TOKENS


def test_a_long_chain_adds_a_bounded_number_of_memo_entries():
    """Past the token cap every map of a chain has the same opaque token, so the build
    checks' memo gets one entry per distinct signature, not one per op."""
    from minitorch_exp.tensor.expr import _MAP_INFO
    y = mt.ones(8)
    for _ in range(200):
        y = y * 1.00001 + 0.0
    before = len(_MAP_INFO)
    for _ in range(2000):
        y = y * 1.00001 + 0.0
    assert len(_MAP_INFO) - before < 100
