"""Translation between the HTTP contract and the core: request models in, response models out."""

from __future__ import annotations

from schemas.analysis import OperatorAnalysis, OperatorAnalysisRequest, ShapeEfficiencyOut
from service.persistence.catalog import DeviceCatalog
from service.core.dtypes import bytes_per_element, quantized_bytes_per_element, weight_group_size
from service.core.efficiency import grouped_rows, matmul_efficiency
from service.core.errors import CostModelError
from service.core.hardware import DeviceSpec
from service.core.operators import operator_cost
from service.core.roofline import RooflineResult, analyze
from service.core.roofs import MeasuredRoofs, RoofMode
from service.runtime.errors import cost_model_error


def roofline_response(device_id: str, result: RooflineResult) -> OperatorAnalysis:
    """Validated from plain dicts in one call: pydantic-core does that faster than model_construct
    builds the same models in Python, and checks the values on the way."""
    cost, compute, memory = result.cost, result.compute_roof, result.memory_roof
    return OperatorAnalysis.model_validate({
        "device_id": device_id,
        "kind": cost.kind,
        "flops": cost.flops,
        "bytes": {"read": cost.bytes_read, "written": cost.bytes_written, "total": cost.bytes_total},
        "arithmetic_intensity": result.arithmetic_intensity,
        "ridge_point": result.ridge_point,
        "bound": result.bound,
        "attainable_flops_per_s": result.attainable_flops_per_s,
        "compute_time_s": result.compute_time_s,
        "memory_time_s": result.memory_time_s,
        "time_s": result.time_s,
        "mfu": result.mfu,
        "compute_roof": {"flops_per_s": compute.flops_per_s, "dtype": compute.dtype, "unit": compute.unit,
                         "source": compute.source},
        "memory_roof": {"level": memory.level, "bytes_per_s": memory.bytes_per_s, "source": memory.source},
        "binding_level": result.binding_level,
        "levels": [{"level": c.roof.level, "bytes": c.bytes, "bytes_per_s": c.roof.bytes_per_s, "source": c.roof.source,
                    "time_s": c.time_s, "arithmetic_intensity": c.arithmetic_intensity, "ridge_point": c.ridge_point}
                   for c in result.levels],
        "achieved": vars(result.achieved) if result.achieved else None,
        "shape_efficiency": None,
        "assumptions": list(result.assumptions),
    })


def shape_efficiency(operator, device: DeviceSpec, cost) -> ShapeEfficiencyOut | None:
    if operator.kind == "matmul":
        tile = (operator.tile.m, operator.tile.n, operator.tile.k) if operator.tile else device.matmul_tile
        e = matmul_efficiency(operator.m, operator.n, operator.k, operator.batch, tile, device.sm_count,
                              2 * operator.batch * operator.m * operator.n * operator.k)
        return ShapeEfficiencyOut(tile=list(tile), padding_efficiency=e.padding_efficiency, model_flops=e.model_flops,
                                  executed_flops=e.executed_flops, tiles=e.tiles, sm_count=e.sm_count, waves=e.waves,
                                  wave_efficiency=e.wave_efficiency, applied=operator.apply_efficiency)
    if operator.kind == "grouped_matmul":
        rows, executed = grouped_rows(operator.tokens_per_expert, operator.min_row_tile)
        return ShapeEfficiencyOut(tile=[operator.min_row_tile, operator.n, operator.k],
                                  padding_efficiency=rows / executed if executed else 1.0, model_flops=cost.flops,
                                  executed_flops=cost.flops * executed / rows if rows else 0.0,
                                  rows_with_data=rows, rows_executed=executed, applied=operator.apply_efficiency)
    return None


def operator_fields(operator, device: DeviceSpec) -> dict:
    """The cost model's keyword arguments: the request's fields, the device's tile for a matmul."""
    fields = operator.model_dump(exclude={"kind", "apply_efficiency"}, exclude_none=True)
    if operator.kind == "matmul":
        tile = fields.get("tile")
        fields["tile"] = (tile["m"], tile["n"], tile["k"]) if tile else device.matmul_tile
        # Group scales are charged on B as the model analysis charges them on weights.
        b_dtype = operator.b_dtype or operator.dtype
        group = weight_group_size(b_dtype, fields.pop("weight_group_size", None))
        scale = fields.pop("weight_scale_bytes")
        if group:
            fields["b_bytes_per_element"] = quantized_bytes_per_element(bytes_per_element(b_dtype) * 8, scale, group)
    return fields


def analyze_operator(request: OperatorAnalysisRequest, device: DeviceSpec, measured: MeasuredRoofs) -> OperatorAnalysis:
    try:
        cost = operator_cost(request.operator.kind, **operator_fields(request.operator, device))
    except CostModelError as exc:
        raise cost_model_error(exc, "body.operator") from None
    shape = shape_efficiency(request.operator, device, cost)
    efficiency = 1.0
    if shape is not None and shape.applied:
        efficiency = shape.padding_efficiency * (shape.wave_efficiency or 1.0)
    try:
        result = analyze(cost, device, measured=measured, mode=RoofMode(request.roofs),
                         bytes_by_level=request.bytes_by_level, sustained_clock_hz=request.sustained_clock_hz,
                         measured_time_s=request.measured_time_s, compute_efficiency=efficiency)
    except CostModelError as exc:
        prefix = "body" if exc.field in {"roofs", "sustained_clock_hz", "measured_time_s"} else "body.operator"
        raise cost_model_error(exc, prefix) from None
    response = roofline_response(device.id, result)
    response.shape_efficiency = shape
    return response


def analyze_operator_request(request: OperatorAnalysisRequest, catalog: DeviceCatalog) -> OperatorAnalysis:
    return analyze_operator(request, catalog.get(request.device_id), catalog.measured(request.device_id))
