"""The audit trail of writes: each request a writer's token sends with a writing method is recorded once
answered (the token's label, method, path, status, when, and its request id), whatever the answer was: a refused
write is part of who tried what. Requests without a writer's token are not recorded (they wrote nothing, and a
flood of them must not grow the table); their 401s are in the access log."""

from __future__ import annotations

from fastapi.concurrency import run_in_threadpool
from sqlmodel import Session

from service.api.idempotency import is_write
from service.persistence import repository
from service.runtime.config import bearer_label
from service.runtime.observability import request_id_var


class AuditMiddleware:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        writer = _writer(scope) if is_write(scope) else None
        if writer is None:
            await self.app(scope, receive, send)
            return
        status = 500

        async def watching(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, watching)
        finally:
            await run_in_threadpool(_record, scope["app"].state.engine, writer, scope["method"], scope["path"], status,
                                    request_id_var.get())


def _writer(scope) -> str | None:
    authorization = next((value for name, value in scope["headers"] if name == b"authorization"), b"")
    return bearer_label(scope["app"].state.writer_tokens, authorization)


def _record(engine, writer: str, method: str, path: str, status: int, request_id: str) -> None:
    with Session(engine) as session:
        repository.record_write(session, writer=writer, method=method, path=path, status=status, request_id=request_id)
