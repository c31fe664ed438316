"""Liveness and readiness."""

from fastapi import APIRouter
from sqlalchemy.exc import SQLAlchemyError

from service import repository
from service.api.deps import SessionDep
from service.errors import DatabaseUnavailable

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
