"""The catalog's devices of 2025-26 (B300, GB200, GB300, MI325X, MI355X), added to databases created before them; a
database created from now on has them from revision 0001, which seeds the whole shipped catalog.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03
"""

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

ADDED = ("nvidia-b300", "nvidia-gb200", "nvidia-gb300", "amd-mi325x", "amd-mi355x")


def upgrade() -> None:
    from service.persistence.catalog import seed_catalog_devices

    seed_catalog_devices(op.get_bind(), ADDED)


def downgrade() -> None:
    op.execute("DELETE FROM devices WHERE origin = 'catalog' AND id IN "
               "('nvidia-b300', 'nvidia-gb200', 'nvidia-gb300', 'amd-mi325x', 'amd-mi355x')")
