"""A route class for the analyses: the same contract, served without FastAPI's generic request path.

An analysis endpoint takes exactly a JSON body (one pydantic model) and the catalog. FastAPI's generic
handler (per-request endpoint introspection, dependency solving, validation of an already parsed dict)
cost more than the analysis itself (bench/in_process.py measures both paths side by side). The
endpoint's signature still drives the OpenAPI document; at run time this handler does what FastAPI
would: JSON content types only, the same 422 errors with locations under `body`, the same catalog
freshness check, a plain `def` run in the thread pool. An endpoint of any other shape keeps FastAPI's path.
"""

from __future__ import annotations

import inspect
import json
import typing
from collections.abc import Callable
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, TypeAdapter, ValidationError

from schemas.batch import BatchRequest, TypedBatchRequest
from service.api.deps import get_catalog
from service.runtime.errors import is_json_content_type

# A body this large takes milliseconds to validate (a 1,000-matmul batch about 10 ms, 1,000 model steps with inline
# configs near the 1 MiB body limit about 27): it is validated in the thread pool, so that /healthz and small
# requests are not held behind it on the event loop.
OFF_LOOP_BYTES = 32 * 1024


async def _validated(validate: Callable[[bytes], Any], raw: bytes) -> Any:
    if len(raw) < OFF_LOOP_BYTES:
        return validate(raw)
    return await run_in_threadpool(validate, raw)


# Bodies tried first as a stricter, faster-to-run model that the endpoint also accepts (a batch whose every item
# is valid, parsed straight into typed requests); anything it refuses is validated as the documented model.
FIRST_TRY: dict[type[BaseModel], type[BaseModel]] = {BatchRequest: TypedBatchRequest}


def _body_and_catalog(endpoint: Callable[..., Any]) -> tuple[str, type[BaseModel], str] | None:
    """(body parameter, its model, catalog parameter) when the endpoint has exactly that shape."""
    hints = typing.get_type_hints(endpoint, include_extras=True)
    body = catalog = None
    for name in inspect.signature(endpoint).parameters:
        hint = hints.get(name)
        metadata = getattr(hint, "__metadata__", ())
        base = typing.get_args(hint)[0] if metadata else hint
        if any(getattr(m, "dependency", None) is get_catalog for m in metadata):
            catalog = name
        elif isinstance(base, type) and issubclass(base, BaseModel) and body is None:
            body = (name, base)
        else:
            return None
    if body is None or catalog is None:
        return None
    return body[0], body[1], catalog


def _located(exc: ValidationError) -> RequestValidationError:
    """pydantic's errors placed under `body`, as FastAPI reports them."""
    return RequestValidationError([{**error, "loc": ("body", *error["loc"])} for error in exc.errors(include_url=False)])


def _parse_as_fastapi_does(raw: bytes) -> Any:
    """Only for a body pydantic-core found malformed: the stdlib parser's verdict, in FastAPI's words
    (a syntax error as a 422 at its character offset, anything else as a 400)."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise RequestValidationError([{"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error",
                                       "input": {}, "ctx": {"error": exc.msg}}]) from None
    except Exception:
        raise HTTPException(status_code=400, detail="There was an error parsing the body") from None


class LeanAnalysisRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Any]:
        shape = _body_and_catalog(self.endpoint)
        if shape is None:
            return super().get_route_handler()
        return self._lean_handler(self.endpoint, *shape)

    @staticmethod
    def _lean_handler(endpoint: Callable[..., Any], body_name: str, model: type[BaseModel], catalog_name: str):
        adapter = TypeAdapter(model)
        validate, validate_python = adapter.validate_json, adapter.validate_python
        first_try = FIRST_TRY.get(model)
        is_async = inspect.iscoroutinefunction(endpoint)

        async def handle(request: Request) -> Response:
            raw = await request.body()
            if not raw:
                raise RequestValidationError([{"type": "missing", "loc": ("body",), "msg": "Field required",
                                               "input": None}])
            if not is_json_content_type(request.headers.get("content-type")):
                raise RequestValidationError([{"type": "model_attributes_type", "loc": ("body",),
                                               "msg": "Input should be a valid dictionary or object to extract "
                                                      "fields from (send the body as application/json)",
                                               "input": None}])
            body = None
            if first_try is not None:
                try:
                    body = await _validated(first_try.model_validate_json, raw)
                except ValidationError:
                    pass  # the documented model decides, and words the errors
            try:
                if body is None:
                    body = await _validated(validate, raw)
            except ValidationError as exc:
                if not any(error["type"] == "json_invalid" for error in exc.errors()):
                    raise _located(exc) from None
                try:
                    body = validate_python(_parse_as_fastapi_does(raw))
                except ValidationError as parsed_exc:
                    raise _located(parsed_exc) from None
            arguments = {body_name: body, catalog_name: await get_catalog(request)}
            if is_async:
                return await endpoint(**arguments)
            return await run_in_threadpool(endpoint, **arguments)

        return handle
