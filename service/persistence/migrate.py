"""Run the Alembic migrations programmatically (app start-up, CLI, tests).

Alembic is imported only when there is something to migrate: every worker checks its database at start-up, and
alembic would stay in its memory for good (11 MB of a worker's 105 at start), so the check reads the database's
revision with SQLAlchemy and the code's head from the revision files themselves (tests/db/test_migrations.py holds
that head equal to alembic's own).
"""

from __future__ import annotations

import contextlib
import fcntl
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import create_engine, event, text
from sqlalchemy.exc import SQLAlchemyError

from service.persistence.db import ensure_sqlite_directory, is_sqlite, sqlite_file

# Any constant shared by every process that migrates this database: PostgreSQL's advisory lock key.
MIGRATION_LOCK_KEY = 0x726F6F66  # "roof"

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"


if TYPE_CHECKING:
    from alembic.config import Config

_REVISION = re.compile(r'^revision\s*=\s*["\'](\w+)["\']', re.MULTILINE)
_DOWN_REVISION = re.compile(r'^down_revision\s*=\s*(?:None|["\'](\w+)["\'])', re.MULTILINE)


@cache
def head_revision() -> str | None:
    """The code's head revision, read from the revision files: the one no other revision follows (None when the
    files do not name exactly one, for alembic itself to judge)."""
    revisions, followed = set(), set()
    for path in (MIGRATIONS_DIR / "versions").glob("*.py"):
        source = path.read_text()
        revision, down = _REVISION.search(source), _DOWN_REVISION.search(source)
        if revision is None or down is None:
            return None
        revisions.add(revision.group(1))
        if down.group(1):
            followed.add(down.group(1))
    heads = revisions - followed
    return heads.pop() if len(heads) == 1 else None


def database_revision(url: str) -> str | None:
    """The database's revision, or None (no database yet, no version table, unreachable: migrating will tell)."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
    except SQLAlchemyError:
        return None
    finally:
        engine.dispose()


def at_head(url: str) -> bool:
    head = head_revision()
    return head is not None and database_revision(url) == head


def alembic_config(url: str) -> Config:
    from alembic.config import Config

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
    from alembic import command

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


def pending_migration(url: str) -> tuple[str | None, str | None] | None:
    """(the database's revision, the head) when the database is behind the code; None when at head."""
    head = head_revision()
    if head is None:
        from alembic.script import ScriptDirectory

        head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    current = database_revision(url)
    return None if current == head else (current, head)


if __name__ == "__main__":
    from service.runtime.config import get_settings

    upgrade(get_settings().database_url)
    print("database is at the head revision")
