"""Liveness and readiness."""

from fastapi import APIRouter, Response
from sqlalchemy.exc import SQLAlchemyError

from service.api.deps import SessionDep
from service.core.conventions import conventions
from service.persistence import repository
from service.runtime.errors import DatabaseUnavailable
from service.runtime.observability import metrics_payload

router = APIRouter(tags=["health"])
# The conventions are reference data, not health: a router of their own, so the docs list them once.
conventions_router = APIRouter(tags=["conventions"])


@router.get("/healthz", summary="Liveness", operation_id="healthz", description="Answers while the process serves requests.")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness", operation_id="readyz", description="Checks that the database answers a query.",
            responses={503: {"description": "The database does not answer"}})
def readyz(session: SessionDep) -> dict[str, str]:
    try:
        repository.ping(session)
    except SQLAlchemyError as exc:
        raise DatabaseUnavailable(f"database check failed: {type(exc).__name__}") from None
    return {"status": "ok", "database": "ok"}


@router.get("/metrics", summary="Prometheus metrics", response_class=Response, operation_id="metrics",
            description="Request counts and latency histograms per route, and analyses per kind, in the Prometheus "
                        "text format. Latencies in seconds.")
def metrics() -> Response:
    payload, content_type = metrics_payload()
    return Response(payload, media_type=content_type)


@conventions_router.get("/v1/conventions", summary="Counting conventions", operation_id="get_conventions",
            description="The conventions every analysis follows: bytes per element of each dtype, FLOP per element of "
                        "each elementwise and row-wise operator, which compute unit each operator kind runs on, and "
                        "the formulas behind roofline, MFU and KV capacity. Units: bytes, FLOP, seconds.")
def get_conventions() -> dict:
    return conventions()
