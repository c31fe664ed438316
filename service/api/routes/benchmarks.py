"""Measured roofs: submissions (authenticated), listing, deletion, ERT import, and the roofs view."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Query, Response, status
from pydantic import TypeAdapter, ValidationError

from schemas.benchmarks import (
    BandwidthBenchmarkCreate,
    BenchmarkCreate,
    BenchmarkPublic,
    ComputeBenchmarkCreate,
    DeviceRoofs,
    ErtImport,
    ErtImportResult,
)
from schemas.common import DTypeName, MemoryLevelName, UnitName, example_of
from service.api.deps import BenchmarkPath, CatalogDep, DevicePath, SessionDep, WriterDep
from service.api.responses import INVALID, NOT_FOUND, UNAUTHORIZED
from service.core.errors import CostModelError
from service.core.ert import ert_records
from service.persistence import repository
from service.runtime.errors import cost_model_error, invalid_nested
from service.translation.devices.measured_roofs import device_roofs, validate_against_nominal

BENCHMARK_RECORD = TypeAdapter(BenchmarkCreate)
router = APIRouter(prefix="/v1/devices/{device_id}", tags=["measured roofs"])

BENCHMARK_EXAMPLES = {
    "hbm": {"summary": "Measured HBM bandwidth", "value": example_of(BandwidthBenchmarkCreate)},
    "compute": {"summary": "Measured bf16 tensor throughput",
                "value": example_of(ComputeBenchmarkCreate)},
}


@router.post("/benchmarks", status_code=status.HTTP_201_CREATED, summary="Submit a measured roof",
             operation_id="create_benchmark", responses={**UNAUTHORIZED, **NOT_FOUND, **INVALID},
             description="Stores one measurement: a compute roof (FLOP/s for a dtype and unit) or a bandwidth roof "
                         "(bytes/s for a memory level). A value more than 5 % above its nominal counterpart is "
                         "refused unless `exceeds_nominal_reason` explains it; one below 10 % of it, or a compute roof "
                         "the device has no nominal peak for, unless `off_nominal_reason` does. Every later analysis with "
                         "roofs 'effective' uses the median of the device's measurements.")
def create_benchmark(device_id: DevicePath, body: Annotated[BenchmarkCreate, Body(openapi_examples=BENCHMARK_EXAMPLES)],
                     session: SessionDep, catalog: CatalogDep, writer: WriterDep) -> BenchmarkPublic:
    record = body.model_dump()
    validate_against_nominal(catalog.get(device_id), [record], "body.{field}")
    [row] = repository.add_benchmarks(session, device_id=device_id, records=[record], submitted_by=writer)
    return BenchmarkPublic.model_validate(row)


@router.post("/benchmarks/ert", status_code=status.HTTP_201_CREATED, summary="Import an ERT roofline.json",
             operation_id="import_ert", responses={**UNAUTHORIZED, **NOT_FOUND, **INVALID},
             description="Maps the `empirical` section of an Empirical Roofline Toolkit result (GFLOP/s and GB/s) "
                         "onto benchmark records, all stored or none. FLOP entries become vector roofs; DRAM maps to "
                         "hbm, L2 to l2, L1 to smem; other entries are listed as skipped.")
def import_ert(device_id: DevicePath, body: ErtImport, session: SessionDep, catalog: CatalogDep,
               writer: WriterDep) -> ErtImportResult:
    device = catalog.get(device_id)
    try:
        records, skipped = ert_records(body.roofline)
    except CostModelError as exc:
        raise cost_model_error(exc, "body") from None
    metadata = body.model_dump(exclude={"roofline"})
    records = [{**record, **metadata} for record in records]
    for index, record in enumerate(records):
        # Each mapped entry obeys what a direct submission must (e.g. the physical bounds).
        try:
            BENCHMARK_RECORD.validate_python(record)
        except ValidationError as exc:
            raise invalid_nested(exc, ["body", "roofline", "empirical", str(index)]) from None
    validate_against_nominal(device, records, "body.roofline.empirical")
    rows = repository.add_benchmarks(session, device_id=device_id, records=records, submitted_by=writer)
    return ErtImportResult(created=[BenchmarkPublic.model_validate(row) for row in rows], skipped=skipped)


@router.get("/benchmarks", summary="List measured roofs", operation_id="list_benchmarks", responses=NOT_FOUND,
            description="The device's submissions, oldest first, filtered by any of the query parameters.")
def list_benchmarks(
    device_id: DevicePath, session: SessionDep, catalog: CatalogDep,
    kind: Annotated[str | None, Query(pattern="^(compute|memory_bandwidth|link_bandwidth|collective_latency)$")] = None,
    dtype: DTypeName | None = None, unit: UnitName | None = None, level: MemoryLevelName | None = None,
    host: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 1000, offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
) -> list[BenchmarkPublic]:
    catalog.get(device_id)
    rows = repository.list_benchmarks(session, device_id=device_id, kind=kind, dtype=dtype, unit=unit, level=level,
                                      host=host, limit=limit, offset=offset)
    return [BenchmarkPublic.model_validate(row) for row in rows]


@router.delete("/benchmarks/{benchmark_id:int}", status_code=status.HTTP_204_NO_CONTENT, summary="Remove a measurement",
               operation_id="delete_benchmark", responses={**UNAUTHORIZED, **NOT_FOUND},
               description="Removes a bad submission; the effective roofs are recomputed without it.")
def delete_benchmark(device_id: DevicePath, benchmark_id: BenchmarkPath, session: SessionDep,
                     _writer: WriterDep) -> Response:
    repository.delete_benchmark(session, device_id=device_id, benchmark_id=benchmark_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/roofs", summary="Nominal, measured and effective roofs", operation_id="get_roofs", responses=NOT_FOUND,
            description="Per compute roof (FLOP/s) and memory level (bytes/s): the nominal value, the measured "
                        "aggregate (median, count, min, max, latest), the effective value and its source; and the "
                        "HBM ridge point (FLOP/byte) per dtype, nominal and effective.")
def get_roofs(device_id: DevicePath, catalog: CatalogDep) -> DeviceRoofs:
    return device_roofs(catalog.get(device_id), catalog.measured(device_id))
