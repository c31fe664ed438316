"""Database tables."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Column, DateTime, Float, ForeignKey, Integer, MetaData, String, Text
from sqlalchemy.types import TypeDecorator
from sqlmodel import Field, SQLModel

# Benchmark kinds measured on a link between devices, whose link's name the level column keeps.
LINK_KINDS = ("link_bandwidth", "collective_latency")

# Stable constraint names, so that migrations can refer to them on every dialect.
SQLModel.metadata.naming_convention = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
metadata: MetaData = SQLModel.metadata


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator):
    """Timestamps stored in UTC and always read back timezone-aware (SQLite drops the offset)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value, dialect):
        if value is not None and value.tzinfo is not None:
            value = value.astimezone(UTC)
        return value

    def process_result_value(self, value, dialect):
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value


class Device(SQLModel, table=True):
    __tablename__ = "devices"

    id: str = Field(primary_key=True, max_length=64)
    name: str = Field(max_length=200)
    vendor: str = Field(max_length=100)
    architecture: str | None = Field(default=None, max_length=200)
    memory_type: str | None = Field(default=None, max_length=100)
    memory_capacity_bytes: int = Field(sa_type=BigInteger)
    memory_capacity_marketing: str | None = Field(default=None, max_length=50)
    memory_capacity_physical_bytes: int | None = Field(default=None, sa_type=BigInteger)
    compute_peaks: list[dict[str, Any]] = Field(sa_column=Column(JSON, nullable=False))
    memory_levels: list[dict[str, Any]] = Field(sa_column=Column(JSON, nullable=False))
    sm_count: int | None = None
    compute_unit_name: str | None = Field(default=None, max_length=50)
    boost_clock_hz: float | None = None
    tdp_w: float | None = None
    interconnect_bandwidth_bytes_per_s: float | None = None
    interconnect_kind: str | None = Field(default=None, max_length=100)
    confidence: str | None = Field(default=None, max_length=500)
    citations: dict[str, str] = Field(sa_column=Column(JSON, nullable=False))
    origin: str = Field(max_length=16)
    base_device_id: str | None = Field(default=None, max_length=64)
    default_matmul_tile: list[int] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    microarchitecture: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    kernel_launch_overhead_s: float | None = None
    usable_memory_bytes: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    collective_latency_s: float | None = None
    node_size: int | None = None
    in_network_reduction: bool | None = None
    inter_node_bandwidth_bytes_per_s: float | None = None
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    updated_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))


class Benchmark(SQLModel, table=True):
    """One submitted measurement of a compute roof (dtype, unit) or a bandwidth roof (level)."""

    __tablename__ = "benchmarks"

    id: int | None = Field(default=None, sa_column=Column(Integer, primary_key=True, autoincrement=True))
    device_id: str = Field(sa_column=Column(String(64), ForeignKey("devices.id", ondelete="CASCADE"),
                                            nullable=False, index=True))
    kind: str = Field(max_length=32)
    dtype: str | None = Field(default=None, max_length=16)
    unit: str | None = Field(default=None, max_length=16)
    level: str | None = Field(default=None, max_length=16)
    flops_per_s: float | None = None
    bytes_per_s: float | None = None
    seconds: float | None = None  # a collective_latency record's
    tool: str = Field(max_length=200)
    measured_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    host: str | None = Field(default=None, max_length=200)
    clock_hz: float | None = None
    power_limit_w: float | None = None
    notes: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    exceeds_nominal_reason: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    off_nominal_reason: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    submitted_by: str = Field(max_length=100)
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))

    @property
    def link(self) -> str | None:
        return self.level if self.kind in LINK_KINDS else None


class ModelConfig(SQLModel, table=True):
    """A catalog model: its config (a Hugging Face config.json, or the generic schema)."""

    __tablename__ = "models"

    id: str = Field(primary_key=True, max_length=100)
    name: str = Field(max_length=200)
    family: str = Field(max_length=50)
    config: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    source: str | None = Field(default=None, max_length=1000)
    origin: str = Field(max_length=16)
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    updated_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))


class CatalogState(SQLModel, table=True):
    """One row: the catalog's version, bumped in the same transaction as every write."""

    __tablename__ = "catalog_state"

    id: int = Field(sa_column=Column(Integer, primary_key=True, autoincrement=False))
    version: int = Field(sa_type=BigInteger)


class IdempotencyKey(SQLModel, table=True):
    """A write sent with an Idempotency-Key: claimed before the write runs, its answer kept after, so a retry of
    the same write is answered again instead of applied twice."""

    __tablename__ = "idempotency_keys"

    client: str = Field(sa_column=Column(String(64), primary_key=True))  # SHA-256 of the Authorization header
    key: str = Field(sa_column=Column(String(200), primary_key=True))
    fingerprint: str = Field(max_length=64)  # SHA-256 of the method, path and body
    status: int | None = None  # None while the write runs (or if it never finished)
    response: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    # Indexed: each claim deletes the keys past their time to live (ROOFLINE_IDEMPOTENCY_TTL_S).
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False, index=True))


class KernelTiming(SQLModel, table=True):
    """One submitted measured kernel time: the operator as the operator endpoint takes it, its model FLOPs and HBM
    bytes when it was stored (what a calibration is fitted against), and the time measured."""

    __tablename__ = "kernel_timings"

    id: int | None = Field(default=None, sa_column=Column(Integer, primary_key=True, autoincrement=True))
    device_id: str = Field(sa_column=Column(String(64), ForeignKey("devices.id", ondelete="CASCADE"),
                                            nullable=False, index=True))
    engine: str = Field(max_length=64)
    source: str = Field(max_length=1000)
    kind: str = Field(max_length=32)
    dtype: str = Field(max_length=16)  # the compute dtype its roof is read for
    operator: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    flops: float
    hbm_bytes: float
    time_s: float
    submitted_by: str = Field(max_length=100)
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))


class StoredKernelCalibration(SQLModel, table=True):
    """The calibration fitted to a device's timings of one engine and compute dtype, refitted in the transaction
    that changes them."""

    __tablename__ = "kernel_calibrations"

    device_id: str = Field(sa_column=Column(String(64), ForeignKey("devices.id", ondelete="CASCADE"),
                                            primary_key=True))
    engine: str = Field(sa_column=Column(String(64), primary_key=True))
    dtype: str = Field(sa_column=Column(String(16), primary_key=True))
    fit: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))  # KernelCalibration's fields
    fitted_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))


class ServingRun(SQLModel, table=True):
    """One submitted measured serving run: its deployment as the serving analysis takes it, the service's bounds
    there when it was stored (what a calibration is fitted against), and the medians measured."""

    __tablename__ = "serving_runs"

    id: int | None = Field(default=None, sa_column=Column(Integer, primary_key=True, autoincrement=True))
    device_id: str = Field(sa_column=Column(String(64), ForeignKey("devices.id", ondelete="CASCADE"),
                                            nullable=False, index=True))
    engine: str = Field(max_length=64)
    model: str = Field(max_length=200)  # a catalog model id or "inline <family>"
    precision: str = Field(max_length=16)  # the weights' type
    speculative: str = Field(max_length=16)  # the speculative method or "none"
    input_len: int
    output_len: int
    concurrency: int
    request: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    tpot_s: float
    ttft_s: float
    bound_tpot_s: float
    bound_ttft_s: float
    bound_prefill_share_s: float = Field(default=0.0, sa_column=Column(Float, nullable=False, server_default="0"))
    source: str = Field(max_length=1000)
    exceeds_bound_reason: str | None = Field(default=None, max_length=1000)
    submitted_by: str = Field(max_length=100)
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))


class StoredServingCalibration(SQLModel, table=True):
    """The calibration fitted to the runs of one device, engine, model, weights' type and speculative method,
    refitted in the transaction that changes them."""

    __tablename__ = "serving_calibrations"

    device_id: str = Field(sa_column=Column(String(64), ForeignKey("devices.id", ondelete="CASCADE"),
                                            primary_key=True))
    engine: str = Field(sa_column=Column(String(64), primary_key=True))
    model: str = Field(sa_column=Column(String(200), primary_key=True))
    precision: str = Field(sa_column=Column(String(16), primary_key=True))
    speculative: str = Field(sa_column=Column(String(16), primary_key=True))
    fit: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))  # ServingCalibration's fields
    fitted_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))


class AuditEntry(SQLModel, table=True):
    """One write committed (who, what, when): added to the write's own transaction, so a write and its record are
    committed together or not at all."""

    __tablename__ = "audit_log"

    id: int | None = Field(default=None, sa_column=Column(Integer, primary_key=True, autoincrement=True))
    at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False, index=True))
    writer: str = Field(max_length=100)  # the token's label, never the token
    method: str = Field(max_length=8)
    path: str = Field(max_length=300)
    request_id: str = Field(max_length=128)
