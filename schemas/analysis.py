"""Operator roofline analysis: request and response."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from schemas.common import (
    BoundName,
    DeviceId,
    EngineName,
    MemoryLevelName,
    RoofSourceName,
    StrictModel,
    UnitName,
)
from schemas.operators import Operator

RoofsMode = Literal["effective", "nominal", "measured"]


class RoofOptions(StrictModel):
    """What every analysis accepts about roofs."""

    roofs: RoofsMode = Field(
        "effective", description="'effective': measured roof where benchmarks exist, else nominal; "
                                 "'nominal': datasheet only; 'measured': benchmarks only (422 when missing)")
    sustained_clock_hz: Annotated[float, Field(ge=1e6, le=1e11)] | None = Field(
        None, description="What-if: scale compute roofs by this clock over the device's boost clock, Hz")


class OperatorAnalysisRequest(RoofOptions):
    device_id: DeviceId
    operator: Operator
    measured_time_s: Annotated[float, Field(ge=1e-12, le=1e6)] | None = Field(
        None, description="A measured run time, seconds: the answer then also reports what was achieved")
    bytes_by_level: dict[MemoryLevelName, Annotated[float, Field(ge=1, le=1e30)]] | None = Field(
        None, description="Traffic per memory level, bytes (e.g. from a profiler); replaces the modelled traffic")
    engine: EngineName | None = Field(
        None, description="The engine whose kernels you run: `expected` then comes from the calibration fitted to the "
                          "timings submitted for this device and engine (POST /v1/devices/{id}/kernel-timings) where "
                          "one exists, else from a shipped one of the same engine")
    calibration: Literal["auto", "none"] = Field(
        "auto", description="auto: answer `expected` where a calibration applies; none: the bound alone")


class ByteCounts(BaseModel):
    read: float = Field(description="Bytes read from the memory level, bytes")
    written: float = Field(description="Bytes written, bytes")
    total: float = Field(description="read + written, bytes")


class ComputeRoofOut(BaseModel):
    flops_per_s: float = Field(description="The compute ceiling used, FLOP/s")
    dtype: str
    unit: UnitName
    source: RoofSourceName = Field(description="'nominal' (datasheet) or 'measured' (submitted benchmarks); the "
                                               "citation of a nominal roof is on GET /v1/devices/{id}, the "
                                               "measurements behind a measured one on GET /v1/devices/{id}/roofs")


class MemoryRoofOut(BaseModel):
    level: MemoryLevelName
    bytes_per_s: float = Field(description="The bandwidth ceiling used, bytes/s")
    source: RoofSourceName = Field(description="'nominal' (datasheet) or 'measured' (median of submitted benchmarks)")


class LevelCeilingOut(BaseModel):
    level: MemoryLevelName
    bytes: float = Field(description="Traffic at this level, bytes")
    bytes_per_s: float = Field(description="Bandwidth roof of this level, bytes/s")
    source: RoofSourceName
    time_s: float = Field(description="bytes / bandwidth, seconds")
    arithmetic_intensity: float = Field(description="FLOPs per byte of this level's traffic")
    ridge_point: float = Field(description="Compute roof / this level's bandwidth, FLOP/byte")


class AchievedOut(BaseModel):
    measured_time_s: float
    flops_per_s: float = Field(description="Model FLOPs / measured time, FLOP/s")
    bandwidth_bytes_per_s: float = Field(description="HBM bytes / measured time, bytes/s")
    mfu: float | None = Field(description="Achieved FLOP/s over the nominal peak (comparable across teams)")
    roof_fraction: float = Field(description="Lower-bound time / measured time, at the roofs used (how close to them)")
    compute_roof_fraction: float = Field(description="Achieved FLOP/s over the compute roof used")
    bandwidth_fraction: float = Field(description="Achieved HBM bandwidth over the HBM roof used")


class ShapeEfficiencyOut(BaseModel):
    tile: list[int] = Field(description="[m, n, k] tile (rows tile only, for grouped matmuls: [min_row_tile, n, k])")
    padding_efficiency: float = Field(description="Useful fraction of the padded work (0..1)")
    model_flops: float
    executed_flops: float = Field(description="FLOPs the hardware executes with padding (HFU counts these)")
    tiles: int | None = None
    sm_count: int | None = None
    waves: float | None = Field(None, description="tiles / SMs")
    wave_efficiency: float | None = Field(None, description="waves / ceil(waves)")
    rows_with_data: int | None = None
    rows_executed: int | None = None
    applied: bool = Field(description="Whether the time estimate was slowed by these efficiencies")


class ExpectedOut(BaseModel):
    """What the operator is expected to take, from a calibration fitted to measured kernels: beside the bound,
    never in place of it."""

    calibration_id: str = Field(description="GET /v1/calibrations/{id} shows it, its parameters and its errors")
    origin: Literal["shipped", "measured"] = Field(
        description="'shipped': fitted to public measurements; 'measured': to the timings submitted for the device")
    points: int = Field(description="The timings it was fitted to")
    extrapolated: bool = Field(description="The matmul lies outside the m, n and k the timings covered")

    time_s: float = Field(description="Expected time, seconds: t0 + max(FLOPs / (peak x e_c), bytes / (bandwidth x "
                                      "e_m)) at the roofs the calibration was fitted at, or the bound where the "
                                      "roofs in use put it higher")
    basis: str = Field(description="What it was fitted on, the fit, and how wrong it was on measurements held out")
    engine: str = Field(description="The kernels measured (e.g. trtllm): the expectation is theirs")
    median_error: float = Field(description="|expected / measured - 1| on the held-out measurements, median")
    p90_error: float = Field(description="The same, 90th percentile")


class OperatorAnalysis(BaseModel):
    device_id: str
    kind: str
    flops: float = Field(description="Model FLOPs (one multiply-add = 2 FLOP)")
    bytes: ByteCounts
    arithmetic_intensity: float = Field(description="FLOPs per byte of DRAM/HBM traffic (bytes.total), FLOP/byte; "
                                                    "always HBM's, on every device. Other levels' are under `levels`")
    ridge_point: float = Field(description="Compute roof / HBM bandwidth roof, FLOP/byte")
    bound: BoundName = Field(description="`memory` when a memory level's time exceeds the compute time "
                                         "(`binding_level` says which), else `compute`")
    attainable_flops_per_s: float = Field(description="flops / time_s = min(compute roof, each level's intensity x "
                                                      "bandwidth), FLOP/s")
    compute_time_s: float = Field(description="FLOPs / compute roof, seconds")
    memory_time_s: float = Field(description="HBM bytes / HBM bandwidth roof, seconds (other levels' under `levels`)")
    time_s: float = Field(description="Lower bound: max(compute_time_s, every level's time_s), seconds")
    mfu: float | None = Field(description="Attainable FLOP/s over the nominal peak of the dtype and unit (0..1); "
                                          "null when the device lists no nominal peak for it")
    compute_roof: ComputeRoofOut
    memory_roof: MemoryRoofOut = Field(description="The HBM bandwidth roof used")
    binding_level: MemoryLevelName | None = Field(
        description="The memory level that binds: its time is the longest and exceeds the compute time; null when "
                    "the operator is compute-bound")
    levels: list[LevelCeilingOut] = Field(description="One ceiling per memory level with known traffic and bandwidth, "
                                                      "HBM first: each level's own bytes, intensity, ridge and time")
    achieved: AchievedOut | None = Field(None, description="Present when measured_time_s was given")
    expected: ExpectedOut | None = Field(
        None, description="A calibrated expectation of a plain matmul: from the calibration fitted to the timings "
                          "submitted for the device and the request's `engine`, or, with no engine (or trtllm), the "
                          "one shipped for H100, H200 and B200 in bf16 and fp8 (fitted to NVIDIA AIConfigurator's "
                          "public TensorRT-LLM measurements); null elsewhere and with calibration 'none'")
    shape_efficiency: ShapeEfficiencyOut | None = Field(None, description="Matmul and grouped matmul only")
    assumptions: list[str] = Field(description="The counting conventions and roof choices behind these numbers")
