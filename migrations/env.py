"""Alembic environment: the service's metadata, batch mode on SQLite, the URL from settings."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from service.persistence.tables import metadata

config = context.config


def database_url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if url:
        return url
    from service.runtime.config import get_settings

    return get_settings().database_url


def run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_offline() -> None:
    context.configure(url=database_url(), target_metadata=metadata, literal_binds=True,
                      render_as_batch=database_url().startswith("sqlite"))
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_offline()
elif (connection := config.attributes.get("connection")) is not None:
    run(connection)
else:
    engine = create_engine(database_url())
    with engine.begin() as connection:
        run(connection)
    engine.dispose()
