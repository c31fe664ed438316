"""The audit trail of writes (service/api/audit.py records it)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from schemas.audit import AuditEntryPublic
from service.api.deps import SessionDep
from service.persistence import repository

router = APIRouter(prefix="/v1/audit", tags=["audit"])


@router.get("", summary="The writes made", operation_id="list_audit",
            description="Every write committed, newest first: the label of the writer token that sent it, method, "
                        "path, time and request id, recorded in the write's own transaction. A refused write committed "
                        "nothing and is not listed (its 4xx is in the access log).")
def list_audit(
    session: SessionDep,
    writer: Annotated[str | None, Query(min_length=1, max_length=100, description="Only this token label's")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100, offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
) -> list[AuditEntryPublic]:
    return [AuditEntryPublic.model_validate(row) for row in repository.audit_entries(session, writer=writer,
                                                                                       limit=limit, offset=offset)]
