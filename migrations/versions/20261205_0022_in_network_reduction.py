"""Devices say whether their scale-up switch reduces in the network (NVLink SHARP): an all-reduce inside such a node
is bounded at half a ring's bytes, since the ring's bound sat above measured all-reduces of 0.5-1 GB on eight H100s
and H200s; catalog entries get the shipped catalog's cited value.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-05
"""

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

FIELDS = ("in_network_reduction",)


def upgrade() -> None:
    with op.batch_alter_table("devices") as batch:
        batch.add_column(sa.Column("in_network_reduction", sa.Boolean(), nullable=True))
    from service.persistence.catalog import backfill_catalog_fields

    backfill_catalog_fields(op.get_bind(), FIELDS)


def downgrade() -> None:
    with op.batch_alter_table("devices") as batch:
        batch.drop_column("in_network_reduction")
