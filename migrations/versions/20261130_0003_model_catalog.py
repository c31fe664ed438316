"""Model catalog, seeded with the reference Hugging Face configs.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    models = op.create_table(
        "models",
        sa.Column("id", sa.String(length=100), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("family", sa.String(length=50), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("source", sa.String(length=1000), nullable=True),
        sa.Column("origin", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_models")),
    )
    from service.persistence.catalog import model_catalog

    now = datetime.now(UTC)
    op.bulk_insert(models, [
        {"id": entry["id"], "name": entry["name"], "family": entry["config"]["model_type"], "config": entry["config"],
         "source": entry["source"], "origin": "catalog", "created_at": now, "updated_at": now}
        for entry in model_catalog()
    ])


def downgrade() -> None:
    op.drop_table("models")
