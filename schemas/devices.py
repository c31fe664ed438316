"""Device specifications as clients send and receive them."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from schemas.common import DeviceId, DTypeName, MemoryLevelName, PositiveFinite, StrictModel, UnitName

Citation = Annotated[str, Field(min_length=1, max_length=4000, description="Where the number comes from")]
Bytes = Annotated[int, Field(gt=0, le=2**60)]

# Scalar numbers that, when given, must carry a citation under `citations`.
CITED_SCALARS = ("memory_capacity_bytes", "sm_count", "boost_clock_hz", "tdp_w", "interconnect_bandwidth_bytes_per_s")


class ComputePeak(StrictModel):
    dtype: DTypeName
    unit: UnitName
    flops_per_s: PositiveFinite = Field(description="Dense peak, FLOP/s (never a sparsity figure)")
    citation: Citation


class MemoryLevel(StrictModel):
    level: MemoryLevelName
    bandwidth_bytes_per_s: PositiveFinite
    capacity_bytes: Bytes | None = None
    citation: Citation


H100_EXAMPLE = {
    "name": "H100 SXM5 80GB",
    "vendor": "NVIDIA",
    "architecture": "Hopper (GH100)",
    "memory_type": "HBM3",
    "memory_capacity_bytes": 85899345920,
    "memory_capacity_marketing": "80 GB",
    "compute_peaks": [
        {"dtype": "bf16", "unit": "tensor", "flops_per_s": 9.894e14, "citation": "NVIDIA H100 datasheet (dense)"},
        {"dtype": "fp32", "unit": "vector", "flops_per_s": 6.69e13, "citation": "NVIDIA H100 datasheet"},
    ],
    "memory_levels": [
        {"level": "hbm", "bandwidth_bytes_per_s": 3.35e12, "citation": "NVIDIA H100 datasheet"},
    ],
    "sm_count": 132,
    "citations": {"memory_capacity_bytes": "NVIDIA H100 datasheet", "sm_count": "NVIDIA Hopper whitepaper"},
}


class DeviceBase(StrictModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [H100_EXAMPLE]})

    name: str = Field(min_length=1, max_length=200)
    vendor: str = Field(min_length=1, max_length=100)
    architecture: str | None = Field(None, max_length=200)
    memory_type: str | None = Field(None, max_length=100)
    memory_capacity_bytes: Bytes = Field(description="Device memory as built, bytes (an '80 GB' HBM card holds 80 GiB)")
    memory_capacity_marketing: str | None = Field(None, max_length=50, description="The marketed figure, e.g. '80 GB'")
    memory_capacity_physical_bytes: Bytes | None = None
    compute_peaks: list[ComputePeak] = Field(min_length=1, max_length=64)
    memory_levels: list[MemoryLevel] = Field(min_length=1, max_length=8, description="Must include 'hbm'")
    sm_count: int | None = Field(None, ge=1, le=100_000, description="Streaming multiprocessors / compute units")
    compute_unit_name: str | None = Field(None, max_length=50)
    boost_clock_hz: PositiveFinite | None = None
    tdp_w: PositiveFinite | None = None
    interconnect_bandwidth_bytes_per_s: PositiveFinite | None = Field(
        None, description="Scale-up link bandwidth per direction, bytes/s")
    interconnect_kind: str | None = Field(None, max_length=100)
    confidence: str | None = Field(None, max_length=500)
    citations: dict[str, Citation] = Field(default_factory=dict, description="Citation per scalar number, keyed by field name")

    @model_validator(mode="after")
    def _consistent(self):
        peaks = [(p.dtype, p.unit) for p in self.compute_peaks]
        duplicated = {p for p in peaks if peaks.count(p) > 1}
        if duplicated:
            raise ValueError(f"compute_peaks: duplicate (dtype, unit) {sorted(duplicated)}")
        levels = [m.level for m in self.memory_levels]
        if len(set(levels)) != len(levels):
            raise ValueError("memory_levels: each level may appear once")
        if "hbm" not in levels:
            raise ValueError("memory_levels: the 'hbm' level (device memory) is required")
        uncited = [name for name in CITED_SCALARS if getattr(self, name) is not None and name not in self.citations]
        if uncited:
            raise ValueError(f"citations: a source is required for {', '.join(uncited)}")
        return self


class DeviceCreate(DeviceBase):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"id": "nvidia-h100-sxm-cluster-a", **H100_EXAMPLE}]})
    id: DeviceId


class DeviceUpdate(DeviceBase):
    """A full replacement of a device's specification (PUT); the id comes from the path."""


class DevicePublic(DeviceBase):
    model_config = ConfigDict(extra="ignore")
    id: str
    origin: Literal["catalog", "user"] = Field(description="'catalog' for the seeded nominal catalog, 'user' for API-created")
    created_at: datetime
    updated_at: datetime


class DeviceSummary(BaseModel):
    id: str
    name: str
    vendor: str
    memory_capacity_bytes: int
    hbm_bandwidth_bytes_per_s: float
    peak_tensor_flops_per_s: float | None = Field(description="Highest dense tensor peak over all dtypes, FLOP/s")
    origin: Literal["catalog", "user"]
