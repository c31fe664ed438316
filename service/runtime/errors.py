"""One exception tree and one error format: {"error": code, "detail": text, "fields": [{loc, msg}]}."""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterable
from email.message import Message
from functools import lru_cache

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from sqlalchemy.exc import DataError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from schemas.benchmarks import BENCHMARK_KINDS
from schemas.operators import OPERATOR_KINDS
from schemas.serving_runs import SERVING_RUN_FORMATS
from service.core.budget import BudgetSpent
from service.core.errors import CostModelError

log = logging.getLogger("roofline.errors")

# Tags of the discriminated unions, and the fields (or the body itself) that hold such unions.
UNION_TAGS = frozenset(OPERATOR_KINDS) | frozenset(BENCHMARK_KINDS) | frozenset(SERVING_RUN_FORMATS)
UNION_FIELDS = frozenset({"operator", "body", "request"})


class ServiceError(Exception):
    status_code = 500
    code = "internal_error"
    headers: dict[str, str] | None = None

    def __init__(self, detail: str, fields: list[dict[str, str]] | None = None):
        super().__init__(detail)
        self.detail = detail
        self.fields = fields or []


def nearest(wanted: str, known: Iterable[str], most: int = 3) -> str:
    """' did you mean a, b?' for the known ids that contain what was asked or read close to it; '' for none."""
    known = sorted(known)
    lowered = wanted.lower()
    found = [k for k in known if lowered and lowered in k.lower()]
    found += [k for k in difflib.get_close_matches(lowered, known, n=most, cutoff=0.6) if k not in found]
    return f" did you mean {', '.join(found[:most])}?" if found else ""


class DeadlineExceeded(ServiceError):
    status_code = 503
    code = "deadline_exceeded"

    def __init__(self, reason: str):
        super().__init__(f"{reason}: the work was stopped; narrow the request (fewer devices, points or items) or "
                         "raise ROOFLINE_REQUEST_DEADLINE_S")


class DeviceNotFound(ServiceError):
    status_code = 404
    code = "device_not_found"

    def __init__(self, device_id: str, why: str = "GET /v1/devices lists the known ids", known: Iterable[str] = ()):
        super().__init__(f"no device with id {device_id!r};{nearest(device_id, known)} {why}")


class ModelNotFound(ServiceError):
    status_code = 404
    code = "model_not_found"

    def __init__(self, model_id: str, known: Iterable[str] = ()):
        super().__init__(f"no model with id {model_id!r};{nearest(model_id, known)} GET /v1/models lists the known ids")


class BenchmarkNotFound(ServiceError):
    status_code = 404
    code = "benchmark_not_found"

    def __init__(self, device_id: str, benchmark_id: int):
        super().__init__(f"device {device_id!r} has no benchmark {benchmark_id}")


class KernelTimingNotFound(ServiceError):
    status_code = 404
    code = "kernel_timing_not_found"

    def __init__(self, device_id: str, timing_id: int):
        super().__init__(f"device {device_id!r} has no kernel timing {timing_id}")


class ServingRunNotFound(ServiceError):
    status_code = 404
    code = "serving_run_not_found"

    def __init__(self, run_id: int):
        super().__init__(f"no serving run {run_id}: GET /v1/serving-runs lists them")


class CalibrationNotFound(ServiceError):
    status_code = 404
    code = "calibration_not_found"

    def __init__(self, calibration_id: str):
        super().__init__(f"no calibration {calibration_id!r}: GET /v1/calibrations lists them")


class AlreadyExists(ServiceError):
    status_code = 409
    code = "already_exists"

    def __init__(self, what: str, key: str):
        super().__init__(f"a {what} with id {key!r} already exists")


class Unauthorized(ServiceError):
    status_code = 401
    code = "unauthorized"
    headers = {"WWW-Authenticate": "Bearer"}


class Unprocessable(ServiceError):
    status_code = 422
    code = "unprocessable"


class Overloaded(ServiceError):
    status_code = 503
    code = "overloaded"
    headers = {"Retry-After": "1"}


class DatabaseUnavailable(ServiceError):
    status_code = 503
    code = "database_unavailable"
    headers = {"Retry-After": "1"}


@lru_cache(maxsize=64)  # a handful of distinct header values in practice; parsing one costs ~4 us
def is_json_content_type(content_type: str | None) -> bool:
    """application/json or application/*+json, parameters (charset) allowed."""
    if not content_type:
        return False
    message = Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


def _body(code: str, detail: str, fields: list[dict[str, str]] | None = None) -> dict:
    return {"error": code, "detail": detail, "fields": fields or []}


def _loc(parts) -> str:
    return ".".join(str(p) for p in parts)


def client_path(loc: tuple) -> list:
    """The error's location as the client wrote the body: pydantic adds the tag of a discriminated
    union member (body.operator.matmul.m) and validator names, neither of which is in the request."""
    path: list = []
    for part in loc:
        if isinstance(part, str) and (part in UNION_TAGS and path and path[-1] in UNION_FIELDS
                                      or part.startswith(("function-", "tagged-union["))):
            continue
        path.append(part)
    return path


def _error_loc(error) -> tuple:
    """Where an error is: a discriminated union's missing or unknown tag at the tag's field, not at its object."""
    loc = tuple(error.get("loc", ()))
    if error.get("type") in {"union_tag_invalid", "union_tag_not_found"}:
        return (*loc, str(error.get("ctx", {}).get("discriminator", "")).strip("'"))
    return loc


def _validation_fields(exc: RequestValidationError) -> list[dict[str, str]]:
    return [{"loc": _loc(client_path(_error_loc(error))), "msg": error.get("msg", "invalid value")}
            for error in exc.errors()]


def invalid_nested(exc: ValidationError, prefix: list[str], skip: int = 0) -> Unprocessable:
    """A 422 for a body validated inside the service (a sweep point, a plot point, a graph operator):
    locations prefixed with where that body sits in the request, union tags removed."""
    fields = [{"loc": _loc(prefix + client_path(_error_loc(e)[skip:])), "msg": e["msg"]} for e in exc.errors()]
    return Unprocessable(f"{fields[0]['loc']}: {fields[0]['msg']}", fields)


def cost_model_error(exc: CostModelError, prefix: str) -> Unprocessable:
    return Unprocessable(str(exc.reason), [{"loc": f"{prefix}.{exc.field}", "msg": exc.reason}])


def allowed_methods(request: Request) -> str:
    """Every method some route serves at this path (Starlette's own 405 names only the first route that matched the
    path, and several routes share /v1/devices/{id})."""
    methods = {method for method in ("DELETE", "GET", "HEAD", "PATCH", "POST", "PUT")
               if any(route.matches({**request.scope, "method": method})[0] == Match.FULL
                      for route in request.app.router.routes)}
    return ", ".join(sorted(methods))


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def _service_error(_request: Request, exc: ServiceError):
        return JSONResponse(_body(exc.code, exc.detail, exc.fields), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(BudgetSpent)
    async def _budget_spent(request: Request, exc: BudgetSpent):
        return await _service_error(request, DeadlineExceeded(exc.reason))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError):
        errors = exc.errors()
        malformed = next((e for e in errors if e.get("type") == "json_invalid"), None)
        if malformed is not None:
            # pydantic places a syntax error at its character offset (body.46): a position, not a field.
            where = malformed.get("loc", ())[1:2]
            reason = (malformed.get("ctx") or {}).get("error") or malformed.get("msg", "invalid JSON")
            at = f" at character {where[0]}" if where else ""
            return JSONResponse(_body("malformed_json", f"the body is not valid JSON{at}: {reason}",
                                      [{"loc": "body", "msg": f"not valid JSON{at}: {reason}"}]), status_code=400)
        content_type = request.headers.get("content-type")
        if content_type and not is_json_content_type(content_type) and any(
                tuple(e.get("loc", ())) == ("body",) and e.get("type") in {"model_attributes_type", "dict_type"}
                for e in errors):
            return JSONResponse(_body("unsupported_media_type", f"the body is {content_type.split(';')[0]}; send it as "
                                      "application/json", [{"loc": "header.content-type", "msg": "must be application/json"}]),
                                status_code=415)
        fields = _validation_fields(exc)
        summary = "; ".join(f"{f['loc']}: {f['msg']}" for f in fields[:5])
        return JSONResponse(_body("validation_error", f"invalid request: {summary}", fields), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        code = {400: "malformed_json", 404: "not_found", 405: "method_not_allowed",
                413: "payload_too_large"}.get(exc.status_code, "http_error")
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:
            headers = {**(headers or {}), "Allow": allowed_methods(request)}
        return JSONResponse(_body(code, str(exc.detail)), status_code=exc.status_code, headers=headers)

    @app.exception_handler(DataError)
    async def _unstorable(_request: Request, exc: DataError):
        # PostgreSQL refuses what SQLite would store (NUL characters, integers beyond the column's range):
        # the client's value is at fault, and the transaction was rolled back, so nothing was written.
        log.warning("value refused by the database: %s", type(exc.orig).__name__ if exc.orig else "DataError")
        return JSONResponse(_body("unprocessable", "a value in the request cannot be stored or looked up "
                                  "(a NUL character, or a number beyond the database's range)",
                                  [{"loc": "request", "msg": "value refused by the database"}]), status_code=422)

    async def _database_unavailable(_request: Request, exc: Exception):
        # A lock held past the busy timeout, a pool with no free connection, a lost server: the request
        # is fine and may succeed later, so this is the server's 503, not a 500 or the client's 4xx.
        log.error("database unavailable: %s", type(getattr(exc, "orig", None) or exc).__name__)
        return await _service_error(_request, DatabaseUnavailable("the database was busy or unreachable; retry shortly"))

    app.add_exception_handler(OperationalError, _database_unavailable)
    app.add_exception_handler(PoolTimeout, _database_unavailable)
