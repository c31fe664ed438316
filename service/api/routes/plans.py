"""Deployment plans."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Response

from schemas.plans import PLAN_EXAMPLE, ServingPlan, ServingPlanRequest
from service.api.deps import CatalogDep
from service.api.lean_route import LeanAnalysisRoute
from service.api.responses import INVALID, NOT_FOUND
from service.api.routes.analyze import answered
from service.translation.serving_plans import plan_serving

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
