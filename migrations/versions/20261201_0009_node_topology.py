"""Devices carry their node topology for training collectives: devices per node (the scale-up link's reach)
and the inter-node bandwidth per device; catalog entries get the shipped catalog's cited figures.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

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
    from service.persistence.catalog import backfill_catalog_fields

    backfill_catalog_fields(op.get_bind(), FIELDS)


def downgrade() -> None:
    with op.batch_alter_table("devices") as batch:
        for name in reversed(FIELDS):
            batch.drop_column(name)
