"""A version counter bumped by every catalog write, so that each process (uvicorn worker, replica)
notices writes made by the others and reloads its in-memory catalog.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    state = op.create_table(
        "catalog_state",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_catalog_state")),
    )
    op.bulk_insert(state, [{"id": 1, "version": 1}])


def downgrade() -> None:
    op.drop_table("catalog_state")
