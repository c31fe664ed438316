"""Calibrations: the shipped fits and those fitted to submitted kernel timings and serving runs, with their
parameters and errors."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from schemas.calibrations import CalibrationDetail, CalibrationPublic
from service.api.deps import CatalogDep, SessionDep
from service.api.responses import NOT_FOUND
from service.persistence import repository
from service.persistence.repository import MAX_FITTED_TIMINGS
from service.translation.calibrations import all_calibrations, calibration_detail

router = APIRouter(prefix="/v1/calibrations", tags=["calibrations"])
CalibrationPath = Annotated[str, Path(description="A calibration's id (GET /v1/calibrations lists them)",
                                      openapi_examples={"h100": {"summary": "H100 bf16 GEMMs (TensorRT-LLM)",
                                                                 "value": "kernel:shipped:nvidia-h100-sxm:trtllm:bf16"}})]


@router.get("", summary="List calibrations", operation_id="list_calibrations",
            description="Every calibration: the kernel and serving fits shipped with the service, the kernel fits "
                        "to the timings submitted for each device and the serving fits to the runs submitted, each "
                        "with its parameters (names, values, units), "
                        "what it was fitted on and its error on measurements it did not see.")
def list_calibrations(catalog: CatalogDep) -> list[CalibrationPublic]:
    return [CalibrationPublic.model_validate(entry) for entry in all_calibrations(catalog)]


@router.get("/{calibration_id}", summary="One calibration, with its residuals", operation_id="get_calibration",
            responses=NOT_FOUND,
            description="A calibration; a measured one with each kernel timing or serving run it was fitted to "
                        "against the fit and the bound.")
def get_calibration(calibration_id: CalibrationPath, catalog: CatalogDep, session: SessionDep) -> CalibrationDetail:
    def timings_of(device_id: str, engine: str, dtype: str):
        return repository.list_kernel_timings(session, device_id=device_id, engine=engine, dtype=dtype,
                                              limit=MAX_FITTED_TIMINGS)

    def runs_of(key: tuple[str, ...]):
        return repository.serving_runs_of(session, key=key)

    return CalibrationDetail.model_validate(calibration_detail(calibration_id, catalog, timings_of, runs_of))
