"""Translation between the HTTP contract and the core: request models in, response models out.

An answer is built once as plain JSON-ready fields in the response model's field order. In-process callers
validate them into the response model; the HTTP routes and the batch endpoint serialise them straight to
JSON with pydantic-core (validating an answer the service has just computed, then serialising the model,
cost three times as much; tests/api/test_answer_json.py holds the two byte for byte equal).
"""

from __future__ import annotations

from typing import cast

from schemas.analysis import OperatorAnalysis, OperatorAnalysisRequest
from service.core.dtypes import bytes_per_element, peak_dtype, quantized_bytes_per_element, weight_group_size
from service.core.efficiency import grouped_rows, matmul_efficiency
from service.core.errors import CostModelError
from service.core.expectations.kernels import KernelCalibration
from service.core.hardware import DeviceSpec
from service.core.operators import operator_cost
from service.core.roofline import RooflineResult, analyze
from service.core.roofs import ComputeRoof, MeasuredRoofs, MemoryRoof, RoofMode
from service.persistence.catalog import DeviceCatalog, gemm_calibrations
from service.runtime.errors import cost_model_error
from service.translation.plain_fields import json_bytes


def compute_roof_fields(compute: ComputeRoof) -> dict:
    return {"flops_per_s": compute.flops_per_s, "dtype": str(compute.dtype), "unit": str(compute.unit),
            "source": str(compute.source)}


def memory_roof_fields(memory: MemoryRoof) -> dict:
    return {"level": memory.level, "bytes_per_s": memory.bytes_per_s, "source": str(memory.source)}


def level_fields(roof: MemoryRoof, level_bytes: float, time_s: float, intensity: float, ridge: float) -> dict:
    """LevelCeilingOut's fields (bytes as a float)."""
    return {"level": roof.level, "bytes": float(level_bytes), "bytes_per_s": roof.bytes_per_s, "source": str(roof.source),
            "time_s": time_s, "arithmetic_intensity": intensity, "ridge_point": ridge}


def answer_fields(device_id: str, kind: str, flops, bytes_read, bytes_written, bytes_total, intensity: float,
                  ridge: float, bound: str, attainable: float, compute_time: float, memory_time: float, time_s: float,
                  mfu: float | None, compute_roof: dict, memory_roof: dict, binding_level: str | None, levels: list[dict],
                  achieved: dict | None, shape: dict | None, assumptions: list[str], expected: dict | None = None) -> dict:
    """The OperatorAnalysis fields, in its order (counts as floats, as the model has them)."""
    return {
        "device_id": device_id,
        "kind": kind,
        "flops": float(flops),
        "bytes": {"read": float(bytes_read), "written": float(bytes_written), "total": float(bytes_total)},
        "arithmetic_intensity": intensity,
        "ridge_point": ridge,
        "bound": bound,
        "attainable_flops_per_s": attainable,
        "compute_time_s": compute_time,
        "memory_time_s": memory_time,
        "time_s": time_s,
        "mfu": mfu,
        "compute_roof": compute_roof,
        "memory_roof": memory_roof,
        "binding_level": binding_level,
        "levels": levels,
        "achieved": achieved,
        "expected": expected,
        "shape_efficiency": shape,
        "assumptions": assumptions,
    }


def expected_fields(calibration: KernelCalibration | None, time_s, extrapolated=False) -> dict | None:
    """The answer's `expected`, its time given (a value, or a template's marker)."""
    if calibration is None:
        return None
    return {"calibration_id": calibration.id, "origin": calibration.origin, "points": calibration.fitted_on,
            "extrapolated": extrapolated, "time_s": time_s, "basis": calibration.basis, "engine": calibration.engine,
            "median_error": calibration.median_error, "p90_error": calibration.p90_error}


def calibration_for(device_id: str, kind: str, compute_dtype: str, *, engine: str | None = None,
                    measured: MeasuredRoofs | None = None) -> KernelCalibration | None:
    """The calibration of a plain matmul on the device, in its compute dtype: with an engine named, the one fitted to
    the timings submitted for it, else a shipped one of that engine; with none, the shipped one."""
    if kind != "matmul":
        return None
    dtype = peak_dtype(compute_dtype)
    shipped = gemm_calibrations().get((device_id, dtype))
    if engine is None:
        return shipped
    fitted = measured.kernels.get((engine, dtype)) if measured is not None else None
    return fitted or (shipped if shipped is not None and shipped.engine == engine else None)


def roofline_fields(device_id: str, result: RooflineResult, shape: dict | None = None,
                    calibration: KernelCalibration | None = None, sizes: tuple[int, int, int] | None = None) -> dict:
    """The OperatorAnalysis fields of a roofline result, with the expectation of `calibration` where one applies."""
    cost = result.cost
    expected = expected_fields(calibration, max(calibration.expected_time_s(cost.flops, cost.bytes_total, sizes),
                                                result.time_s),
                               calibration.outside(cost.flops, cost.bytes_total, sizes)) if calibration else None
    return answer_fields(
        device_id, cost.kind, cost.flops, cost.bytes_read, cost.bytes_written, cost.bytes_total,
        result.arithmetic_intensity, result.ridge_point, str(result.bound), result.attainable_flops_per_s,
        result.compute_time_s, result.memory_time_s, result.time_s, result.mfu, compute_roof_fields(result.compute_roof),
        memory_roof_fields(result.memory_roof), result.binding_level,
        [level_fields(c.roof, c.bytes, c.time_s, c.arithmetic_intensity, c.ridge_point) for c in result.levels],
        result.achieved._asdict() if result.achieved else None, shape, list(result.assumptions), expected)


def shape_fields(tile, padding_efficiency, model_flops, executed_flops, applied, tiles=None, sm_count=None,
                  waves=None, wave_efficiency=None, rows_with_data=None, rows_executed=None) -> dict:
    """ShapeEfficiencyOut's fields, in its order."""
    return {"tile": list(tile), "padding_efficiency": float(padding_efficiency), "model_flops": float(model_flops),
            "executed_flops": float(executed_flops), "tiles": tiles, "sm_count": sm_count,
            "waves": None if waves is None else float(waves),
            "wave_efficiency": None if wave_efficiency is None else float(wave_efficiency),
            "rows_with_data": rows_with_data, "rows_executed": rows_executed, "applied": applied}


def shape_efficiency(operator, device: DeviceSpec, cost) -> dict | None:
    """A matmul's or grouped matmul's padding and wave efficiency (ShapeEfficiencyOut's fields)."""
    if operator.kind == "matmul":
        tile = (operator.tile.m, operator.tile.n, operator.tile.k) if operator.tile else device.matmul_tile
        e = matmul_efficiency(operator.m, operator.n, operator.k, operator.batch, tile, device.sm_count,
                              2 * operator.batch * operator.m * operator.n * operator.k)
        return shape_fields(tile, e.padding_efficiency, e.model_flops, e.executed_flops, operator.apply_efficiency,
                             tiles=e.tiles, sm_count=e.sm_count, waves=e.waves, wave_efficiency=e.wave_efficiency)
    if operator.kind == "grouped_matmul":
        rows, executed = grouped_rows(operator.tokens_per_expert, operator.min_row_tile)
        return shape_fields([operator.min_row_tile, operator.n, operator.k], rows / executed if executed else 1.0,
                             cost.flops, cost.flops * executed / rows if rows else 0.0, operator.apply_efficiency,
                             rows_with_data=rows, rows_executed=executed)
    return None


NOT_COST_FIELDS = frozenset({"kind", "apply_efficiency"})


def operator_fields(operator, device: DeviceSpec) -> dict:
    """The cost model's keyword arguments: the request's fields, the device's tile for a matmul."""
    # The validated model's own attributes (model_dump walks the schema to the same values, at some cost).
    fields = {name: value for name, value in operator.__dict__.items()
              if value is not None and name not in NOT_COST_FIELDS}
    if operator.kind == "matmul":
        tile = operator.tile
        fields["tile"] = (tile.m, tile.n, tile.k) if tile else device.matmul_tile
        # Group scales are charged on B as the model analysis charges them on weights.
        b_dtype = operator.b_dtype or operator.dtype
        group = weight_group_size(b_dtype, fields.pop("weight_group_size", None))
        scale = fields.pop("weight_scale_bytes")
        if group:
            fields["b_bytes_per_element"] = quantized_bytes_per_element(bytes_per_element(b_dtype) * 8, scale, group)
    return fields


def operator_analysis_fields(request: OperatorAnalysisRequest, device: DeviceSpec, measured: MeasuredRoofs) -> dict:
    try:
        cost = operator_cost(request.operator.kind, **operator_fields(request.operator, device))
    except CostModelError as exc:
        raise cost_model_error(exc, "body.operator") from None
    shape = shape_efficiency(request.operator, device, cost)
    efficiency = 1.0
    if shape is not None and shape["applied"]:
        efficiency = shape["padding_efficiency"]  # never the waves: service/core/efficiency.py says why
    try:
        result = analyze(cost, device, measured=measured, mode=RoofMode(request.roofs),
                         bytes_by_level=cast(dict[str, float] | None, request.bytes_by_level),
                         sustained_clock_hz=request.sustained_clock_hz,
                         measured_time_s=request.measured_time_s, compute_efficiency=efficiency)
    except CostModelError as exc:
        prefix = "body" if exc.field in {"roofs", "sustained_clock_hz", "measured_time_s"} else "body.operator"
        raise cost_model_error(exc, prefix) from None
    operator = request.operator
    calibration = None if request.calibration == "none" else calibration_for(
        device.id, cost.kind, cost.compute_dtype, engine=request.engine, measured=measured)
    sizes = (operator.m, operator.n, operator.k) if operator.kind == "matmul" else None
    return roofline_fields(device.id, result, shape, calibration, sizes)


def analyze_operator(request: OperatorAnalysisRequest, device: DeviceSpec, measured: MeasuredRoofs) -> OperatorAnalysis:
    return OperatorAnalysis.model_validate(operator_analysis_fields(request, device, measured))


def analyze_operator_request(request: OperatorAnalysisRequest, catalog: DeviceCatalog) -> OperatorAnalysis:
    return analyze_operator(request, catalog.get(request.device_id), catalog.measured(request.device_id))


def operator_answer_json(request: OperatorAnalysisRequest, catalog: DeviceCatalog) -> bytes:
    """analyze_operator_request's answer as its JSON, without building the model."""
    return json_bytes(operator_analysis_fields(request, catalog.get(request.device_id), catalog.measured(request.device_id)))
