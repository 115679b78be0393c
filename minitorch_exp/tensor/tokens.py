"""Interned tokens: the small, identity-hashed objects that memo keys are made of.

A training loop builds the same statements every step. Each memo on that
path (a node's build-time checks, a statement's kernel launch) is a dict
keyed by the statement's *structure*, and hashing a structure spelled out
as nested tuples of shapes, dtypes and layouts costs more than the lookup
saves. So each fact is interned once as an object that hashes by identity:

* ``TreeToken``: what a node's checks and plan depend on -- for a tensor, its
  shape, dtype and device; for a map, its op and its operands' tokens. It
  also carries the node's shape-free plan tokens (see ``plan._walk``).
* ``LeafToken``: a tensor's part of a statement key -- its dtype, its layout
  and whether it is the destination's storage.

A tensor keeps its tokens (``leaf_tokens``); a map gets its token when it is
built (``expr.Map``). Interning tables are bounded: cleared when large,
while tokens already handed out stay valid (a new token for the same facts
only costs a memo miss). Memo tables themselves live with their owner,
``caches.py``.
"""

from __future__ import annotations

from .caches import memo_table


class TreeToken:
    """The identity of a node's structure. ``plan_tokens``: its post-order plan
    tokens with no repeats (``plan._walk``'s format), or None when the node
    holds something that is not elementwise."""

    __slots__ = ("plan_tokens",)

    def __init__(self, plan_tokens: tuple | None):
        self.plan_tokens = plan_tokens

    def __repr__(self) -> str:
        return f"TreeToken{self.plan_tokens}"


class LeafToken:
    """A tensor's part of a statement key: its dtype char, its layout, and whether
    it is dst's storage."""

    __slots__ = ("char", "layout", "is_dst_storage")

    def __init__(self, char: str, layout, is_dst_storage: bool):
        self.char, self.layout, self.is_dst_storage = char, layout, is_dst_storage

    @property
    def ndim(self) -> int:
        return len(self.layout.shape)

    def __repr__(self) -> str:
        return f"LeafToken({self.char!r}, {self.layout}, {self.is_dst_storage})"


_INTERNED = memo_table("tokens.interned", 1 << 16)
NOT_DST, DST, TREE = 0, 1, 2  # the positions in a tensor's ``leaf_tokens``


def opaque_token(shape, dtype, device) -> TreeToken:
    """The token of a node whose plan is not spelled out (not elementwise, or too big):
    interned by what the build checks read, so equal facts give the same token."""
    return _intern(("opaque", shape, dtype, device), lambda: TreeToken(None))


def _intern(facts: tuple, make):
    token = _INTERNED.get(facts)  # ``Memo.memo`` spelled out: this runs for every new tensor
    return _INTERNED.keep(facts, make()) if token is None else token


def leaf_tokens(t) -> tuple[LeafToken, LeafToken, TreeToken]:
    """The tensor ``t``'s tokens, by position ``NOT_DST``, ``DST`` (its leaf token as
    another storage than dst's, and as dst's) and ``TREE``; interned and remembered
    on ``t`` (a Tensor is an immutable view)."""
    char, layout = t.dtype.char, t.layout
    t._leaf_tokens = tokens = (
        _intern(("leaf", char, layout, False), lambda: LeafToken(char, layout, False)),
        _intern(("leaf", char, layout, True), lambda: LeafToken(char, layout, True)),
        _intern(("tree", char, layout.shape, t.device),
                lambda: TreeToken(((char, len(layout.shape)),))))
    return tokens
