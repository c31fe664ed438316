"""Request ids, JSON logs and Prometheus metrics, in one pure ASGI middleware.

Log lines carry the method, the route template, the status, the duration and the request id; never a
header, a query string or a body, so no token can reach a log.
"""

from __future__ import annotations

import contextvars
import functools
import json
import logging
import re
import time
import traceback
import uuid

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
    multiprocess,
)
from starlette.requests import ClientDisconnect

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
REQUEST_ID_HEADER = b"x-request-id"
# On an answer computed from the last catalog loaded because the database could not be reached.
STALE_CATALOG_HEADER = (b"x-roofline-catalog", b"stale: the database is unreachable; roofs as last loaded")
SAFE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")

REGISTRY = CollectorRegistry(auto_describe=True)
REQUESTS = Counter("roofline_http_requests_total", "HTTP requests served", ["method", "route", "status"],
                   registry=REGISTRY)
# Up to 30 s: a chart or a large batch takes seconds, and a bucket below them would hide them all in +Inf.
LATENCY = Histogram("roofline_http_request_duration_seconds", "Time to answer an HTTP request", ["method", "route"],
                    registry=REGISTRY,
                    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                             30.0))
ANALYSES = Counter("roofline_analyses_total", "Analyses answered, by kind", ["kind"], registry=REGISTRY)
IN_FLIGHT = Gauge("roofline_http_requests_in_flight", "Requests this worker is serving now", registry=REGISTRY,
                  multiprocess_mode="livesum")
OVERLOADED = Counter("roofline_overloaded_total", "Requests refused 503 overloaded (the admission limit)",
                     registry=REGISTRY)
STALE = Counter("roofline_stale_catalog_answers_total",
                "Answers computed from the last loaded catalog because the database was unreachable", registry=REGISTRY)
# Resident memory, CPU seconds, open files and the interpreter: this worker's (in multi-process mode too, where
# the registry below is built per scrape: the worker that answers reports itself).
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)

access_log = logging.getLogger("roofline.access")
error_log = logging.getLogger("roofline.errors")
INTERNAL_ERROR = json.dumps({"error": "internal_error", "detail": "an unexpected error occurred; it has been logged "
                             "with this response's X-Request-ID", "fields": []}).encode()


# nginx's code for a request whose client closed the connection before the answer.
CLIENT_CLOSED = 499
# The documents FastAPI and the docs serve without a route object in the scope (a bounded set).
DOCUMENT_PATHS = frozenset({"/openapi.json", "/docs", "/redoc", "/docs/oauth2-redirect"})


def route_label(scope, status: int) -> str:
    """The route's template; for the service's own documents their path; for a request refused before any routing
    (overloaded, too large, a malformed body) `before_routing`; for an unknown path `unmatched`."""
    route = getattr(scope.get("route"), "path", None)
    if route:
        return route
    if scope.get("path") in DOCUMENT_PATHS:
        return scope["path"]
    return "unmatched" if status in (404, 405) else "before_routing"


def count_analysis(kind: str) -> None:
    ANALYSES.labels(kind=kind).inc()


def metrics_payload() -> tuple[bytes, str]:
    """The metrics of this process, or of every worker when PROMETHEUS_MULTIPROC_DIR is set."""
    import os

    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        ProcessCollector(registry=registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


class JsonFormatter(logging.Formatter):
    FIELDS = ("method", "route", "status", "duration_ms", "exception_type", "where")

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None) or request_id_var.get(),
        }
        line.update({k: getattr(record, k) for k in self.FIELDS if hasattr(record, k)})
        if record.exc_info:
            line["exception"] = record.exc_info[0].__name__ if record.exc_info[0] else None
        return json.dumps(line)


def configure_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("roofline")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


@functools.lru_cache(maxsize=4096)
def _children(method: str, route: str, status: int):
    """The labelled series of one (method, route, status): looked up once, not on every request."""
    return REQUESTS.labels(method=method, route=route, status=str(status)), LATENCY.labels(method=method, route=route)


def log_unexpected(exc: BaseException) -> None:
    """An unexpected error, logged by type and place only: an exception's text can carry request values (a
    validation error quotes its input), and tracebacks would carry them to the log."""
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    error_log.error("unhandled error", extra={"exception_type": type(exc).__name__,
                                              "where": f"{frame.filename}:{frame.lineno}" if frame else "?"})


class ObservabilityMiddleware:
    def __init__(self, app, access_log_sample: float = 1.0):
        self.app = app
        # Every n-th successful request is logged (a counter, not a coin: the rate is exact and costs nothing).
        self._log_every = 0 if access_log_sample <= 0 else max(1, round(1 / access_log_sample))
        self._successes = 0

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        offered = next((v.decode("latin-1") for k, v in scope["headers"] if k == REQUEST_ID_HEADER), None)
        request_id = offered if offered and SAFE_REQUEST_ID.match(offered) else uuid.uuid4().hex
        token = request_id_var.set(request_id)
        started = time.perf_counter()
        status: int | None = None  # set when the response starts

        async def send_with_id(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", [])) + [(REQUEST_ID_HEADER, request_id.encode())]
                if scope.get("state", {}).get("catalog_stale"):
                    headers.append(STALE_CATALOG_HEADER)
                    STALE.inc()
                message["headers"] = headers
            await send(message)

        IN_FLIGHT.inc()
        try:
            await self.app(scope, receive, send_with_id)
        except ClientDisconnect:
            status = status or CLIENT_CLOSED  # the client went away mid-body: not the service's error
        except Exception as exc:
            log_unexpected(exc)
            if status is not None:  # the response had started: too late to replace it
                raise
            await send_with_id({"type": "http.response.start", "status": 500,
                                "headers": [(b"content-type", b"application/json"),
                                            (b"content-length", str(len(INTERNAL_ERROR)).encode())]})
            await send_with_id({"type": "http.response.body", "body": INTERNAL_ERROR})
        finally:
            IN_FLIGHT.dec()
            elapsed = time.perf_counter() - started
            method = scope["method"]
            status = CLIENT_CLOSED if status is None else status  # no response at all: the client went away
            route = route_label(scope, status)
            requests, latency = _children(method, route, status)
            requests.inc()
            latency.observe(elapsed)
            if self._sampled(status) and access_log.isEnabledFor(logging.INFO):
                access_log.info("request", extra={"method": method, "route": route, "status": status,
                                                  "duration_ms": round(elapsed * 1000, 3), "request_id": request_id})
            request_id_var.reset(token)

    def _sampled(self, status: int) -> bool:
        if status >= 400:
            return True
        if not self._log_every:
            return False
        self._successes += 1
        return self._successes % self._log_every == 0
