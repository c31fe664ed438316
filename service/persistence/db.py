"""Engine factory and sessions. SQLite gets WAL and a busy timeout so concurrent writers wait, not fail."""

from __future__ import annotations

import os
import weakref
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import URL, Engine, make_url
from sqlmodel import create_engine

SQLITE_BUSY_TIMEOUT_MS = 10_000
POSTGRES_CONNECT_TIMEOUT_S = 3
POSTGRES_STATEMENT_TIMEOUT_MS = 10_000
POOL_TIMEOUT_S = 10


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


# The SQLite file each engine opened first, with its (device, inode): (path, identity).
_OPENED_FILES: weakref.WeakKeyDictionary[Engine, tuple[str, tuple[int, int] | None]] = weakref.WeakKeyDictionary()


def _file_identity(path: str) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return stat.st_dev, stat.st_ino


def database_file_intact(engine: Engine) -> bool:
    """False when the SQLite file this engine opened was deleted or replaced since: its connections would
    go on writing to an unlinked file, and every acknowledged write would vanish at the next start."""
    opened = _OPENED_FILES.get(engine)
    return opened is None or _file_identity(opened[0]) == opened[1]


def make_engine(url: str, connections: int | None = None) -> Engine:
    """An engine with SQLAlchemy's default pool, or a pool of exactly `connections`."""
    pool = {} if connections is None else {"pool_size": connections, "max_overflow": 0}
    if not is_sqlite(url):
        # A server that stops answering (packets held, not refused) must not hold a request for minutes:
        # connects, statements and the wait for a pooled connection are all bounded.
        return create_engine(url, pool_pre_ping=True, pool_timeout=POOL_TIMEOUT_S,
                             connect_args={"connect_timeout": POSTGRES_CONNECT_TIMEOUT_S,
                                           "options": f"-c statement_timeout={POSTGRES_STATEMENT_TIMEOUT_MS}"},
                             **pool)
    ensure_sqlite_directory(url)
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
                           **pool)

    database = sqlite_file(url)

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection, _record):
        # The driver's own transaction handling is kept: a SQLAlchemy-issued deferred BEGIN was seen
        # to raise "database is locked" under concurrent writers even with a busy timeout.
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()
        if database and engine not in _OPENED_FILES:
            _OPENED_FILES[engine] = (database, _file_identity(database))

    return engine
