"""Devices carry the memory the runtime exposes beside the as-built capacity; catalog entries get the
cited figures of the shipped catalog.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

import json

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("devices") as batch:
        batch.add_column(sa.Column("usable_memory_bytes", sa.BigInteger(), nullable=True))
    from service.persistence.catalog import nominal_catalog

    devices = sa.table("devices", sa.column("id", sa.String), sa.column("origin", sa.String),
                       sa.column("usable_memory_bytes", sa.BigInteger), sa.column("citations", sa.JSON))
    connection = op.get_bind()
    for entry in nominal_catalog():
        if entry.get("usable_memory_bytes") is None:
            continue
        row = connection.execute(sa.select(devices.c.citations).where(
            devices.c.id == entry["id"], devices.c.origin == "catalog")).first()
        if row is None:
            continue  # deleted, or replaced by a user: left as they are
        citations = row[0] if isinstance(row[0], dict) else json.loads(row[0] or "{}")
        citations["usable_memory_bytes"] = entry["citations"]["usable_memory_bytes"]
        connection.execute(devices.update().where(devices.c.id == entry["id"]).values(
            usable_memory_bytes=entry["usable_memory_bytes"], citations=citations))


def downgrade() -> None:
    with op.batch_alter_table("devices") as batch:
        batch.drop_column("usable_memory_bytes")
