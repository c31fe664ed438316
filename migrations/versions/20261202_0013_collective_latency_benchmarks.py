"""Measured collective latencies: a benchmark's fixed cost of one collective on a link, in seconds.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("benchmarks") as batch:
        batch.add_column(sa.Column("seconds", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("benchmarks") as batch:
        batch.drop_column("seconds")
