"""Translation between the HTTP contract and the core: request models in, response models out."""

from __future__ import annotations

from schemas.analysis import ByteCounts, ComputeRoofOut, MemoryRoofOut, OperatorAnalysis, OperatorAnalysisRequest
from service.core.errors import CostModelError
from service.core.hardware import DeviceSpec
from service.core.operators import operator_cost
from service.core.roofline import RooflineResult, analyze_nominal
from service.errors import cost_model_error


def roofline_response(device_id: str, result: RooflineResult) -> OperatorAnalysis:
    cost = result.cost
    return OperatorAnalysis(
        device_id=device_id,
        kind=cost.kind,
        flops=cost.flops,
        bytes=ByteCounts(read=cost.bytes_read, written=cost.bytes_written, total=cost.bytes_total),
        arithmetic_intensity=result.arithmetic_intensity,
        ridge_point=result.ridge_point,
        bound=result.bound,
        attainable_flops_per_s=result.attainable_flops_per_s,
        compute_time_s=result.compute_time_s,
        memory_time_s=result.memory_time_s,
        time_s=result.time_s,
        mfu=result.mfu,
        compute_roof=ComputeRoofOut(
            flops_per_s=result.compute_roof.flops_per_s, dtype=result.compute_roof.dtype,
            unit=result.compute_roof.unit, source=result.compute_roof.source, citation=result.compute_roof.citation,
        ),
        memory_roof=MemoryRoofOut(
            level=result.memory_roof.level, bytes_per_s=result.memory_roof.bytes_per_s,
            source=result.memory_roof.source, citation=result.memory_roof.citation,
        ),
        assumptions=list(result.assumptions),
    )


def analyze_operator(request: OperatorAnalysisRequest, device: DeviceSpec) -> OperatorAnalysis:
    fields = request.operator.model_dump(exclude={"kind"}, exclude_none=True)
    try:
        cost = operator_cost(request.operator.kind, **fields)
        result = analyze_nominal(cost, device)
    except CostModelError as exc:
        raise cost_model_error(exc, "body.operator") from None
    return roofline_response(device.id, result)
