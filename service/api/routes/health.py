"""Liveness and readiness.

The probes never wait behind work: they are coroutines (a plain `def` route runs in the thread pool the analyses
fill, and under 48 heavy requests /readyz took 18-30 s), and readiness's database query runs on a pool of its own
with a deadline."""

import anyio
from fastapi import APIRouter, Request, Response
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session

from service.core.conventions import conventions
from service.persistence import repository
from service.runtime.errors import DatabaseUnavailable, Overloaded
from service.runtime.observability import metrics_payload

# The readiness query's own threads: two, so a slow database holds at most two, never the analyses' pool.
PROBE_LIMITER = anyio.CapacityLimiter(2)
PROBE_DEADLINE_S = 2.0

router = APIRouter(tags=["health"])
# The conventions are reference data, not health: a router of their own, so the docs list them once.
conventions_router = APIRouter(tags=["conventions"])


@router.get("/healthz", summary="Liveness", operation_id="healthz", description="Answers while the process serves requests.")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness", operation_id="readyz",
            description="Ready when this worker has room for another request and the database answers a query. A "
                        "worker serving its in-flight limit (ROOFLINE_MAX_IN_FLIGHT) answers 503 `overloaded`, so a "
                        "load balancer sends the next requests elsewhere; /healthz still answers 200 (alive).",
            responses={503: {"description": "The worker is at its in-flight limit, or the database does not answer"}})
async def readyz(request: Request) -> dict[str, str]:
    admission = request.app.state.admission
    if admission.saturated:
        raise Overloaded(admission.refusal())

    def ping() -> None:
        with Session(request.app.state.engine) as session:
            repository.ping(session)

    try:
        with anyio.fail_after(PROBE_DEADLINE_S):
            await anyio.to_thread.run_sync(ping, limiter=PROBE_LIMITER, abandon_on_cancel=True)
    except TimeoutError:
        raise DatabaseUnavailable(f"database check did not answer within {PROBE_DEADLINE_S:g} s") from None
    except SQLAlchemyError as exc:
        raise DatabaseUnavailable(f"database check failed: {type(exc).__name__}") from None
    return {"status": "ok", "database": "ok"}


@router.get("/metrics", summary="Prometheus metrics", response_class=Response, operation_id="metrics",
            description="Request counts and latency histograms per route, and analyses per kind, in the Prometheus "
                        "text format. Latencies in seconds.")
async def metrics() -> Response:
    payload, content_type = metrics_payload()
    return Response(payload, media_type=content_type)


@conventions_router.get("/v1/conventions", summary="Counting conventions", operation_id="get_conventions",
            description="The conventions every analysis follows: bytes per element of each dtype, FLOP per element of "
                        "each elementwise and row-wise operator, which compute unit each operator kind runs on, and "
                        "the formulas behind roofline, MFU and KV capacity. Units: bytes, FLOP, seconds.")
def get_conventions() -> dict:
    return conventions()
