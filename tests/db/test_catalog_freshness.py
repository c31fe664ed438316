"""The in-memory catalog notices commits made through other connections."""

import pytest
from sqlalchemy.engine import make_url
from sqlmodel import Session

from service import repository
from service.catalog import DeviceCatalog
from service.db import make_engine

DEVICE = "nvidia-h100-sxm"
MEASUREMENT = {"kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": 3.0e12, "tool": "nvbandwidth"}


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


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
