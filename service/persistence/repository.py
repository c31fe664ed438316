"""Every query and commit of the service. Functions take the session and keyword arguments only."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from contextvars import ContextVar
from datetime import timedelta
from typing import Any, NamedTuple, cast

from sqlalchemy import Engine, delete, func, insert, text, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from service.persistence.db import database_file_intact
from service.persistence.tables import (
    AuditEntry,
    Benchmark,
    CatalogState,
    Device,
    IdempotencyKey,
    KernelTiming,
    ModelConfig,
    ServingRun,
    StoredKernelCalibration,
    StoredServingCalibration,
    utcnow,
)
from service.runtime.errors import (
    AlreadyExists,
    BenchmarkNotFound,
    DatabaseUnavailable,
    DeviceNotFound,
    KernelTimingNotFound,
    ModelNotFound,
    ServingRunNotFound,
)


def _require_intact_file(session: Session) -> None:
    if not database_file_intact(cast(Engine, session.get_bind())):  # sessions are bound to the engine
        raise DatabaseUnavailable("the database file was deleted or replaced while the service ran; nothing was "
                                  "written. Restart the service against the right file")


class WriteRecord(NamedTuple):
    """Who writes what: the audit trail's row for the write being made."""

    writer: str  # the token's label
    method: str
    path: str
    request_id: str


# Set by the HTTP layer (service/api/audit.py) around a writer's write; every write's transaction records it.
CURRENT_WRITE: ContextVar[WriteRecord | None] = ContextVar("current_write", default=None)


def _bump_version(session: Session) -> None:
    """Every write to the catalog bumps its version in the same transaction (see catalog.py), after
    checking that the SQLite file is still the one the service opened, and records who made it (the audit trail),
    so a write and its record commit together."""
    _require_intact_file(session)
    write = CURRENT_WRITE.get()
    if write is not None:
        session.add(AuditEntry(at=utcnow(), writer=write.writer, method=write.method, path=write.path[:300],
                               request_id=write.request_id[:128]))
    session.exec(update(CatalogState).where(col(CatalogState.id) == 1).values(version=col(CatalogState.version) + 1))


def catalog_version(session: Session) -> int:
    return session.exec(select(CatalogState.version).where(CatalogState.id == 1)).one()


def list_devices(session: Session) -> list[Device]:
    return list(session.exec(select(Device).order_by(Device.id)))


def get_device(session: Session, *, device_id: str) -> Device:
    device = session.get(Device, device_id)
    if device is None:
        raise DeviceNotFound(device_id)
    return device


def _insert(session: Session, row, what: str, key: str):
    session.add(row)
    try:
        _bump_version(session)  # flushes the insert first: a duplicate id fails here
        session.commit()
    except IntegrityError:
        session.rollback()
        raise AlreadyExists(what, key) from None
    session.refresh(row)
    return row


def _delete(session: Session, row) -> None:
    session.delete(row)
    _bump_version(session)
    session.commit()


def create_device(session: Session, *, device_id: str, spec: dict[str, Any], origin: str = "user") -> Device:
    # A row of that id may already sit in this session (a profile's base): adding a second object of the
    # same identity would collide in the session before the database could refuse it.
    if session.get(Device, device_id) is not None:
        raise AlreadyExists("device", device_id)
    now = utcnow()
    return _insert(session, Device(id=device_id, origin=origin, created_at=now, updated_at=now, **spec), "device", device_id)


def replace_device(session: Session, *, device_id: str, spec: dict[str, Any]) -> Device:
    """A catalog entry that is replaced says so (origin catalog_modified) until it is restored."""
    device = get_device(session, device_id=device_id)
    for name, value in spec.items():
        setattr(device, name, value)
    if device.origin == "catalog":
        device.origin = "catalog_modified"
    device.updated_at = utcnow()
    session.add(device)
    _bump_version(session)
    session.commit()
    session.refresh(device)
    return device


def restore_catalog_device(session: Session, *, device_id: str, entry: dict[str, Any]) -> Device:
    """Puts a shipped catalog entry back as it ships (re-created if it was deleted); its benchmarks stay."""
    columns = set(Device.model_fields) - {"id", "origin", "created_at", "updated_at"}
    spec: dict[str, Any] = {name: entry.get(name) for name in columns}
    device = session.get(Device, device_id)
    now = utcnow()
    if device is None:
        device = Device(id=device_id, created_at=now, origin="catalog", updated_at=now, **spec)
    else:
        for name, value in spec.items():
            setattr(device, name, value)
        device.origin, device.updated_at = "catalog", now
    session.add(device)
    _bump_version(session)
    session.commit()
    session.refresh(device)
    return device


def delete_device(session: Session, *, device_id: str) -> None:
    _delete(session, get_device(session, device_id=device_id))


def ping(session: Session) -> None:
    session.exec(select(1)).one()
    _require_intact_file(session)


def stored_benchmark(record: dict[str, Any]) -> dict[str, Any]:
    """A link measurement keeps its link's name in the level column (one column names what was measured)."""
    if "link" not in record:
        return record
    stored = {key: value for key, value in record.items() if key != "link"}
    return {**stored, "level": record["link"]}


def add_benchmarks(session: Session, *, device_id: str, records: list[dict[str, Any]], submitted_by: str) -> list[Benchmark]:
    """Stores all records in one transaction: either every one is written or none."""
    now = utcnow()
    rows = [Benchmark(device_id=device_id, submitted_by=submitted_by, created_at=now,
                      **{**stored_benchmark(record), "measured_at": record.get("measured_at") or now}) for record in records]
    session.add_all(rows)
    _bump_version(session)
    session.commit()
    for row in rows:
        session.refresh(row)
    return rows


def list_benchmarks(session: Session, *, device_id: str | None = None, kind: str | None = None,
                    dtype: str | None = None, unit: str | None = None, level: str | None = None,
                    host: str | None = None, limit: int = 1000, offset: int = 0) -> list[Benchmark]:
    query = select(Benchmark)
    for column, value in ((Benchmark.device_id, device_id), (Benchmark.kind, kind), (Benchmark.dtype, dtype),
                          (Benchmark.unit, unit), (Benchmark.level, level), (Benchmark.host, host)):
        if value is not None:
            query = query.where(column == value)
    return list(session.exec(query.order_by(col(Benchmark.id)).offset(offset).limit(limit)))


def all_benchmarks(session: Session) -> list[Benchmark]:
    return list(session.exec(select(Benchmark)))


def delete_benchmark(session: Session, *, device_id: str, benchmark_id: int) -> None:
    row = session.get(Benchmark, benchmark_id)
    if row is None or row.device_id != device_id:
        raise BenchmarkNotFound(device_id, benchmark_id)
    _delete(session, row)


# The most recent timings of a (device, engine, dtype) a calibration is fitted to: what bounds a refit's work.
MAX_FITTED_TIMINGS = 10_000
# Refit: a group's measurements (kernel timings or serving runs) to its calibration's fields, or to the reason it
# cannot be fitted (too few, too alike).
Refit = Callable[[list[Any]], dict[str, Any] | str]


class NotFitted(NamedTuple):
    scope: str  # the key's values, joined by ':'
    measurements: int
    reason: str


def add_kernel_timings(session: Session, *, device_id: str, records: list[dict[str, Any]], submitted_by: str,
                       refit: Refit) -> tuple[list[int], list[StoredKernelCalibration], list[NotFitted]]:
    """Stores every timing (one multi-row insert) and refits the calibrations they touch, in one transaction: all of
    it or none. Answers the new ids, the refitted calibrations' rows and why the others have none."""
    now = utcnow()
    rows = [{"device_id": device_id, "submitted_by": submitted_by, "created_at": now, **record} for record in records]
    ids = [int(cast(int, new_id)) for new_id in session.scalars(
        insert(KernelTiming).returning(col(KernelTiming.id), sort_by_parameter_order=True), rows)]
    groups = {(record["engine"], record["dtype"]) for record in records}
    not_fitted = _refit(session, device_id, groups, refit)
    _bump_version(session)
    session.commit()
    fitted = [session.get(StoredKernelCalibration, (device_id, engine, dtype)) for engine, dtype in sorted(groups)]
    return ids, [row for row in fitted if row is not None], not_fitted


def _refit(session: Session, device_id: str, groups: set[tuple[str, str]], refit: Refit) -> list[NotFitted]:
    reasons = [_refit_one(session, KernelTiming, StoredKernelCalibration,
                          {"device_id": device_id, "engine": engine, "dtype": dtype}, refit, MAX_FITTED_TIMINGS)
               for engine, dtype in sorted(groups)]
    return [reason for reason in reasons if reason is not None]


def _lock_scope(session: Session, key: dict[str, str]) -> None:
    """Serialises the writers of one calibration until the transaction ends, before its measurements are read: on
    PostgreSQL two concurrent refits each read without the other's uncommitted rows (the last commit would leave a
    fit of part of them) and both insert the calibration (a unique violation). A transaction-scoped advisory lock on
    a 64-bit digest of the key; writers lock their keys in sorted order, so they never deadlock. SQLite serialises
    every writer already."""
    if session.get_bind().dialect.name != "postgresql":
        return
    digest = int.from_bytes(hashlib.blake2b("\x1f".join(key.values()).encode(), digest_size=8).digest(), "big",
                            signed=True)
    session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": digest})


def _refit_one(session: Session, measurements: type[KernelTiming] | type[ServingRun],
               calibrations: type[StoredKernelCalibration] | type[StoredServingCalibration], key: dict[str, str],
               refit: Refit, most: int) -> NotFitted | None:
    """Refits (or drops, when refit answers a reason) the calibration of `key` (its primary key's columns, in their
    order) from its newest `most` measurements; answers why there is none, where there is none."""
    _lock_scope(session, key)
    query: Any = select(measurements)
    for name, value in key.items():
        query = query.where(getattr(measurements, name) == value)
    found = list(session.exec(query.order_by(col(measurements.id).desc()).limit(most)))
    fit = refit(found)
    stored = session.get(calibrations, tuple(key.values()))
    if isinstance(fit, str):
        if stored is not None:
            session.delete(stored)
        return NotFitted(":".join(key.values()), len(found), fit)
    if stored is None:
        session.add(calibrations(**key, fit=fit, fitted_at=utcnow()))
    else:
        stored.fit, stored.fitted_at = fit, utcnow()
        session.add(stored)
    return None


def list_kernel_timings(session: Session, *, device_id: str, engine: str | None = None, kind: str | None = None,
                        dtype: str | None = None, limit: int = 1000, offset: int = 0) -> list[KernelTiming]:
    query = select(KernelTiming).where(KernelTiming.device_id == device_id)
    for column, value in ((KernelTiming.engine, engine), (KernelTiming.kind, kind), (KernelTiming.dtype, dtype)):
        if value is not None:
            query = query.where(column == value)
    return list(session.exec(query.order_by(col(KernelTiming.id)).offset(offset).limit(limit)))


def delete_kernel_timing(session: Session, *, device_id: str, timing_id: int, refit: Refit) -> None:
    """Removes a timing and refits (or drops) the calibration it counted in, in one transaction."""
    row = session.get(KernelTiming, timing_id)
    if row is None or row.device_id != device_id:
        raise KernelTimingNotFound(device_id, timing_id)
    session.delete(row)
    session.flush()
    _refit(session, device_id, {(row.engine, row.dtype)}, refit)
    _bump_version(session)
    session.commit()


def all_kernel_calibrations(session: Session) -> list[StoredKernelCalibration]:
    return list(session.exec(select(StoredKernelCalibration)))


# The most recent runs of a calibration's scope it is fitted to: what bounds a refit's work.
MAX_FITTED_RUNS = 1000
SERVING_KEY = ("device_id", "engine", "model", "precision", "speculative")


def add_serving_runs(session: Session, *, records: list[dict[str, Any]], submitted_by: str,
                     refit: Refit) -> tuple[list[int], list[StoredServingCalibration], list[NotFitted]]:
    """Stores every run (one multi-row insert) and refits the serving calibrations they touch, in one transaction.
    Answers the new ids, the refitted calibrations' rows and why the others have none."""
    now = utcnow()
    rows = [{"submitted_by": submitted_by, "created_at": now, **record} for record in records]
    ids = [int(cast(int, new_id)) for new_id in session.scalars(
        insert(ServingRun).returning(col(ServingRun.id), sort_by_parameter_order=True), rows)]
    keys = sorted({tuple(record[name] for name in SERVING_KEY) for record in records})
    reasons = [_refit_one(session, ServingRun, StoredServingCalibration, dict(zip(SERVING_KEY, key, strict=True)),
                          refit, MAX_FITTED_RUNS) for key in keys]
    _bump_version(session)
    session.commit()
    fitted = [session.get(StoredServingCalibration, key) for key in keys]
    return ids, [row for row in fitted if row is not None], [reason for reason in reasons if reason is not None]


def list_serving_runs(session: Session, *, device_id: str | None = None, engine: str | None = None,
                      model: str | None = None, limit: int = 1000, offset: int = 0) -> list[ServingRun]:
    query = select(ServingRun)
    for column, value in ((ServingRun.device_id, device_id), (ServingRun.engine, engine), (ServingRun.model, model)):
        if value is not None:
            query = query.where(column == value)
    return list(session.exec(query.order_by(col(ServingRun.id)).offset(offset).limit(limit)))


def serving_runs_of(session: Session, *, key: tuple[str, ...]) -> list[ServingRun]:
    """The runs a serving calibration of `key` (SERVING_KEY's values) is fitted to, newest first."""
    query = select(ServingRun)
    for name, value in zip(SERVING_KEY, key, strict=True):
        query = query.where(getattr(ServingRun, name) == value)
    return list(session.exec(query.order_by(col(ServingRun.id).desc()).limit(MAX_FITTED_RUNS)))


def delete_serving_run(session: Session, *, run_id: int, refit: Refit) -> None:
    """Removes a run and refits (or drops) the calibration it counted in, in one transaction."""
    row = session.get(ServingRun, run_id)
    if row is None:
        raise ServingRunNotFound(run_id)
    session.delete(row)
    session.flush()
    _refit_one(session, ServingRun, StoredServingCalibration, {name: getattr(row, name) for name in SERVING_KEY},
               refit, MAX_FITTED_RUNS)
    _bump_version(session)
    session.commit()


def all_serving_calibrations(session: Session) -> list[StoredServingCalibration]:
    return list(session.exec(select(StoredServingCalibration)))


def list_models(session: Session) -> list[ModelConfig]:
    return list(session.exec(select(ModelConfig).order_by(ModelConfig.id)))


def get_model(session: Session, *, model_id: str) -> ModelConfig:
    model = session.get(ModelConfig, model_id)
    if model is None:
        raise ModelNotFound(model_id)
    return model


def create_model(session: Session, *, model_id: str, name: str, family: str, config: dict[str, Any],
                 source: str | None) -> ModelConfig:
    now = utcnow()
    row = ModelConfig(id=model_id, name=name, family=family, config=config, source=source, origin="user",
                      created_at=now, updated_at=now)
    return _insert(session, row, "model", model_id)


def delete_model(session: Session, *, model_id: str) -> None:
    _delete(session, get_model(session, model_id=model_id))


def claim_idempotency_key(session: Session, *, client: str, key: str, fingerprint: str,
                          ttl_s: float) -> IdempotencyKey | None:
    """Claims `key` for a write about to run: None when it is new or its claim has expired (the claim is committed),
    else what holds it. Deletes the keys claimed more than `ttl_s` ago first."""
    now = utcnow()
    session.execute(delete(IdempotencyKey).where(col(IdempotencyKey.created_at) < now - timedelta(seconds=ttl_s)))
    session.add(IdempotencyKey(client=client, key=key, fingerprint=fingerprint, created_at=now))
    try:
        session.commit()
        return None
    except IntegrityError:
        session.rollback()
        found = session.get(IdempotencyKey, (client, key))
        if found is None:  # released in between: claim it again
            return claim_idempotency_key(session, client=client, key=key, fingerprint=fingerprint, ttl_s=ttl_s)
        return found


def count_idempotency_keys(session: Session) -> int:
    return int(session.scalar(select(func.count()).select_from(IdempotencyKey)) or 0)


def complete_idempotency_key(session: Session, *, client: str, key: str, status: int, response: str | None) -> None:
    """Keeps a finished write's answer under its key; an answer of a server error releases the key (retry it)."""
    found = session.get(IdempotencyKey, (client, key))
    if found is None:
        return
    if status >= 500:
        session.delete(found)
    else:
        found.status, found.response = status, response
    session.commit()


def audit_entries(session: Session, *, writer: str | None = None, limit: int = 100, offset: int = 0) -> list[AuditEntry]:
    """The writes recorded, newest first."""
    query = select(AuditEntry)
    if writer is not None:
        query = query.where(AuditEntry.writer == writer)
    return list(session.exec(query.order_by(col(AuditEntry.id).desc()).offset(offset).limit(limit)))
