"""Response models' fields as plain values, for answers serialised straight to JSON.

The analyses build their answers as dicts in the response model's field order; pydantic-core's `to_json`
writes them as the model would (tests/api/test_answer_json.py holds the bytes equal), without validating an
answer the service has just computed. A model declares counts as floats and writes them as `1.0`: a count
that arrives as an int is made a float here, as validation would.
"""

from __future__ import annotations

import types
import typing
from functools import cache
from typing import Any

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


def to_json_with(fields: dict, key: str, raw_json: bytes) -> bytes:
    """`fields` as a JSON object, with `raw_json` (already serialised) as the value of `key`, in its place."""
    keys = list(fields)
    at = keys.index(key)
    head = to_json({name: fields[name] for name in keys[:at]})
    tail = to_json({name: fields[name] for name in keys[at + 1:]})
    opening = head[:-1] + (b"," if at else b"")
    closing = (b"," + tail[1:]) if at + 1 < len(keys) else b"}"
    return opening + to_json(key) + b":" + raw_json + closing
