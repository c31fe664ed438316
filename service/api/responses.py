"""Documented error responses, for the `responses=` of each route."""

from typing import Any

from schemas.common import ErrorResponse

# FastAPI's own type for `responses=`.
Responses = dict[int | str, dict[str, Any]]

NOT_FOUND: Responses = {404: {"model": ErrorResponse, "description": "Unknown device, model or benchmark"}}
# Errors of a request body (service.api.openapi keeps them only on operations that take one).
BAD_BODY: Responses = {
    400: {"model": ErrorResponse, "description": "`malformed_json`: the body is not valid JSON"},
    413: {"model": ErrorResponse, "description": "`payload_too_large`: a body over ROOFLINE_MAX_BODY_BYTES"},
    415: {"model": ErrorResponse, "description": "`unsupported_media_type`: a body that is not application/json"},
}
INVALID: Responses = {
    **BAD_BODY,
    422: {"model": ErrorResponse, "description": "Invalid request; `fields` names each field and the reason"},
}
UNAUTHORIZED: Responses = {401: {"model": ErrorResponse, "description": "Missing, malformed or wrong bearer token"}}
CONFLICT: Responses = {409: {"model": ErrorResponse, "description": "A resource with that id already exists"}}
THROTTLED: Responses = {
    429: {"model": ErrorResponse, "description": "`too_many_requests`: this client's anonymous compute budget is "
                                                 "spent (ROOFLINE_ANONYMOUS_CPU_S_PER_S); retry after `Retry-After`"}}
UNAVAILABLE: Responses = {
    **THROTTLED,
    503: {"model": ErrorResponse,
          "description": "The database was busy or unreachable, or the worker saturated; retry after `Retry-After`"}}
