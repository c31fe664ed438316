"""Measured roofs: benchmark submissions, the ERT import, and the roofs view of a device."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, FiniteFloat, model_validator

from schemas.common import (
    MAX_BYTES_PER_S,
    MAX_FLOPS_PER_S,
    MIN_BYTES_PER_S,
    MIN_FLOPS_PER_S,
    MemoryLevelName,
    PeakDTypeName,
    PositiveFinite,
    RoofSourceName,
    StrictModel,
    UnitName,
)

ShortText = Annotated[str, Field(min_length=1, max_length=200)]

FlopsPerSecond = Annotated[FiniteFloat, Field(ge=MIN_FLOPS_PER_S, le=MAX_FLOPS_PER_S,
                                              description="Measured throughput, FLOP/s (not GFLOP/s or TFLOP/s)")]
BytesPerSecond = Annotated[FiniteFloat, Field(ge=MIN_BYTES_PER_S, le=MAX_BYTES_PER_S,
                                              description="Measured bandwidth, bytes/s (not GB/s)")]


def _plausible_time(value: datetime | None) -> datetime | None:
    """A measurement time between 1970 and 2200, as an aware UTC time (a naive one is taken as UTC)."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    if not (datetime(1970, 1, 1, tzinfo=UTC) <= value <= datetime(2200, 1, 1, tzinfo=UTC)):
        raise ValueError("must lie between 1970-01-01 and 2200-01-01")
    return value.astimezone(UTC)


def _written_time(value):
    """A time written as a number is refused: pydantic reads it as seconds since 1970, so 0 became 1970-01-01."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise ValueError("give the time as ISO 8601 text (2026-06-01T12:00:00Z), not a number")
    return value


MeasuredAt = Annotated[datetime | None, BeforeValidator(_written_time), AfterValidator(_plausible_time)]


class BenchmarkMetadata(StrictModel):
    tool: ShortText = Field(description="What measured it, e.g. 'nvbandwidth 0.7', 'ERT 1.1', 'cublas gemm sweep'")
    measured_at: MeasuredAt = Field(None, description="When it was measured (ISO 8601, 1970 to 2200); default: now")
    host: str | None = Field(None, max_length=200, description="Host or cluster label")
    clock_hz: PositiveFinite | None = Field(None, description="SM clock during the run, Hz, if known")
    power_limit_w: PositiveFinite | None = Field(None, description="Power limit during the run, W, if known")
    notes: str | None = Field(None, max_length=4000)
    exceeds_nominal_reason: str | None = Field(
        None, min_length=1, max_length=1000,
        description="Required when the value exceeds its nominal counterpart by more than the tolerance (5 %): why")
    off_nominal_reason: str | None = Field(
        None, min_length=1, max_length=1000,
        description="Required when the value is below 10 % of its nominal counterpart (often a unit slip: values are "
                    "FLOP/s and bytes/s), or when the device has no nominal peak for this dtype and unit: why")


class ComputeBenchmarkCreate(BenchmarkMetadata):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"kind": "compute", "dtype": "bf16", "unit": "tensor", "flops_per_s": 7.2e14, "tool": "cublasLt gemm 8192^3",
         "host": "cluster-a/node-17", "power_limit_w": 700}]})
    kind: Literal["compute"]
    dtype: PeakDTypeName = Field(description="The dtype of the peak (fp8 for fp8_e4m3 and fp8_e5m2 alike: they "
                                             "compute at one peak)")
    unit: UnitName
    flops_per_s: FlopsPerSecond


class BandwidthBenchmarkCreate(BenchmarkMetadata):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": 2.9e12, "tool": "nvbandwidth 0.7",
         "host": "cluster-a/node-17"}]})
    kind: Literal["memory_bandwidth"]
    level: MemoryLevelName
    bytes_per_s: BytesPerSecond


LinkName = Literal["intra_node", "inter_node"]


class LinkBenchmarkCreate(BenchmarkMetadata):
    """A collective's bus bandwidth between devices, as nccl-tests reports busbw: what each device's link
    sustains in a ring, per direction."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"kind": "link_bandwidth", "link": "intra_node", "bytes_per_s": 3.6e11, "tool": "nccl-tests all_reduce_perf "
         "-b 1G -e 1G (busbw)", "host": "cluster-a/node-17"}]})
    kind: Literal["link_bandwidth"]
    link: LinkName = Field(description="'intra_node': the scale-up link among the devices of one node (NVLink); "
                                       "'inter_node': the scale-out link between nodes (InfiniBand, RoCE)")
    bytes_per_s: BytesPerSecond


class CollectiveLatencyBenchmarkCreate(BenchmarkMetadata):
    """The fixed cost of one small collective on a link, as the fastest kernels take it (e.g. nccl-tests
    all_reduce_perf at 8 bytes, captured in a CUDA graph): it replaces the device's collective_latency_s, so that
    no bound charges more than was measured."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"kind": "collective_latency", "link": "intra_node", "seconds": 2.3e-6, "tool": "nccl-tests all_reduce_perf "
         "-b 8 -e 8 -G 1 (8 GPUs, graph-captured)", "host": "cluster-a/node-17"}]})
    kind: Literal["collective_latency"]
    link: LinkName = Field(description="The link the collective's ranks share: 'intra_node' or 'inter_node'")
    seconds: Annotated[float, Field(gt=0, le=0.01)] = Field(
        description="Time of one small collective, seconds (at most 10 ms: larger is a unit slip)")


BENCHMARK_KINDS = ("compute", "memory_bandwidth", "link_bandwidth", "collective_latency")
BenchmarkCreate = Annotated[ComputeBenchmarkCreate | BandwidthBenchmarkCreate | LinkBenchmarkCreate
                            | CollectiveLatencyBenchmarkCreate, Field(discriminator="kind")]


class BenchmarkPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: int
    device_id: str
    kind: Literal["compute", "memory_bandwidth", "link_bandwidth", "collective_latency"]
    dtype: str | None
    unit: str | None
    level: str | None = Field(description="The memory level of a memory_bandwidth record")
    link: str | None = Field(None, description="The link of a link_bandwidth or collective_latency record")
    flops_per_s: float | None
    bytes_per_s: float | None
    seconds: float | None = Field(None, description="A collective_latency record's time, seconds")
    tool: str
    measured_at: datetime
    host: str | None
    clock_hz: float | None
    power_limit_w: float | None
    notes: str | None
    exceeds_nominal_reason: str | None
    off_nominal_reason: str | None = None
    submitted_by: str = Field(description="Label of the token that submitted it (never the token)")
    created_at: datetime

    @model_validator(mode="after")
    def _link_is_not_a_level(self):
        if self.kind in ("link_bandwidth", "collective_latency"):
            self.level = None
        return self


class ErtImport(StrictModel):
    """An Empirical Roofline Toolkit result: its `roofline.json` with `empirical.gflops.data` and
    `empirical.gbytes.data` as [name, value] pairs in GFLOP/s and GB/s (1e9)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "tool": "ERT 1.1.0", "host": "cluster-a/node-17",
        "roofline": {"empirical": {"gflops": {"data": [["FP64 GFLOPs", 7068.9]]},
                                   "gbytes": {"data": [["L1", 14029.3], ["L2", 2996.8], ["DRAM", 828.8]]}}}}]})
    tool: ShortText = "ERT"
    measured_at: MeasuredAt = None
    host: str | None = Field(None, max_length=200)
    notes: str | None = Field(None, max_length=4000)
    exceeds_nominal_reason: str | None = Field(None, min_length=1, max_length=1000)
    off_nominal_reason: str | None = Field(None, min_length=1, max_length=1000)
    roofline: dict[str, Any] = Field(description="The roofline.json document as ERT wrote it")


class ErtImportResult(BaseModel):
    created: list[BenchmarkPublic]
    skipped: list[str] = Field(description="Entries not mapped onto a roof, with the reason")


class MeasuredStats(BaseModel):
    median: float
    count: int
    min: float
    max: float
    latest_at: datetime | None


class ComputeRoofView(BaseModel):
    dtype: str
    unit: UnitName
    nominal_flops_per_s: float | None
    measured: MeasuredStats | None
    effective_flops_per_s: float
    source: RoofSourceName


class MemoryRoofView(BaseModel):
    level: MemoryLevelName
    nominal_bytes_per_s: float | None
    measured: MeasuredStats | None
    effective_bytes_per_s: float
    source: RoofSourceName


class LinkRoofView(BaseModel):
    link: LinkName
    nominal_bytes_per_s: float | None = Field(description="The device's figure per device and direction, bytes/s")
    measured: MeasuredStats | None
    effective_bytes_per_s: float | None = Field(description="What training collectives use with roofs 'effective', "
                                                            "bytes/s; null when neither is known")
    source: RoofSourceName
    measured_latency: MeasuredStats | None = Field(None, description="Submitted collective_latency records, seconds")
    effective_latency_s: float = Field(description="The fixed cost of one collective on this link with roofs "
                                                   "'effective': the measured median, else the device's default, "
                                                   "seconds")
    latency_source: Literal["nominal", "measured"] = Field("nominal", description="'nominal': the device's default")


class RidgePoint(BaseModel):
    dtype: str
    unit: UnitName
    level: MemoryLevelName
    nominal: float | None = Field(description="Nominal compute roof / nominal bandwidth, FLOP/byte")
    effective: float = Field(description="Effective compute roof / effective bandwidth, FLOP/byte")


class DeviceRoofs(BaseModel):
    device_id: str
    compute: list[ComputeRoofView]
    memory: list[MemoryRoofView]
    links: list[LinkRoofView] = Field(description="Intra- and inter-node links, where the device or a benchmark "
                                                  "gives a figure")
    ridge_points: list[RidgePoint]
