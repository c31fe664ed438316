"""Starting several workers or replicas at once on a fresh database: every one migrates safely, and a
replica told not to migrate refuses an un-migrated database with a message, not a SQL error."""

import multiprocessing

import pytest
from sqlalchemy import create_engine, text

from service.main import create_app
from service.persistence.catalog import nominal_catalog
from service.persistence.migrate import pending_migration, upgrade
from service.runtime.config import Settings


def _migrate(url: str, results) -> None:
    try:
        upgrade(url)
        results.put("ok")
    except Exception as exc:  # reported to the parent, which fails the test with it
        results.put(f"{type(exc).__name__}: {exc}")


def test_six_processes_migrating_one_fresh_database_at_once_all_succeed(empty_database_url):
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    workers = [context.Process(target=_migrate, args=(empty_database_url, results)) for _ in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    outcomes = [results.get(timeout=5) for _ in workers]
    assert outcomes == ["ok"] * 6
    assert pending_migration(empty_database_url) is None
    engine = create_engine(empty_database_url)
    with engine.connect() as connection:
        # Seeded once, not six times.
        assert connection.execute(text("select count(*) from devices")).scalar_one() == len(nominal_catalog())
    engine.dispose()


def test_a_replica_that_may_not_migrate_refuses_an_unmigrated_database(empty_database_url, capfd):
    from fastapi.testclient import TestClient

    settings = Settings(database_url=empty_database_url, migrate_on_start=False)
    # uvicorn sees the SystemExit and exits; the test client's portal reports it as a cancelled start.
    with pytest.raises(BaseException) as refused, TestClient(create_app(settings)):
        pass
    assert not isinstance(refused.value, AssertionError)
    logged = capfd.readouterr().err
    assert "run `python -m service.persistence.migrate`" in logged
    assert "revision none (empty)" in logged
