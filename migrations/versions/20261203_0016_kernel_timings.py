"""Measured kernel timings a device's users submit, and the calibrations fitted to them.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "kernel_timings",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("device_id", sa.String(64), sa.ForeignKey("devices.id", ondelete="CASCADE",
                                                            name=op.f("fk_kernel_timings_device_id_devices")), nullable=False),
        sa.Column("engine", sa.String(64), nullable=False),
        sa.Column("source", sa.String(1000), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("dtype", sa.String(16), nullable=False),
        sa.Column("operator", sa.JSON(), nullable=False),
        sa.Column("flops", sa.Float(), nullable=False),
        sa.Column("hbm_bytes", sa.Float(), nullable=False),
        sa.Column("time_s", sa.Float(), nullable=False),
        sa.Column("submitted_by", sa.String(100), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_kernel_timings")),
    )
    op.create_index(op.f("ix_kernel_timings_device_id"), "kernel_timings", ["device_id"])
    op.create_table(
        "kernel_calibrations",
        sa.Column("device_id", sa.String(64), sa.ForeignKey("devices.id", ondelete="CASCADE",
                                                            name=op.f("fk_kernel_calibrations_device_id_devices")),
                  nullable=False),
        sa.Column("engine", sa.String(64), nullable=False),
        sa.Column("dtype", sa.String(16), nullable=False),
        sa.Column("fit", sa.JSON(), nullable=False),
        sa.Column("fitted_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("device_id", "engine", "dtype", name=op.f("pk_kernel_calibrations")),
    )


def downgrade() -> None:
    op.drop_table("kernel_calibrations")
    op.drop_index(op.f("ix_kernel_timings_device_id"), table_name="kernel_timings")
    op.drop_table("kernel_timings")
