"""The nominal catalog file, and the in-memory view of devices and measured roofs that analyses read.

Analyses never touch the database: they read this cache, which is rebuilt when a write is seen.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlmodel import Session

from service.core.dtypes import peak_dtype
from service.core.expectations.engines import EngineCalibration
from service.core.expectations.kernels import KernelCalibration, ShapeCorrection
from service.core.expectations.serving_runs import ServingCalibration
from service.core.hardware import (
    DEFAULT_COLLECTIVE_LATENCY_S,
    DEFAULT_LAUNCH_OVERHEAD_S,
    DEFAULT_MATMUL_TILE,
    ComputePeak,
    DeviceSpec,
    MemoryLevel,
    MemoryLevelName,
    Unit,
)
from service.core.roofs import NO_MEASUREMENTS, MeasuredRoofs, aggregate
from service.core.simulation.carried_over import CarriedSchedulingCalibration
from service.core.simulation.fit import SchedulingCalibration
from service.persistence import repository
from service.persistence.change_probe import SqliteCommitProbe
from service.persistence.tables import Benchmark, ModelConfig, StoredKernelCalibration
from service.runtime.errors import DeviceNotFound, ModelNotFound

# After the database failed, analyses are served from the loaded catalog for this long before it is
# tried again.
UNREACHABLE_RETRY_S = 2.0
S = TypeVar("S")
T = TypeVar("T")
DATA_DIR = Path(__file__).resolve().parents[1] / "data"
NOMINAL_CATALOG_PATH = DATA_DIR / "devices.json"
MODEL_CATALOG_DIR = DATA_DIR / "models"
GEMM_CALIBRATIONS_PATH = DATA_DIR / "calibrations" / "gemm.json"
MOE_CALIBRATIONS_PATH = DATA_DIR / "calibrations" / "moe.json"
ATTENTION_CALIBRATIONS_PATH = DATA_DIR / "calibrations" / "attention.json"
GEMM_LATTICES_PATH = DATA_DIR / "calibrations" / "gemm_lattices.npz"
SERVING_CALIBRATIONS_PATH = DATA_DIR / "calibrations" / "serving.json"
ENGINE_CALIBRATIONS_PATH = DATA_DIR / "calibrations" / "engines.json"
SCHEDULING_CALIBRATIONS_PATH = DATA_DIR / "calibrations" / "scheduling.json"
CARRIED_SCHEDULING_PATH = DATA_DIR / "calibrations" / "scheduling_carried.json"


@lru_cache
def nominal_catalog() -> tuple[dict[str, Any], ...]:
    """The datasheet catalog shipped with the service (SI units, a citation per number)."""
    return tuple(json.loads(NOMINAL_CATALOG_PATH.read_text())["devices"])


@lru_cache
def gemm_calibrations() -> dict[tuple[str, str], KernelCalibration]:
    """The GEMM calibrations shipped with the service (scripts/fit_gemm_calibration.py), by (device id, dtype), each
    with its nearest-shapes lattice as tabulated when it was fitted (scripts/tabulate_gemm_lattices.py)."""
    entries = json.loads(GEMM_CALIBRATIONS_PATH.read_text())["calibrations"]
    calibrations = {(entry["device_id"], entry["dtype"]): KernelCalibration(**entry) for entry in entries}
    if GEMM_LATTICES_PATH.exists():
        with np.load(GEMM_LATTICES_PATH) as tables:
            for (device_id, dtype), calibration in calibrations.items():
                key = lattice_key(device_id, dtype)
                if f"{key}:values" in tables:
                    calibration.use_lattice(ShapeCorrection.tabulated(
                        tables[f"{key}:low"], float(tables[f"{key}:step"]), tables[f"{key}:values"]))
    return calibrations


@lru_cache
def moe_calibrations() -> dict[tuple[str, str, str], KernelCalibration]:
    """The fused-MoE calibrations shipped with the service (scripts/fit_moe_calibration.py), by (device id, engine,
    dtype)."""
    entries = json.loads(MOE_CALIBRATIONS_PATH.read_text())["calibrations"]
    calibrations = (KernelCalibration(**entry) for entry in entries)
    return {(calibration.device_id, calibration.engine, calibration.key): calibration for calibration in calibrations}


@lru_cache
def attention_calibrations() -> dict[tuple[str, str, str], KernelCalibration]:
    """The attention calibrations shipped with the service (scripts/fit_attention_calibration.py), by (device id,
    engine, attention_kernels.attention_key: "<kind>:<dtype>")."""
    entries = json.loads(ATTENTION_CALIBRATIONS_PATH.read_text())["calibrations"]
    return {(entry["device_id"], entry["engine"], f"{entry['operator']}:{entry['dtype']}"): KernelCalibration(**entry)
            for entry in entries}


def lattice_key(device_id: str, dtype: str) -> str:
    """A shipped calibration's name among the tabulated lattices."""
    return f"{device_id}:{dtype}"


@lru_cache
def serving_calibrations() -> dict[tuple[str, str, str | None, str, str], ServingCalibration]:
    """The serving calibrations shipped with the service (scripts/fit_serving_calibration.py), by (device id, engine,
    model, precision, speculative method)."""
    entries = json.loads(SERVING_CALIBRATIONS_PATH.read_text())["calibrations"]
    found = {}
    for entry in entries:
        c = serving_calibration_of(entry)
        found[(c.device_id, c.engine, c.model, c.precision, c.speculative)] = c
    return found


# The catalog model InferenceX's DeepSeek-R1 runs served (its architecture): the model of every shipped scheduling
# calibration, and of the serving calibrations and engine lines fitted to those runs.
DEEPSEEK_RUNS_MODEL = "deepseek-v3"


@lru_cache
def engine_calibrations() -> dict[tuple[str, str, str], EngineCalibration]:
    """The engines' costs shipped with the service (scripts/fit_engine_calibration.py), by (engine, precision,
    speculative method); none before that script has run."""
    if not ENGINE_CALIBRATIONS_PATH.exists():
        return {}
    entries = json.loads(ENGINE_CALIBRATIONS_PATH.read_text())["calibrations"]
    return {(c.engine, c.precision, c.speculative): c for c in (EngineCalibration(**entry) for entry in entries)}


@lru_cache
def scheduling_calibrations() -> dict[tuple[str, str, str, str], SchedulingCalibration]:
    """The scheduling simulation's fits shipped with the service (scripts/fit_scheduling_calibration.py), by (device
    id, engine, precision, speculative method); none before that script has run."""
    if not SCHEDULING_CALIBRATIONS_PATH.exists():
        return {}
    entries = json.loads(SCHEDULING_CALIBRATIONS_PATH.read_text())["calibrations"]
    return {(c.device_id, c.engine, c.precision, c.speculative): c
            for c in (SchedulingCalibration(**entry) for entry in entries)}


@lru_cache
def carried_scheduling_calibrations() -> dict[tuple[str, str, str], CarriedSchedulingCalibration]:
    """The scheduling simulation's fits carried over to devices without runs (scripts/fit_carried_scheduling.py), by
    (engine, precision, speculative method)."""
    if not CARRIED_SCHEDULING_PATH.exists():
        return {}
    entries = json.loads(CARRIED_SCHEDULING_PATH.read_text())["calibrations"]
    return {(c.engine, c.precision, c.speculative): c
            for c in (CarriedSchedulingCalibration(**entry) for entry in entries)}


# Where a stored serving calibration's fields keep the scheduling simulation's fit of the same runs, and why there is
# none (the serving_calibrations table holds every fit of one scope's runs).
SCHEDULING_FIELD, SCHEDULING_NOT_FITTED_FIELD = "scheduling", "scheduling_not_fitted"


# What a measured serving calibration stored before its runs were simulated says of its scheduling fit.
NOT_REFITTED = ("fitted before submitted runs were simulated: the next run submitted to or deleted from its scope "
                "refits both")


def _measured_key(serving: ServingCalibration) -> tuple[str, ...]:
    """A measured serving calibration's scope, as the serving_calibrations table keys it (SERVING_KEY)."""
    return (serving.device_id, serving.engine, serving.model or "", serving.precision, serving.speculative)


def serving_calibration_of(fields: dict[str, Any]) -> ServingCalibration:
    """A serving calibration from its fields as JSON keeps them (pairs as lists)."""
    own = {name: value for name, value in fields.items() if name not in (SCHEDULING_FIELD, SCHEDULING_NOT_FITTED_FIELD)}
    return ServingCalibration(**{**own, "shapes": tuple(map(tuple, fields["shapes"])),
                                 "concurrency": tuple(fields["concurrency"])})


def measured_scheduling_of(fields: dict[str, Any]) -> SchedulingCalibration | None:
    """The scheduling calibration a stored serving calibration's fields hold, if any (rows stored before there was
    one hold none)."""
    scheduling = fields.get(SCHEDULING_FIELD)
    return SchedulingCalibration(**scheduling) if scheduling else None


@lru_cache
def shipped_runs() -> tuple[dict[str, Any], ...]:
    """The measured serving runs shipped with the service (SemiAnalysis InferenceX), as their rows."""
    return tuple(json.loads((DATA_DIR / "serving-runs" / "inferencex-dsr1.json").read_text())["rows"])


def shipped_gpt_oss_runs() -> tuple[dict[str, Any], ...]:
    """InferenceX's gpt-oss-120b runs (inferencex-gptoss-120b.json, their means): they give an engine with no
    DeepSeek-R1 run its line (vLLM), and check the others' lines on a second model."""
    return tuple(json.loads((DATA_DIR / "serving-runs" / "inferencex-gptoss-120b.json").read_text())["rows"])


@lru_cache
def model_catalog() -> tuple[dict[str, Any], ...]:
    """The reference model configs shipped with the service: id, name, source and the config itself."""
    index = json.loads((MODEL_CATALOG_DIR / "index.json").read_text())["models"]
    return tuple({**entry, "config": json.loads((MODEL_CATALOG_DIR / entry["file"]).read_text())} for entry in index)


def seed_catalog_models(connection: Connection, ids: tuple[str, ...]) -> None:
    """For a migration that ships new catalog models: those of `ids` the database does not hold yet, as shipped."""
    models = sa.table("models", sa.column("id"), sa.column("name"), sa.column("family"), sa.column("config", sa.JSON),
                      sa.column("source"), sa.column("origin"), sa.column("created_at"), sa.column("updated_at"))
    present = {row[0] for row in connection.execute(sa.select(models.c.id).where(models.c.id.in_(ids)))}
    now = datetime.now(UTC)
    rows = [{"id": entry["id"], "name": entry["name"], "family": entry["config"]["model_type"], "config": entry["config"],
             "source": entry["source"], "origin": "catalog", "created_at": now, "updated_at": now}
            for entry in model_catalog() if entry["id"] in ids and entry["id"] not in present]
    if rows:
        connection.execute(models.insert(), rows)


def seed_catalog_devices(connection: Connection, ids: tuple[str, ...]) -> None:
    """For a migration that ships new catalog devices: those of `ids` the database does not hold yet, as shipped,
    every field the table has at this revision."""
    devices = sa.Table("devices", sa.MetaData(), autoload_with=connection)
    present = {row[0] for row in connection.execute(sa.select(devices.c.id).where(devices.c.id.in_(ids)))}
    now = datetime.now(UTC)
    columns = set(devices.c.keys())
    rows = [{**{name: value for name, value in entry.items() if name in columns}, "origin": "catalog",
             "created_at": now, "updated_at": now}
            for entry in nominal_catalog() if entry["id"] in ids and entry["id"] not in present]
    if rows:
        connection.execute(devices.insert(), rows)


def backfill_catalog_fields(connection: Connection, fields: tuple[str, ...], ids: tuple[str, ...] | None = None) -> None:
    """For a migration that adds columns (or ships new values of them: `ids`, those devices only): the shipped
    catalog's values of `fields`, with their citations, onto the catalog devices still as they shipped (a device
    deleted or replaced through the API is left alone)."""
    structured = {"compute_peaks", "memory_levels", "citations", "default_matmul_tile", "microarchitecture"}
    devices = sa.table("devices", sa.column("id"), sa.column("origin"), sa.column("citations", sa.JSON),
                       *(sa.column(name, sa.JSON) if name in structured else sa.column(name) for name in fields))
    for entry in nominal_catalog():
        if all(entry.get(name) is None for name in fields) or (ids is not None and entry["id"] not in ids):
            continue
        found = connection.execute(sa.select(devices.c.citations).where(
            devices.c.id == entry["id"], devices.c.origin == "catalog")).first()
        if found is None:
            continue
        citations = found[0] if isinstance(found[0], dict) else json.loads(found[0] or "{}")
        citations.update({name: entry["citations"][name] for name in fields if name in entry["citations"]})
        connection.execute(devices.update().where(devices.c.id == entry["id"]).values(
            citations=citations, **{name: entry[name] for name in fields}))


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
        collective_latency_s=(DEFAULT_COLLECTIVE_LATENCY_S if fields.get("collective_latency_s") is None
                              else fields["collective_latency_s"]),
        usable_memory_bytes=fields.get("usable_memory_bytes"),
        node_size=fields.get("node_size"),
        in_network_reduction=bool(fields.get("in_network_reduction")),
        inter_node_bandwidth_bytes_per_s=fields.get("inter_node_bandwidth_bytes_per_s"),
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
    links: dict[str, dict] = defaultdict(lambda: defaultdict(list))
    latencies: dict[str, dict] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        if row.kind == "compute":
            # Keyed as peaks are: both fp8 encodings measure the device's one fp8 roof.
            assert row.dtype is not None  # the contract requires a compute benchmark's dtype
            compute[row.device_id][(peak_dtype(row.dtype), row.unit)].append((row.flops_per_s, row.measured_at))
        elif row.kind == "link_bandwidth":
            links[row.device_id][row.level].append((row.bytes_per_s, row.measured_at))  # the link's name
        elif row.kind == "collective_latency":
            latencies[row.device_id][row.level].append((row.seconds, row.measured_at))
        else:
            memory[row.device_id][row.level].append((row.bytes_per_s, row.measured_at))

    def aggregates(by_key: dict) -> dict:
        return {key: aggregate(samples) for key, samples in by_key.items()}

    return {
        device_id: MeasuredRoofs(compute=aggregates(compute[device_id]), memory=aggregates(memory[device_id]),
                                 links=aggregates(links[device_id]), latencies=aggregates(latencies[device_id]))
        for device_id in set(compute) | set(memory) | set(links) | set(latencies)
    }


def with_kernel_calibrations(measured: dict[str, MeasuredRoofs],
                             rows: list[StoredKernelCalibration]) -> dict[str, MeasuredRoofs]:
    """Each device's measured roofs with the calibrations fitted to its kernel timings beside them."""
    kernels: dict[str, dict[tuple[str, str], KernelCalibration]] = defaultdict(dict)
    for row in rows:
        kernels[row.device_id][(row.engine, row.dtype)] = KernelCalibration(**row.fit)
    return {**measured, **{device_id: replace(measured.get(device_id, NO_MEASUREMENTS), kernels=fits)
                           for device_id, fits in kernels.items()}}


class DeviceCatalog:
    """Devices, measured roofs and models, held in memory and reloaded when the catalog's version moves.

    Every write bumps catalog_state.version in its own transaction. Before serving, a process checks
    whether anything was committed since it loaded: on SQLite with a commit probe (microseconds, safe on
    the event loop), elsewhere by querying the version. The catalog reads through an engine of its own,
    given by the caller: a request holding a pooled connection then never waits on the catalog for a
    second one, which under load starved the pool (requests each holding one connection, all waiting
    for another). Refreshes are serialised, so a slower, older load never replaces a newer one."""

    def __init__(self, engine: Engine):
        self._engine = engine
        self._probe = SqliteCommitProbe.for_engine(engine)
        self._version: int | None = None
        self._commits_seen: int | None = None
        self._refresh_lock = threading.Lock()
        self._failed_at = -math.inf
        self._specs: dict[str, DeviceSpec] = {}
        self._measured: dict[str, MeasuredRoofs] = {}
        self._models: dict[str, ModelConfig] = {}
        self._serving: dict[tuple[str, ...], ServingCalibration] = {}
        self._scheduling: dict[tuple[str, ...], SchedulingCalibration] = {}
        self._scheduling_not_fitted: dict[tuple[str, ...], str] = {}
        self._derived: dict[Any, Any] = {}

    def refresh_or_go_stale(self) -> bool:
        """Refreshes, unless the database failed within the last UNREACHABLE_RETRY_S; True when the caller
        is to be served from the catalog as last loaded. Blocking: run it off the event loop. Raises when
        the database fails and nothing was ever loaded."""
        if self.loaded and time.monotonic() - self._failed_at < UNREACHABLE_RETRY_S:
            return True  # don't make every request wait out a connect timeout on a server known down
        try:
            self.refresh()
        except (OperationalError, PoolTimeout):
            self._failed_at = time.monotonic()
            if not self.loaded:
                raise
            return True
        return False

    @property
    def loaded(self) -> bool:
        """Whether any load succeeded: a stale catalog can still answer analyses."""
        return self._version is not None

    def is_known_current(self) -> bool:
        """True only when certainly nothing was committed since the last load."""
        return self._probe is not None and self._probe.commit_counter() == self._commits_seen

    def refresh(self) -> None:
        """Reloads if the stored version moved. Blocking: run it off the event loop."""
        with self._refresh_lock:
            with Session(self._engine) as session:
                # Connected first (its set-up may switch the journal mode, which counts as a change), then
                # the counter, then the data: a commit that lands during the load moves the counter again.
                session.connection()
                commits = self._probe.commit_counter() if self._probe else None
                version = repository.catalog_version(session)
                if version != self._version:
                    specs = {row.id: device_spec(row.model_dump()) for row in repository.list_devices(session)}
                    measured = measured_roofs(repository.all_benchmarks(session))
                    models = {row.id: row for row in repository.list_models(session)}
                    measured = with_kernel_calibrations(measured, repository.all_kernel_calibrations(session))
                    stored = {tuple(getattr(row, name) for name in repository.SERVING_KEY): row.fit
                              for row in repository.all_serving_calibrations(session)}
                    self._specs, self._measured, self._models, self._version = specs, measured, models, version
                    self._serving = {key: serving_calibration_of(fit) for key, fit in stored.items()}
                    self._scheduling = {key: found for key, fit in stored.items()
                                        if (found := measured_scheduling_of(fit)) is not None}
                    self._scheduling_not_fitted = {key: fit.get(SCHEDULING_NOT_FITTED_FIELD) or NOT_REFITTED
                                                   for key, fit in stored.items() if key not in self._scheduling}
                    self._derived = {}
            self._commits_seen = commits

    def close(self) -> None:
        if self._probe is not None:
            self._probe.close()
        self._engine.dispose()

    def derived(self, source: S, build: Callable[[S], T]) -> T:
        """build(source), computed once per loaded object (e.g. a model row's parsed architecture) and
        dropped at the next reload. The layers above decide what to derive; the catalog knows when it is
        stale. The entry keeps its source, so a row read just before a reload never answers for its successor."""
        key = (id(source), build)
        entry = self._derived.get(key)
        if entry is None or entry[0] is not source:
            entry = (source, build(source))
            self._derived[key] = entry
        return entry[1]

    def model(self, model_id: str) -> ModelConfig:
        found = self._models.get(model_id)
        if found is None:
            raise ModelNotFound(model_id, self._models)
        return found

    def get(self, device_id: str) -> DeviceSpec:
        spec = self._specs.get(device_id)
        if spec is None:
            raise DeviceNotFound(device_id, known=self._specs)
        return spec

    def measured(self, device_id: str) -> MeasuredRoofs:
        return self._measured.get(device_id, NO_MEASUREMENTS)

    def serving_calibration(self, device_id: str, engine: str, model: str, precision: str,
                            speculative: str) -> ServingCalibration | None:
        """The calibration fitted to the runs submitted for exactly this device, engine, model, weights' type and
        speculative method, else the one shipped for them (InferenceX's DeepSeek-R1 and gpt-oss-120b runs: another
        model's deployment was not measured, and reads its kernel tables instead), else None."""
        submitted = self._serving.get((device_id, engine, model, precision, speculative))
        if submitted is not None:
            return submitted
        return serving_calibrations().get((device_id, engine, model, precision, speculative))

    def measured_serving_calibrations(self) -> list[ServingCalibration]:
        return [self._serving[key] for key in sorted(self._serving)]

    def scheduling_calibration(self, serving: ServingCalibration) -> SchedulingCalibration | None:
        """The scheduling calibration fitted to the same runs as `serving` (one serving_calibration answered): the
        submitted runs' own where it is a measured one, else the shipped one of its device and scope (DeepSeek-R1's:
        no other model's runs are simulated)."""
        if serving.origin == "measured":
            return self._scheduling.get(_measured_key(serving))
        if serving.model != DEEPSEEK_RUNS_MODEL:
            return None
        return scheduling_calibrations().get((serving.device_id, serving.engine, serving.precision,
                                              serving.speculative))

    def scheduling_not_fitted(self, serving: ServingCalibration) -> str:
        """Why the runs of a measured serving calibration have no scheduling calibration."""
        return self._scheduling_not_fitted.get(_measured_key(serving), NOT_REFITTED)

    def measured_scheduling_calibrations(self) -> list[SchedulingCalibration]:
        return [self._scheduling[key] for key in sorted(self._scheduling)]

    def kernel_calibrations(self) -> list[KernelCalibration]:
        """Every calibration fitted to submitted timings, of every device."""
        return [fit for measured in self._measured.values() for fit in measured.kernels.values()]
