"""Calibrations: the shipped fits and those fitted to submitted kernel timings and serving runs, with their
parameters and errors."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Response

from schemas.calibrations import CalibrationDetail, CalibrationPublic
from service.api.deps import CatalogDep, SessionDep
from service.api.responses import INVALID, NOT_FOUND
from service.api.routes.plots import DRAWN, IMAGE, drawn
from service.persistence import repository
from service.persistence.repository import MAX_FITTED_TIMINGS
from service.rendering.calibration_charts import parity_figure
from service.translation.charts import MEDIA_TYPES
from service.translation.kernels.calibrations import all_calibrations, calibration_detail, parity_points

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
    return CalibrationDetail.model_validate(calibration_detail(calibration_id, catalog, *_readers(session)))


def _readers(session):
    """How a calibration's stored measurements are read: its kernel timings, its serving runs."""
    def timings_of(device_id: str, engine: str, dtype: str):
        return repository.list_kernel_timings(session, device_id=device_id, engine=engine, dtype=dtype,
                                              limit=MAX_FITTED_TIMINGS)

    def runs_of(key: tuple[str, ...]):
        return repository.serving_runs_of(session, key=key)

    return timings_of, runs_of


@router.get("/{calibration_id}/parity.svg", summary="A calibration's parity chart", operation_id="calibration_parity",
            response_class=Response, responses={**IMAGE, **NOT_FOUND, **INVALID},
            description="Predicted against measured, log-log, one point a measurement: the calibration's expectation "
                        "(filled) and the bare bound (hollow) beside the diagonal and bands of 10 % and 25 %. A measured "
                        "kernel or serving calibration's stored timings or runs; a shipped serving, engine or scheduling "
                        "one's InferenceX runs against today's bounds, each as its fit read it (a scheduling one's "
                        "simulated at its timing; an engine one's on its device's kernel tables); a measured scheduling "
                        "one's submitted runs, simulated (a shipped kernel one's timings are not shipped: 422). "
                        + DRAWN)
async def calibration_parity(calibration_id: CalibrationPath, catalog: CatalogDep, session: SessionDep,
                             format: Literal["svg", "png"] = "svg") -> Response:
    def render() -> bytes:  # the reads and any bounds too, off the event loop
        title, quantity, points = parity_points(calibration_id, catalog, *_readers(session))
        return parity_figure(points, title=title, quantity=quantity, image_format=format)

    return Response(await drawn(render), media_type=MEDIA_TYPES[format])
