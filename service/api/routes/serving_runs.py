"""Measured serving runs: submissions (authenticated, all or none), listing and deletion; each write refits the
serving calibrations it touches in the same transaction."""

from __future__ import annotations

from functools import partial
from typing import Annotated

from fastapi import APIRouter, Body, Path, Query, Response, status

from schemas.calibrations import CalibrationPublic
from schemas.common import DeviceId, EngineName, example_of
from schemas.serving_runs import (
    InferenceXServingRuns,
    NativeServingRuns,
    ServingRunPublic,
    ServingRunsCreate,
    ServingRunsCreated,
    VllmBenchServingRuns,
)
from service.api.deps import CatalogDep, SessionDep, WriterDep
from service.api.responses import INVALID, NOT_FOUND, UNAUTHORIZED
from service.persistence import repository
from service.persistence.catalog import SCHEDULING_NOT_FITTED_FIELD, measured_scheduling_of, serving_calibration_of
from service.translation.kernels.calibrations import scheduling_public, serving_public
from service.translation.serving.runs import refit_serving, run_records

router = APIRouter(prefix="/v1/serving-runs", tags=["calibrations"])
RUN_EXAMPLES = {
    "native": {"summary": "Runs in this service's names", "value": example_of(NativeServingRuns)},
    "vllm-bench": {"summary": "A file vllm bench serve saved", "value": example_of(VllmBenchServingRuns)},
    "inferencex": {"summary": "An InferenceX row", "value": example_of(InferenceXServingRuns)},
}
RunPath = Annotated[int, Path(ge=1, le=2**31 - 1, description="A serving run's id, as its submission answered",
                              openapi_examples={"first": {"summary": "The first run", "value": 1}})]


@router.post("", status_code=status.HTTP_201_CREATED, summary="Submit measured serving runs",
             operation_id="create_serving_runs", responses={**UNAUTHORIZED, **NOT_FOUND, **INVALID},
             description="Stores up to 1,000 measured serving runs, all or none, in one of three forms (`native`, "
                         "`vllm-bench`: the files `vllm bench serve --save-result` or SGLang's bench_serving write, "
                         "`inferencex`: SemiAnalysis InferenceX rows), each mapped to the deployment POST "
                         "/v1/analyze/serving takes and stored beside the bound there. A run faster than its bound is "
                         "refused, naming it, unless `exceeds_bound_reason` says why. Refits the serving calibration "
                         "(TPOT = scale x bound + overhead, and TTFT alike) of every device, engine, model, weights' "
                         "type and speculative method the runs touch, from 3 runs on, and the scheduling "
                         "simulation's calibration of the same runs (its newest 100 simulated as stored, aggregated "
                         "ones within the simulation's limit, from 3 on); serving analyses of that scope naming the "
                         "engine then answer `expected` from them, with percentiles.")
def create_serving_runs(body: Annotated[ServingRunsCreate, Body(openapi_examples=RUN_EXAMPLES)], session: SessionDep, catalog: CatalogDep,
                        writer: WriterDep) -> ServingRunsCreated:
    records = run_records(body, catalog)
    ids, fitted, not_fitted = repository.add_serving_runs(session, records=records, submitted_by=writer,
                                                          refit=partial(refit_serving, catalog=catalog))
    calibrations, unsimulated = [], []
    for row in fitted:
        calibrations.append(serving_public(serving_calibration_of(row.fit)))
        scheduling = measured_scheduling_of(row.fit)
        if scheduling is not None:
            calibrations.append(scheduling_public(scheduling))
        else:
            unsimulated.append({"scope": "scheduling:" + row.fit["id"], "measurements": row.fit["fitted_on"],
                                "reason": row.fit[SCHEDULING_NOT_FITTED_FIELD]})
    return ServingRunsCreated(created=ids, calibrations=[CalibrationPublic.model_validate(c) for c in calibrations],
                              not_fitted=[reason._asdict() for reason in not_fitted] + unsimulated)


@router.get("", summary="List measured serving runs", operation_id="list_serving_runs",
            description="The serving runs submitted, oldest first, filtered by any of the query parameters.")
def list_serving_runs(
    session: SessionDep, device_id: Annotated[DeviceId | None, Query()] = None, engine: EngineName | None = None,
    model: Annotated[str | None, Query(min_length=1, max_length=200,
                                       description="A catalog model id or 'inline <family>'")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 1000, offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
) -> list[ServingRunPublic]:
    rows = repository.list_serving_runs(session, device_id=device_id, engine=engine, model=model, limit=limit,
                                        offset=offset)
    return [ServingRunPublic.model_validate(row) for row in rows]


@router.delete("/{run_id}", status_code=status.HTTP_204_NO_CONTENT, summary="Remove a serving run",
               operation_id="delete_serving_run", responses={**UNAUTHORIZED, **NOT_FOUND},
               description="Removes a bad run and refits the calibration it counted in (or drops it below 3 runs).")
def delete_serving_run(run_id: RunPath, session: SessionDep, catalog: CatalogDep, _writer: WriterDep) -> Response:
    repository.delete_serving_run(session, run_id=run_id, refit=partial(refit_serving, catalog=catalog))
    return Response(status_code=status.HTTP_204_NO_CONTENT)
