"""Liveness and readiness."""

from fastapi import APIRouter, Response
from sqlalchemy.exc import SQLAlchemyError

from service import repository
from service.api.deps import SessionDep
from service.errors import DatabaseUnavailable
from service.observability import metrics_payload

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness", description="Answers while the process serves requests.")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness", description="Checks that the database answers a query.",
            responses={503: {"description": "The database does not answer"}})
def readyz(session: SessionDep) -> dict[str, str]:
    try:
        repository.ping(session)
    except SQLAlchemyError as exc:
        raise DatabaseUnavailable(f"database check failed: {type(exc).__name__}") from None
    return {"status": "ok", "database": "ok"}


@router.get("/metrics", summary="Prometheus metrics", response_class=Response,
            description="Request counts and latency histograms per route, and analyses per kind, in the Prometheus "
                        "text format. Latencies in seconds.")
def metrics() -> Response:
    payload, content_type = metrics_payload()
    return Response(payload, media_type=content_type)
