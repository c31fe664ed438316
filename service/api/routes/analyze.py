"""Analyses. They read the in-memory catalog only, so no request waits on the database."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from schemas.analysis import OperatorAnalysis, OperatorAnalysisRequest
from schemas.batch import BatchRequest, BatchResponse
from schemas.fusion import SWIGLU_EXAMPLE, FusionAnalysis, FusionRequest
from schemas.models import (
    KvCapacity,
    KvCapacityRequest,
    ModelAnalysis,
    ModelAnalysisRequest,
)
from schemas.serving import SERVING_EXAMPLE, ServingAnalysis, ServingAnalysisRequest
from schemas.sweeps import CompareRequest, CompareResult, SweepRequest, SweepResult
from schemas.training import TRAINING_EXAMPLE, TrainingAnalysis, TrainingRequest
from service.api.deps import CatalogDep
from service.api.examples import KV_EXAMPLES, MODEL_EXAMPLES, OPERATOR_EXAMPLES
from service.api.lean_route import LeanAnalysisRoute
from service.api.responses import INVALID, NOT_FOUND
from service.runtime.observability import count_analysis
from service.translation.analyses import batch_json_chunks
from service.translation.models.analyses import kv_capacity_request, model_answer_json
from service.translation.operators.analyses import operator_answer_json
from service.translation.operators.fusion_graphs import analyze_fusion
from service.translation.serving.analyses import analyze_serving_request
from service.translation.sweeps import compare_devices, run_sweep
from service.translation.training.analyses import analyze_training_request

router = APIRouter(prefix="/v1/analyze", tags=["analysis"], route_class=LeanAnalysisRoute)


async def off_loop_if_inline(body, run, catalog):
    """A catalog model is parsed already, so its analysis is a fraction of a millisecond and runs inline;
    an inline config is parsed per request, in time that grows with its layers, so in the thread pool."""
    if body.model is None:
        return run(body, catalog)
    return await run_in_threadpool(run, body, catalog)


def answered(result: BaseModel | bytes, kind: str) -> Response:
    """Counts the analysis, and answers its JSON (written once by pydantic-core: returning the model would make
    FastAPI validate it again against response_model)."""
    count_analysis(kind)
    return Response(result if isinstance(result, bytes) else result.model_dump_json(), media_type="application/json")


# Pure computation with no I/O, bounded to a fraction of a millisecond (an operator, a model step of at most
# a handful of distinct layers, a KV budget): an async route skips the thread-pool hop a plain def would
# take. Fusion graphs, sweeps and comparisons cost more and run as plain defs, in the thread pool.
@router.post(
    "/operator", response_model=OperatorAnalysis, summary="Roofline of one operator", operation_id="analyze_operator",
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
) -> Response:
    return answered(operator_answer_json(body, catalog), f"operator:{body.operator.kind}")


@router.post(
    "/model", response_model=ModelAnalysis, summary="Roofline of a transformer step", operation_id="analyze_model",
    responses={**NOT_FOUND, **INVALID},
    description=(
        "One prefill or decode step of a catalog model (`model_id`) or an inline config (`model`), operator by "
        "operator: one row per operator of each distinct layer (with how many layers share it), the embedding and "
        "LM head, and totals (FLOPs, HBM bytes, weight and KV bytes, seconds). Prefill answers `ttft_s`; decode "
        "answers `tpot_s` and `tokens_per_s`; with `output_len`, `e2e_latency_s`. Units: FLOP, bytes, seconds."
    ),
)
async def analyze_model_route(
    body: Annotated[ModelAnalysisRequest, Body(openapi_examples=MODEL_EXAMPLES)], catalog: CatalogDep,
) -> Response:
    return answered(await off_loop_if_inline(body, model_answer_json, catalog), f"model:{body.phase}")


@router.post(
    "/kv-capacity", response_model=KvCapacity, summary="KV-cache concurrency", operation_id="analyze_kv_capacity",
    responses={**NOT_FOUND, **INVALID},
    description=(
        "How many requests of `context_len` tokens fit beside the weights: floor((usable - weights - workspace) / "
        "KV bytes per request), per device under tensor parallelism. Bytes throughout; `fits: false` with the "
        "shortfall when the weights alone do not fit."
    ),
)
async def kv_capacity_route(
    body: Annotated[KvCapacityRequest, Body(openapi_examples=KV_EXAMPLES)], catalog: CatalogDep,
) -> Response:
    return answered(await off_loop_if_inline(body, kv_capacity_request, catalog), "kv_capacity")


# A deployment costs a few model steps (prefill, decode, a verification and a draft): a plain def, in the thread pool.
@router.post(
    "/serving", response_model=ServingAnalysis, summary="One serving deployment under one workload",
    operation_id="analyze_serving", responses={**NOT_FOUND, **INVALID},
    description=(
        "What a serving benchmark would measure of one fixed deployment: TTFT, TPOT, ITL, end-to-end latency, "
        "requests/s and tokens/s (per device, per user) at a concurrency, with expert parallelism, attention data "
        "parallelism, speculative decoding and disaggregated prefill and decode pools; the memory of each pool with "
        "`fits`. `bound` holds bounds (times from below, rates from above) under the scheduling model `assumptions` "
        "states; `expected` is a calibrated estimate where one applies."
    ),
)
def analyze_serving_route(
    body: Annotated[ServingAnalysisRequest, Body(openapi_examples={"deepseek": {"summary": "DeepSeek-V3, 8 x B200, "
                                                                               "EP 8, DP attention, MTP",
                                                                    "value": SERVING_EXAMPLE}})],
    catalog: CatalogDep,
) -> Response:
    return answered(analyze_serving_request(body, catalog), "serving")


@router.post(
    "/fusion", response_model=FusionAnalysis, summary="What fusing kernels saves", operation_id="analyze_fusion",
    responses={**NOT_FOUND, **INVALID},
    description=(
        "A dataflow graph of operators over named tensors (shapes and dtypes), and groups of operators to fuse "
        "(default: all in one). Answers the unfused cost (per kernel and in total), the fused cost, and the savings "
        "in bytes, fraction, roofline seconds, launches and launch seconds. A group holds at most one matrix "
        "operator; cycles, undefined tensors, shape mismatches and groups that cannot be one kernel are 422s."
    ),
)
def analyze_fusion_route(
    body: Annotated[FusionRequest, Body(openapi_examples={"swiglu": {"summary": "SiLU(gate) x up", "value": SWIGLU_EXAMPLE}})],
    catalog: CatalogDep,
) -> Response:
    return answered(analyze_fusion(body, catalog), "fusion")


@router.post(
    "/batch", response_model=BatchResponse, summary="Many analyses in one request", operation_id="analyze_batch",
    responses={**INVALID},
    description=(
        "Up to 1,000 items, each `{id, analysis, request}` with `analysis` one of operator, model, kv-capacity, fusion, training, "
        "serving, sweep, compare, plan-serving, plan-training and `request` the body that endpoint takes. Answers one result per item in "
        "order: `{id, status: 200, result}` or `{id, status, error}` in the service's error shape; one bad item never "
        "fails the batch. Items on one device share its roofs and evaluated rows. A batch may cost at most 20,000 "
        "units (an operator or model step 1, a sweep its points, a comparison its devices, a serving plan the step "
        "analyses it runs (20,000 at most), a training "
        "step or plan 3, a serving deployment 5)."
    ),
)
def batch_route(body: BatchRequest, catalog: CatalogDep) -> Response:
    count_analysis("batch")
    # Streamed as its items are answered (refused before the first byte when over its budget).
    return StreamingResponse(batch_json_chunks(body, catalog), media_type="application/json")


# A sweep can take a few hundred milliseconds: a plain def runs it in the thread pool, off the event loop.
@router.post(
    "/sweep", response_model=SweepResult, summary="Sweep one parameter", operation_id="analyze_sweep", responses={**NOT_FOUND, **INVALID},
    description=(
        "Runs an operator or model analysis once per value of one parameter (a dotted path into the body, e.g. "
        "`operator.m`, `batch_size`, `seq_len`), from `values` or a `range`, up to 4,096 points. Answers one row "
        "per value (seconds, FLOPs, bytes, bound, MFU, serving metrics for models), every crossover where the bound "
        "changes (with an interpolated estimate), and for a matmul the critical M at which it turns compute-bound."
    ),
)
def sweep_route(body: SweepRequest, catalog: CatalogDep) -> Response:
    return answered(run_sweep(body, catalog), f"sweep:{body.endpoint}")


@router.post(
    "/compare", response_model=CompareResult, summary="Compare devices", operation_id="analyze_compare", responses={**INVALID},
    description=(
        "One operator or model workload on each listed device, ranked by time (seconds), with each device's bound, "
        "MFU and, for models, tokens per second. Devices the workload cannot run on are listed under `errors`."
    ),
)
def compare_route(body: CompareRequest, catalog: CatalogDep) -> Response:
    return answered(compare_devices(body, catalog), f"compare:{body.endpoint}")


# Three passes over a model's rows and the alternatives' memory: about a millisecond, in the thread pool.
@router.post(
    "/training", response_model=TrainingAnalysis, summary="Roofline of a training step", operation_id="analyze_training",
    responses={**NOT_FOUND, **INVALID},
    description=(
        "One optimizer step of a catalog model or an inline config under data, tensor and pipeline parallelism "
        "(ZeRO 0-3) with a recomputation policy, per device: forward, backward (activation and weight gradients), "
        "recompute and optimizer rows on the roofline; each collective on the link tier it crosses (intra- or "
        "inter-node); the pipeline bubble; memory (parameters, gradients, optimizer states, activations; `fits`); "
        "step time, tokens/s, MFU (model FLOPs) and HFU (with the recomputed forward); and what recomputation would "
        "trade (Q_saved / B against F_re / P). Units: FLOP, bytes, seconds."
    ),
)
def analyze_training_route(
    body: Annotated[TrainingRequest, Body(openapi_examples={
        "llama-8b-64-h100": {"summary": "Llama 3.1 8B on 64 H100s (TP 4, DP 16, ZeRO 1)", "value": TRAINING_EXAMPLE}})],
    catalog: CatalogDep,
) -> Response:
    return answered(analyze_training_request(body, catalog), "training")
