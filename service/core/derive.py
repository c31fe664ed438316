"""Peaks derived from micro-architecture numbers, to stand beside (or in for) datasheet values.

compute: units x FMA per unit per cycle x 2 FLOP x clock; bandwidth: bus bits / 8 x transfers per second per pin.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DerivedPeak:
    dtype: str
    unit: str
    flops_per_s: float
    formula: str


@dataclass(frozen=True)
class DerivedBandwidth:
    bytes_per_s: float
    formula: str


def derived_compute_peaks(micro: dict[str, Any]) -> list[DerivedPeak]:
    units, clock = micro["units"], micro["clock_hz"]
    peaks = []
    for unit in ("tensor", "vector"):
        for dtype, fma in (micro.get(f"{unit}_fma_per_unit_per_cycle") or {}).items():
            peaks.append(DerivedPeak(dtype, unit, units * fma * 2 * clock,
                                     f"{units} units x {fma} FMA/cycle x 2 FLOP x {clock:.4g} Hz"))
    return peaks


def derived_bandwidth(micro: dict[str, Any]) -> DerivedBandwidth | None:
    bits, rate = micro.get("memory_bus_width_bits"), micro.get("memory_transfers_per_s_per_pin")
    if not (bits and rate):
        return None
    return DerivedBandwidth(bits / 8 * rate, f"{bits} bits / 8 x {rate:.4g} transfers/s per pin")
