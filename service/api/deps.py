"""Dependencies shared by the routes: sessions, settings, the device catalog, the writer check."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

import anyio.to_thread
from fastapi import Depends, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlmodel import Session

from service.persistence.catalog import DeviceCatalog
from service.runtime.config import Settings, token_label
from service.runtime.errors import Unauthorized


def get_session(request: Request) -> Iterator[Session]:
    with Session(request.app.state.engine) as session:
        yield session


def get_app_settings(request: Request) -> Settings:
    return request.app.state.settings


# The catalog's freshness query (PostgreSQL's) runs on threads of its own: a quick query each request makes, which in
# the analyses' two-thread pool would queue a burst of requests behind the work and count against its queue (48
# charts at once answered an analysis 503 on PostgreSQL). The catalog has one connection: more threads would wait.
CATALOG_LIMITER = anyio.CapacityLimiter(2)


async def fresh_catalog(app) -> tuple[DeviceCatalog, bool]:
    """(the catalog, whether it is served as last loaded): reloaded first if anything was committed since it was
    loaded (by this worker, another worker or another replica). The SQLite check is inline; a query or reload
    (PostgreSQL's check) runs off the event loop. When the database is unreachable but a catalog was loaded,
    analyses go on from it, and say so."""
    catalog = app.state.catalog
    stale = not catalog.is_known_current() and await anyio.to_thread.run_sync(catalog.refresh_or_go_stale,
                                                                              limiter=CATALOG_LIMITER)
    return catalog, stale


async def get_catalog(request: Request) -> DeviceCatalog:
    catalog, stale = await fresh_catalog(request.app)
    if stale:
        request.state.catalog_stale = True  # the response says so (a header), see ObservabilityMiddleware
    return catalog


_bearer = HTTPBearer(auto_error=False, description="A token listed in ROOFLINE_API_TOKENS")


def require_writer(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> str:
    """The label of the token that authorised this write. Every configured token is compared in
    constant time, so the time taken does not reveal how much of a guess was right."""
    tokens = request.app.state.writer_tokens
    if not tokens:
        raise Unauthorized("writes are disabled: no token is configured. Set ROOFLINE_API_TOKENS "
                           "(e.g. ROOFLINE_API_TOKENS='ops=<secret>') and send 'Authorization: Bearer <secret>'")
    if credentials is None:
        raise Unauthorized("this operation writes and needs 'Authorization: Bearer <token>'")
    label = token_label(tokens, credentials.credentials)
    if label is None:
        raise Unauthorized("the bearer token is not valid")
    return label


SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[Settings, Depends(get_app_settings)]
CatalogDep = Annotated[DeviceCatalog, Depends(get_catalog)]
WriterDep = Annotated[str, Depends(require_writer)]


# Path parameters, each with an example so the docs' "Try it out" runs as shown.
DevicePath = Annotated[str, Path(description="A device id (GET /v1/devices lists them)",
                                 openapi_examples={"h100": {"summary": "NVIDIA H100 SXM", "value": "nvidia-h100-sxm"}})]
ModelPath = Annotated[str, Path(description="A model id (GET /v1/models lists them)",
                                openapi_examples={"llama": {"summary": "Llama 3.1 8B", "value": "llama-3.1-8b"}})]
BenchmarkPath = Annotated[int, Path(ge=1, le=2**31 - 1, description="A benchmark's id, as its submission answered",
                                    openapi_examples={"first": {"summary": "The first submission", "value": 1}})]
