"""Measured kernel timings: submissions (authenticated, all or none), listing and deletion; each write refits the
calibrations it touches in the same transaction."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response, status
from fastapi.concurrency import run_in_threadpool

from schemas.calibrations import KernelTimingPublic, KernelTimingsCreate, KernelTimingsCreated, Source
from schemas.common import DTypeName, EngineName
from service.api.deps import CatalogDep, DevicePath, SessionDep, WriterDep
from service.api.responses import INVALID, NOT_FOUND, UNAUTHORIZED
from service.core.expectations.kernels import KernelCalibration
from service.core.operators.registry import KINDS
from service.persistence import repository
from service.translation.kernels.calibrations import kernel_public, refit_for, timing_records
from service.translation.kernels.timing_csv import kernel_timings_from_csv

router = APIRouter(prefix="/v1/devices/{device_id}", tags=["calibrations"])
TimingPath = Annotated[int, Path(ge=1, le=2**31 - 1, description="A kernel timing's id, as its submission answered",
                                 openapi_examples={"first": {"summary": "The first timing", "value": 1}})]


@router.post("/kernel-timings", status_code=status.HTTP_201_CREATED, summary="Submit measured kernel timings",
             operation_id="create_kernel_timings", responses={**UNAUTHORIZED, **NOT_FOUND, **INVALID},
             description="Stores up to 10,000 measured kernel times, all or none, each with the operator as POST "
                         "/v1/analyze/operator takes it, and refits the device's calibration of every engine and "
                         "compute dtype they touch (plain matmuls: t = t0 + max(T_compute / e_c, T_memory / e_m) at "
                         "the nominal roofs, from 6 timings of 6 distinct shapes on; `not_fitted` says why a scope "
                         "has none). Operator analyses naming the engine then answer `expected` from it.")
def create_kernel_timings(device_id: DevicePath, body: KernelTimingsCreate, session: SessionDep, catalog: CatalogDep,
                          writer: WriterDep) -> KernelTimingsCreated:
    device = catalog.get(device_id)
    records = timing_records(body, device)
    ids, fitted, not_fitted = repository.add_kernel_timings(session, device_id=device_id, records=records,
                                                            submitted_by=writer, refit=refit_for(device))
    return KernelTimingsCreated(created=ids, calibrations=[kernel_public(KernelCalibration(**row.fit))
                                                           for row in fitted],
                                not_fitted=[reason._asdict() for reason in not_fitted])


CSV_EXAMPLE = "kind,m,n,k,dtype,time_s\nmatmul,4096,4096,4096,bf16,1.86e-4\nmatmul,16,4096,4096,bf16,1.3e-5\n"
CSV_BODY = {"requestBody": {"required": True, "content": {"text/csv": {
    "schema": {"type": "string"}, "example": CSV_EXAMPLE}}}}


@router.post("/kernel-timings/csv", status_code=status.HTTP_201_CREATED, summary="Submit measured kernel timings as CSV",
             operation_id="create_kernel_timings_csv", responses={**UNAUTHORIZED, **NOT_FOUND, **INVALID},
             openapi_extra=CSV_BODY,
             description="The kernel-timings write with a CSV body: a header naming the operator's fields (kind, m, n, "
                         "k, dtype, ...; a list or object cell as JSON), time_s and, optionally, engine and source (a "
                         "row's own); the engine and source of the rest in the query. Up to 10,000 data rows, stored "
                         "all or none; an error's location `body.timings.N` is the N-th data row, from 0.")
async def create_kernel_timings_csv(
    device_id: DevicePath, request: Request, session: SessionDep, catalog: CatalogDep, writer: WriterDep,
    engine: Annotated[EngineName, Query(description="The engine or kernel library that ran them")],
    source: Annotated[Source, Query(description="Where the timings come from (tool, version, run)")],
) -> KernelTimingsCreated:
    raw = await request.body()
    # Parsing, costing and fitting up to 10,000 rows is CPU work: off the event loop.
    body = await run_in_threadpool(kernel_timings_from_csv, raw, engine=engine, source=source)
    return await run_in_threadpool(create_kernel_timings, device_id, body, session, catalog, writer)


@router.get("/kernel-timings", summary="List measured kernel timings", operation_id="list_kernel_timings",
            responses=NOT_FOUND, description="The device's kernel timings, oldest first, filtered by any of the "
                                             "query parameters.")
def list_kernel_timings(
    device_id: DevicePath, session: SessionDep, catalog: CatalogDep, engine: EngineName | None = None,
    kind: Annotated[str | None, Query(pattern="^(" + "|".join(KINDS) + ")$")] = None, dtype: DTypeName | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 1000, offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
) -> list[KernelTimingPublic]:
    catalog.get(device_id)
    rows = repository.list_kernel_timings(session, device_id=device_id, engine=engine, kind=kind, dtype=dtype,
                                          limit=limit, offset=offset)
    return [KernelTimingPublic.model_validate(row) for row in rows]


@router.delete("/kernel-timings/{timing_id}", status_code=status.HTTP_204_NO_CONTENT,
               summary="Remove a kernel timing", operation_id="delete_kernel_timing",
               responses={**UNAUTHORIZED, **NOT_FOUND},
               description="Removes a bad timing and refits the calibration it counted in (or drops it below 6 "
                           "matmul timings).")
def delete_kernel_timing(device_id: DevicePath, timing_id: TimingPath, session: SessionDep, catalog: CatalogDep,
                         _writer: WriterDep) -> Response:
    repository.delete_kernel_timing(session, device_id=device_id, timing_id=timing_id,
                                    refit=refit_for(catalog.get(device_id)))
    return Response(status_code=status.HTTP_204_NO_CONTENT)
