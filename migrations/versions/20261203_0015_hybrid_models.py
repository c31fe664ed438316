"""The catalog's first hybrid model (Qwen3-Next-80B-A3B: Gated DeltaNet and gated attention), added to databases
created before it; a database created from now on has it from revision 0003, which seeds the whole shipped index.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-03
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

ADDED = ("qwen3-next-80b-a3b",)


def upgrade() -> None:
    from service.persistence.catalog import seed_catalog_models

    seed_catalog_models(op.get_bind(), ADDED)


def downgrade() -> None:
    op.execute("DELETE FROM models WHERE origin = 'catalog' AND id IN ('qwen3-next-80b-a3b')")
