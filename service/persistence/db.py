"""Engine factory and sessions. SQLite gets WAL and a busy timeout so concurrent writers wait, not fail."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import URL, Engine, make_url
from sqlmodel import create_engine

SQLITE_BUSY_TIMEOUT_MS = 10_000


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def sqlite_file(url: str | URL) -> str | None:
    """The database file of a file-backed SQLite URL; None for an in-memory one or another database."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    return parsed.database


def ensure_sqlite_directory(url: str) -> None:
    database = sqlite_file(url)
    if database:
        Path(database).parent.mkdir(parents=True, exist_ok=True)


def make_engine(url: str, connections: int | None = None) -> Engine:
    """An engine with SQLAlchemy's default pool, or a pool of exactly `connections`."""
    pool = {} if connections is None else {"pool_size": connections, "max_overflow": 0}
    if not is_sqlite(url):
        return create_engine(url, pool_pre_ping=True, **pool)
    ensure_sqlite_directory(url)
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
                           **pool)

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection, _record):
        # The driver's own transaction handling is kept: a SQLAlchemy-issued deferred BEGIN was seen
        # to raise "database is locked" under concurrent writers even with a busy timeout.
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    return engine
