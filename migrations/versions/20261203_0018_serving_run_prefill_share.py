"""A stored serving run keeps its bound's prefill share (what the TPOT of an aggregated deployment waits for on top
of one step's bound), which serving calibrations now fit beside the TPOT bound. Runs stored before it take 0: they
were fitted without one, and refit alike until they are submitted again.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("serving_runs") as batch:
        batch.add_column(sa.Column("bound_prefill_share_s", sa.Float(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("serving_runs") as batch:
        batch.drop_column("bound_prefill_share_s")
