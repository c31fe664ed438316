"""The nominal catalog file, and the in-memory view of devices and measured roofs that analyses read.

Analyses never touch the database: they read this cache, which is rebuilt after every write.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from functools import lru_cache
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine
from sqlmodel import Session

from service import repository
from service.core.hardware import DEFAULT_MATMUL_TILE, ComputePeak, DeviceSpec, MemoryLevel, MemoryLevelName, Unit
from service.core.roofs import NO_MEASUREMENTS, MeasuredRoofs, aggregate
from service.errors import DeviceNotFound
from service.models import Benchmark, Device

NOMINAL_CATALOG_PATH = Path(__file__).parent / "data" / "devices.json"


@lru_cache
def nominal_catalog() -> tuple[dict[str, Any], ...]:
    """The datasheet catalog shipped with the service (SI units, a citation per number)."""
    return tuple(json.loads(NOMINAL_CATALOG_PATH.read_text())["devices"])


def spec_from_row(row: Device) -> DeviceSpec:
    return DeviceSpec(
        id=row.id,
        name=row.name,
        vendor=row.vendor,
        memory_capacity_bytes=row.memory_capacity_bytes,
        compute_peaks=tuple(
            ComputePeak(p["dtype"], Unit(p["unit"]), float(p["flops_per_s"]), p["citation"]) for p in row.compute_peaks
        ),
        memory_levels=tuple(
            MemoryLevel(MemoryLevelName(m["level"]), float(m["bandwidth_bytes_per_s"]), m["citation"], m.get("capacity_bytes"))
            for m in row.memory_levels
        ),
        sm_count=row.sm_count,
        boost_clock_hz=row.boost_clock_hz,
        tdp_w=row.tdp_w,
        interconnect_bandwidth_bytes_per_s=row.interconnect_bandwidth_bytes_per_s,
        citations=dict(row.citations),
        matmul_tile=tuple(row.default_matmul_tile) if row.default_matmul_tile else DEFAULT_MATMUL_TILE,
    )


def measured_roofs(rows: list[Benchmark]) -> dict[str, MeasuredRoofs]:
    """Median (with count, min, max, latest) of the accepted measurements per device and roof."""
    compute: dict[str, dict] = defaultdict(lambda: defaultdict(list))
    memory: dict[str, dict] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        if row.kind == "compute":
            compute[row.device_id][(row.dtype, row.unit)].append((row.flops_per_s, row.measured_at))
        else:
            memory[row.device_id][row.level].append((row.bytes_per_s, row.measured_at))
    return {
        device_id: MeasuredRoofs(
            compute={key: aggregate(samples) for key, samples in compute[device_id].items()},
            memory={key: aggregate(samples) for key, samples in memory[device_id].items()},
        )
        for device_id in set(compute) | set(memory)
    }


class DeviceCatalog:
    """Device specs and measured roofs by device id, loaded once and reloaded after writes."""

    def __init__(self, engine: Engine):
        self._engine = engine
        self._lock = threading.Lock()
        self._specs: dict[str, DeviceSpec] = {}
        self._measured: dict[str, MeasuredRoofs] = {}

    def reload(self) -> None:
        with Session(self._engine) as session:
            specs = {row.id: spec_from_row(row) for row in repository.list_devices(session)}
            measured = measured_roofs(repository.all_benchmarks(session))
        with self._lock:
            self._specs, self._measured = specs, measured

    def get(self, device_id: str) -> DeviceSpec:
        spec = self._specs.get(device_id)
        if spec is None:
            raise DeviceNotFound(device_id)
        return spec

    def measured(self, device_id: str) -> MeasuredRoofs:
        return self._measured.get(device_id, NO_MEASUREMENTS)

    def __len__(self) -> int:
        return len(self._specs)
