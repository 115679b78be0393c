"""``einsum``, ``addmm`` and ``baddbmm``: products written as compositions.

``einsum`` lowers an equation to the ops the engine already has, so its gradient
is theirs: the letters only one operand has (and the output does not) are summed
out first, then each pair of operands is one batched product -- each permuted to
(batch, kept, summed) and (batch, summed, kept), reshaped to three dims and
multiplied through BLAS (the DotEngine) -- and the result is reshaped and
permuted to the output's letters. More operands are contracted left to right.
"""

from __future__ import annotations

import math
import string

from ..tensor import creation, dtypes
from ..tensor.engine import assign, realize
from ..tensor.expr import matmul
from . import ops
from .function import Function
from .node import Node

LETTERS = set(string.ascii_letters)


def einsum(equation: str, *operands) -> Node:
    """``torch.einsum``: ``"ij,jk->ik"``, implicit outputs (``"ij,jk"``: the letters
    seen once, in order), ``...`` for leading broadcast dims, operands given one by
    one or as a list."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    nodes = [ops.as_node(x) for x in operands]
    inputs, output = _parse(equation, nodes)
    terms = list(zip(inputs, nodes))
    letters, result = terms[0]
    for i, (other_letters, other) in enumerate(terms[1:], start=1):
        later = set(output).union(*[t[0] for t in terms[i + 1:]])
        letters, result = _contract(letters, result, other_letters, other, later)
    letters, result = _keep_only(letters, result, set(output))
    return ops.permute(result, *[letters.index(c) for c in output]) if letters else result


def _parse(equation: str, nodes: list) -> tuple[list[str], str]:
    """Each operand's letters and the output's, with ``...`` spelled out as upper-case
    letters no subscript uses."""
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    inputs = lhs.split(",")
    if len(inputs) != len(nodes):
        raise ValueError(f"einsum: {equation!r} names {len(inputs)} operands, "
                         f"got {len(nodes)}")
    spare = sorted(LETTERS - set(eq))
    ellipsis = max((x.ndim - len(s.replace("...", "")) for s, x in zip(inputs, nodes)
                    if "..." in s), default=0)
    dots = "".join(spare[:ellipsis])
    expanded = []
    for s, x in zip(inputs, nodes):
        letters = s.replace("...", dots[len(dots) - (x.ndim - len(s) + 3):] if "..." in s
                            else "")
        if len(letters) != x.ndim or not set(letters) <= LETTERS:
            raise ValueError(f"einsum: subscripts {s!r} for an operand of shape {x.shape}")
        if len(set(letters)) != len(letters):
            raise NotImplementedError(f"einsum: a letter repeated within one operand "
                                      f"({s!r}, a diagonal) is not supported")
        expanded.append(letters)
    if not arrow:
        seen = "".join(expanded)
        out = dots + "".join(sorted(c for c in set(seen) - set(dots) if seen.count(c) == 1))
    out = out.replace("...", dots)
    if len(set(out)) != len(out) or not set(out) <= set("".join(expanded)):
        raise ValueError(f"einsum: output subscripts {out!r} must be distinct letters "
                         f"of the inputs")
    _check_sizes(expanded, nodes)
    return expanded, out


def _check_sizes(inputs: list[str], nodes: list) -> None:
    sizes: dict[str, int] = {}
    for letters, x in zip(inputs, nodes):
        for c, n in zip(letters, x.shape):
            if sizes.setdefault(c, n) != n and n != 1 and sizes[c] != 1:
                raise ValueError(f"einsum: letter {c!r} has sizes {sizes[c]} and {n}")
            sizes[c] = max(sizes[c], n)


def _keep_only(letters: str, x: Node, keep: set) -> tuple[str, Node]:
    """``x`` summed over its letters not in ``keep``."""
    gone = tuple(i for i, c in enumerate(letters) if c not in keep)
    if not gone:
        return letters, x
    return "".join(c for c in letters if c in keep), ops.sum(x, gone)


def _contract(la: str, a: Node, lb: str, b: Node, later: set) -> tuple[str, Node]:
    """``a`` and ``b`` multiplied and summed over the letters they share that nothing
    later needs: one batched product."""
    la, a = _keep_only(la, a, later | set(lb))
    lb, b = _keep_only(lb, b, later | set(la))
    batch = [c for c in la if c in lb and c in later]
    summed = [c for c in la if c in lb and c not in later]
    left = [c for c in la if c not in lb]
    right = [c for c in lb if c not in la]
    a, b = _broadcast_shared(la, a, lb, b, batch + summed)
    sizes = dict(zip(la, a.shape)) | dict(zip(lb, b.shape))
    a3 = _grouped(a, la, batch, left, summed, sizes)
    b3 = _grouped(b, lb, batch, summed, right, sizes)
    product = ops.matmul(a3, b3)
    letters = "".join(batch + left + right)
    return letters, ops.reshape(product, tuple(sizes[c] for c in letters))


def _broadcast_shared(la: str, a: Node, lb: str, b: Node, shared: list) -> tuple[Node, Node]:
    """Letters of size 1 in one operand and larger in the other, expanded."""
    sa, sb = dict(zip(la, a.shape)), dict(zip(lb, b.shape))
    if all(sa[c] == sb[c] for c in shared):
        return a, b
    full = {c: max(sa[c], sb[c]) for c in shared}
    a = ops.expand(a, *[full.get(c, n) for c, n in zip(la, a.shape)])
    b = ops.expand(b, *[full.get(c, n) for c, n in zip(lb, b.shape)])
    return a, b


def _grouped(x: Node, letters: str, *groups_and_sizes) -> Node:
    """``x`` permuted to three groups of letters and reshaped to one dim each."""
    *groups, sizes = groups_and_sizes
    order = [c for group in groups for c in group]
    x = ops.permute(x, *[letters.index(c) for c in order])
    return ops.reshape(x, tuple(math.prod(sizes[c] for c in group) for group in groups))


class AddMatMul(Function):
    """``beta * input + alpha * (mat1 @ mat2)`` as BLAS computes it: ``beta * input``
    broadcast into the result's buffer, then the product added into it by the GEMM's
    own ``beta`` (cpu_numpy's ``dot`` with ``+=``: ``blas.add_product``), with no
    temporary product. ``beta = 0`` ignores ``input``, NaN included, as PyTorch's.
    Backward, one body for both levels: ``beta * g`` summed to ``input``'s shape, and
    ``alpha`` times the products' gradients."""

    keyword_attributes = True
    backward_on_nodes = True

    @staticmethod
    def forward(ctx, input, mat1, mat2, beta, alpha):  # noqa: A002
        mat1, mat2 = realize(mat1), realize(mat2)
        ctx.save_for_backward(mat1, mat2)
        ctx.attrs["in_shape"] = input.shape
        product = matmul(mat1 * alpha if alpha != 1 else mat1, mat2)
        out = creation.empty(product.shape, dtype=dtypes.result_type(
            input.dtype, product.dtype), device=mat1.device)
        if beta == 0:
            assign(out, product)
            return out
        assign(out, input * beta if beta != 1 else input)
        assign(out, product, "+=")
        return out

    @staticmethod
    def backward(ctx, g):
        mat1, mat2 = ctx.saved_tensors
        beta, alpha = ctx.attrs["beta"], ctx.attrs["alpha"]
        ga = g * alpha if alpha != 1 else g
        return ((g * beta).sum_to(ctx.attrs["in_shape"]), ga @ mat2.transpose(-2, -1),
                mat1.transpose(-2, -1) @ ga)


def addmm(input, mat1: Node, mat2: Node, *, beta=1, alpha=1) -> Node:  # noqa: A002
    """``beta * input + alpha * (mat1 @ mat2)``, as PyTorch's (``beta=0``: input is
    ignored, NaN included), with BLAS's ``beta`` (``AddMatMul``)."""
    if mat1.ndim != 2 or mat2.ndim != 2:
        raise ValueError(f"addmm: mat1 and mat2 must be 2-D, got {mat1.shape} and "
                         f"{mat2.shape}")
    return AddMatMul.apply(ops.as_node(input), mat1, mat2, beta=beta, alpha=alpha)


def baddbmm(input, batch1: Node, batch2: Node, *, beta=1, alpha=1) -> Node:  # noqa: A002
    """``beta * input + alpha * (batch1 @ batch2)`` over a batch of matrices."""
    if batch1.ndim != 3 or batch2.ndim != 3:
        raise ValueError(f"baddbmm: batch1 and batch2 must be 3-D, got {batch1.shape} and "
                         f"{batch2.shape}")
    return AddMatMul.apply(ops.as_node(input), batch1, batch2, beta=beta, alpha=alpha)


FUNCTIONS = {"einsum": einsum, "addmm": addmm, "baddbmm": baddbmm}
METHODS = {"addmm": addmm, "baddbmm": baddbmm}


def install() -> None:
    for name, method in METHODS.items():
        setattr(Node, name, method)


install()
