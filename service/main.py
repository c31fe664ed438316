"""The ASGI application: `service.main:app`."""

from __future__ import annotations

import gc
import inspect
import logging
from contextlib import asynccontextmanager

import anyio.to_thread
from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from service.api import openapi
from service.api.audit import AuditMiddleware
from service.api.hot_path import HotPathMiddleware
from service.api.idempotency import IdempotencyMiddleware
from service.api.responses import INVALID, THROTTLED, UNAVAILABLE
from service.api.routes import (
    analyze,
    audit,
    benchmarks,
    calibrations,
    devices,
    docs,
    explorer,
    health,
    kernel_timings,
    models,
    plans,
    plots,
    serving_runs,
)
from service.persistence.catalog import DeviceCatalog
from service.persistence.db import make_engine
from service.persistence.migrate import at_head, pending_migration, upgrade
from service.runtime.config import Settings, get_settings
from service.runtime.errors import install_error_handlers
from service.runtime.limits import (
    Admission,
    AdmissionMiddleware,
    AnonymousBudgetMiddleware,
    BodySizeLimitMiddleware,
    ClientBudgets,
    GZipWhenAccepted,
    ShutdownAnswerMiddleware,
)
from service.runtime.observability import ObservabilityMiddleware, configure_logging

log = logging.getLogger("roofline.startup")

DESCRIPTION = """
Tells how fast an accelerator workload can run, and why: FLOPs, bytes moved, arithmetic intensity,
the bound (memory or compute), the attainable time and MFU, computed from first principles against a
catalog of datasheet (nominal) device roofs.

All JSON fields are SI base units: FLOP, bytes, seconds, FLOP/s, bytes/s. Reads are open; writes need
`Authorization: Bearer <token>` with a token from `ROOFLINE_API_TOKENS`. Every error has the shape
`{"error": code, "detail": text, "fields": [{"loc", "msg"}]}`.

[The roofline explorer](/explore): pick a device, a model step or an operator, and see the chart, the
per-operator table, the memory fit and the serving figures update as the inputs change.
"""


GZIP_MINIMUM_BYTES = 16 * 1024
GC_THRESHOLDS = (20_000, 50, 100)


def telemetry_options(enabled: bool) -> dict:
    """FastAPI's native OpenTelemetry switches, where this FastAPI has them (0.16x on)."""
    if "telemetry" not in inspect.signature(FastAPI.__init__).parameters:
        return {}
    return {"telemetry": {"tracing": enabled, "metrics": enabled, "logs": enabled}}

TAGS = [
    {"name": "analysis", "description": "Roofline analyses: operators, models, KV capacity, fusion, sweeps, comparisons"},
    {"name": "devices", "description": "The device catalog (nominal datasheet specs with citations)"},
    {"name": "measured roofs", "description": "Benchmark submissions that override nominal roofs"},
    {"name": "calibrations", "description": "Measured kernel timings, and the calibrations behind every `expected`"},
    {"name": "models", "description": "The transformer model catalog"},
    {"name": "plans", "description": "Deployment plans: what serves a model best on a budget, within SLOs"},
    {"name": "plots", "description": "Roofline charts (SVG, PNG)"},
    {"name": "conventions", "description": "The counting conventions in force"},
    {"name": "audit", "description": "Who wrote what, when"},
    {"name": "health", "description": "Liveness, readiness, metrics"},
]


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.worker_threads
        if settings.migrate_on_start:
            if not at_head(settings.database_url):  # read without alembic: see service.persistence.migrate
                upgrade(settings.database_url)
        elif (behind := pending_migration(settings.database_url)) is not None:
            current, head = behind
            # Said plainly and once: a replica on an un-migrated database would otherwise fail on its
            # first query with a raw SQL error.
            log.error("the database is at revision %s, the code needs %s: run `python -m service.persistence.migrate` "
                      "(or `roofline db upgrade`) against it first, or set ROOFLINE_MIGRATE_ON_START=true",
                      current or "none (empty)", head)
            raise SystemExit(3)
        engine = make_engine(settings.database_url)
        app.state.engine = engine
        # The catalog's one connection is its own: see DeviceCatalog.
        app.state.catalog = DeviceCatalog(make_engine(settings.database_url, connections=1))
        app.state.catalog.refresh()
        # Start-up objects (modules, the catalog) never die: keep them out of every later GC pass.
        gc.freeze()
        # An analysis allocates thousands of short-lived tuples that reference counting frees, and the caches of
        # evaluated rows hold thousands of long-lived ones: at Python's default thresholds (700, 10, 10) the cycle
        # collector ran so often that it cost a batch of 1,000 model steps a quarter of its CPU time. The service
        # makes few reference cycles, so collecting less often costs little memory.
        gc.set_threshold(*GC_THRESHOLDS)
        yield
        app.state.catalog.close()
        engine.dispose()

    # Swagger UI and ReDoc assets are served by the service itself: the docs work on a closed network.
    # No redirects to the path with or without a trailing slash: Starlette builds their Location from the request's
    # Host header, which a client can set to anything.
    app = FastAPIOffline(title="Roofline service", version="0.1.0", description=DESCRIPTION, lifespan=lifespan,
                         redirect_slashes=False,
                         openapi_tags=TAGS, redoc_url=None, swagger_ui_parameters={"validatorUrl": None},
                         **telemetry_options(settings.opentelemetry))
    app.state.settings = settings
    app.state.writer_tokens = settings.writer_tokens()
    configure_logging(settings.log_level)
    # Innermost: the hot analyses' plainly valid requests, answered inside every other middleware.
    app.add_middleware(HotPathMiddleware, enabled=settings.hot_path)
    # A retried write with the same Idempotency-Key answers the first answer again (service/api/idempotency.py).
    app.add_middleware(IdempotencyMiddleware)
    # Who writes: set around a writer's write, recorded in each transaction it commits (service/api/audit.py).
    app.add_middleware(AuditMiddleware)
    # Large answers (a 4,096-point sweep is about a megabyte) travel compressed to clients that accept it;
    # small ones are not worth the CPU.
    app.add_middleware(GZipWhenAccepted, minimum_size=GZIP_MINIMUM_BYTES)
    app.state.admission = Admission(settings.max_in_flight, settings.max_queued_work)
    app.add_middleware(AdmissionMiddleware, admission=app.state.admission)
    # Outside admission (a client in debt takes no slot), inside the budget it charges from.
    if settings.anonymous_cpu_s_per_s > 0:
        app.add_middleware(AnonymousBudgetMiddleware, writer_tokens=app.state.writer_tokens,
                           budgets=ClientBudgets(settings.anonymous_cpu_s_per_s, settings.anonymous_burst_s))
    # Outside admission: a request takes a slot only once its whole body has arrived.
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_body_bytes,
                       body_timeout_s=settings.body_timeout_s, deadline_s=settings.request_deadline_s,
                       cpu_s=settings.request_cpu_s, bulk_bytes=settings.max_bulk_body_bytes,
                       writer_tokens=app.state.writer_tokens, model_bytes=settings.max_model_body_bytes)
    app.add_middleware(ObservabilityMiddleware, access_log_sample=settings.access_log_sample)
    # Outermost: what a request cancelled by the end of a graceful shutdown is answered.
    app.add_middleware(ShutdownAnswerMiddleware)
    install_error_handlers(app)
    openapi.install(app)
    # Routes are matched in order: the hot analysis paths first.
    for module in (analyze, health, plans, devices, benchmarks, kernel_timings, serving_runs, calibrations, models,
                   plots, audit):
        # Every 422 of the API has the service's one error shape, not FastAPI's default one.
        app.include_router(module.router, responses={**INVALID, **UNAVAILABLE})
    app.include_router(health.conventions_router, responses=THROTTLED)
    app.include_router(docs.router)
    app.include_router(explorer.router)
    return app


app = create_app()
