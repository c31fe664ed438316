"""The OpenAPI document, with each operation's error responses trimmed to those it can actually return.

Routers declare the body and database errors once for all their routes; which of them an operation can
answer follows from its own signature, so the trimming is derived, not listed by hand:
- 400 (malformed JSON), 413 (too large) and 415 (not JSON) need a request body;
- 422 needs something to validate: a body, a query parameter, or a typed (non-string) path parameter;
- 503 needs the database: an operation that depends on a session or on the catalog it feeds (every resource and
  analysis), or readiness (which answers it when the worker or the database cannot serve), not liveness, metrics,
  the conventions or the docs;
- 429 (an anonymous client's compute budget spent) is every operation's but the probes', which are never charged.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from typing import Any, NamedTuple

from fastapi import FastAPI, Request, Response
from fastapi import routing as fastapi_routing
from fastapi.dependencies.models import Dependant
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool
from starlette.routing import Route

from schemas.field_docs import describe
from service.api.deps import get_catalog, get_session
from service.api.responses import BAD_BODY
from service.runtime.limits import UNLIMITED_PATHS

BODY_ONLY = set(BAD_BODY)


def _validates(operation: dict[str, Any]) -> bool:
    if "requestBody" in operation:
        return True
    for parameter in operation.get("parameters", []):
        if parameter["in"] == "query" or parameter.get("schema", {}).get("type") not in (None, "string"):
            return True
    return False


def _needs_database(dependant: Dependant) -> bool:
    return any(d.call in (get_session, get_catalog) or _needs_database(d) for d in dependant.dependencies)


def _routes(app: FastAPI):
    """(full path, methods, dependant) of every API route; FastAPI 0.16x wraps included routers, whose
    routes its own iterator unwraps with their prefixes."""
    iterate = getattr(fastapi_routing, "iter_route_contexts", None)
    if iterate is None:
        return [(r.path_format, r.methods, r.dependant) for r in app.routes if isinstance(r, APIRoute)]
    return [(c.path, c.methods, c.dependant) for c in iterate(app.routes) if getattr(c, "dependant", None) is not None]


def _database_operations(app: FastAPI) -> set[tuple[str, str]]:
    return {(path, method.lower()) for path, methods, dependant in _routes(app) if _needs_database(dependant)
            for method in methods or ()}


def trimmed_document(app: FastAPI) -> dict[str, Any]:
    document = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes,
                           tags=app.openapi_tags)
    describe(document.get("components", {}).get("schemas", {}))
    database = _database_operations(app)
    for path, item in document["paths"].items():
        for method, operation in item.items():
            responses = operation.get("responses", {})
            drop = set()
            if "requestBody" not in operation:
                drop |= {str(code) for code in BODY_ONLY}
            if not _validates(operation):
                drop.add("422")
            if (path, method) not in database and path != "/readyz":
                drop.add("503")
            if path in UNLIMITED_PATHS:
                drop.add("429")
            for code in drop:
                responses.pop(code, None)
    return document


class ServedDocument(NamedTuple):
    """The document as /openapi.json sends it: serialised and compressed once, not at every request (about 12 ms of
    the event loop's time for its 400 KB, every explorer form page asks for it), with a strong ETag so that a browser
    revalidates it in one small exchange and always sees the running version's."""

    body: bytes
    gzipped: bytes
    etag: str


def served_document(document: dict[str, Any]) -> ServedDocument:
    body = json.dumps(document, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
    return ServedDocument(body, gzip.compress(body, mtime=0), '"' + hashlib.sha256(body).hexdigest()[:32] + '"')


def install(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = trimmed_document(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    ready: list[ServedDocument] = []

    def document() -> ServedDocument:
        if not ready:
            ready.append(served_document(openapi()))
        return ready[0]

    async def openapi_json(request: Request) -> Response:
        served = ready[0] if ready else await run_in_threadpool(document)  # built once, off the event loop
        headers = {"ETag": served.etag, "Cache-Control": "no-cache", "Vary": "Accept-Encoding"}
        if served.etag in request.headers.get("if-none-match", ""):
            return Response(status_code=304, headers=headers)
        if "gzip" in request.headers.get("accept-encoding", ""):
            return Response(served.gzipped, media_type="application/json", headers={**headers, "Content-Encoding": "gzip"})
        return Response(served.body, media_type="application/json", headers=headers)

    # FastAPI's own route serialises the document at every request: replaced in its place (routes match in order).
    url = app.openapi_url or "/openapi.json"
    routes = app.router.routes
    index = next(i for i, route in enumerate(routes) if getattr(route, "path", None) == url)
    routes[index] = Route(url, openapi_json, include_in_schema=False)
