"""Memos of pure functions over the catalog's objects (devices, measured roofs, architectures).

Those objects are immutable and replaced, not changed, when the catalog reloads, and an analysis asks the
same questions of the same few of them thousands of times a second; hashing one (a device's peaks, an
architecture's layer groups) would cost about what the answer does. So they are keyed by identity, and
each entry holds its objects, so a freed object's id reused by a new one can never hit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache, update_wrapper
from typing import Any, Generic, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


class ByIdentity(Generic[P, R]):
    """Memoises `compute`, its first `objects` positional arguments keyed by identity, the rest (and keyword
    arguments) by value. An error is raised, never kept; cleared when it holds `limit` entries (inline model
    configs make a new architecture per request: the bound keeps those few kilobytes each from piling up)."""

    def __init__(self, compute: Callable[P, R], objects: int, limit: int = 1024):
        if objects not in (1, 2):
            raise ValueError("one or two objects keyed by identity")
        self._compute, self._objects, self._limit = compute, objects, limit
        self._entries: dict[tuple, tuple[tuple, R]] = {}
        update_wrapper(self, compute)

    def __call__(self, *arguments: Any, **keywords: Any) -> R:
        objects = self._objects
        if len(arguments) == 1 and not keywords:  # the commonest call, keyed by the bare id
            key: Any = id(arguments[0])
        else:
            key = ((id(arguments[0]),) if objects == 1 else (id(arguments[0]), id(arguments[1]))) + arguments[objects:]
            if keywords:
                key += tuple(sorted(keywords.items()))
        entry = self._entries.get(key)
        if entry is not None:
            held = entry[0]
            if held[0] is arguments[0] and (objects == 1 or held[1] is arguments[1]):
                return entry[1]
        value = self._compute(*arguments, **keywords)
        if len(self._entries) >= self._limit:
            self._entries.clear()
        self._entries[key] = (arguments[:objects], value)
        return value


def by_identity(objects: int) -> Callable[[Callable[P, R]], ByIdentity[P, R]]:
    """Decorator form of ByIdentity."""
    return lambda compute: ByIdentity(compute, objects)


# Set while cost models run on arrays of steps (core.transformer.batched_steps): arrays are not hashable, and a
# memo of one batch's arrays would never be asked again.
_arrays_in_flight: ContextVar[bool] = ContextVar("arrays_in_flight", default=False)


@contextmanager
def costing_arrays() -> Iterator[None]:
    """Within the block, the memoised cost models (by_value) compute straight through."""
    token = _arrays_in_flight.set(True)
    try:
        yield
    finally:
        _arrays_in_flight.reset(token)


def by_value(maxsize: int) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """functools.lru_cache, except within costing_arrays(), where the function is called as it is."""
    def decorate(compute: Callable[P, R]) -> Callable[P, R]:
        cached = lru_cache(maxsize=maxsize)(compute)

        def call(*arguments: Any, **keywords: Any) -> R:
            if _arrays_in_flight.get():
                return compute(*arguments, **keywords)
            return cached(*arguments, **keywords)

        update_wrapper(call, compute)
        return call
    return decorate
