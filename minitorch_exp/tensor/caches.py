"""The cache owner: every memo of the tensor level, registered, bounded, invalidated in one place.

The speed of a training loop rests on memos keyed by a statement's
*structure* (tokens.py): build-time checks per map signature, Plans per
program, kernel launches per statement. Each is a ``Memo``, made here with a
name and a bound, so that

* no memo grows without limit: a ``Memo`` holding ``limit`` entries is
  cleared before it takes another (cheap, and a miss only costs a rebuild);
* one call forgets what a change made stale: ``invalidate(reason)`` clears
  every memo that holds kernels or launches and bumps ``generation()``
  (choosing another CPU evaluator, unregistering a user op, changing the
  debug level or the thread threshold all go through it);
* ``cache_info()`` lists every memo with its size and bound, and
  ``clear_caches()`` empties them all.

A ``Memo`` is a dict, so the hot path pays a plain ``dict.get``. Memos are
safe to share between threads: each operation is one dict operation under
the interpreter lock, and a race can only cause a second build of an entry.
This module imports nothing from the package, so every other module may
register with it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

_MEMOS: dict[str, Memo] = {}
_ON_INVALIDATE: list[Callable[[], None]] = []
_GENERATION = [0]


class Memo(dict):
    """A bounded memo table, registered under ``name`` (see the module docstring).

    ``stale_on_invalidate``: it holds kernels, launches or anything else that a
    change of evaluator, op or debug level makes wrong, so ``invalidate`` clears it.
    """

    __slots__ = ("name", "limit", "stale_on_invalidate")

    def __init__(self, name: str, limit: int, *, stale_on_invalidate: bool = False):
        super().__init__()
        self.name, self.limit, self.stale_on_invalidate = name, limit, stale_on_invalidate

    def keep(self, key, value):
        """``self[key] = value``, returning ``value``; cleared first when full."""
        if len(self) >= self.limit:
            self.clear()
        self[key] = value
        return value

    def memo(self, key, make: Callable):
        """``self[key]``, made by ``make()`` and kept the first time."""
        found = self.get(key, _MISSING)  # a sentinel: None is a value worth keeping
        return self.keep(key, make()) if found is _MISSING else found

    def __repr__(self) -> str:
        return f"Memo({self.name!r}, {len(self)}/{self.limit})"


_MISSING = object()


def memo_table(name: str, limit: int, *, stale_on_invalidate: bool = False) -> Memo:
    """Make and register the memo ``name`` (one per name: importing a module twice,
    as a reload does, gets the registered one back, emptied)."""
    table = _MEMOS.get(name)
    if table is None:
        table = _MEMOS[name] = Memo(name, limit, stale_on_invalidate=stale_on_invalidate)
    else:
        table.clear()
        table.limit, table.stale_on_invalidate = limit, stale_on_invalidate
    return table


def on_invalidate(hook: Callable[[], None]) -> None:
    """Call ``hook()`` on every ``invalidate`` (state that is not a table: epochs)."""
    _ON_INVALIDATE.append(hook)


def invalidate(reason: str = "") -> int:
    """Forget every kernel and launch (``stale_on_invalidate`` memos) and run the
    hooks; returns the new generation. ``reason`` documents the caller."""
    for table in _MEMOS.values():
        if table.stale_on_invalidate:
            table.clear()
    for hook in _ON_INVALIDATE:
        hook()
    _GENERATION[0] += 1
    return _GENERATION[0]


def generation() -> int:
    """How many times ``invalidate`` has run: a value built at one generation is stale
    at the next."""
    return _GENERATION[0]


def clear_caches() -> None:
    """Empty every memo (structure memos too) and invalidate: the next statements
    rebuild everything, as in a fresh process (kernels on disk stay)."""
    for table in _MEMOS.values():
        table.clear()
    invalidate("clear_caches")


class CacheInfo(NamedTuple):
    name: str
    size: int
    limit: int
    stale_on_invalidate: bool


def cache_info() -> list[CacheInfo]:
    """Every registered memo: its name, size, bound and whether ``invalidate`` clears it."""
    return [CacheInfo(t.name, len(t), t.limit, t.stale_on_invalidate)
            for t in sorted(_MEMOS.values(), key=lambda t: t.name)]
