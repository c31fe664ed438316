"""Response models' fields as plain values, for answers serialised straight to JSON.

The analyses build their answers as dicts in the response model's field order, written as the model would
write them (tests/api/test_answer_json.py holds the bytes equal), without validating an answer the service has
just computed. A model declares counts as floats and writes them as `1.0`: a count
that arrives as an int is made a float here, as validation would.
"""

from __future__ import annotations

import types
import typing
from functools import cache
from typing import Any

import orjson
from pydantic import BaseModel
from pydantic_core import to_json


@cache
def _plan(model: type[BaseModel]) -> tuple[tuple[str, bool], ...]:
    """(field name, whether the model holds it as a float) in the model's order."""
    plan = []
    for name, info in model.model_fields.items():
        annotation = info.annotation
        arguments = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
        plan.append((name, float in arguments))
    return tuple(plan)


def plain_fields(model: type[BaseModel], source: Any, **given: Any) -> dict:
    """`model`'s fields read from `source`'s attributes (or taken from `given`)."""
    values = {}
    for name, is_float in _plan(model):
        value = given[name] if name in given else getattr(source, name)
        values[name] = float(value) if is_float and type(value) is int else value
    return values


def json_bytes(value: Any, numpy: bool = False) -> bytes:
    """`value` as JSON, the same bytes pydantic-core's `to_json` writes for the plain values an answer holds
    (dicts, lists, strings, ints, finite floats, None, str enums; tests/translation/test_json_bytes.py holds them equal).
    orjson writes a model answer about twice as fast as `to_json`, which infers each value's type through
    pydantic's serialiser; anything orjson refuses (an int past 64 bits, a model object) goes to `to_json`.
    `numpy`: numpy arrays written as nested lists, their floats and ints as Python's would be."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY if numpy else None)
    except TypeError:  # orjson.JSONEncodeError is one
        return to_json(value)


def json_bytes_around(value: Any, **written: bytes) -> bytes:
    """json_bytes of a dict whose named fields are already JSON text (`written`), set in place without a second
    parse; orjson alone (a TypeError where it refuses a value, for the caller to write the answer another way)."""
    return orjson.dumps({**value, **{name: orjson.Fragment(text) for name, text in written.items()}})
