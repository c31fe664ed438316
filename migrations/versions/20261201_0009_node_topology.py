"""Devices carry their node topology for training collectives: devices per node (the scale-up link's reach)
and the inter-node bandwidth per device; catalog entries get the shipped catalog's cited figures.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

import json

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

FIELDS = ("node_size", "inter_node_bandwidth_bytes_per_s")


def upgrade() -> None:
    with op.batch_alter_table("devices") as batch:
        batch.add_column(sa.Column("node_size", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("inter_node_bandwidth_bytes_per_s", sa.Float(), nullable=True))
    from service.persistence.catalog import nominal_catalog

    devices = sa.table("devices", sa.column("id", sa.String), sa.column("origin", sa.String),
                       sa.column("citations", sa.JSON), *(sa.column(name) for name in FIELDS))
    connection = op.get_bind()
    for entry in nominal_catalog():
        if entry.get("node_size") is None:
            continue
        found = connection.execute(sa.select(devices.c.citations).where(
            devices.c.id == entry["id"], devices.c.origin == "catalog")).first()
        if found is None:
            continue  # deleted, or replaced by a user: left as they are
        citations = found[0] if isinstance(found[0], dict) else json.loads(found[0] or "{}")
        citations.update({name: entry["citations"][name] for name in FIELDS})
        connection.execute(devices.update().where(devices.c.id == entry["id"]).values(
            citations=citations, **{name: entry[name] for name in FIELDS}))


def downgrade() -> None:
    with op.batch_alter_table("devices") as batch:
        for name in reversed(FIELDS):
            batch.drop_column(name)
