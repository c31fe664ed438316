"""The catalog's models of 2025-26 (gpt-oss-20b and -120b), added to databases created before them; a database
created from now on has them from revision 0003, which seeds the whole shipped index.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

ADDED = ("gpt-oss-20b", "gpt-oss-120b")


def upgrade() -> None:
    from service.persistence.catalog import seed_catalog_models

    seed_catalog_models(op.get_bind(), ADDED)


def downgrade() -> None:
    op.execute("DELETE FROM models WHERE origin = 'catalog' AND id IN ('gpt-oss-20b', 'gpt-oss-120b')")
