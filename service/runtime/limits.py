"""Refuses request bodies over a size limit with 413, before anything parses them; and requests beyond
what a worker serves at once with 503, before they queue.

A declared Content-Length over the limit is refused without parsing; a body without one (chunked) is read
up to the limit before the application sees it, then replayed to it. Before a refusal is sent, the rest
of the body is read and dropped (up to DRAIN_LIMIT_BYTES): a client still sending when the server
answers and closes would see a connection reset instead of the 413."""

from __future__ import annotations

import asyncio
import json
import math
import re
import time

from service.core.budget import CURRENT_BUDGET, Budget
from service.runtime.config import scope_writer
from service.runtime.observability import OVERLOADED

# Reading and dropping a too-large body costs the bandwidth, not the CPU of parsing it; past this much the
# connection is closed instead.
DRAIN_LIMIT_BYTES = 64 * 1024 * 1024


def replaying(messages: list[dict], receive):
    """A receive that hands the app `messages` (already read from the connection) first, then the rest."""
    pending = iter(messages)

    async def replayed():
        return next(pending, None) or await receive()

    return replayed


# Requests whose work may take seconds (searches, sweeps, batches, charts): their client's departure is watched
# for, so that work stops. The hot analyses take well under a millisecond and are not worth the watcher.
WATCHED_PREFIXES = ("/v1/plan/", "/v1/plot/", "/v1/analyze/batch", "/v1/analyze/sweep", "/v1/analyze/compare",
                    "/v1/analyze/training", "/v1/analyze/fusion")


# The bulk writes, whose bodies may reach ROOFLINE_MAX_BULK_BODY_BYTES for a writer.
BULK_WRITES = re.compile(r"^/v1/(devices/[^/]+/kernel-timings(/csv)?|serving-runs)$")
# The requests that may carry a model's config, whose bodies may reach ROOFLINE_MAX_MODEL_BODY_BYTES for anyone (a
# batch's pieces are held to the general limit: each piece is one worker's work; an operator carries no model).
MODEL_BODIES = re.compile(r"^/v1/(analyze/(model|serving|training|kv-capacity|compare|sweep)|plan/[a-z-]+"
                          r"|plot/(model-roofline|step-breakdown|sweep|serving-plan)|models)$")


class BodySizeLimitMiddleware:
    """Reads each request's whole body before anything else runs (so a slow upload holds a connection, never one of
    the admission slots inside it), refusing one over `max_bytes` with 413 and one still arriving after
    `body_timeout_s` with 408; then gives the request its deadline (service.core.budget) and, for the requests that
    may compute for long, watches for its client leaving."""

    def __init__(self, app, max_bytes: int, body_timeout_s: float = 10.0, deadline_s: float = 30.0,
                 cpu_s: float | None = None, bulk_bytes: int | None = None, writer_tokens: dict[bytes, str] | None = None,
                 model_bytes: int | None = None):
        self.app = app
        self.max_bytes = max_bytes
        self.model_bytes = model_bytes or max_bytes
        # A writer's bulk writes may be larger (BULK_WRITES); anyone else's are held to max_bytes before their 401.
        self.bulk_bytes, self.writer_tokens = bulk_bytes or max_bytes, writer_tokens or {}
        self.body_timeout_s = body_timeout_s
        self.deadline_s = deadline_s
        self.cpu_s = cpu_s

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self._limit(scope)
        declared = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await self._drain(receive)
            await self._refuse(send, limit)
            return
        try:
            chunks = await self._read(receive, limit)
        except TimeoutError:
            await send_error(send, 408, "request_timeout", f"the request body did not arrive within "
                          f"{self.body_timeout_s:g} s (ROOFLINE_BODY_TIMEOUT_S)")
            return
        if chunks is None:
            await self._refuse(send, limit)
            return
        spent = Budget(time.monotonic() + self.deadline_s, self.deadline_s, cpu_limit_s=self.cpu_s)
        token = CURRENT_BUDGET.set(spent)
        try:
            if not scope["path"].startswith(WATCHED_PREFIXES) or chunks[-1]["type"] != "http.request":
                await self.app(scope, replaying(chunks, receive), send)
                return
            await self._watched(scope, chunks, receive, send, spent)
        finally:
            CURRENT_BUDGET.reset(token)

    async def _watched(self, scope, chunks, receive, send, spent) -> None:
        """Runs the app while one task waits on the connection: a disconnect marks the budget spent (the work
        stops at its next check) and answers the app's own waits for it."""
        gone = asyncio.Event()

        async def watch():
            message = await receive()
            if message["type"] == "http.disconnect":
                spent.client_gone = True
                gone.set()

        watcher = asyncio.create_task(watch())
        pending = iter(chunks)

        async def replayed():
            message = next(pending, None)
            if message is not None:
                return message
            await gone.wait()
            return {"type": "http.disconnect"}

        try:
            await self.app(scope, replayed, send)
        finally:
            watcher.cancel()

    def _limit(self, scope) -> int:
        if scope["method"] != "POST":
            return self.max_bytes
        if MODEL_BODIES.match(scope["path"]):
            return self.model_bytes
        if not BULK_WRITES.match(scope["path"]) or self.bulk_bytes == self.max_bytes:
            return self.max_bytes
        return self.bulk_bytes if scope_writer(self.writer_tokens, scope) is not None else self.max_bytes

    async def _read(self, receive, limit: int) -> list[dict] | None:
        """The body's messages, or None when it outgrows `limit` (the rest is drained). The first message comes
        without a timer (almost every body is one message, and a timer costs each request microseconds); a body
        still arriving after it must be whole within body_timeout_s (asyncio.timeout raises TimeoutError). A client
        that sends nothing at all holds its connection, never an admission slot."""
        first = await receive()
        if first["type"] != "http.request" or not first.get("more_body", False):
            if len(first.get("body", b"")) > limit:
                return None
            return [first]
        async with asyncio.timeout(self.body_timeout_s):
            return await self._read_rest(receive, first, limit)

    async def _read_rest(self, receive, first: dict, limit: int) -> list[dict] | None:
        chunks, size = [first], len(first.get("body", b""))
        if size > limit:
            await self._drain(receive, already=size)
            return None
        while True:
            message = await receive()
            if message["type"] != "http.request":
                chunks.append(message)
                return chunks
            size += len(message.get("body", b""))
            if size > limit:
                if message.get("more_body", False):
                    await self._drain(receive, already=size)
                return None
            chunks.append(message)
            if not message.get("more_body", False):
                return chunks

    @staticmethod
    async def _drain(receive, already: int = 0) -> None:
        drained = already
        while drained <= DRAIN_LIMIT_BYTES:
            message = await receive()
            if message["type"] != "http.request":
                return
            drained += len(message.get("body", b""))
            if not message.get("more_body", False):
                return

    async def _refuse(self, send, limit: int):
        await send_error(send, 413, "payload_too_large", f"request bodies are limited to {limit} bytes"
                         + (f" ({self.bulk_bytes} for a writer's bulk write)" if limit != self.bulk_bytes else "")
                         + (f" ({self.model_bytes} for a request that carries a model's config)"
                            if limit not in (self.model_bytes, self.bulk_bytes) else ""))


async def send_json(send, status: int, body: bytes, headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    """A whole JSON answer from a middleware, before or instead of the app."""
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": body})


async def send_error(send, status: int, error: str, detail: str, fields: list[dict] | None = None,
                     headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    """The service's error shape, from a middleware."""
    body = json.dumps({"error": error, "detail": detail, "fields": fields or []}).encode()
    await send_json(send, status, body, headers)


# Routes that must answer whatever the load: the orchestrator's probes and the metrics scrape.
UNLIMITED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


def waiting_for_a_thread() -> int:
    """Calls waiting for a thread of the pool the routes' work runs in (AnyIO's default), on this event loop."""
    import anyio.to_thread

    try:
        return anyio.to_thread.current_default_thread_limiter().statistics().tasks_waiting
    except RuntimeError:  # no event loop: nothing waits
        return 0


class Admission:
    """How many requests this worker serves now, against its limits: the admission middleware counts, and the
    readiness probe reads it, so a saturated worker is taken out of a load balancer's rotation before its
    clients see 503s. Saturated at `max_in_flight` requests, or once `max_queued` calls wait for a thread of the
    work pool: below the in-flight limit, 48 heavy requests had queued there for 18-30 s, refused by nothing."""

    def __init__(self, max_in_flight: int, max_queued: int | None = None):
        self.max_in_flight = max_in_flight
        self.max_queued = max_queued if max_queued is not None else max_in_flight
        self.in_flight = 0

    @property
    def saturated(self) -> bool:
        return self.in_flight >= self.max_in_flight or waiting_for_a_thread() >= self.max_queued

    def refusal(self) -> str:
        if self.in_flight >= self.max_in_flight:
            return f"this worker is serving its limit of {self.max_in_flight} requests; retry shortly"
        return (f"this worker's {self.max_queued} places in the queue for its work threads are taken; retry "
                f"shortly")


class AdmissionMiddleware:
    """At most `max_in_flight` requests served at once per worker; the next one gets a quick 503
    `overloaded` with Retry-After instead of a place in an unbounded queue (at concurrency 256 on one
    worker, requests waited 4-7 s at p99 and timed out)."""

    def __init__(self, app, admission: Admission):
        self.app = app
        self.admission = admission

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] in UNLIMITED_PATHS:
            await self.app(scope, receive, send)
            return
        admission = self.admission
        if admission.saturated:
            OVERLOADED.inc()
            await send_error(send, 503, "overloaded", admission.refusal(), headers=((b"retry-after", b"1"),))
            return
        admission.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            admission.in_flight -= 1


class ClientBudgets:
    """Each anonymous client's budget of compute seconds: it refills at `rate` a second up to `burst`, each request
    is charged what it spent, and a client in debt is refused until the debt has refilled. Clients at a full budget
    are not kept, and at most MAX_CLIENTS are (the fullest dropped first), so a flood of addresses cannot grow it."""

    MAX_CLIENTS = 10_000

    def __init__(self, rate: float, burst: float):
        self.rate, self.burst = rate, burst
        self._balances: dict[str, tuple[float, float]] = {}  # client -> (balance, when)

    def _balance(self, client: str, now: float) -> float:
        balance, when = self._balances.get(client, (self.burst, now))
        return min(self.burst, balance + (now - when) * self.rate)

    def retry_after(self, client: str, now: float) -> float | None:
        """Seconds until the client may send again, or None when it may now."""
        balance = self._balance(client, now)
        return None if balance >= 0 else -balance / self.rate

    def charge(self, client: str, seconds: float, now: float) -> None:
        balance = self._balance(client, now) - seconds
        if balance >= self.burst:
            self._balances.pop(client, None)
            return
        self._balances[client] = (balance, now)
        if len(self._balances) > self.MAX_CLIENTS:
            fullest = sorted(self._balances, key=lambda name: -self._balance(name, now))[:len(self._balances) // 10]
            for name in fullest:
                del self._balances[name]


class AnonymousBudgetMiddleware:
    """Anonymous requests (no writer token) are charged per client address what they computed (the CPU the
    request's budget measured, or its time where no loop measured it), and a client in debt gets 429 with
    Retry-After: eight clients without a token had kept both cores of a two-worker server busy indefinitely. A
    writer's requests and the probes are not charged."""

    def __init__(self, app, budgets: ClientBudgets, writer_tokens: dict[bytes, str]):
        self.app, self.budgets, self.writer_tokens = app, budgets, writer_tokens

    async def __call__(self, scope, receive, send):
        if (scope["type"] != "http" or scope["path"] in UNLIMITED_PATHS
                or scope_writer(self.writer_tokens, scope) is not None):
            await self.app(scope, receive, send)
            return
        client = (scope.get("client") or ("unknown",))[0]
        started = time.monotonic()
        wait = self.budgets.retry_after(client, started)
        if wait is not None:
            seconds = max(1, math.ceil(wait))
            await send_error(send, 429, "too_many_requests", f"this client's anonymous compute budget is spent; "
                             f"retry in {seconds} s, or send a writer token (ROOFLINE_ANONYMOUS_CPU_S_PER_S)",
                             headers=((b"retry-after", str(seconds).encode()),))
            return
        try:
            await self.app(scope, receive, send)
        finally:
            budget = CURRENT_BUDGET.get()
            spent = budget.cpu_s if budget is not None and budget.cpu_s > 0 else time.monotonic() - started
            self.budgets.charge(client, spent, time.monotonic())


class ShutdownAnswerMiddleware:
    """A request still computing when the server's graceful shutdown runs out (uvicorn then cancels it) is answered
    503 `shutting_down` with Retry-After, so its client retries on another replica: uvicorn's own answer was a
    plain-text 500, which reads as a defect and is not retried."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watching(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, watching)
        except asyncio.CancelledError:
            if not started:
                await send_error(send, 503, "shutting_down", "the server is shutting down and stopped this request; "
                                 "retry it (another replica will answer)", headers=((b"retry-after", b"1"),))
            raise


class GZipWhenAccepted:
    """Starlette's GZipMiddleware for clients that accept gzip; the others go straight to the app (the
    middleware would otherwise wrap every response to inspect its headers, about 5 % of a small answer)."""

    def __init__(self, app, minimum_size: int):
        from starlette.middleware.gzip import GZipMiddleware

        self.app = app
        self.gzip = GZipMiddleware(app, minimum_size=minimum_size)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"accept-encoding" and b"gzip" in value:
                await self.gzip(scope, receive, send)
                return

        async def send_varying(message):
            # Caches must still know that a large answer would have been compressed for another client.
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), (b"vary", b"Accept-Encoding")]
            await send(message)

        await self.app(scope, receive, send_varying)
