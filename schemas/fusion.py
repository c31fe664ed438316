"""Fusion analysis: a small dataflow graph of operators, and what fusing groups of them saves."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from schemas.analysis import RoofOptions
from schemas.common import DeviceId, Dim, DTypeName, IndexDTypeName, NonNegativeFinite, StrictModel

TensorName = Annotated[str, Field(min_length=1, max_length=64)]
# A graph's operators, and so each group's names and the number of groups: bounds that keep the graph
# checks (convexity, connectivity) to a few thousand steps.
MAX_OPS = 64


class FusionTensor(StrictModel):
    shape: list[Dim] = Field(min_length=1, max_length=8)
    dtype: DTypeName | IndexDTypeName = "bf16"


class FusionOp(BaseModel):
    """`kind`, `inputs`, `outputs`, and any of that operator kind's own fields the tensors do not determine
    (e.g. `op` for an elementwise operator, `causal` for attention, `tokens_per_expert`)."""

    model_config = ConfigDict(extra="allow")
    name: str | None = Field(None, min_length=1, max_length=64, description="Default: op<index>")
    kind: str = Field(min_length=1, max_length=32)
    inputs: list[TensorName] = Field(min_length=1, max_length=16)
    outputs: list[TensorName] = Field(min_length=1, max_length=1)


SWIGLU_EXAMPLE: dict[str, Any] = {
    "device_id": "nvidia-h100-sxm",
    "tensors": {"gate": {"shape": [4096, 14336]}, "up": {"shape": [4096, 14336]},
                "act": {"shape": [4096, 14336]}, "h": {"shape": [4096, 14336]}},
    "ops": [{"name": "silu", "kind": "elementwise", "op": "silu", "inputs": ["gate"], "outputs": ["act"]},
            {"name": "mul", "kind": "elementwise", "op": "mul", "inputs": ["act", "up"], "outputs": ["h"]}],
}


class FusionRequest(RoofOptions):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [SWIGLU_EXAMPLE]})
    device_id: DeviceId
    tensors: dict[TensorName, FusionTensor] = Field(min_length=1, max_length=256)
    ops: list[FusionOp] = Field(min_length=1, max_length=MAX_OPS)
    groups: list[Annotated[list[TensorName], Field(max_length=MAX_OPS)]] | None = Field(
        None, max_length=MAX_OPS, description="Operator names fused into one kernel each (at most 64 groups of at most "
                                              "64 names); default: all in one group")
    launch_overhead_s: NonNegativeFinite | None = Field(
        None, le=1, description="Cost of one kernel launch, seconds; default: the device's (4 us if unset)")


class KernelCost(BaseModel):
    name: str
    kinds: list[str]
    flops: float
    bytes_read: float
    bytes_written: float
    time_s: float = Field(description="Lower bound at the roofs used, seconds")


class FusionSide(BaseModel):
    bytes: float = Field(description="HBM bytes read + written")
    bytes_read: float
    bytes_written: float
    launches: int
    time_s: float = Field(description="Sum of the kernels' lower bounds, seconds")
    launch_time_s: float = Field(description="launches x launch overhead, seconds")
    kernels: list[KernelCost]


class FusionSavings(BaseModel):
    bytes: float
    fraction: float = Field(description="bytes saved / unfused bytes")
    time_s: float = Field(description="Roofline time saved at the roofs used, seconds")
    launches: int = Field(description="Kernel launches removed")
    launch_time_s: float = Field(description="launches removed x launch overhead, seconds")


class FusionAnalysis(BaseModel):
    device_id: str
    unfused: FusionSide
    fused: FusionSide
    savings: FusionSavings
    launch_overhead_s: float
    assumptions: list[str]
