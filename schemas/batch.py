"""Many analyses in one request: each item answered in order, with its own result or its own error."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, create_model

from schemas.analysis import OperatorAnalysisRequest
from schemas.common import ErrorResponse, StrictModel
from schemas.fusion import FusionRequest
from schemas.models import KvCapacityRequest, ModelAnalysisRequest
from schemas.plans import ServingPlanRequest
from schemas.serving import ServingAnalysisRequest
from schemas.sweeps import CompareRequest, SweepRequest
from schemas.training import TrainingPlanRequest, TrainingRequest

MAX_BATCH_ITEMS = 1000
# What one batch may cost, in units of one operator or model step: a sweep counts its points, a comparison
# its devices, a plan 50; a batch over the budget is refused before any item runs.
MAX_BATCH_WORK = 20_000

# The request each analysis a batch may hold takes (the registry in service.translation.analyses runs them).
BATCH_REQUEST_MODELS: dict[str, type[BaseModel]] = {
    "operator": OperatorAnalysisRequest, "model": ModelAnalysisRequest, "kv-capacity": KvCapacityRequest,
    "fusion": FusionRequest, "sweep": SweepRequest, "compare": CompareRequest, "plan-serving": ServingPlanRequest,
    "training": TrainingRequest, "plan-training": TrainingPlanRequest, "serving": ServingAnalysisRequest,
}
BatchAnalysisName = Literal[tuple(BATCH_REQUEST_MODELS)]  # type: ignore[valid-type]
ITEM_ID = Field(None, max_length=128, description="The client's id for this item, echoed in its result")
ANALYSIS = Field(description="Which analysis: the endpoint /v1/analyze/<analysis> (plan-serving, plan-training: "
                             "/v1/plan/serving, /v1/plan/training)")


class BatchItem(StrictModel):
    """An item whose request did not validate as its analysis's: answered with that analysis's error."""

    id: str | None = ITEM_ID
    analysis: BatchAnalysisName = ANALYSIS  # type: ignore[valid-type]  # a Literal built from the registry
    request: dict[str, Any] = Field(description="The body that endpoint takes")


# A batch whose every item is valid is parsed in one pass over its JSON straight into each analysis's request
# (no dict in between, no second validation): the analysis route tries TypedBatchRequest first, and on any error
# parses the documented BatchRequest, whose items' requests each analysis then validates, answering a bad item
# with the error its own endpoint would give.
TYPED_ITEMS = tuple(
    create_model(f"Batch{''.join(part.title() for part in name.split('-'))}Item", __base__=StrictModel,
                 id=(str | None, ITEM_ID), analysis=(Literal[name], ANALYSIS),  # type: ignore[arg-type]
                 request=(model, Field(description=f"The body the {name} analysis takes")))
    for name, model in BATCH_REQUEST_MODELS.items())
# A union over a tuple built at run time: only Union[...] can spell it.
TypedBatchItem = Annotated[Union[TYPED_ITEMS], Field(discriminator="analysis")]  # type: ignore[valid-type]  # noqa: UP007


class TypedBatchRequest(StrictModel):
    items: list[TypedBatchItem] = Field(min_length=1, max_length=MAX_BATCH_ITEMS)


class BatchRequest(StrictModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"items": [
        {"id": "gemv", "analysis": "operator",
         "request": {"device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": 1, "n": 4096, "k": 4096}}},
        {"id": "decode", "analysis": "model",
         "request": {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "phase": "decode", "batch_size": 32,
                     "seq_len": 4096}}]}]})
    items: list[BatchItem] = Field(min_length=1, max_length=MAX_BATCH_ITEMS)


class BatchResult(BaseModel):
    id: str | None
    status: int = Field(description="The status the item's own endpoint would have answered")
    # The analysis's own response model, serialised as itself (its schema is that endpoint's answer).
    result: SerializeAsAny[BaseModel] | None = Field(None, description="The analysis, when status is 200: what its "
                                                                       "endpoint answers")
    error: ErrorResponse | None = Field(None, description="The item's error, in the service's error shape")


class BatchResponse(BaseModel):
    results: list[BatchResult] = Field(description="One per item, in the items' order")
