"""The roofline: the bound and lower-bound time an operator's cost gives on a device's roofs.

Per memory level l with traffic Q_l: T_l = Q_l / B_l, and T >= max(F / P, max_l T_l). The headline
intensity I = F / Q_hbm, ridge I* = P / B_hbm and memory time are always DRAM/HBM's, on every device, so
they compare across devices whatever other levels a device's entry models. A memory level binds only when
its time is the largest and exceeds the compute time; then the bound is "memory" (at that level), else
"compute". Attainable P_att = F / T = min(P, min_l I_l * B_l); MFU at the roof = P_att / P_nominal.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import StrEnum
from functools import lru_cache
from typing import NamedTuple

from service.core.errors import CostModelError
from service.core.hardware import DeviceSpec, MemoryLevelName
from service.core.operators.base import OperatorCost
from service.core.roofs import (
    NO_MEASUREMENTS,
    ComputeRoof,
    MeasuredRoofs,
    MemoryRoof,
    RoofMode,
    require_memory_roof,
    select_compute_roof,
    select_memory_roof,
)


class Bound(StrEnum):
    memory = "memory"
    compute = "compute"


# Immutable tuples rather than frozen dataclasses: a frozen dataclass's __init__ sets each field through
# object.__setattr__, and a batch builds a thousand of these a request (a result's 15 fields cost 6 µs that way,
# 2 as a tuple).
class LevelCeiling(NamedTuple):
    roof: MemoryRoof
    bytes: float
    time_s: float
    arithmetic_intensity: float
    ridge_point: float


class Achieved(NamedTuple):
    measured_time_s: float
    flops_per_s: float
    bandwidth_bytes_per_s: float
    mfu: float | None  # against the nominal peak, comparable across teams
    roof_fraction: float  # lower-bound time / measured time: how close to the roofs used
    compute_roof_fraction: float
    bandwidth_fraction: float


class RooflineResult(NamedTuple):
    cost: OperatorCost
    compute_roof: ComputeRoof
    memory_roof: MemoryRoof  # HBM's
    levels: tuple[LevelCeiling, ...]
    arithmetic_intensity: float  # F / HBM bytes
    ridge_point: float  # compute roof / HBM bandwidth
    bound: Bound
    binding_level: str | None  # the memory level that binds (a MemoryLevelName's value); None when compute binds
    attainable_flops_per_s: float
    compute_time_s: float
    memory_time_s: float
    time_s: float
    mfu: float | None
    achieved: Achieved | None
    assumptions: tuple[str, ...]


def _finite(field: str, *values: float) -> None:
    if not all(map(math.isfinite, values)):
        raise CostModelError(field, "the counts exceed the floating-point range")


HBM = MemoryLevelName.hbm.value


def _level_ceilings(cost: OperatorCost, device: DeviceSpec, measured: MeasuredRoofs, mode: RoofMode,
                    flops_per_s: float, bytes_by_level: Mapping[str, float] | None) -> tuple[list[LevelCeiling], list[str]]:
    traffic = {HBM: cost.bytes_total}
    traffic.update(cost.traffic_by_level)
    notes = []
    if bytes_by_level:
        traffic.update(bytes_by_level)
        notes.append("traffic per level taken from the request's bytes_by_level for: " + ", ".join(sorted(bytes_by_level)))
    ceilings = []
    for level, level_bytes in traffic.items():
        roof = (require_memory_roof(device, measured, level, mode) if level == HBM
                else select_memory_roof(device, measured, level, mode))
        if roof is None:
            notes.append(f"{level} traffic ({level_bytes:.4g} bytes) not bounded: device {device.id} has no {mode} {level} bandwidth")
            continue
        if level_bytes <= 0:
            continue
        ceilings.append(LevelCeiling(roof, level_bytes, level_bytes / roof.bytes_per_s,
                                     cost.flops / level_bytes, flops_per_s / roof.bytes_per_s))
    return ceilings, notes


@lru_cache(maxsize=1024)
def _roof_notes(source: str, dtype: str, unit: str, flops_per_s: float,
                memory_roofs: tuple[tuple[str, str, float], ...]) -> tuple[str, ...]:
    """The roofs an answer used, in words (the same few roofs answer thousands of analyses)."""
    return (
        f"compute roof: {source} {dtype} {unit}, {flops_per_s:.4g} FLOP/s",
        *(f"memory roof: {source} {level} bandwidth, {bytes_per_s:.4g} bytes/s"
          for source, level, bytes_per_s in memory_roofs),
        "time: lower bound max(FLOPs / compute roof, max over levels of bytes / bandwidth), perfect overlap",
        "mfu: attainable (or achieved) FLOP/s over the nominal peak of the dtype and unit",
    )


def roof_notes(compute: ComputeRoof, ceilings: list[LevelCeiling]) -> tuple[str, ...]:
    return _roof_notes(compute.source, compute.dtype, compute.unit, compute.flops_per_s,
                       tuple((c.roof.source, c.roof.level, c.roof.bytes_per_s) for c in ceilings))


def analyze(
    cost: OperatorCost,
    device: DeviceSpec,
    *,
    measured: MeasuredRoofs = NO_MEASUREMENTS,
    mode: RoofMode = RoofMode.effective,
    bytes_by_level: Mapping[str, float] | None = None,
    sustained_clock_hz: float | None = None,
    measured_time_s: float | None = None,
    compute_efficiency: float = 1.0,
) -> RooflineResult:
    _finite("operator", cost.flops, cost.bytes_total)
    if cost.bytes_total <= 0:
        raise CostModelError("operator", "moves no bytes, so its arithmetic intensity is undefined")
    compute, roof_notes_ = select_compute_roof(device, measured, cost.compute_dtype, cost.unit, mode)
    notes = list(roof_notes_)
    if sustained_clock_hz is not None or compute_efficiency < 1.0:
        compute = _scaled_compute_roof(compute, device, sustained_clock_hz, compute_efficiency, notes)
    ceilings, level_notes = _level_ceilings(cost, device, measured, mode, compute.flops_per_s, bytes_by_level)
    hbm, slowest = _hbm_and_slowest(ceilings)
    compute_time = cost.flops / compute.flops_per_s
    time_s = max(compute_time, slowest.time_s)
    # Ties go to compute, as I >= I* does on a single roofline.
    binding_level = slowest.roof.level if slowest.time_s > compute_time else None
    bound = Bound.memory if binding_level is not None else Bound.compute
    attainable = cost.flops / time_s if time_s > 0 else compute.flops_per_s
    nominal_peak = compute.nominal_flops_per_s
    mfu = attainable / nominal_peak if nominal_peak else None

    achieved = None
    if measured_time_s is not None:
        achieved = _achieved(cost, compute, hbm, time_s, measured_time_s, notes)

    notes_on_roofs = roof_notes(compute, ceilings)
    if nominal_peak is None:
        notes.append(f"mfu: not defined, device {device.id} lists no nominal {compute.dtype} {compute.unit} peak")
    _finite("operator", hbm.arithmetic_intensity, hbm.ridge_point, attainable, compute_time,
            time_s, *(value for value in achieved or () if value is not None), *([mfu] if mfu is not None else []))
    return RooflineResult(
        cost=cost,
        compute_roof=compute,
        memory_roof=hbm.roof,
        levels=tuple(ceilings),
        arithmetic_intensity=hbm.arithmetic_intensity,
        ridge_point=hbm.ridge_point,
        bound=bound,
        binding_level=binding_level,
        attainable_flops_per_s=attainable,
        compute_time_s=compute_time,
        memory_time_s=hbm.time_s,
        time_s=time_s,
        mfu=mfu,
        achieved=achieved,
        assumptions=cost.assumptions + tuple(notes) + tuple(level_notes) + notes_on_roofs,
    )


def _scaled_compute_roof(compute: ComputeRoof, device: DeviceSpec, sustained_clock_hz: float | None,
                         compute_efficiency: float, notes: list[str]) -> ComputeRoof:
    """The what-ifs that slow the compute roof: a sustained clock below boost, a kernel's shape efficiency."""
    if sustained_clock_hz is not None:
        if not device.boost_clock_hz:
            raise CostModelError("sustained_clock_hz", f"device {device.id} has no boost clock to scale from")
        scale = sustained_clock_hz / device.boost_clock_hz
        compute = ComputeRoof(compute.flops_per_s * scale, compute.dtype, compute.unit, compute.source,
                              compute.citation, compute.nominal_flops_per_s)
        notes.append(f"what-if: compute roof scaled by sustained clock {sustained_clock_hz:.4g} Hz / boost clock "
                     f"{device.boost_clock_hz:.4g} Hz = {scale:.4f}; MFU stays against the unscaled nominal peak")
    if compute_efficiency < 1.0:
        compute = ComputeRoof(compute.flops_per_s * compute_efficiency, compute.dtype, compute.unit, compute.source,
                              compute.citation, compute.nominal_flops_per_s)
        notes.append(f"shape: compute roof scaled by the padding efficiency {compute_efficiency:.4f}")
    return compute


def _hbm_and_slowest(ceilings: list[LevelCeiling]) -> tuple[LevelCeiling, LevelCeiling]:
    """HBM's ceiling (the headline intensity's) and the level that takes longest."""
    if not ceilings:
        raise CostModelError("bytes_by_level", "no memory level with a known bandwidth carries traffic")
    hbm: LevelCeiling | None = None
    slowest = ceilings[0]
    for ceiling in ceilings:
        if ceiling.roof.level == HBM and hbm is None:
            hbm = ceiling
        if ceiling.time_s > slowest.time_s:
            slowest = ceiling
    if hbm is None:
        raise CostModelError("bytes_by_level", "HBM traffic must be positive: the headline intensity is FLOPs per HBM byte")
    return hbm, slowest


def _achieved(cost: OperatorCost, compute: ComputeRoof, hbm: LevelCeiling, time_s: float, measured_time_s: float,
              notes: list[str]) -> Achieved:
    nominal_peak = compute.nominal_flops_per_s
    achieved = Achieved(
        measured_time_s=measured_time_s,
        flops_per_s=cost.flops / measured_time_s,
        bandwidth_bytes_per_s=hbm.bytes / measured_time_s,
        mfu=cost.flops / measured_time_s / nominal_peak if nominal_peak else None,
        roof_fraction=time_s / measured_time_s,
        compute_roof_fraction=cost.flops / measured_time_s / compute.flops_per_s,
        bandwidth_fraction=hbm.bytes / measured_time_s / hbm.roof.bytes_per_s,
    )
    if measured_time_s < time_s:
        notes.append("the measured time beats the lower bound: a roof is understated or the counts overstated")
    _finite("measured_time_s", achieved.flops_per_s, achieved.bandwidth_bytes_per_s)
    return achieved


def analyze_nominal(cost: OperatorCost, device: DeviceSpec) -> RooflineResult:
    return analyze(cost, device, mode=RoofMode.nominal)
