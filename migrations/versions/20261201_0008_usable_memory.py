"""Devices carry the memory the runtime exposes beside the as-built capacity; catalog entries get the
cited figures of the shipped catalog.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("devices") as batch:
        batch.add_column(sa.Column("usable_memory_bytes", sa.BigInteger(), nullable=True))
    from service.persistence.catalog import backfill_catalog_fields

    backfill_catalog_fields(op.get_bind(), ("usable_memory_bytes",))


def downgrade() -> None:
    with op.batch_alter_table("devices") as batch:
        batch.drop_column("usable_memory_bytes")
