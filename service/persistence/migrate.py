"""Run the Alembic migrations programmatically (app start-up, CLI, tests)."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, event, text

from service.persistence.db import ensure_sqlite_directory, is_sqlite, sqlite_file

# Any constant shared by every process that migrates this database: PostgreSQL's advisory lock key.
MIGRATION_LOCK_KEY = 0x726F6F66  # "roof"

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


@contextlib.contextmanager
def _sqlite_migration_lock(url: str) -> Iterator[None]:
    """One migrating process at a time per SQLite file: the others wait on a lock file beside it, then
    find the database at head and do nothing."""
    database = sqlite_file(url)
    if database is None:
        yield
        return
    with open(f"{database}.migrate-lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate with a plain engine: on SQLite, foreign keys stay off so batch table copies keep child rows.

    Safe with any number of workers and replicas starting at once: migrations run under a lock (a lock
    file on SQLite, an advisory lock held by the migrating transaction on PostgreSQL), so the first
    migrates and the rest wait and then find nothing to do."""
    if is_sqlite(url):
        ensure_sqlite_directory(url)
    engine = create_engine(url)
    if is_sqlite(url):
        @event.listens_for(engine, "connect")
        def _no_foreign_keys(dbapi_connection, _record):
            dbapi_connection.execute("PRAGMA foreign_keys=OFF")
    try:
        with _sqlite_migration_lock(url), engine.begin() as connection:
            if not is_sqlite(url):
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
            config = alembic_config(url)
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
    finally:
        engine.dispose()


def pending_migration(url: str) -> tuple[str | None, str] | None:
    """(the database's revision, the head) when the database is behind the code; None when at head."""
    head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            current = MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()
    return None if current == head else (current, head)


if __name__ == "__main__":
    from service.runtime.config import get_settings

    upgrade(get_settings().database_url)
    print("database is at the head revision")
