"""Many analyses in one request: each item answered in order, with its own result or its own error."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny

from schemas.common import ErrorResponse, StrictModel

MAX_BATCH_ITEMS = 1000
# What one batch may cost, in units of one operator or model step: a sweep counts its points, a comparison
# its devices, a plan 50; a batch over the budget is refused before any item runs.
MAX_BATCH_WORK = 20_000

BatchAnalysisName = Literal["operator", "model", "kv-capacity", "fusion", "sweep", "compare", "plan-serving", "training",
                            "plan-training"]


class BatchItem(StrictModel):
    id: str | None = Field(None, max_length=128, description="The client's id for this item, echoed in its result")
    analysis: BatchAnalysisName = Field(description="Which analysis: the endpoint /v1/analyze/<analysis> "
                                                    "(plan-serving, plan-training: /v1/plan/serving, /v1/plan/training)")
    request: dict[str, Any] = Field(description="The body that endpoint takes")


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
