"""Idempotency keys expire (ROOFLINE_IDEMPOTENCY_TTL_S, a day by default): each claim deletes the keys claimed
before the cut-off, so their claim time is indexed.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-04
"""

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_idempotency_keys_created_at", "idempotency_keys", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_idempotency_keys_created_at", table_name="idempotency_keys")
