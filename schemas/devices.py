"""Device specifications as clients send and receive them."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, FiniteFloat, model_validator

from schemas.common import (
    ByteRate,
    DeviceId,
    FlopRate,
    MemoryLevelName,
    NonNegativeFinite,
    PeakDTypeName,
    PositiveFinite,
    StrictModel,
    UnitName,
    all_rules,
    given,
)

Citation = Annotated[str, Field(min_length=1, max_length=4000, description="Where the number comes from")]
# 10^18 and not 2^60: a bound above 2^53 is printed in the document as a rounded float, which a reader takes for
# a larger integer than the one enforced; 10^18 prints exactly.
Bytes = Annotated[int, Field(gt=0, le=10**18)]

def cited(field: str) -> dict[str, Any]:
    """Matches a device whose `citations` name a source for `field`."""
    return {"required": ["citations"], "properties": {"citations": {"required": [field]}}}


# Scalar numbers that, when given, must carry a citation under `citations`.
CITED_SCALARS = ("memory_capacity_bytes", "usable_memory_bytes", "sm_count", "boost_clock_hz", "tdp_w",
                 "interconnect_bandwidth_bytes_per_s", "node_size", "inter_node_bandwidth_bytes_per_s")


class ComputePeak(StrictModel):
    dtype: PeakDTypeName = Field(description="The dtype of the peak (fp8 for fp8_e4m3 and fp8_e5m2 alike: they "
                                             "compute at one peak)")
    unit: UnitName
    flops_per_s: FlopRate = Field(description="Dense peak, FLOP/s (never a sparsity figure), 1e6 to 1e21")
    citation: Citation


class MemoryLevel(StrictModel):
    level: MemoryLevelName
    bandwidth_bytes_per_s: ByteRate = Field(description="Bandwidth of the level, bytes/s, 1e3 to 1e18")
    capacity_bytes: Bytes | None = None
    citation: Citation


# Bounded so that every derived peak lands inside the peaks' and bandwidths' own ranges: units x FMA x 2 x clock
# runs from 1 x 0.5 x 2 x 1e6 = 1e6 to 1e5 x 5e4 x 2 x 1e11 = 1e21 FLOP/s, bits / 8 x rate from 1e3 to 1e18 bytes/s.
FmaRate = Annotated[FiniteFloat, Field(ge=0.5, le=5e4, description="FMA per unit per cycle")]


class Microarchitecture(StrictModel):
    """Numbers peaks can be derived from: units x FMA per unit per cycle x 2 x clock; bus bits / 8 x rate."""

    units: int = Field(ge=1, le=100_000, description="SMs / compute units")
    clock_hz: Annotated[FiniteFloat, Field(ge=1e6, le=1e11)] = Field(description="Hz, 1 MHz to 100 GHz")
    tensor_fma_per_unit_per_cycle: dict[PeakDTypeName, FmaRate] = Field(default_factory=dict)
    vector_fma_per_unit_per_cycle: dict[PeakDTypeName, FmaRate] = Field(default_factory=dict)
    memory_bus_width_bits: int | None = Field(None, ge=1, le=1_000_000)
    memory_transfers_per_s_per_pin: Annotated[FiniteFloat, Field(ge=8e3, le=8e12)] | None = None


class DerivedPeakOut(BaseModel):
    dtype: str
    unit: UnitName
    flops_per_s: float
    formula: str
    datasheet_flops_per_s: float | None = Field(description="The stored peak of the same dtype and unit, if any, FLOP/s")


H100_EXAMPLE: dict[str, Any] = {
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
    usable_memory_bytes: Bytes | None = Field(
        None, description="Memory the runtime exposes, bytes: CUDA's total (what vLLM's gpu_memory_utilization "
                          "multiplies) or NVML's memory.total; below the as-built capacity (an H100's 80 GiB shows "
                          "81,559 MiB in nvidia-smi). Unset: capacity and KV budgets use memory_capacity_bytes")
    compute_peaks: list[ComputePeak] = Field(
        default_factory=list, max_length=64, description="Dense peaks, one per (dtype, unit); at least one unless "
                                                         "microarchitecture gives FMA rates to derive them from")
    memory_levels: list[MemoryLevel] = Field(
        default_factory=list, max_length=8, description="Each level once; must include 'hbm' unless microarchitecture "
                                                        "gives its bus width and data rate")
    microarchitecture: Microarchitecture | None = None
    kernel_launch_overhead_s: PositiveFinite | None = Field(
        None, le=1, description="Cost of one kernel launch, seconds (fusion savings); default 4e-6")
    collective_latency_s: NonNegativeFinite | None = Field(
        None, le=1, description="Fixed cost of one collective (a tensor-parallel all-reduce) beside its bytes / "
                                "interconnect bandwidth, seconds; default 2e-6 (under the 2.3 us the fastest "
                                "graph-captured all-reduces measure)")
    default_matmul_tile: list[Annotated[int, Field(ge=1, le=4096)]] | None = Field(
        None, min_length=3, max_length=3, description="[m, n, k] tile of the L2 traffic model; default [128, 128, 64]")
    sm_count: int | None = Field(None, ge=1, le=100_000, description="Streaming multiprocessors / compute units")
    compute_unit_name: str | None = Field(None, max_length=50)
    boost_clock_hz: PositiveFinite | None = None
    tdp_w: PositiveFinite | None = None
    interconnect_bandwidth_bytes_per_s: ByteRate | None = Field(
        None, description="Scale-up (intra-node) link bandwidth per device and direction, bytes/s (NVLink, xGMI, ICI, "
                          "or PCIe where there is no scale-up link): the tier of collectives among devices of one node")
    node_size: int | None = Field(
        None, ge=1, le=100_000, description="Devices per node that share the scale-up link (8 in an HGX/DGX server): "
                                            "a collective whose group stays within a node runs on "
                                            "interconnect_bandwidth_bytes_per_s, otherwise on the inter-node link")
    inter_node_bandwidth_bytes_per_s: ByteRate | None = Field(
        None, description="Scale-out (inter-node) bandwidth per device and direction, bytes/s (InfiniBand or RoCE: a "
                          "400 Gb/s NIC per GPU is 5e10): the tier of collectives that cross nodes")
    in_network_reduction: bool | None = Field(
        None, description="The scale-up switch reduces in the network (NVIDIA's NVLink SHARP, NVSwitch's third "
                          "generation on: HGX H100/H200/B200/B300, GB200/GB300 NVL72): an all-reduce inside a node "
                          "is then bounded at half a ring's bytes on the nominal link, each device's buffer crossing "
                          "it once (cite its source under `citations`); unset or false: a ring")
    interconnect_kind: str | None = Field(None, max_length=100)
    confidence: str | None = Field(None, max_length=500)
    citations: dict[str, Citation] = Field(
        default_factory=dict, description="Citation per scalar number, keyed by field name: required for each of "
                                          f"{', '.join(CITED_SCALARS)} that is given")
    schema_rules = all_rules(
        {"anyOf": [{"required": ["compute_peaks"], "properties": {"compute_peaks": {"minItems": 1}}},
                   {"required": ["microarchitecture"], "properties": {"microarchitecture": {"type": "object", "anyOf": [
                       {"required": [rates], "properties": {rates: {"minProperties": 1}}}
                       for rates in ("tensor_fma_per_unit_per_cycle", "vector_fma_per_unit_per_cycle")]}}}]},
        {"anyOf": [{"required": ["memory_levels"], "properties": {"memory_levels": {
                        "contains": {"required": ["level"], "properties": {"level": {"const": "hbm"}}}}}},
                   {"required": ["microarchitecture"], "properties": {"microarchitecture": {
                       "type": "object", **given("memory_bus_width_bits", "memory_transfers_per_s_per_pin")}}}]},
        # memory_capacity_bytes is always given, so always cited; the optional numbers are cited where given
        # (one dependentSchemas and not an if/then per number: schema fuzzers give up on seven if/thens).
        cited("memory_capacity_bytes"),
        {"dependentSchemas": {name: {"anyOf": [{"properties": {name: {"type": "null"}}}, cited(name)]}
                              for name in CITED_SCALARS if name != "memory_capacity_bytes"}})

    @model_validator(mode="after")
    def _consistent(self):
        peaks = [(p.dtype, p.unit) for p in self.compute_peaks]
        duplicated = {p for p in peaks if peaks.count(p) > 1}
        if duplicated:
            raise ValueError(f"compute_peaks: duplicate (dtype, unit) {sorted(duplicated)}")
        levels = [m.level for m in self.memory_levels]
        if len(set(levels)) != len(levels):
            raise ValueError("memory_levels: each level may appear once")
        micro = self.microarchitecture
        if not peaks and not (micro and (micro.tensor_fma_per_unit_per_cycle or micro.vector_fma_per_unit_per_cycle)):
            raise ValueError("compute_peaks: give at least one peak, or FMA rates under microarchitecture")
        if "hbm" not in levels and not (micro and micro.memory_bus_width_bits and micro.memory_transfers_per_s_per_pin):
            raise ValueError("memory_levels: the 'hbm' level (device memory) is required, "
                             "or its bus width and data rate under microarchitecture")
        uncited = [name for name in CITED_SCALARS if getattr(self, name) is not None and name not in self.citations]
        if uncited:
            raise ValueError(f"citations: a source is required for {', '.join(uncited)}")
        return self


class DeviceCreate(DeviceBase):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"id": "nvidia-h100-sxm-cluster-a", **H100_EXAMPLE}]})
    id: DeviceId


class DeviceUpdate(DeviceBase):
    """A full replacement of a device's specification (PUT); the id comes from the path."""


class ProfileCreate(StrictModel):
    """A device that inherits its base's nominal specification and carries its own measurements."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"id": "h100-sxm-cluster-b-500w", "name": "H100 SXM, cluster B, capped at 500 W", "tdp_w": 500,
         "citations": {"tdp_w": "nvidia-smi -pl 500 on cluster B"}}]})
    id: DeviceId
    name: str | None = Field(None, min_length=1, max_length=200)
    tdp_w: PositiveFinite | None = Field(None, description="The profile's power limit, W")
    confidence: str | None = Field(None, max_length=500)
    citations: dict[str, Citation] = Field(default_factory=dict, description="A source for tdp_w where it is given")
    schema_rules = {"if": given("tdp_w"),
                    "then": cited("tdp_w")}

    @model_validator(mode="after")
    def _cited(self):
        if self.tdp_w is not None and "tdp_w" not in self.citations:
            raise ValueError("citations: a source is required for tdp_w")
        return self


class DevicePublic(DeviceBase):
    model_config = ConfigDict(extra="ignore")
    id: str
    origin: Literal["catalog", "catalog_modified", "user"] = Field(
        description="'catalog': the shipped nominal entry as it ships; 'catalog_modified': a catalog entry replaced "
                    "through PUT (POST /v1/devices/{id}/restore undoes it); 'user': created through the API")
    base_device_id: str | None = Field(None, description="The device a profile inherited its nominal specification from")
    derived_peaks: list[DerivedPeakOut] = Field(default_factory=list, description="Peaks derived from microarchitecture")
    derived_hbm_bandwidth_bytes_per_s: float | None = None
    created_at: datetime
    updated_at: datetime


class DeviceSummary(BaseModel):
    id: str
    name: str
    vendor: str
    memory_capacity_bytes: int
    hbm_bandwidth_bytes_per_s: float
    peak_tensor_flops_per_s: float | None = Field(description="Highest dense tensor peak over all dtypes, FLOP/s")
    peak_tensor_dtype: str | None = Field(None, description="The dtype of that peak (often fp8 or int8, not bf16)")
    bf16_tensor_flops_per_s: float | None = Field(None, description="Dense bf16 tensor peak, FLOP/s, where listed")
    origin: Literal["catalog", "catalog_modified", "user"]
