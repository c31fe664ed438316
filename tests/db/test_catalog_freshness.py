"""The in-memory catalog notices commits made through other connections, and a database that stays
locked past the busy timeout gives a 503 with nothing written, not a 500."""

import sqlite3

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import make_url
from sqlmodel import Session

from service.main import create_app
from service.persistence import repository
from service.persistence.catalog import DeviceCatalog
from service.persistence.db import is_sqlite, make_engine
from tests.conftest import AUTH

DEVICE = "nvidia-h100-sxm"
MEASUREMENT = {"kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": 3.0e12, "tool": "nvbandwidth"}


@pytest.fixture
def catalog(database_url):
    catalog = DeviceCatalog(make_engine(database_url, connections=1))
    catalog.refresh()
    yield catalog
    catalog.close()


def write_measurement(database_url: str) -> None:
    """A commit through an engine the catalog does not know: as another worker or replica would write."""
    engine = make_engine(database_url)
    with Session(engine) as session:
        repository.add_benchmarks(session, device_id=DEVICE, records=[MEASUREMENT], submitted_by="elsewhere")
    engine.dispose()


def test_a_commit_elsewhere_is_noticed_and_loaded(catalog, database_url):
    assert catalog.measured(DEVICE).memory == {}
    write_measurement(database_url)
    assert not catalog.is_known_current()
    catalog.refresh()
    assert catalog.measured(DEVICE).memory["hbm"].median == 3.0e12


def test_sqlite_knows_it_is_current_without_a_query(catalog, database_url):
    if not is_sqlite(database_url):
        # Elsewhere there is no commit probe: every request asks the database for the version.
        assert not catalog.is_known_current()
        return
    assert catalog.is_known_current()
    write_measurement(database_url)
    assert not catalog.is_known_current()
    catalog.refresh()
    assert catalog.is_known_current()


def test_a_write_lock_held_past_the_busy_timeout_is_a_503_and_writes_nothing(settings, database_url, monkeypatch):
    if not is_sqlite(database_url):
        pytest.skip("the SQLite busy timeout; PostgreSQL writers queue on row locks instead")
    monkeypatch.setattr("service.persistence.db.SQLITE_BUSY_TIMEOUT_MS", 200)
    with TestClient(create_app(settings)) as client:
        blocker = sqlite3.connect(make_url(database_url).database, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # holds the one write lock, as a long transaction would
        try:
            refused = client.post(f"/v1/devices/{DEVICE}/benchmarks", json=MEASUREMENT, headers=AUTH)
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["error"] == "database_unavailable"
        assert client.get(f"/v1/devices/{DEVICE}/benchmarks").json() == []
        # The lock gone, the same request succeeds.
        assert client.post(f"/v1/devices/{DEVICE}/benchmarks", json=MEASUREMENT, headers=AUTH).status_code == 201
