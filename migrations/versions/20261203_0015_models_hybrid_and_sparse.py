"""The catalog's hybrid and sparse-attention models of 2025-26 (Qwen3-Next-80B-A3B, the Nemotron-H models,
DeepSeek-V3.2) and Kimi K2, added to databases created before them; a database created from now on has them from
revision 0003, which seeds the whole shipped index.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-03
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

ADDED = ("qwen3-next-80b-a3b", "deepseek-v3.2", "kimi-k2-instruct", "nemotron-3-nano-30b-a3b", "nemotron-h-56b")


def upgrade() -> None:
    from service.persistence.catalog import seed_catalog_models

    seed_catalog_models(op.get_bind(), ADDED)


def downgrade() -> None:
    listed = ", ".join(f"'{model_id}'" for model_id in ADDED)
    op.execute(f"DELETE FROM models WHERE origin = 'catalog' AND id IN ({listed})")
