"""Measured serving runs users submit, and the serving calibrations fitted to them.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "serving_runs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("device_id", sa.String(64), sa.ForeignKey("devices.id", ondelete="CASCADE",
                                                            name=op.f("fk_serving_runs_device_id_devices")), nullable=False),
        sa.Column("engine", sa.String(64), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("precision", sa.String(16), nullable=False),
        sa.Column("speculative", sa.String(16), nullable=False),
        sa.Column("input_len", sa.Integer(), nullable=False),
        sa.Column("output_len", sa.Integer(), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=False),
        sa.Column("request", sa.JSON(), nullable=False),
        sa.Column("tpot_s", sa.Float(), nullable=False),
        sa.Column("ttft_s", sa.Float(), nullable=False),
        sa.Column("bound_tpot_s", sa.Float(), nullable=False),
        sa.Column("bound_ttft_s", sa.Float(), nullable=False),
        sa.Column("source", sa.String(1000), nullable=False),
        sa.Column("exceeds_bound_reason", sa.String(1000), nullable=True),
        sa.Column("submitted_by", sa.String(100), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_serving_runs")),
    )
    op.create_index(op.f("ix_serving_runs_device_id"), "serving_runs", ["device_id"])
    op.create_table(
        "serving_calibrations",
        sa.Column("device_id", sa.String(64), sa.ForeignKey("devices.id", ondelete="CASCADE",
                                                            name=op.f("fk_serving_calibrations_device_id_devices")),
                  nullable=False),
        sa.Column("engine", sa.String(64), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("precision", sa.String(16), nullable=False),
        sa.Column("speculative", sa.String(16), nullable=False),
        sa.Column("fit", sa.JSON(), nullable=False),
        sa.Column("fitted_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("device_id", "engine", "model", "precision", "speculative",
                                name=op.f("pk_serving_calibrations")),
    )


def downgrade() -> None:
    op.drop_table("serving_calibrations")
    op.drop_index(op.f("ix_serving_runs_device_id"), table_name="serving_runs")
    op.drop_table("serving_runs")
