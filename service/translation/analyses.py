"""Every analysis the service offers, by name: the request it takes and the function that answers it.

The HTTP routes, the CLI's in-process mode and anything else that runs analyses look them up here, so
each caller runs exactly the same code for the same question.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from schemas.batch import BATCH_REQUEST_MODELS, MAX_BATCH_WORK, BatchRequest, TypedBatchRequest
from schemas.common import ErrorResponse
from schemas.sweeps import MAX_SWEEP_POINTS
from service.core import budget
from service.core.budget import BudgetSpent
from service.persistence.catalog import DeviceCatalog
from service.runtime.errors import DeadlineExceeded, ServiceError, Unprocessable, invalid_nested
from service.runtime.observability import INTERNAL_ERROR, log_unexpected
from service.translation.models.analyses import (
    analyze_model_request,
    kv_capacity_request,
    model_answer_json,
    resolve_model,
    shared_evaluators,
)
from service.translation.models.batches import ModelStepAnswers, is_plain_model_step
from service.translation.operators.analyses import analyze_operator_request, operator_answer_json
from service.translation.operators.fusion_graphs import analyze_fusion
from service.translation.operators.matmul_batches import MatmulAnswers, is_plain_matmul
from service.translation.plain_fields import json_bytes
from service.translation.serving.analyses import analyze_serving_request
from service.translation.serving.plans import plan_serving, plan_work
from service.translation.sweeps import compare_devices, run_sweep
from service.translation.training.analyses import analyze_training_request
from service.translation.training.plans import plan_training


@dataclass(frozen=True)
class Analysis:
    request_model: type[BaseModel]
    run: Callable[[Any, DeviceCatalog], BaseModel] | None  # the answer as its response model
    # The answer's JSON written straight from its fields (the hot analyses), the same bytes as the model's.
    write_json: Callable[[Any, DeviceCatalog], bytes] | None = None

    def answer_json(self, request: BaseModel, catalog: DeviceCatalog) -> bytes:
        if self.write_json is not None:
            return self.write_json(request, catalog)
        assert self.run is not None  # every analysis has one or the other
        return self.run(request, catalog).model_dump_json().encode()


RUNS: dict[str, Callable[[Any, DeviceCatalog], BaseModel]] = {
    "operator": analyze_operator_request,
    "model": analyze_model_request,
    "kv-capacity": kv_capacity_request,
    "fusion": analyze_fusion,
    "sweep": run_sweep,
    "compare": compare_devices,
    "plan-serving": plan_serving,
    "training": analyze_training_request,
    "plan-training": plan_training,
    "serving": analyze_serving_request,
}
WRITES_JSON: dict[str, Callable[[Any, DeviceCatalog], bytes]] = {
    "operator": operator_answer_json,
    "model": model_answer_json,
}
# The request models are the contract's (schemas.batch names them for the batch endpoint's one-pass parse).
ANALYSES: dict[str, Analysis] = {name: Analysis(BATCH_REQUEST_MODELS[name], run, WRITES_JSON.get(name))
                                 for name, run in RUNS.items()}
# Registered below: the batch runs the others.


def run_analysis_json(name: str, body: dict[str, Any], catalog: DeviceCatalog, loc: list[str] | None = None) -> bytes:
    """Validates a body as the named analysis's request and answers it as JSON; a ServiceError on bad input,
    located as the body sits in the caller's request (`loc`, default `body`)."""
    analysis = ANALYSES[name]
    try:
        request = analysis.request_model.model_validate(body)
    except ValidationError as exc:
        raise invalid_nested(exc, loc or ["body"]) from None
    return analysis.answer_json(request, catalog)


BATCH_SLOTS = threading.BoundedSemaphore(1)


def _work(item, catalog: DeviceCatalog) -> int:
    """An item's cost in units of one operator or model step, from its request (before it runs)."""
    body: Any = item.request
    if isinstance(item.request, BaseModel):  # validated: its fields are known good
        if item.analysis == "plan-serving":
            return _plan_work(body, catalog)
        if item.analysis == "sweep":
            return max(1, len(body.values)) if body.values is not None else max(1, body.range.num or MAX_SWEEP_POINTS)
        if item.analysis == "compare":
            return len(body.device_ids)
    elif item.analysis == "sweep":
        values, spacing = body.get("values"), body.get("range") or {}
        if isinstance(values, list):
            return max(1, len(values))
        return MAX_SWEEP_POINTS if not isinstance(spacing.get("num"), int) else max(1, spacing["num"])
    elif item.analysis == "compare":
        devices = body.get("device_ids")
        return max(1, len(devices)) if isinstance(devices, list) else 1
    # A training step evaluates a model's rows three times over (forward, backward, recompute), and its
    # plan one such step; a serving plan that did not validate is refused as its own item, at no cost.
    # A serving deployment runs up to five steps (a prefill alone and batched, a decode or a verification and a
    # draft, the prefill pool's); counted as five.
    return {"training": 3, "plan-training": 3, "serving": 5}.get(item.analysis, 1)


def _plan_work(request, catalog: DeviceCatalog) -> int:
    """A serving plan's step analyses; one whose model cannot be read costs 1 (its item is refused on its own)."""
    try:
        _, arch = resolve_model(request, catalog)
    except ServiceError:
        return 1
    return plan_work(request, arch)


# Answers gathered per hop to the thread pool when the answer streams. Each hop costs StreamingResponse a thread
# switch and a trip through the middleware (pieces of 50 results cost a 1,000-matmul batch 17 % more CPU than one
# piece), and a worker holds one piece at a time: 1 MiB is 500 operators or 125 model steps.
PIECE_BYTES = 1 << 20


def _item_json(index: int, item, catalog: DeviceCatalog, matmuls: MatmulAnswers, steps: ModelStepAnswers) -> bytes:
    """One item's BatchResult JSON: its analysis's answer through the same code as its own endpoint (a plain matmul
    or model step from its group's arrays, the same bytes), or its error in the service's error shape (an unexpected one as its
    own 500, logged as the middleware logs one)."""
    try:
        budget.check()
        answer = matmuls.answer(index) or steps.answer(index)
        if answer is None and isinstance(item.request, BaseModel):
            answer = ANALYSES[item.analysis].answer_json(item.request, catalog)
        elif answer is None:
            answer = run_analysis_json(item.analysis, item.request, catalog, loc=["body", "items", str(index), "request"])
    except BudgetSpent as spent:
        stopped = DeadlineExceeded(spent.reason)
        error = ErrorResponse(error=stopped.code, detail=stopped.detail, fields=[]).model_dump_json().encode()
        return _result_json(item.id, stopped.status_code, error=error)
    except ServiceError as exc:
        error = ErrorResponse(error=exc.code, detail=exc.detail, fields=exc.fields).model_dump_json().encode()
        return _result_json(item.id, exc.status_code, error=error)
    except Exception as exc:  # a defect: this item's 500, not the end of a half-sent answer
        log_unexpected(exc)
        return _result_json(item.id, 500, error=INTERNAL_ERROR)
    return _result_json(item.id, 200, result=answer)


def _result_json(item_id: str | None, status: int, result: bytes = b"null", error: bytes = b"null") -> bytes:
    """BatchResult's JSON, its fields in order, around an answer's or an error's own JSON."""
    return b'{"id":%s,"status":%d,"result":%s,"error":%s}' % (json_bytes(item_id), status, result, error)


def batch_json_chunks(request: BatchRequest | TypedBatchRequest, catalog: DeviceCatalog) -> Iterator[bytes]:
    """The batch's BatchResponse JSON in pieces of about PIECE_BYTES, in order: a worker holds one piece at a time,
    not a thousand answers (1,000 model steps are about 8 MB of JSON). A batch over its work budget is refused
    here, before any item runs; the items run as the pieces are taken."""
    work = sum(_work(item, catalog) for item in request.items)
    if work > MAX_BATCH_WORK:
        reason = (f"the items cost {work:,} units (a sweep counts its points, a comparison its devices, a serving plan "
                  "the step analyses it runs, a training step or plan 3), "
                  f"over the {MAX_BATCH_WORK:,} a batch may; split it")
        raise Unprocessable(reason, [{"loc": "body.items", "msg": reason}])
    return _chunks(request.items, catalog)


def _chunks(items: list, catalog: DeviceCatalog) -> Iterator[bytes]:
    evaluators: dict = {}  # items on one device share its roofs and evaluated rows, across the pieces
    matmuls: MatmulAnswers | None = None
    steps: ModelStepAnswers | None = None
    yield b'{"results":['
    index = 0
    while index < len(items):
        first = index == 0
        answers, size = [], 0
        # One piece of one batch computes at a time per process (batches in flight take turns by pieces): two at once
        # only shared the interpreter's lock, each thread evicting the other's caches (one worker, two batches of
        # 1,000 model steps in flight: 4,740-5,040 steps/s with two at once, 5,480 with one), and every one more
        # multiplied the memory (32 concurrent batches, unchunked, peaked at 750 MB in one worker).
        with BATCH_SLOTS, shared_evaluators(evaluators):
            if matmuls is None or steps is None:  # the numbers of every plain matmul at once (a few hundred kilobytes), written per piece
                matmuls = MatmulAnswers(((at, item.request) for at, item in enumerate(items)
                                         if item.analysis == "operator" and is_plain_matmul(item.request)), catalog)
                steps = ModelStepAnswers(((at, item.request) for at, item in enumerate(items)
                                          if item.analysis == "model" and is_plain_model_step(item.request)), catalog)
            while index < len(items) and size < PIECE_BYTES:
                answers.append(_item_json(index, items[index], catalog, matmuls, steps))
                size += len(answers[-1])
                index += 1
        piece = b",".join(answers)
        yield piece if first else b"," + piece
    yield b"]}"


def run_batch_json(request: BatchRequest | TypedBatchRequest, catalog: DeviceCatalog) -> bytes:
    """The whole batch answer at once (in-process callers)."""
    return b"".join(batch_json_chunks(request, catalog))


ANALYSES["batch"] = Analysis(BatchRequest, None, run_batch_json)
