"""Documented error responses, for the `responses=` of each route."""

from schemas.common import ErrorResponse

NOT_FOUND = {404: {"model": ErrorResponse, "description": "Unknown device, model or benchmark"}}
INVALID = {
    400: {"model": ErrorResponse, "description": "A body that is not parseable JSON"},
    413: {"model": ErrorResponse, "description": "A body over the size limit (ROOFLINE_MAX_BODY_BYTES)"},
    422: {"model": ErrorResponse, "description": "Invalid request; `fields` names each field and the reason"},
}
UNAUTHORIZED = {401: {"model": ErrorResponse, "description": "Missing, malformed or wrong bearer token"}}
CONFLICT = {409: {"model": ErrorResponse, "description": "A resource with that id already exists"}}
UNAVAILABLE = {503: {"model": ErrorResponse,
                     "description": "The database was busy or unreachable; retry after the `Retry-After` seconds"}}
