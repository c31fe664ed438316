"""Roofline plots of a device, with analysed workloads as points."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from schemas.common import DeviceId, DTypeName, MemoryLevelName, StrictModel, UnitName
from schemas.models import Count, ModelAnalysisRequest
from schemas.plans import ServingPlanRequest
from schemas.sweeps import SweepRequest

ImageFormat = Literal["svg", "png"]


class PlotRoof(StrictModel):
    dtype: DTypeName
    unit: UnitName = "tensor"


class PlotPointRequest(StrictModel):
    name: str = Field(min_length=1, max_length=80)
    endpoint: Literal["operator", "model"]
    request: dict[str, Any] = Field(description="A body of that endpoint; device_id is the plot's")


class PlotRequest(StrictModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "device_id": "nvidia-h100-sxm", "format": "svg",
        "points": [
            {"name": "decode GEMV", "endpoint": "operator",
             "request": {"operator": {"kind": "matmul", "m": 1, "n": 4096, "k": 4096}}},
            {"name": "prefill GEMM", "endpoint": "operator",
             "request": {"operator": {"kind": "matmul", "m": 4096, "n": 4096, "k": 4096}}},
            {"name": "llama-3.1-8b decode b32", "endpoint": "model",
             "request": {"model_id": "llama-3.1-8b", "phase": "decode", "batch_size": 32, "seq_len": 4096}}]}]})
    device_id: DeviceId
    roofs: Literal["nominal", "effective"] = "effective"
    compute: list[PlotRoof] | None = Field(None, max_length=16, description="Default: every tensor peak and fp32 vector")
    levels: list[MemoryLevelName] | None = Field(None, max_length=8,
                                                 description="Memory levels to draw (each once); default: every level the device has")
    points: list[PlotPointRequest] = Field(default_factory=list, max_length=64)
    ridges: list[DTypeName] | None = Field(
        None, max_length=16, description="Dtypes whose ridge points (against HBM) to mark; default: the points' "
                                         "dtypes, or the device's headline dtype (bf16) when there are no points")
    format: ImageFormat = "svg"


class ModelRooflinePlotRequest(ModelAnalysisRequest):
    """A model step's operators as points on the device's roofline, each sized by its share of the step's time."""

    format: ImageFormat = "svg"


class StepBreakdownPlotRequest(ModelAnalysisRequest):
    """A step's time by operator kind as stacked bars: one bar per batch size."""

    format: ImageFormat = "svg"
    batch_sizes: list[Count] | None = Field(None, min_length=1, max_length=8,
                                            description="One bar per batch size (default: the request's batch_size)")


class SweepPlotRequest(SweepRequest):
    """A sweep drawn: the metric against the swept parameter, crossovers and the largest feasible value marked."""

    format: ImageFormat = "svg"
    metric: Literal["time_s", "tokens_per_s", "mfu"] = Field(
        "time_s", description="What to draw: the step or operator time, tokens/s (model sweeps) or MFU")
    log_x: bool | None = Field(None, description="A log x axis; default when the values span more than 20x")


class ServingPlanPlotRequest(ServingPlanRequest):
    """A serving plan drawn: tokens/s per device against tokens/s per user, the Pareto frontier joined."""

    format: ImageFormat = "svg"
