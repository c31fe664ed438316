"""Benchmark submissions; device profiles (base_device_id), matmul tiles, micro-architecture numbers.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("devices") as batch:
        batch.add_column(sa.Column("base_device_id", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("default_matmul_tile", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("microarchitecture", sa.JSON(), nullable=True))
    op.create_table(
        "benchmarks",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("device_id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("dtype", sa.String(length=16), nullable=True),
        sa.Column("unit", sa.String(length=16), nullable=True),
        sa.Column("level", sa.String(length=16), nullable=True),
        sa.Column("flops_per_s", sa.Float(), nullable=True),
        sa.Column("bytes_per_s", sa.Float(), nullable=True),
        sa.Column("tool", sa.String(length=200), nullable=False),
        sa.Column("measured_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("host", sa.String(length=200), nullable=True),
        sa.Column("clock_hz", sa.Float(), nullable=True),
        sa.Column("power_limit_w", sa.Float(), nullable=True),
        sa.Column("notes", sa.Text(), nullable=True),
        sa.Column("exceeds_nominal_reason", sa.Text(), nullable=True),
        sa.Column("submitted_by", sa.String(length=100), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["device_id"], ["devices.id"], name=op.f("fk_benchmarks_device_id_devices"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_benchmarks")),
    )
    op.create_index(op.f("ix_benchmarks_device_id"), "benchmarks", ["device_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_benchmarks_device_id"), table_name="benchmarks")
    op.drop_table("benchmarks")
    with op.batch_alter_table("devices") as batch:
        batch.drop_column("microarchitecture")
        batch.drop_column("default_matmul_tile")
        batch.drop_column("base_device_id")
