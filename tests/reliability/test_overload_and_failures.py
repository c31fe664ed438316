"""Under overload, oversized bodies and unexpected errors the service answers quickly and in its own
shape: 503 `overloaded` past the in-flight limit, a 413 every client library receives, a 500 that carries
its request id and leaves request values out of the log."""

import asyncio
import json
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from fastapi.testclient import TestClient

from service.main import create_app
from service.runtime.limits import Admission, AdmissionMiddleware
from tests.conftest import AUTH, TOKEN


@pytest.mark.parametrize("size", [2 * 1024 * 1024, 8 * 1024 * 1024])
def test_a_plain_urllib_client_receives_the_413(live_server, size):
    """The middleware answered before reading, and the connection closed with the body unread: urllib saw
    a reset in 60 of 60 tries at 8 MiB."""
    for _ in range(5):
        request = urllib.request.Request(f"{live_server}/v1/analyze/operator", data=b"x" * size, method="POST",
                                         headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 413
        assert json.loads(refused.value.read())["error"] == "payload_too_large"


def test_requests_past_the_in_flight_limit_get_a_quick_503_and_probes_still_answer():
    """Two requests may be in flight; a third is refused at once with Retry-After, /healthz never is."""
    release = asyncio.Event()

    async def slow_app(scope, receive, send):
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"done"})

    app = AdmissionMiddleware(slow_app, Admission(max_in_flight=2))

    async def scenario():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            held = [asyncio.create_task(client.get("/v1/devices")) for _ in range(2)]
            await asyncio.sleep(0.05)
            refused = await client.get("/v1/devices")
            probe = asyncio.create_task(client.get("/healthz"))
            await asyncio.sleep(0.05)
            release.set()
            return refused, await probe, [await task for task in held]

    refused, probe, held = asyncio.run(scenario())
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    assert refused.json()["error"] == "overloaded"
    assert probe.status_code == 200 and [r.status_code for r in held] == [200, 200]
    assert app.admission.in_flight == 0


def test_a_worker_at_its_in_flight_limit_is_not_ready_but_alive(settings, monkeypatch):
    """Readiness follows saturation: while the one slot a worker has is taken (a sweep, held in the thread pool),
    /readyz answers 503 `overloaded` (a load balancer then sends the next requests elsewhere) and /healthz 200;
    once the slot is free, ready again."""
    from service.api.routes import analyze

    started, release = threading.Event(), threading.Event()
    sweep = analyze.run_sweep

    def held(*args, **kwargs):
        started.set()
        release.wait(30)
        return sweep(*args, **kwargs)

    monkeypatch.setattr(analyze, "run_sweep", held)
    with TestClient(create_app(settings.model_copy(update={"max_in_flight": 1}))) as client:
        assert client.get("/readyz").status_code == 200
        body = {"endpoint": "operator", "parameter": "operator.m", "values": [1, 2], "request": {
            "device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": 1, "n": 8, "k": 8}}}
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(client.post, "/v1/analyze/sweep", json=body)
            assert started.wait(30)
            ready, alive = client.get("/readyz"), client.get("/healthz")
            refused = client.get("/v1/devices")
            release.set()
            assert answer.result(30).status_code == 200
        assert ready.status_code == 503 and ready.json()["error"] == "overloaded"
        assert ready.headers["retry-after"] == "1" and "limit of 1 requests" in ready.json()["detail"]
        assert alive.status_code == 200 and refused.status_code == 503
        assert client.get("/readyz").json() == {"status": "ok", "database": "ok"}


def test_an_unexpected_error_is_a_500_with_its_request_id_and_no_request_values_logged(settings, monkeypatch, capfd):
    from service.translation.operators import analyses as operator_analyses

    secret_value = "7f3a-sensitive-value"

    def explode(*_args, **_kwargs):
        raise RuntimeError(f"boom with {secret_value}")

    monkeypatch.setattr(operator_analyses, "operator_analysis_fields", explode)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        response = client.post("/v1/analyze/operator", headers={"X-Request-ID": "trace-500"}, json={
            "device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": 1, "n": 8, "k": 8}})
    assert response.status_code == 500
    assert response.headers["x-request-id"] == "trace-500"
    assert response.json()["error"] == "internal_error"
    logged = capfd.readouterr().err
    assert "RuntimeError" in logged and "trace-500" in logged
    assert secret_value not in logged and TOKEN not in logged


def test_a_deleted_sqlite_file_is_noticed_by_readiness_and_writes(settings, database_url):
    import os

    from service.persistence.db import sqlite_file

    path = sqlite_file(database_url)
    if path is None:
        pytest.skip("an SQLite file is what can be deleted under the server")
    measurement = {"kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": 3e12, "tool": "nvbandwidth"}
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with TestClient(create_app(settings)) as client:
        assert client.post("/v1/devices/nvidia-h100-sxm/benchmarks", headers=auth, json=measurement).status_code == 201
        assert client.get("/readyz").status_code == 200
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.remove(path + suffix)
        # Before: writes were acknowledged into the unlinked file and lost at the next start.
        refused = client.post("/v1/devices/nvidia-h100-sxm/benchmarks", headers=auth, json=measurement)
        assert refused.status_code == 503 and "deleted or replaced" in refused.json()["detail"]
        assert client.get("/readyz").status_code == 503


def test_analyses_go_on_from_the_loaded_catalog_when_the_database_is_unreachable_and_say_so(settings, monkeypatch):
    from sqlalchemy.exc import OperationalError

    body = {"device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": 1, "n": 4096, "k": 4096}}
    with TestClient(create_app(settings)) as client:
        fresh = client.post("/v1/analyze/operator", json=body)
        assert fresh.status_code == 200 and "x-roofline-catalog" not in fresh.headers
        catalog = client.app.state.catalog

        def unreachable():
            raise OperationalError("SELECT version", {}, Exception("server closed the connection"))

        monkeypatch.setattr(catalog, "is_known_current", lambda: False)
        monkeypatch.setattr(catalog, "refresh", unreachable)
        stale = client.post("/v1/analyze/operator", json=body)
        assert stale.status_code == 200 and stale.json()["time_s"] == fresh.json()["time_s"]
        assert stale.headers["x-roofline-catalog"].startswith("stale")
        # Within the retry interval the database is not tried again: no request waits out a connect timeout.
        attempts = []
        monkeypatch.setattr(catalog, "refresh", lambda: attempts.append(1) or unreachable())
        assert client.post("/v1/analyze/operator", json=body).headers["x-roofline-catalog"].startswith("stale")
        assert attempts == []
        # GET .roofs reads the loaded catalog as well.
        assert client.get("/v1/devices/nvidia-h100-sxm/roofs").status_code == 200


def test_a_postgres_server_that_stops_answering_costs_seconds_not_minutes():
    """A listener that accepts TCP and then says nothing, as a server whose packets are held: the connect
    gives up after POSTGRES_CONNECT_TIMEOUT_S (3 s) instead of hanging past 40 s."""
    import socket
    import time

    from sqlalchemy.exc import OperationalError

    from service.persistence.db import POSTGRES_CONNECT_TIMEOUT_S, make_engine

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        engine = make_engine(f"postgresql+psycopg://postgres@127.0.0.1:{port}/test")
        started = time.monotonic()
        with pytest.raises(OperationalError):
            engine.connect()
        waited = time.monotonic() - started
        engine.dispose()
    assert waited < 4 * POSTGRES_CONNECT_TIMEOUT_S


def test_an_overload_is_counted_and_labelled_before_routing_and_a_vanished_client_is_not_a_500():
    from service.runtime.observability import OVERLOADED, ObservabilityMiddleware, route_label

    before = OVERLOADED._value.get()
    held = asyncio.Event()

    async def slow_app(scope, receive, send):
        await held.wait()

    app = AdmissionMiddleware(slow_app, Admission(max_in_flight=1))

    async def scenario():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            first = asyncio.create_task(client.get("/v1/devices"))
            await asyncio.sleep(0.05)
            refused = await client.get("/v1/devices")
            first.cancel()
            return refused

    assert asyncio.run(scenario()).status_code == 503
    assert OVERLOADED._value.get() == before + 1
    assert route_label({"path": "/v1/analyze/model"}, 503) == "before_routing"
    assert route_label({"path": "/nowhere"}, 404) == "unmatched"

    # A client that goes away mid-body: 499, as nginx files it, and no unexpected-error log.
    from starlette.requests import ClientDisconnect

    async def reading_app(scope, receive, send):
        raise ClientDisconnect()

    statuses = []
    middleware = ObservabilityMiddleware(reading_app)
    import service.runtime.observability as observability

    original = observability._children
    observability._children = lambda method, route, status: (statuses.append(status) or original(method, route, status))
    try:
        scope = {"type": "http", "method": "POST", "path": "/v1/analyze/model", "headers": []}

        async def receive():
            return {"type": "http.disconnect"}

        async def send(message):
            raise AssertionError("nothing is sent to a client that has gone")

        asyncio.run(middleware(scope, receive, send))
    finally:
        observability._children = original
    assert statuses == [499]


@pytest.mark.dialect_free
def test_a_request_stopped_by_the_end_of_a_graceful_shutdown_is_a_503_to_retry(database_url, tmp_path, monkeypatch):
    import signal
    import time

    from tests.reliability.test_compute_budgets import SEARCH
    from tests.reliability.test_writers import free_port, start_server, stop

    monkeypatch.setenv("ROOFLINE_GRACEFUL_SHUTDOWN_S", "1")
    port = free_port()
    server = start_server(database_url, port, tmp_path / "server.log", workers=1)
    answers = []
    try:
        # A layout search of about 4 s, still computing when the second of grace runs out.
        request = threading.Thread(target=lambda: answers.append(httpx.post(
            f"http://127.0.0.1:{port}/v1/plan/training", json=SEARCH, headers=AUTH, timeout=60)))
        request.start()
        time.sleep(1.0)
        server.send_signal(signal.SIGTERM)
        request.join(60)
    finally:
        stop(server)
    [answer] = answers
    assert answer.status_code == 503, answer.text  # uvicorn's own was a plain-text 500
    assert answer.json()["error"] == "shutting_down" and answer.headers["retry-after"] == "1"
