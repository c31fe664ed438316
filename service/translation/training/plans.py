"""Time to train (POST /v1/plan/training): the roofline step on the devices, in the client's layout or the fastest
the search finds, turned into days, device-hours and cost."""

from __future__ import annotations

import math

from pydantic import ValidationError

from schemas.training import PLAN_ONLY, TrainingEstimate, TrainingPlan, TrainingPlanRequest, TrainingRequest
from service.persistence.catalog import DeviceCatalog
from service.runtime.errors import Unprocessable, invalid_nested
from service.translation.training.analyses import analyze_training_request
from service.translation.training.search import search_plan

SECONDS_PER_DAY = 86_400




def _estimate(basis: str, mfu: float, total_flops: float, peak: float, request: TrainingPlanRequest) -> TrainingEstimate:
    seconds = total_flops / (request.num_devices * peak * mfu)
    device_hours = request.num_devices * seconds / 3600
    price = request.price_per_device_hour
    deadline = request.deadline_days
    return TrainingEstimate(
        basis=basis, mfu=mfu, days=seconds / SECONDS_PER_DAY, device_hours=device_hours,
        cost=device_hours * price if price is not None else None,
        devices_for_deadline=math.ceil(total_flops / (peak * mfu * deadline * SECONDS_PER_DAY)) if deadline else None)


def plan_training(request: TrainingPlanRequest, catalog: DeviceCatalog) -> TrainingPlan:
    """Days, device-hours and cost of training on total_tokens, at the roofline step's MFU on num_devices and at
    the MFU the client states, side by side."""
    search = None
    if request.search:
        step_request, search = search_plan(request, catalog)
    else:
        step_request = _layout_request(request)
    step = analyze_training_request(step_request, catalog)
    if not step.peak_flops_per_s or step.mfu is None:
        reason = f"device {request.device_id} has no nominal peak for the matmuls' dtype to plan MFU against"
        raise Unprocessable(reason, [{"loc": "body.device_id", "msg": reason}])
    total_flops = step.model_flops_per_token * request.total_tokens
    estimates = [_estimate("roofline", step.mfu, total_flops, step.peak_flops_per_s, request)]
    if step.expected is not None and step.expected.mfu:
        estimates.append(_estimate("kernels", step.expected.mfu, total_flops, step.peak_flops_per_s, request))
    if request.mfu is not None:
        estimates.append(_estimate("stated", request.mfu, total_flops, step.peak_flops_per_s, request))
    return TrainingPlan(
        device_id=request.device_id, model=step.model, num_devices=request.num_devices,
        total_tokens=request.total_tokens, seq_len=request.seq_len, model_flops_per_token=step.model_flops_per_token,
        total_flops=total_flops, peak_flops_per_s=step.peak_flops_per_s, estimates=estimates, step=step, search=search,
        assumptions=[
            "total FLOPs = model FLOPs per token (forward + backward at seq_len, from the roofline step) x total_tokens",
            "days = total FLOPs / (num_devices x nominal peak x MFU) / 86,400; device_hours = num_devices x hours",
            "the roofline MFU is a bound: a real run reaches a fraction of it (40-60 % MFU is good practice on "
            "large runs); the kernels MFU is the step's expected from the device's measured kernel tables "
            "(step.expected, with where it was checked); the stated MFU is the client's",
        ] + ([] if step.fits else ["the roofline step does NOT fit in memory as configured: its MFU is a what-if"]),
    )


def _layout_request(request: TrainingPlanRequest) -> TrainingRequest:
    """The plan's step in the client's own layout: all of num_devices, as data-parallel replicas of it."""
    shard = request.tensor_parallel * request.pipeline_parallel * request.context_parallel
    if request.num_devices % shard:
        reason = (f"{request.num_devices} devices do not split into replicas of tensor_parallel x pipeline_parallel "
                  f"x context_parallel = {shard}")
        raise Unprocessable(reason, [{"loc": "body.num_devices", "msg": reason}])
    body = request.model_dump(exclude=PLAN_ONLY, exclude_unset=True)
    try:
        return TrainingRequest.model_validate({**body, "data_parallel": request.num_devices // shard})
    except ValidationError as exc:
        raise invalid_nested(exc, ["body"]) from None
