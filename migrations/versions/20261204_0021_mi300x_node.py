"""The MI300X's node (eight GPUs on one xGMI mesh, a 400 Gb/s NIC each) onto databases created without it: a
multi-GPU MI300X deployment had no node to place its devices in.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-04
"""

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

FIELDS = ("node_size", "inter_node_bandwidth_bytes_per_s")


def upgrade() -> None:
    from service.persistence.catalog import backfill_catalog_fields

    backfill_catalog_fields(op.get_bind(), FIELDS, ids=("amd-mi300x",))


def downgrade() -> None:
    op.execute("UPDATE devices SET node_size = NULL, inter_node_bandwidth_bytes_per_s = NULL "
               "WHERE id = 'amd-mi300x' AND origin = 'catalog'")
