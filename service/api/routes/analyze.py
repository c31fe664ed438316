"""Analyses. They read the in-memory catalog only, so no request waits on the database."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body

from schemas.analysis import OperatorAnalysis, OperatorAnalysisRequest
from service.analysis import analyze_operator
from service.api.deps import CatalogDep
from service.api.examples import OPERATOR_EXAMPLES
from service.api.responses import INVALID, NOT_FOUND

router = APIRouter(prefix="/v1/analyze", tags=["analysis"])


# Pure computation with no I/O: an async route skips the thread-pool hop a plain def would take.
@router.post(
    "/operator", summary="Roofline of one operator", operation_id="analyze_operator",
    responses={**NOT_FOUND, **INVALID},
    description=(
        "Counts the operator's model FLOPs and ideal HBM bytes, then places it on the device's roofline. "
        "Units: FLOP, bytes, seconds, FLOP/s, bytes/s; intensity and ridge point in FLOP/byte. "
        "Matmul and attention use the tensor-unit peak of their dtype, the other kinds the vector-unit peak. "
        "`assumptions` lists every convention and roof choice behind the numbers."
    ),
)
async def analyze_operator_route(
    body: Annotated[OperatorAnalysisRequest, Body(openapi_examples=OPERATOR_EXAMPLES)],
    catalog: CatalogDep,
) -> OperatorAnalysis:
    return analyze_operator(body, catalog.get(body.device_id), catalog.measured(body.device_id))
