"""Memos of pure functions over the catalog's objects (devices, measured roofs, architectures).

An analysis asks the same questions of the same few catalog objects thousands of times a second, and hashing
one (a device's peaks, an architecture's layer groups) would cost about what the answer does. So they are keyed
by identity, and each entry holds its objects, so a freed object's id reused by a new one can never hit.

Keying by identity is only sound because those objects cannot change in place: each is a frozen dataclass whose
fields are themselves immutable (tuples, read-only mappings, other frozen dataclasses), and the catalog replaces
them, never edits them, when it reloads. `deeply_frozen` states that rule as code, and a test runs the golden
requests and checks it on every object any ByIdentity memo holds (tests/core/test_memo.py). Every memo is
bounded (`limit`), so inline configs, a new architecture per request, cannot pile up.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache, update_wrapper
from types import MappingProxyType
from typing import Any, Generic, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


_SCALARS = (type(None), bool, int, float, complex, str, bytes, enum.Enum, datetime.datetime, datetime.date)


def deeply_frozen(value: Any) -> bool:
    """Whether nothing reachable from `value` can be changed in place: scalars, tuples and frozensets of such,
    read-only mappings of such, and frozen dataclasses whose every field is such."""
    if isinstance(value, _SCALARS):
        return True
    if isinstance(value, (tuple, frozenset)):
        return all(deeply_frozen(item) for item in value)
    if isinstance(value, MappingProxyType):
        return all(deeply_frozen(key) and deeply_frozen(item) for key, item in value.items())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return type(value).__dataclass_params__.frozen and all(  # type: ignore[attr-defined]
            deeply_frozen(getattr(value, f.name)) for f in dataclasses.fields(value))
    return False


def read_only(mapping: Any) -> MappingProxyType:
    """A read-only copy of a mapping, for a frozen dataclass's field (set in __post_init__)."""
    return mapping if isinstance(mapping, MappingProxyType) else MappingProxyType(dict(mapping))


# Every ByIdentity memo, for the test that checks what they hold.
MEMOS: weakref.WeakSet[ByIdentity] = weakref.WeakSet()


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
        MEMOS.add(self)

    def held(self) -> Iterator[Any]:
        """The objects its entries are keyed by (for tests)."""
        for objects, _ in self._entries.values():
            yield from objects

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
