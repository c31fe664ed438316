"""Idempotency-Key on writes: a client that retries a write whose answer it lost (a timeout, a worker killed after
the commit) sends the same key, and gets the first answer again instead of a second write.

The key is claimed (committed) before the write runs, per client (the bearer token's hash), and only for a request
whose token is a writer's: an unauthenticated write goes to its 401 holding no key (clients without a token had
grown the table by thousands of rows a minute). The same key with the same method, path and body answers what the
first answered; with anything else, a 409. A key whose write never finished (the worker died mid-way) is answered
409 too, since whether it was applied cannot be known: the client checks the resource and retries with a new key.
A write that failed with a 5xx releases its key. A key expires ROOFLINE_IDEMPOTENCY_TTL_S after its claim (a day by
default): a retry after that is a new write, and expired keys are deleted as new ones are claimed.
"""

from __future__ import annotations

import hashlib

from fastapi.concurrency import run_in_threadpool
from sqlmodel import Session

from service.persistence import repository
from service.runtime.config import scope_writer
from service.runtime.limits import replaying, send_error, send_json

HEADER = b"idempotency-key"
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Analyses are POSTs that write nothing: a key there is accepted and needs no record.
READ_ONLY_PREFIXES = ("/v1/analyze/", "/v1/plan/", "/v1/plot/")
MAX_KEY_LENGTH = 200


def is_write(scope) -> bool:
    """Whether a request may write: an HTTP request with a writing method, not an analysis."""
    return scope["type"] == "http" and scope["method"] in WRITES and not scope["path"].startswith(READ_ONLY_PREFIXES)


class IdempotencyMiddleware:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if not is_write(scope):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        key = headers.get(HEADER, b"").decode("latin-1").strip()
        if not key:
            await self.app(scope, receive, send)
            return
        if len(key) > MAX_KEY_LENGTH:
            await send_error(send, 400, "http_error", f"Idempotency-Key is limited to {MAX_KEY_LENGTH} characters",
                             [{"loc": "header.idempotency-key", "msg": "too long"}])
            return
        if scope_writer(scope["app"].state.writer_tokens, scope) is None:
            await self.app(scope, receive, send)  # its 401, with no key claimed
            return
        body, messages = await _body(receive)
        client = hashlib.sha256(headers.get(b"authorization", b"")).hexdigest()
        fingerprint = hashlib.sha256(b"\0".join([scope["method"].encode(), scope["path"].encode(),
                                                 scope.get("query_string", b""), body])).hexdigest()
        engine = scope["app"].state.engine
        ttl_s = scope["app"].state.settings.idempotency_ttl_s
        held = await run_in_threadpool(_claim, engine, client, key, fingerprint, ttl_s)
        if held is not None:
            await _replay(send, held, fingerprint)
            return
        status, chunks = 500, []

        async def keeping(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, replaying(messages, receive), keeping)
        finally:
            await run_in_threadpool(_complete, engine, client, key, status, b"".join(chunks).decode("utf-8", "replace"))


async def _body(receive) -> tuple[bytes, list[dict]]:
    messages, parts = [], []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(parts), messages


def _claim(engine, client: str, key: str, fingerprint: str, ttl_s: float):
    with Session(engine) as session:
        return repository.claim_idempotency_key(session, client=client, key=key, fingerprint=fingerprint, ttl_s=ttl_s)


def _complete(engine, client: str, key: str, status: int, response: str) -> None:
    with Session(engine) as session:
        repository.complete_idempotency_key(session, client=client, key=key, status=status, response=response)


async def _replay(send, held, fingerprint: str) -> None:
    if held.fingerprint != fingerprint:
        await send_error(send, 409, "idempotency_conflict", "this Idempotency-Key was used with another method, "
                         "path or body; use a new key for a new write",
                         [{"loc": "header.idempotency-key", "msg": "used for another request"}])
        return
    if held.status is None:
        await send_error(send, 409, "idempotency_conflict", "the write sent first with this Idempotency-Key is "
                         "still running or never finished, so whether it was applied is unknown: check the resource, "
                         "then retry with a new key",
                         [{"loc": "header.idempotency-key", "msg": "write in progress or interrupted"}])
        return
    await send_json(send, held.status, (held.response or "").encode(), ((b"idempotent-replayed", b"true"),))
