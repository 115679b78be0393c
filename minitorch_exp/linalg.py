"""``torch.linalg``'s vector norms: ``mt.linalg.vector_norm`` and ``mt.linalg.norm``
(of the flattened entries, or over ``dim``). Matrix norms and decompositions are not
here (docs/pytorch.md)."""

from __future__ import annotations

from .node.library_ops import vector_norm


def norm(A, ord=None, dim=None, keepdim: bool = False, *, dtype=None):
    """The vector norm ``ord`` of ``A``'s entries (None: the 2-norm, which is the
    Frobenius norm of a matrix); matrix ``ord`` values are not supported."""
    if isinstance(ord, str) or (ord is not None and dim is not None and not isinstance(dim, int)
                                and len(dim) == 2):
        raise NotImplementedError(f"linalg.norm(ord={ord!r}) of matrices: only vector norms "
                                  "are here; use linalg.vector_norm")
    return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)


__all__ = ["norm", "vector_norm"]
