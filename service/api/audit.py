"""The audit trail of writes: around each request a writer's token sends with a writing method, the writer, method,
path and request id are set where the persistence layer reads them, and every write transaction the request commits
records them in the same transaction (service/persistence/repository.py). A refused write commits nothing and
records nothing (its 4xx is in the access log); requests without a writer's token are not recorded."""

from __future__ import annotations

from service.api.idempotency import is_write
from service.persistence.repository import CURRENT_WRITE, WriteRecord
from service.runtime.config import scope_writer
from service.runtime.observability import request_id_var


class AuditMiddleware:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        writer = scope_writer(scope["app"].state.writer_tokens, scope) if is_write(scope) else None
        if writer is None:
            await self.app(scope, receive, send)
            return
        token = CURRENT_WRITE.set(WriteRecord(writer, scope["method"], scope["path"], request_id_var.get()))
        try:
            await self.app(scope, receive, send)
        finally:
            CURRENT_WRITE.reset(token)
