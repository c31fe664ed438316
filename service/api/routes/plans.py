"""Deployment plans."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Response

from schemas.plans import PLAN_EXAMPLE, ServingPlan, ServingPlanRequest
from schemas.training import TrainingPlan, TrainingPlanRequest
from service.api.deps import CatalogDep
from service.api.lean_route import LeanAnalysisRoute
from service.api.responses import INVALID, NOT_FOUND
from service.api.routes.analyze import answered
from service.translation.serving.plans import plan_serving
from service.translation.training.plans import plan_training

router = APIRouter(prefix="/v1/plan", tags=["plans"], route_class=LeanAnalysisRoute)


# A search of a few dozen analyses: a plain def, in the thread pool.
@router.post(
    "/serving", response_model=ServingPlan, summary="Plan a serving deployment", operation_id="plan_serving",
    responses={**NOT_FOUND, **INVALID},
    description=(
        "Searches tensor-parallel sizes, replicas and concurrency per replica on each candidate device within "
        "total_devices, for aggregated (continuous batching) and optionally disaggregated serving, and ranks the "
        "configurations that fit in memory and meet every SLO by output tokens/s per device. Answers the top_n, the "
        "Pareto frontier of tokens/s per device against tokens/s per user, and how many were searched. When none "
        "meets the SLOs, a 422 names the SLO that cannot be met and the best value any fitting configuration reaches."
    ),
)
def plan_serving_route(body: Annotated[ServingPlanRequest, Body(openapi_examples={
        "llama-8b-on-8-h100": {"summary": "Llama 3.1 8B on 8 H100s", "value": PLAN_EXAMPLE}})],
        catalog: CatalogDep) -> Response:
    return answered(plan_serving(body, catalog), "plan:serving")


@router.post(
    "/training", response_model=TrainingPlan, summary="Time and cost to train", operation_id="plan_training",
    responses={**NOT_FOUND, **INVALID},
    description=(
        "total_tokens on num_devices: total FLOPs (model FLOPs per token at seq_len x tokens), then days, device-hours "
        "and, with price_per_device_hour, cost, at the MFU of the roofline's own step on those devices (num_devices / "
        "(tensor_parallel x pipeline_parallel x context_parallel) data-parallel replicas, the step in `step`) and at "
        "the `mfu` the client states, side by side; with deadline_days, the devices each MFU needs to meet it. With "
        "`search`, the layout is searched instead (tensor, context, pipeline with each schedule, expert and data "
        "parallelism, recomputation where needed, the global batch held fixed): the fastest that fits becomes the "
        "step, `search` ranks the top_n and says what binds, and a 422 names num_devices when no layout fits."
    ),
)
def plan_training_route(body: Annotated[TrainingPlanRequest, Body(openapi_examples={
        "llama-2-7b-2t-tokens": {"summary": "Llama 2 7B on 2T tokens, 1,000 A100s",
                                 "value": TrainingPlanRequest.model_config["json_schema_extra"]["examples"][0]}})],
        catalog: CatalogDep) -> Response:
    return answered(plan_training(body, catalog), "plan:training")
