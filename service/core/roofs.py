"""Which roof an analysis uses: nominal (datasheet), measured (submitted benchmarks) or effective
(measured where it exists, else nominal), and the substitutions a device's published peaks force."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from service.core.dtypes import DType, peak_dtype
from service.core.errors import CostModelError, NoComputePeakError
from service.core.expectations.kernels import KernelCalibration
from service.core.hardware import DEFAULT_INTER_NODE_LATENCY_S, DeviceSpec, Unit
from service.core.memo import by_identity, read_only


class RoofMode(StrEnum):
    effective = "effective"
    nominal = "nominal"
    measured = "measured"


class RoofSource(StrEnum):
    nominal = "nominal"
    measured = "measured"


@dataclass(frozen=True)
class MeasuredRoof:
    """The aggregate of accepted measurements of one roof: the median is the roof."""

    median: float
    count: int
    minimum: float
    maximum: float
    latest_at: datetime | None

    @property
    def citation(self) -> str:
        latest = f", latest {self.latest_at.isoformat()}" if self.latest_at else ""
        return f"median of {self.count} submitted benchmark(s){latest}"


@dataclass(frozen=True)
class MeasuredRoofs:
    compute: Mapping[tuple[str, str], MeasuredRoof] = field(default_factory=dict)
    memory: Mapping[str, MeasuredRoof] = field(default_factory=dict)
    links: Mapping[str, MeasuredRoof] = field(default_factory=dict)  # "intra_node", "inter_node"
    latencies: Mapping[str, MeasuredRoof] = field(default_factory=dict)  # seconds of one collective, per link
    # Calibrations fitted to the kernel timings submitted for the device, by (engine, compute dtype).
    kernels: Mapping[tuple[str, str], KernelCalibration] = field(default_factory=dict)

    def __post_init__(self):
        # Frozen all the way down: memos key measured roofs by identity (service/core/memo.py).
        for name in ("compute", "memory", "links", "latencies", "kernels"):
            object.__setattr__(self, name, read_only(getattr(self, name)))


NO_MEASUREMENTS = MeasuredRoofs()


def aggregate(samples: Iterable[tuple[float, datetime | None]]) -> MeasuredRoof:
    samples = list(samples)
    values = [value for value, _ in samples]
    times = [when for _, when in samples if when is not None]
    ordered = sorted(values)
    middle = len(ordered) // 2
    # The midpoint of two values as low + (high - low) / 2: (low + high) / 2 overflows near the float maximum.
    median = ordered[middle] if len(ordered) % 2 else ordered[middle - 1] + (ordered[middle] - ordered[middle - 1]) / 2
    return MeasuredRoof(median, len(values), ordered[0], ordered[-1], max(times, default=None))


@dataclass(frozen=True)
class ComputeRoof:
    flops_per_s: float
    dtype: str
    unit: Unit
    source: RoofSource
    citation: str
    nominal_flops_per_s: float | None  # the datasheet peak of the same dtype and unit, for MFU


@dataclass(frozen=True)
class MemoryRoof:
    level: str
    bytes_per_s: float
    source: RoofSource
    citation: str


def _candidate_keys(dtype: str, unit: Unit) -> list[tuple[str, Unit]]:
    """Peaks an operator may run at, best first.

    Tensor work needs a matrix peak of its own dtype; fp32 without one runs on the vector units.
    Vector work without a peak of its dtype is computed in fp32 (as framework kernels upcast);
    with no vector peak at all, the tensor peak of the dtype stands in as an optimistic bound.
    """
    wanted = peak_dtype(dtype)
    if unit == Unit.tensor:
        return [(wanted, Unit.tensor)] + ([(DType.fp32, Unit.vector)] if wanted == DType.fp32 else [])
    return [(wanted, Unit.vector), (DType.fp32, Unit.vector), (wanted, Unit.tensor)]


def _pick(nominal: tuple[float, str] | None, measured: MeasuredRoof | None,
          mode: RoofMode) -> tuple[float, RoofSource, str] | None:
    """(value, source, citation) of the roof the mode asks for, or None when it does not exist."""
    if mode == RoofMode.nominal or (mode == RoofMode.effective and measured is None):
        return (nominal[0], RoofSource.nominal, nominal[1]) if nominal is not None else None
    if measured is None:
        return None
    return measured.median, RoofSource.measured, measured.citation


@by_identity(objects=2)
def select_compute_roof(device: DeviceSpec, measured: MeasuredRoofs, dtype: str, unit: Unit,
                         mode: RoofMode) -> tuple[ComputeRoof, tuple[str, ...]]:
    keys = _candidate_keys(dtype, unit)
    for rung, (peak_type, peak_unit) in enumerate(keys):
        nominal = device.peak(peak_type, peak_unit)
        chosen = _pick((nominal.flops_per_s, nominal.citation) if nominal else None,
                       measured.compute.get((peak_type, peak_unit)), mode)
        if chosen is None:
            continue
        value, source, citation = chosen
        roof = ComputeRoof(value, peak_type, peak_unit, source, citation,
                           nominal.flops_per_s if nominal is not None else None)
        if rung == 0:
            return roof, ()
        note = (f"{device.id} has no {unit} roof for {dtype}; used its {peak_type} {peak_unit} roof"
                + (" (an optimistic stand-in: the time is still a lower bound)" if peak_unit != unit
                   else " (the operation is assumed to compute in fp32)"))
        return roof, (note,)
    if mode == RoofMode.measured:
        raise NoComputePeakError("roofs", f"no measured {unit} roof for {dtype} on device {device.id}; submit one "
                                 f"with POST /v1/devices/{device.id}/benchmarks or ask for roofs 'effective'")
    available = ", ".join(sorted({p.dtype for p in device.compute_peaks if p.unit == unit})) or "none"
    raise NoComputePeakError("dtype", f"device {device.id} has no {unit} peak for {dtype} (its {unit} peaks: {available})")


@by_identity(objects=2)
def select_memory_roof(device: DeviceSpec, measured: MeasuredRoofs, level: str, mode: RoofMode) -> MemoryRoof | None:
    nominal = device.memory_level(level)
    chosen = _pick((nominal.bandwidth_bytes_per_s, nominal.citation) if nominal else None, measured.memory.get(level), mode)
    if chosen is None:
        return None
    value, source, citation = chosen
    return MemoryRoof(level, value, source, citation)


def require_memory_roof(device: DeviceSpec, measured: MeasuredRoofs, level: str, mode: RoofMode) -> MemoryRoof:
    roof = select_memory_roof(device, measured, level, mode)
    if roof is None:
        what = "measured " if mode == RoofMode.measured else ""
        raise CostModelError("roofs", f"no {what}{level} bandwidth for device {device.id}")
    return roof


# A measurement may exceed its datasheet counterpart by this much without an explanation
# (run-to-run noise, rounding in datasheets); more needs `exceeds_nominal_reason`.
NOMINAL_TOLERANCE = 0.05
# A measurement below this fraction of its datasheet counterpart is more likely a unit slip (GB/s typed into
# a bytes/s field is 1e-9 of the truth) than a slow card; it needs `off_nominal_reason`. Real sustained
# figures sit at 60-95 % of nominal; a throttled or misconfigured card may fall further, but rarely to a tenth.
NOMINAL_FLOOR = 0.10


def select_collective_latency(device: DeviceSpec, measured: MeasuredRoofs, link: str,
                              mode: RoofMode) -> tuple[float, str]:
    """(seconds of one collective's fixed cost on `link`, "measured" or "nominal"): the median of submitted
    collective_latency records (roofs 'effective' or 'measured'), else the device's intra-node figure or the
    inter-node default."""
    found = measured.latencies.get(link)
    if found is not None and mode != RoofMode.nominal:
        return found.median, "measured"
    return (device.collective_latency_s if link == "intra_node" else DEFAULT_INTER_NODE_LATENCY_S), "nominal"


def nominal_value(device: DeviceSpec, kind: str, key: tuple[str, str] | str) -> float | None:
    if isinstance(key, tuple):  # a compute roof's (dtype, unit)
        dtype, unit = key
        peak = device.peak(peak_dtype(dtype), unit)
        return peak.flops_per_s if peak else None
    if kind == "link_bandwidth":
        return device.link_bandwidth_bytes_per_s(key)
    level = device.memory_level(key)
    return level.bandwidth_bytes_per_s if level else None


def nominal_mismatch(device: DeviceSpec, kind: str, key: tuple[str, str] | str, value: float) -> tuple[str, str] | None:
    """(the reason field that would admit it, why) for a measurement implausible against the datasheet,
    or None when it is plausible."""
    nominal = nominal_value(device, kind, key)
    if nominal is None:
        if not isinstance(key, tuple):
            return None  # bandwidths the datasheet leaves out (an H100's L2, a PCIe card's network) are welcome
        dtype, unit = key
        return ("off_nominal_reason", f"device {device.id} has no nominal {dtype} {unit} peak, so a measurement of it "
                f"is likely a wrong dtype or unit; say why in off_nominal_reason to submit it anyway")
    if value > nominal * (1 + NOMINAL_TOLERANCE):
        return ("exceeds_nominal_reason", f"{value:.4g} is {value / nominal - 1:.1%} above the nominal {nominal:.4g} of "
                f"device {device.id}, beyond the {NOMINAL_TOLERANCE:.0%} tolerance; explain it in exceeds_nominal_reason "
                "(e.g. a boost clock above the datasheet's) to submit it anyway")
    if value < nominal * NOMINAL_FLOOR:
        return ("off_nominal_reason", f"{value:.4g} is {value / nominal:.2%} of the nominal {nominal:.4g} of device "
                f"{device.id}, below the {NOMINAL_FLOOR:.0%} floor (a unit slip? values are FLOP/s and bytes/s, not "
                "GFLOP/s or GB/s); explain it in off_nominal_reason to submit it anyway")
    return None
