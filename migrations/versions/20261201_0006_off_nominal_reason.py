"""Benchmarks keep why a measurement far below its nominal counterpart (or without one) was accepted.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("benchmarks") as batch:
        batch.add_column(sa.Column("off_nominal_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("benchmarks") as batch:
        batch.drop_column("off_nominal_reason")
