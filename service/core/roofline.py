"""The roofline: which roofs apply to an operator, and the bound and time they give.

T >= max(F / P, Q / B); attainable P_att = min(P, I * B) with I = F / Q; ridge I* = P / B;
bound is "compute" when I >= I*. MFU at the roof = P_att / P_nominal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from service.core.dtypes import DType, peak_dtype
from service.core.errors import CostModelError, NoComputePeakError
from service.core.hardware import DeviceSpec, MemoryLevelName, Unit
from service.core.operators.base import OperatorCost


class RoofSource(StrEnum):
    nominal = "nominal"
    measured = "measured"


class Bound(StrEnum):
    memory = "memory"
    compute = "compute"


@dataclass(frozen=True)
class ComputeRoof:
    flops_per_s: float
    dtype: str
    unit: Unit
    source: RoofSource
    citation: str


@dataclass(frozen=True)
class MemoryRoof:
    level: str
    bytes_per_s: float
    source: RoofSource
    citation: str


@dataclass(frozen=True)
class RooflineResult:
    cost: OperatorCost
    compute_roof: ComputeRoof
    memory_roof: MemoryRoof
    nominal_peak_flops_per_s: float
    arithmetic_intensity: float
    ridge_point: float
    bound: Bound
    attainable_flops_per_s: float
    compute_time_s: float
    memory_time_s: float
    time_s: float
    mfu: float
    assumptions: tuple[str, ...]


def _available_peaks(device: DeviceSpec, unit: Unit) -> str:
    names = sorted({p.dtype for p in device.compute_peaks if p.unit == unit})
    return ", ".join(names) or "none"


def nominal_compute_roof(device: DeviceSpec, dtype: str, unit: Unit) -> tuple[ComputeRoof, tuple[str, ...]]:
    """The datasheet peak an operator in `dtype` on `unit` runs at, and any substitution made.

    Tensor work needs a matrix peak of its own dtype; fp32 without one runs on the vector units.
    Vector work without a peak of its dtype is computed in fp32 (as framework kernels upcast);
    with no vector peak at all, the tensor peak of the dtype stands in as an optimistic bound.
    """
    wanted = peak_dtype(dtype)
    if unit == Unit.tensor:
        ladder = [(wanted, Unit.tensor)]
        if wanted == DType.fp32:
            ladder.append((DType.fp32, Unit.vector))
    else:
        ladder = [(wanted, Unit.vector), (DType.fp32, Unit.vector), (wanted, Unit.tensor)]
    for rung, (peak_type, peak_unit) in enumerate(ladder):
        peak = device.peak(peak_type, peak_unit)
        if peak is None:
            continue
        roof = ComputeRoof(peak.flops_per_s, peak.dtype, peak.unit, RoofSource.nominal, peak.citation)
        if rung == 0:
            return roof, ()
        note = (
            f"{device.id} lists no {unit} peak for {dtype}; used its {peak_type} {peak_unit} peak"
            + (" (an optimistic stand-in: the time is still a lower bound)" if peak_unit != unit else
               " (the operation is assumed to compute in fp32)")
        )
        return roof, (note,)
    raise NoComputePeakError(
        "dtype",
        f"device {device.id} has no {unit} peak for {dtype} "
        f"(its {unit} peaks: {_available_peaks(device, unit)})",
    )


def nominal_memory_roof(device: DeviceSpec, level: str = MemoryLevelName.hbm) -> MemoryRoof:
    found = device.memory_level(level)
    if found is None:
        raise CostModelError("level", f"device {device.id} has no bandwidth for memory level {level}")
    return MemoryRoof(found.level, found.bandwidth_bytes_per_s, RoofSource.nominal, found.citation)


def evaluate(cost: OperatorCost, compute: ComputeRoof, memory: MemoryRoof,
             nominal_peak_flops_per_s: float, extra_assumptions: tuple[str, ...] = ()) -> RooflineResult:
    if cost.bytes_total <= 0:
        raise CostModelError("operator", "moves no bytes, so its arithmetic intensity is undefined")
    if not (math.isfinite(cost.flops) and math.isfinite(cost.bytes_total)):
        raise CostModelError("operator", "its FLOP or byte count exceeds the floating-point range")
    intensity = cost.flops / cost.bytes_total
    ridge = compute.flops_per_s / memory.bytes_per_s
    bound = Bound.compute if intensity >= ridge else Bound.memory
    attainable = min(compute.flops_per_s, intensity * memory.bytes_per_s)
    compute_time = cost.flops / compute.flops_per_s
    memory_time = cost.bytes_total / memory.bytes_per_s
    roof_notes = (
        f"compute roof: {compute.source} {compute.dtype} {compute.unit} peak, {compute.flops_per_s:.4g} FLOP/s",
        f"memory roof: {memory.source} {memory.level} bandwidth, {memory.bytes_per_s:.4g} bytes/s",
        "time: lower bound max(FLOPs / compute roof, bytes / memory roof), compute and traffic fully overlapped",
        "mfu: attainable FLOP/s at the roof divided by the nominal peak of the same dtype and unit",
    )
    return RooflineResult(
        cost=cost,
        compute_roof=compute,
        memory_roof=memory,
        nominal_peak_flops_per_s=nominal_peak_flops_per_s,
        arithmetic_intensity=intensity,
        ridge_point=ridge,
        bound=bound,
        attainable_flops_per_s=attainable,
        compute_time_s=compute_time,
        memory_time_s=memory_time,
        time_s=max(compute_time, memory_time),
        mfu=attainable / nominal_peak_flops_per_s,
        assumptions=cost.assumptions + extra_assumptions + roof_notes,
    )


def analyze_nominal(cost: OperatorCost, device: DeviceSpec) -> RooflineResult:
    compute, substitutions = nominal_compute_roof(device, cost.compute_dtype, cost.unit)
    memory = nominal_memory_roof(device)
    return evaluate(cost, compute, memory, compute.flops_per_s, substitutions)
