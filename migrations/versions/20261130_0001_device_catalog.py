"""Devices table, seeded with the nominal catalog.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    devices = op.create_table(
        "devices",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("vendor", sa.String(length=100), nullable=False),
        sa.Column("architecture", sa.String(length=200), nullable=True),
        sa.Column("memory_type", sa.String(length=100), nullable=True),
        sa.Column("memory_capacity_bytes", sa.BigInteger(), nullable=False),
        sa.Column("memory_capacity_marketing", sa.String(length=50), nullable=True),
        sa.Column("memory_capacity_physical_bytes", sa.BigInteger(), nullable=True),
        sa.Column("compute_peaks", sa.JSON(), nullable=False),
        sa.Column("memory_levels", sa.JSON(), nullable=False),
        sa.Column("sm_count", sa.Integer(), nullable=True),
        sa.Column("compute_unit_name", sa.String(length=50), nullable=True),
        sa.Column("boost_clock_hz", sa.Float(), nullable=True),
        sa.Column("tdp_w", sa.Float(), nullable=True),
        sa.Column("interconnect_bandwidth_bytes_per_s", sa.Float(), nullable=True),
        sa.Column("interconnect_kind", sa.String(length=100), nullable=True),
        sa.Column("confidence", sa.String(length=500), nullable=True),
        sa.Column("citations", sa.JSON(), nullable=False),
        sa.Column("origin", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_devices")),
    )
    # Seeding happens here, once per database: a device a user later deletes stays deleted.
    from service.persistence.catalog import nominal_catalog

    now = datetime.now(UTC)
    columns = set(devices.c.keys())
    rows = [{name: value for name, value in entry.items() if name in columns} for entry in nominal_catalog()]
    op.bulk_insert(devices, [{**row, "origin": "catalog", "created_at": now, "updated_at": now} for row in rows])


def downgrade() -> None:
    op.drop_table("devices")
