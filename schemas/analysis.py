"""Operator roofline analysis: request and response."""

from __future__ import annotations

from pydantic import BaseModel, Field

from schemas.common import BoundName, DeviceId, MemoryLevelName, RoofSourceName, StrictModel, UnitName
from schemas.operators import Operator


class OperatorAnalysisRequest(StrictModel):
    device_id: DeviceId
    operator: Operator


class ByteCounts(BaseModel):
    read: float = Field(description="Bytes read from the memory level, bytes")
    written: float = Field(description="Bytes written, bytes")
    total: float = Field(description="read + written, bytes")


class ComputeRoofOut(BaseModel):
    flops_per_s: float = Field(description="The compute ceiling used, FLOP/s")
    dtype: str
    unit: UnitName
    source: RoofSourceName = Field(description="'nominal' (datasheet) or 'measured' (submitted benchmarks)")
    citation: str


class MemoryRoofOut(BaseModel):
    level: MemoryLevelName
    bytes_per_s: float = Field(description="The bandwidth ceiling used, bytes/s")
    source: RoofSourceName
    citation: str


class OperatorAnalysis(BaseModel):
    device_id: str
    kind: str
    flops: float = Field(description="Model FLOPs (one multiply-add = 2 FLOP)")
    bytes: ByteCounts
    arithmetic_intensity: float = Field(description="FLOPs per byte of memory traffic")
    ridge_point: float = Field(description="Compute roof / memory roof, FLOP per byte")
    bound: BoundName
    attainable_flops_per_s: float = Field(description="min(compute roof, intensity x bandwidth), FLOP/s")
    compute_time_s: float = Field(description="FLOPs / compute roof, seconds")
    memory_time_s: float = Field(description="bytes / memory roof, seconds")
    time_s: float = Field(description="Lower bound: max(compute_time_s, memory_time_s), seconds")
    mfu: float = Field(description="Attainable FLOP/s over the nominal peak of the dtype and unit (0..1)")
    compute_roof: ComputeRoofOut
    memory_roof: MemoryRoofOut
    assumptions: list[str] = Field(description="The counting conventions and roof choices behind these numbers")
