"""Translation between the HTTP contract and the core: request models in, response models out."""

from __future__ import annotations

from schemas.analysis import (
    AchievedOut, ByteCounts, ComputeRoofOut, LevelCeilingOut, MemoryRoofOut, OperatorAnalysis, OperatorAnalysisRequest,
)
from service.core.errors import CostModelError
from service.core.hardware import DeviceSpec
from service.core.operators import operator_cost
from service.core.roofline import RooflineResult, analyze
from service.core.roofs import MeasuredRoofs, RoofMode
from service.errors import cost_model_error


def roofline_response(device_id: str, result: RooflineResult) -> OperatorAnalysis:
    cost, compute, memory = result.cost, result.compute_roof, result.memory_roof
    achieved = result.achieved
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
        compute_roof=ComputeRoofOut(flops_per_s=compute.flops_per_s, dtype=compute.dtype, unit=compute.unit,
                                    source=compute.source, citation=compute.citation),
        memory_roof=MemoryRoofOut(level=memory.level, bytes_per_s=memory.bytes_per_s, source=memory.source,
                                  citation=memory.citation),
        bound_level=memory.level,
        levels=[LevelCeilingOut(level=c.roof.level, bytes=c.bytes, bytes_per_s=c.roof.bytes_per_s, source=c.roof.source,
                                time_s=c.time_s, arithmetic_intensity=c.arithmetic_intensity, ridge_point=c.ridge_point)
                for c in result.levels],
        achieved=AchievedOut(**vars(achieved)) if achieved else None,
        assumptions=list(result.assumptions),
    )


def analyze_operator(request: OperatorAnalysisRequest, device: DeviceSpec, measured: MeasuredRoofs) -> OperatorAnalysis:
    fields = request.operator.model_dump(exclude={"kind"}, exclude_none=True)
    if request.operator.kind == "matmul":
        tile = fields.get("tile")
        fields["tile"] = (tile["m"], tile["n"], tile["k"]) if tile else device.matmul_tile
    try:
        cost = operator_cost(request.operator.kind, **fields)
    except CostModelError as exc:
        raise cost_model_error(exc, "body.operator") from None
    try:
        result = analyze(cost, device, measured=measured, mode=RoofMode(request.roofs),
                         bytes_by_level=request.bytes_by_level, sustained_clock_hz=request.sustained_clock_hz,
                         measured_time_s=request.measured_time_s)
    except CostModelError as exc:
        prefix = "body" if exc.field in {"roofs", "sustained_clock_hz", "measured_time_s"} else "body.operator"
        raise cost_model_error(exc, prefix) from None
    return roofline_response(device.id, result)
