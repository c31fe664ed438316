"""Every analysis the service offers, by name: the request it takes and the function that answers it.

The HTTP routes, the CLI's in-process mode and anything else that runs analyses look them up here, so
each caller runs exactly the same code for the same question.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from schemas.analysis import OperatorAnalysisRequest
from schemas.fusion import FusionRequest
from schemas.models import KvCapacityRequest, ModelAnalysisRequest
from schemas.plans import ServingPlanRequest
from schemas.sweeps import CompareRequest, SweepRequest
from service.persistence.catalog import DeviceCatalog
from service.runtime.errors import invalid_nested
from service.translation.fusion_graphs import analyze_fusion
from service.translation.model_analyses import analyze_model_request, kv_capacity_request
from service.translation.operator_analyses import analyze_operator_request
from service.translation.serving_plans import plan_serving
from service.translation.sweeps import compare_devices, run_sweep


@dataclass(frozen=True)
class Analysis:
    request_model: type[BaseModel]
    run: Callable[[Any, DeviceCatalog], BaseModel]


ANALYSES: dict[str, Analysis] = {
    "operator": Analysis(OperatorAnalysisRequest, analyze_operator_request),
    "model": Analysis(ModelAnalysisRequest, analyze_model_request),
    "kv-capacity": Analysis(KvCapacityRequest, kv_capacity_request),
    "fusion": Analysis(FusionRequest, analyze_fusion),
    "sweep": Analysis(SweepRequest, run_sweep),
    "compare": Analysis(CompareRequest, compare_devices),
    "plan-serving": Analysis(ServingPlanRequest, plan_serving),
}


def run_analysis(name: str, body: dict[str, Any], catalog: DeviceCatalog, loc: list[str] | None = None) -> BaseModel:
    """Validates a body as the named analysis's request and answers it; a ServiceError on bad input,
    located as the body sits in the caller's request (`loc`, default `body`)."""
    analysis = ANALYSES[name]
    try:
        request = analysis.request_model.model_validate(body)
    except ValidationError as exc:
        raise invalid_nested(exc, loc or ["body"]) from None
    return analysis.run(request, catalog)
