"""Device bodies to rows and back: derived peaks filled in and shown, profiles copied from their base."""

from __future__ import annotations

from typing import Any

from schemas.devices import DerivedPeakOut, DevicePublic, DeviceSummary, ProfileCreate
from service.core.derive import derived_bandwidth, derived_compute_peaks
from service.persistence.tables import Device

# The columns a profile copies from its base device.
INHERITED = ("vendor", "architecture", "memory_type", "memory_capacity_bytes", "memory_capacity_marketing",
             "memory_capacity_physical_bytes", "usable_memory_bytes", "compute_peaks", "memory_levels", "sm_count", "compute_unit_name",
             "boost_clock_hz", "tdp_w", "interconnect_bandwidth_bytes_per_s", "interconnect_kind",
             "default_matmul_tile", "microarchitecture", "kernel_launch_overhead_s", "collective_latency_s",
             "node_size", "inter_node_bandwidth_bytes_per_s", "in_network_reduction")


def with_derived_peaks(spec: dict[str, Any]) -> dict[str, Any]:
    """Fills the peaks and HBM bandwidth the body left out from its microarchitecture numbers."""
    micro = spec.get("microarchitecture")
    if not micro:
        return spec
    given = {(p["dtype"], p["unit"]) for p in spec["compute_peaks"]}
    peaks = list(spec["compute_peaks"]) + [
        {"dtype": d.dtype, "unit": d.unit, "flops_per_s": d.flops_per_s, "citation": f"derived: {d.formula}"}
        for d in derived_compute_peaks(micro) if (d.dtype, d.unit) not in given
    ]
    levels = list(spec["memory_levels"])
    bandwidth = derived_bandwidth(micro)
    if bandwidth and not any(level["level"] == "hbm" for level in levels):
        levels.append({"level": "hbm", "bandwidth_bytes_per_s": bandwidth.bytes_per_s, "capacity_bytes": None,
                       "citation": f"derived: {bandwidth.formula}"})
    return {**spec, "compute_peaks": peaks, "memory_levels": levels}


def profile_spec(base: Device, body: ProfileCreate) -> dict[str, Any]:
    spec = {name: getattr(base, name) for name in INHERITED}
    citations = {name: f"inherited from {base.id}: {text}" for name, text in base.citations.items()}
    spec.update(
        name=body.name or f"{base.name} (profile {body.id})",
        confidence=body.confidence or f"profile of {base.id}",
        base_device_id=base.id,
        citations={**citations, **body.citations},
    )
    if body.tdp_w is not None:
        spec["tdp_w"] = body.tdp_w
    return spec


def device_public(row: Device) -> DevicePublic:
    public = DevicePublic.model_validate(row, from_attributes=True)
    if row.microarchitecture:
        stored = {(p["dtype"], p["unit"]): p for p in row.compute_peaks}
        public.derived_peaks = [
            DerivedPeakOut(dtype=d.dtype, unit=d.unit, flops_per_s=d.flops_per_s, formula=d.formula,
                           datasheet_flops_per_s=stored[(d.dtype, d.unit)]["flops_per_s"]
                           if (d.dtype, d.unit) in stored else None)
            for d in derived_compute_peaks(row.microarchitecture)
        ]
        bandwidth = derived_bandwidth(row.microarchitecture)
        public.derived_hbm_bandwidth_bytes_per_s = bandwidth.bytes_per_s if bandwidth else None
    return public


def device_summary(device: Device) -> DeviceSummary:
    hbm = next(level for level in device.memory_levels if level["level"] == "hbm")
    tensor = [(p["flops_per_s"], p["dtype"]) for p in device.compute_peaks if p["unit"] == "tensor"]
    highest = max(tensor, key=lambda peak: (peak[0], peak[1] == "bf16"), default=None)  # ties: bf16, the one people read
    return DeviceSummary(
        id=device.id, name=device.name, vendor=device.vendor, origin=device.origin,
        memory_capacity_bytes=device.memory_capacity_bytes,
        hbm_bandwidth_bytes_per_s=hbm["bandwidth_bytes_per_s"],
        peak_tensor_flops_per_s=highest[0] if highest else None, peak_tensor_dtype=highest[1] if highest else None,
        bf16_tensor_flops_per_s=next((flops for flops, dtype in tensor if dtype == "bf16"), None),
    )
