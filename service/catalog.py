"""The nominal catalog file, and the in-memory view of devices and measured roofs that analyses read.

Analyses never touch the database: they read this cache, which is rebuilt after every write.
"""

from __future__ import annotations

import json
import os
import threading
from collections import defaultdict
from functools import lru_cache
from pathlib import Path
from collections.abc import Mapping
from typing import Any

from sqlalchemy.engine import Engine
from sqlmodel import Session

from service import repository
from service.core.hardware import DEFAULT_LAUNCH_OVERHEAD_S, DEFAULT_MATMUL_TILE, ComputePeak, DeviceSpec, MemoryLevel, MemoryLevelName, Unit
from service.core.roofs import NO_MEASUREMENTS, MeasuredRoofs, aggregate
from service.errors import DeviceNotFound, ModelNotFound
from service.core.transformer.architecture import Architecture
from service.models import Benchmark, ModelConfig

NOMINAL_CATALOG_PATH = Path(__file__).parent / "data" / "devices.json"
MODEL_CATALOG_DIR = Path(__file__).parent / "data" / "models"


@lru_cache
def nominal_catalog() -> tuple[dict[str, Any], ...]:
    """The datasheet catalog shipped with the service (SI units, a citation per number)."""
    return tuple(json.loads(NOMINAL_CATALOG_PATH.read_text())["devices"])


@lru_cache
def model_catalog() -> tuple[dict[str, Any], ...]:
    """The reference model configs shipped with the service: id, name, source and the config itself."""
    index = json.loads((MODEL_CATALOG_DIR / "index.json").read_text())["models"]
    return tuple({**entry, "config": json.loads((MODEL_CATALOG_DIR / entry["file"]).read_text())} for entry in index)


def device_spec(fields: Mapping[str, Any]) -> DeviceSpec:
    """A device's specification from its stored fields (a table row's, or a catalog file entry's)."""
    tile = fields.get("default_matmul_tile")
    return DeviceSpec(
        id=fields["id"],
        name=fields["name"],
        vendor=fields["vendor"],
        memory_capacity_bytes=fields["memory_capacity_bytes"],
        compute_peaks=tuple(
            ComputePeak(p["dtype"], Unit(p["unit"]), float(p["flops_per_s"]), p["citation"]) for p in fields["compute_peaks"]
        ),
        memory_levels=tuple(
            MemoryLevel(MemoryLevelName(m["level"]), float(m["bandwidth_bytes_per_s"]), m["citation"], m.get("capacity_bytes"))
            for m in fields["memory_levels"]
        ),
        sm_count=fields.get("sm_count"),
        boost_clock_hz=fields.get("boost_clock_hz"),
        tdp_w=fields.get("tdp_w"),
        interconnect_bandwidth_bytes_per_s=fields.get("interconnect_bandwidth_bytes_per_s"),
        citations=dict(fields.get("citations") or {}),
        matmul_tile=tuple(tile) if tile else DEFAULT_MATMUL_TILE,
        launch_overhead_s=fields.get("kernel_launch_overhead_s") or DEFAULT_LAUNCH_OVERHEAD_S,
    )


def nominal_device(device_id: str) -> DeviceSpec:
    """A device of the shipped catalog, without a database (tests, the CLI's local mode)."""
    for entry in nominal_catalog():
        if entry["id"] == device_id:
            return device_spec(entry)
    raise DeviceNotFound(device_id)


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


def sqlite_files(engine: Engine) -> tuple[str, ...]:
    if engine.dialect.name != "sqlite" or not engine.url.database or engine.url.database == ":memory:":
        return ()
    return (engine.url.database, engine.url.database + "-wal")


def _file_signature(paths: tuple[str, ...]) -> tuple:
    signature = []
    for path in paths:
        try:
            stat = os.stat(path)
            signature.append((stat.st_mtime_ns, stat.st_size, stat.st_ino))
        except FileNotFoundError:
            signature.append(None)
    return tuple(signature)


class DeviceCatalog:
    """Devices, measured roofs and models, held in memory and reloaded when the catalog's version moves.

    Every write bumps catalog_state.version in its own transaction, so a process notices writes made by
    other workers or replicas: before serving, it compares the stored version with the one it loaded.
    On SQLite that comparison is skipped while the database files are untouched (a stat, no query)."""

    def __init__(self, engine: Engine):
        self._engine = engine
        self._version: int | None = None
        self._files = sqlite_files(engine)
        self._signature: tuple | None = None
        self._lock = threading.Lock()
        self._specs: dict[str, DeviceSpec] = {}
        self._measured: dict[str, MeasuredRoofs] = {}
        self._models: dict[str, tuple[ModelConfig, Architecture]] = {}

    def reload(self) -> None:
        from service.model_specs import architecture_of

        with Session(self._engine) as session:
            version = repository.catalog_version(session)
            specs = {row.id: device_spec(row.model_dump()) for row in repository.list_devices(session)}
            measured = measured_roofs(repository.all_benchmarks(session))
            models = {row.id: (row, architecture_of(row.config)) for row in repository.list_models(session)}
        with self._lock:
            self._specs, self._measured, self._models, self._version = specs, measured, models, version

    @property
    def checks_by_stat(self) -> bool:
        return bool(self._files)

    def ensure_fresh(self) -> None:
        if self._files:
            signature = _file_signature(self._files)
            if signature == self._signature:
                return
            self._signature = signature
        with Session(self._engine) as session:
            current = repository.catalog_version(session)
        if current != self._version:
            self.reload()

    def model(self, model_id: str) -> tuple[ModelConfig, Architecture]:
        found = self._models.get(model_id)
        if found is None:
            raise ModelNotFound(model_id)
        return found

    def get(self, device_id: str) -> DeviceSpec:
        spec = self._specs.get(device_id)
        if spec is None:
            raise DeviceNotFound(device_id)
        return spec

    def measured(self, device_id: str) -> MeasuredRoofs:
        return self._measured.get(device_id, NO_MEASUREMENTS)
