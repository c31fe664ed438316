"""Benchmark validation against nominal roofs, and the nominal / measured / effective view of a device."""

from __future__ import annotations

from typing import Any

from schemas.benchmarks import ComputeRoofView, DeviceRoofs, LinkRoofView, MeasuredStats, MemoryRoofView, RidgePoint
from service.core.hardware import DeviceSpec, MemoryLevelName
from service.core.roofs import (
    MeasuredRoof,
    MeasuredRoofs,
    RoofMode,
    nominal_mismatch,
    nominal_value,
    select_collective_latency,
    select_compute_roof,
    select_memory_roof,
)
from service.runtime.errors import Unprocessable


def roof_key(record: dict[str, Any]) -> tuple[str, str] | str:
    if record["kind"] in ("link_bandwidth", "collective_latency"):
        return record["link"]
    return (record["dtype"], record["unit"]) if record["kind"] == "compute" else record["level"]


def roof_value(record: dict[str, Any]) -> float:
    if record["kind"] == "collective_latency":
        return record["seconds"]
    return record["flops_per_s"] if record["kind"] == "compute" else record["bytes_per_s"]


def validate_against_nominal(device: DeviceSpec, records: list[dict[str, Any]], loc: str) -> None:
    """Refuses (422) measurements implausible against the datasheet (far above or below it, or of a
    compute roof it does not have) unless the reason field the mismatch asks for says why."""
    problems = []
    for index, record in enumerate(records):
        mismatch = nominal_mismatch(device, record["kind"], roof_key(record), roof_value(record))
        if mismatch and not record.get(mismatch[0]):
            field = "flops_per_s" if record["kind"] == "compute" else "bytes_per_s"
            problems.append({"loc": loc.format(index=index, field=field), "msg": mismatch[1]})
    if problems:
        raise Unprocessable(problems[0]["msg"], problems)


def _stats(measured: MeasuredRoof | None) -> MeasuredStats | None:
    if measured is None:
        return None
    return MeasuredStats(median=measured.median, count=measured.count, min=measured.minimum,
                         max=measured.maximum, latest_at=measured.latest_at)


def device_roofs(device: DeviceSpec, measured: MeasuredRoofs) -> DeviceRoofs:
    compute_keys = sorted({(p.dtype, p.unit.value) for p in device.compute_peaks} | set(measured.compute))
    compute = []
    for dtype, unit in compute_keys:
        nominal = device.peak(dtype, unit)
        roof, _ = select_compute_roof(device, measured, dtype, unit, RoofMode.effective)
        if (roof.dtype, roof.unit) != (dtype, unit):
            continue
        compute.append(ComputeRoofView(
            dtype=dtype, unit=unit, nominal_flops_per_s=nominal.flops_per_s if nominal else None,
            measured=_stats(measured.compute.get((dtype, unit))), effective_flops_per_s=roof.flops_per_s,
            source=roof.source))
    memory = []
    for level in MemoryLevelName:
        effective = select_memory_roof(device, measured, level, RoofMode.effective)
        if effective is None:
            continue
        nominal_level = device.memory_level(level)
        memory.append(MemoryRoofView(
            level=level, nominal_bytes_per_s=nominal_level.bandwidth_bytes_per_s if nominal_level else None,
            measured=_stats(measured.memory.get(level)), effective_bytes_per_s=effective.bytes_per_s,
            source=effective.source))
    hbm = next(m for m in memory if m.level == MemoryLevelName.hbm)
    ridge_points = [
        RidgePoint(dtype=c.dtype, unit=c.unit, level=hbm.level,
                   nominal=(c.nominal_flops_per_s / hbm.nominal_bytes_per_s
                            if c.nominal_flops_per_s and hbm.nominal_bytes_per_s else None),
                   effective=c.effective_flops_per_s / hbm.effective_bytes_per_s)
        for c in compute
    ]
    links = []
    for link in ("intra_node", "inter_node"):
        nominal_link = nominal_value(device, "link_bandwidth", link)
        measured_link = measured.links.get(link)
        if nominal_link is None and measured_link is None and link not in measured.latencies:
            continue
        latency, latency_source = select_collective_latency(device, measured, link, RoofMode.effective)
        links.append(LinkRoofView(
            link=link, nominal_bytes_per_s=nominal_link, measured=_stats(measured_link),
            effective_bytes_per_s=measured_link.median if measured_link else nominal_link,
            source="measured" if measured_link else "nominal", measured_latency=_stats(measured.latencies.get(link)),
            effective_latency_s=latency, latency_source=latency_source))
    return DeviceRoofs(device_id=device.id, compute=compute, memory=memory, links=links, ridge_points=ridge_points)
