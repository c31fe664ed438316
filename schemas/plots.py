"""Roofline plots of a device, with analysed workloads as points."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from schemas.common import DeviceId, DTypeName, MemoryLevelName, StrictModel, UnitName


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
    format: Literal["svg", "png"] = "svg"
