"""Catalog devices cite one source per number as "Title (URL)" instead of the collection's research notes:
the shipped catalog's peaks, levels and citations replace those of catalog devices still as they shipped.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# The values are the same as before: only the citations inside them and beside them change.
FIELDS = ("compute_peaks", "memory_levels", "memory_capacity_bytes", "usable_memory_bytes", "sm_count",
          "boost_clock_hz", "tdp_w", "interconnect_bandwidth_bytes_per_s", "node_size",
          "inter_node_bandwidth_bytes_per_s")


def upgrade() -> None:
    from service.persistence.catalog import backfill_catalog_fields

    backfill_catalog_fields(op.get_bind(), FIELDS)


def downgrade() -> None:
    pass  # the older citations were notes, not data: nothing to restore
