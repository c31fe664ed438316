"""Run the Alembic migrations programmatically (app start-up, CLI, tests)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, event

from service.persistence.db import ensure_sqlite_directory, is_sqlite

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate with a plain engine: on SQLite, foreign keys stay off so batch table copies keep child rows."""
    if is_sqlite(url):
        ensure_sqlite_directory(url)
    engine = create_engine(url)
    if is_sqlite(url):
        @event.listens_for(engine, "connect")
        def _no_foreign_keys(dbapi_connection, _record):
            dbapi_connection.execute("PRAGMA foreign_keys=OFF")
    try:
        with engine.begin() as connection:
            config = alembic_config(url)
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
    finally:
        engine.dispose()


if __name__ == "__main__":
    from service.runtime.config import get_settings

    upgrade(get_settings().database_url)
    print("database is at the head revision")
