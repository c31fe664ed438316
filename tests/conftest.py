"""Shared fixtures: a migrated database per test, and an app client against it.

SQLite by default: a template file migrated once per session and copied for each test. With
ROOFLINE_TEST_POSTGRES set to an administrative URL (postgresql+psycopg://postgres@127.0.0.1:5432/test),
the same tests run on PostgreSQL: a template database migrated once per run, cloned for each test and
dropped afterwards.
"""

from __future__ import annotations

import importlib
import itertools
import os
import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from service.main import create_app
from service.persistence.migrate import upgrade
from service.runtime.config import Settings

TOKEN = "test-token-7f3a"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
# A copy of the team's datasheet collection (shared/data/devices.json, with its per-number sources), kept in
# the repository: the tests never read outside it.
TEAM_DATASHEETS = Path(__file__).resolve().parent / "data" / "team_datasheets.json"


def import_crosscheck(module: str):
    """A library of the FLOP cross-checks (torch, transformers): skipped where it is not installed, a failure
    where CI requires it."""
    if os.environ.get("REQUIRE_CROSSCHECK"):
        return importlib.import_module(module)
    return pytest.importorskip(module)


def transformers_parameters(model) -> int:
    """A transformers model's parameters plus the persistent buffers its checkpoint stores as weights (a router's
    score-correction bias is a buffer there)."""
    stored = set(model.state_dict())
    return (sum(p.numel() for p in model.parameters())
            + sum(b.numel() for name, b in model.named_buffers() if name in stored))


def import_torch():
    return import_crosscheck("torch")


def forward_flop_counts(layer, *args, **kwargs):
    """FlopCounterMode over one forward of a real layer as a served model runs it (no gradient anywhere), by
    operator name ("mm", "bmm", "convolution", ...), with the total under "total".

    The layer's parameters are frozen, not only the forward run under no_grad: FlopCounterMode's module tracker
    hooks the backward of every tensor that requires a gradient, and a layer that hands one of its parameters to a
    submodule (transformers 5.25's depthwise convolutions do) then fails in torch ("Expected gradient function to be
    set"). Freezing changes no FLOP: the forward computes the same products."""
    torch = import_torch()
    from torch.utils.flop_counter import FlopCounterMode

    layer.requires_grad_(False)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        layer(*args, **kwargs)
    counts = {str(op).split(".")[-1]: flops for op, flops in counter.get_flop_counts()["Global"].items()}
    counts["total"] = counter.get_total_flops()
    return counts


POSTGRES_ADMIN_URL = os.environ.get("ROOFLINE_TEST_POSTGRES")
_clones = itertools.count()


def _admin(sql: str) -> None:
    engine = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(text(sql))
    engine.dispose()


def postgres_url(database: str) -> str:
    return make_url(POSTGRES_ADMIN_URL).set(database=database).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def migrated_template(tmp_path_factory):
    """Migrations run for real once per session; each test gets a copy of the result."""
    if POSTGRES_ADMIN_URL:
        name = f"roofline_template_{os.getpid()}"
        _admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        _admin(f"CREATE DATABASE {name}")
        upgrade(postgres_url(name))
        yield name
        _admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        return
    path = tmp_path_factory.mktemp("template") / "roofline.db"
    upgrade(f"sqlite:///{path}")
    yield path


def fresh_database(migrated_template, path: Path) -> tuple[str, object]:
    """(URL, drop) of a new copy of the migrated template: a file on SQLite, a cloned database on PostgreSQL."""
    if POSTGRES_ADMIN_URL:
        name = f"roofline_test_{os.getpid()}_{next(_clones)}"
        _admin(f"CREATE DATABASE {name} TEMPLATE {migrated_template}")
        return postgres_url(name), lambda: _admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    shutil.copy(migrated_template, path)
    return f"sqlite:///{path}", lambda: None


@pytest.fixture
def database_url(tmp_path, migrated_template):
    url, drop = fresh_database(migrated_template, tmp_path / "roofline.db")
    yield url
    drop()


@pytest.fixture
def settings(database_url) -> Settings:
    return Settings(database_url=database_url, api_tokens=f"tester={TOKEN}", migrate_on_start=True)


@pytest.fixture
def client(settings):
    with TestClient(create_app(settings)) as test_client:
        yield test_client


@pytest.fixture
def empty_database_url(tmp_path):
    """A database with no tables at all, on the dialect under test."""
    if POSTGRES_ADMIN_URL:
        name = f"roofline_empty_{os.getpid()}_{next(_clones)}"
        _admin(f"CREATE DATABASE {name}")
        yield postgres_url(name)
        _admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        return
    yield f"sqlite:///{tmp_path / 'fresh.db'}"


@pytest.fixture
def live_server(settings):
    """The app served by a real uvicorn on a free loopback port, in a thread; yields its base URL."""
    import socket
    import threading
    import time

    import httpx
    import uvicorn

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    from service.runtime.server import BoundedHeadersProtocol

    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning",
                                           http=BoundedHeadersProtocol))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/healthz").status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.05)
    yield base
    server.should_exit = True
    thread.join(timeout=10)


_ARTIFACTS: list[Path] = []


def record_artifact(path: Path) -> None:
    """A file a test leaves for people to look at (a screenshot): named at the end of the run."""
    _ARTIFACTS.append(path)


def pytest_terminal_summary(terminalreporter):
    for path in _ARTIFACTS:
        terminalreporter.write_line(f"artifact: {path}")


def pytest_collection_modifyitems(items):
    """The pure core's tests touch no database, and fuzzing the chart endpoints draws charts (most of a second
    each) from the catalog alone: the PostgreSQL run skips them with the other dialect-free tests."""
    for item in items:
        path = str(item.path).replace("\\", "/")
        if "tests/core/" in path or ("tests/fuzz/" in path and ("/plot/" in item.name or "roofline.svg" in item.name)):
            item.add_marker(pytest.mark.dialect_free)


@pytest.fixture
def catalog_with_measurements(client):
    """The catalog after one measured HBM and one measured bf16 roof, so that some answers cite measured roofs."""
    for body in ({"kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": 3.0e12, "tool": "nvbandwidth"},
                 {"kind": "compute", "dtype": "bf16", "unit": "tensor", "flops_per_s": 7.0e14, "tool": "cublas"}):
        assert client.post("/v1/devices/nvidia-h100-sxm/benchmarks", json=body, headers=AUTH).status_code == 201
    catalog = client.app.state.catalog
    catalog.refresh()  # as a request's freshness check would before its analysis
    return catalog


def assert_batch_answers_as_endpoint(client, analysis: str, bodies: list[dict], bad: int, sampled: list[int]) -> None:
    """`bodies` posted as one batch of `analysis` items: the item at `bad` gets its own 422 and the rest are answered;
    each sampled item (the bad one aside: its error's location differs) gets what /v1/analyze/<analysis> answers."""
    response = client.post("/v1/analyze/batch", json={"items": [
        {"id": str(i), "analysis": analysis, "request": body} for i, body in enumerate(bodies)]})
    assert response.status_code == 200
    results = response.json()["results"]
    assert results[bad]["status"] == 422
    for index in sampled:
        if index == bad:
            continue
        single = client.post(f"/v1/analyze/{analysis}", json=bodies[index])
        assert results[index]["status"] == single.status_code
        assert (results[index]["result"] or results[index]["error"]) == single.json()
