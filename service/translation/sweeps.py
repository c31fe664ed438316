"""Sweeps over one parameter of an operator or model request, and one workload across devices."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from pydantic import BaseModel, ValidationError

from schemas.analysis import OperatorAnalysisRequest
from schemas.models import ModelAnalysisRequest
from schemas.serving import ServingAnalysisRequest
from schemas.sweeps import (
    MAX_SWEEP_POINTS,
    CompareEntry,
    CompareError,
    CompareInfeasible,
    CompareRequest,
    CompareResult,
    CriticalM,
    Crossover,
    SweepRequest,
    SweepResult,
    SweepRow,
)
from service.core import budget
from service.core.dtypes import bytes_per_element
from service.core.errors import CostModelError
from service.core.roofs import RoofMode, require_memory_roof, select_compute_roof
from service.core.transformer.analysis import Totals, affine_sweep
from service.core.transformer.capacity import check_positions
from service.persistence.catalog import DeviceCatalog
from service.runtime.errors import ServiceError, Unprocessable, client_path, invalid_nested
from service.translation.models.analyses import (
    core_dtypes,
    evaluator_for,
    memory_budget_for,
    peak_context,
    resolve_model,
    run_model_analysis,
    serving_metrics,
    shared_evaluators,
    step_memory_at,
    step_memory_for,
    unprocessable,
)
from service.translation.models.step_expectations import row_expectation, step_expected
from service.translation.operators.analyses import analyze_operator
from service.translation.serving.analyses import analyze_serving_request

REQUEST_MODELS: dict[str, type[BaseModel]] = {"operator": OperatorAnalysisRequest, "model": ModelAnalysisRequest,
                                              "serving": ServingAnalysisRequest}


def sweep_values(request: SweepRequest) -> list[float]:
    if request.values is not None:
        return list(request.values)
    r = request.range
    assert r is not None  # the contract gives exactly one of values and range
    if r.step is not None:
        steps = (r.stop - r.start) / r.step  # -inf for a stop far below start over a tiny step: no point
        count = math.floor(steps + 1e-9) + 1 if steps > -1 else 0
        values = [r.start + i * r.step for i in range(max(count, 0))]
    else:
        num = r.num
        assert num is not None  # the contract requires num without step
        if r.scale == "log":
            ratio = (r.stop / r.start) ** (1 / (num - 1))
            values = [r.start * ratio**i for i in range(num)]
        else:
            values = [r.start + (r.stop - r.start) * i / (num - 1) for i in range(num)]
    if all(float(x).is_integer() for x in (r.start, r.stop, r.step or 1)):
        values = sorted({round(v) for v in values})  # an integer range stays integer (log spacing is rounded)
    if not values or len(values) > MAX_SWEEP_POINTS:
        raise Unprocessable("the range gives no point, or more than 4096",
                            [{"loc": "body.range", "msg": f"{len(values)} points"}])
    return values


def _with(body: dict[str, Any], path: list[str], value) -> dict[str, Any]:
    """A copy of body with path set to value, copying only the dicts along the path."""
    head, *rest = path
    copy = dict(body)
    if rest:
        inner = body.get(head)
        if not isinstance(inner, dict):
            raise Unprocessable(f"parameter path: {head!r} is not an object in the request",
                                [{"loc": "body.parameter", "msg": f"{head!r} is not an object in the request"}])
        copy[head] = _with(inner, rest, value)
    else:
        copy[head] = value
    return copy


def _point_request(request_model: type[BaseModel], body: dict, path: list[str], value: float, index: int):
    typed = int(value) if float(value).is_integer() else value
    try:
        return request_model.model_validate(_with(body, path, typed))
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["type"] == "extra_forbidden" and client_path(first["loc"])[-1:] == path[-1:]:
            # The swept path itself names no field: the parameter is wrong, not this point's value.
            where = ".".join(path[:-1]) or "the request"
            kind = (body.get(path[0]) or {}).get("kind") if len(path) > 1 and isinstance(body.get(path[0]), dict) else None
            reason = f"{path[-1]!r} is not a field of {kind or where}"
            raise Unprocessable(f"parameter {'.'.join(path)!r}: {reason}",
                                [{"loc": "body.parameter", "msg": reason}]) from None
        loc = ".".join(str(p) for p in first["loc"])
        raise Unprocessable(f"point {index} ({'.'.join(path)} = {typed}): {loc}: {first['msg']}",
                            [{"loc": f"body.values.{index}", "msg": f"{loc}: {first['msg']}"}]) from None


def _dominant(shares: dict[str, float]) -> str:
    return max(shares, key=lambda kind: shares[kind])


def _affine_sweep_rows(request: SweepRequest, values: list[float],
                       catalog: DeviceCatalog) -> tuple[list[SweepRow], list[float]] | None:
    """Model sweeps over batch_size or a decode seq_len, exactly and at once (see core affine_sweep);
    None when that does not apply."""
    if request.endpoint != "model" or request.parameter not in ("batch_size", "seq_len"):
        return None
    if not all(float(v).is_integer() and 1 <= v <= 2**24 for v in values):
        return None  # let the per-point path name the offending value
    parameter = request.parameter
    first = _point_request(ModelAnalysisRequest, request.request, [parameter], values[0], 0)
    _point_request(ModelAnalysisRequest, request.request, [parameter], values[-1], len(values) - 1)
    if first.output_len or first.speedups:
        return None
    _, arch = resolve_model(first, catalog)
    evaluator = evaluator_for(first, catalog)
    last = first.model_copy(update={parameter: int(values[-1])})
    budget, _ = memory_budget_for(first, arch, catalog.get(first.device_id))
    try:
        check_positions(arch, *peak_context(last))
        expect = None if first.calibration == "none" else row_expectation(
            first.device_id, catalog.measured(first.device_id), first.engine)
        summaries = affine_sweep(arch, evaluator, parameter=parameter, values=[int(v) for v in values],
                                 phase=first.phase, batch=first.batch_size, seq_len=first.seq_len,
                                 dtypes=core_dtypes(first, arch), tensor_parallel=first.tensor_parallel,
                                 attention_implementation=first.attention_implementation, expect=expect)
    except CostModelError as exc:
        raise unprocessable(exc, "body.request") from None
    if summaries is None:
        return None
    rows, margins = [], []
    prefill = first.phase == "prefill"
    tokens_per_sequence = first.seq_len if prefill else 1
    for value, summary in zip(values, summaries):
        t = summary.totals
        batch = summary.value if parameter == "batch_size" else first.batch_size
        row, margin = _model_row(value, t, summary.mfu, ttft_s=t.time_s if prefill else None,
                                 tpot_s=None if prefill else t.time_s,
                                 tokens_per_s=batch * tokens_per_sequence / t.time_s,
                                 fits=step_memory_at(budget, first, **{parameter: int(value)}).fits,
                                 expected_time_s=summary.expected_time_s)
        rows.append(row)
        margins.append(margin)
    return rows, margins


def _model_row(value: float, t: Totals, mfu: float | None, *, ttft_s: float | None, tpot_s: float | None,
               tokens_per_s: float, fits: bool, expected_time_s: float | None) -> tuple[SweepRow, float]:
    """One model sweep row, and its margin (compute-bound time minus memory-bound time: its sign is the bound)."""
    shares = {"memory": t.memory_bound_time_share, "compute": t.compute_bound_time_share,
              "interconnect": t.interconnect_time_share}
    row = SweepRow(value=value, time_s=t.time_s, bound=_dominant(shares), flops=t.flops, bytes=t.bytes, mfu=mfu,
                   memory_bound_time_share=t.memory_bound_time_share, ttft_s=ttft_s, tpot_s=tpot_s,
                   tokens_per_s=tokens_per_s, fits=fits, expected_time_s=expected_time_s)
    return row, (t.compute_bound_time_share - t.memory_bound_time_share) * t.time_s


def run_sweep(request: SweepRequest, catalog: DeviceCatalog) -> SweepResult:
    values = sweep_values(request)
    path = request.parameter.split(".")
    request_model = REQUEST_MODELS[request.endpoint]
    fast = _affine_sweep_rows(request, values, catalog)
    if fast is not None:
        fast_rows, fast_margins = fast
        return SweepResult(endpoint=request.endpoint, parameter=request.parameter, rows=fast_rows,
                           crossover=_crossovers(fast_rows, fast_margins), critical_m=None,
                           largest_feasible_value=_largest_feasible(fast_rows))
    rows: list[SweepRow] = []
    margins: list[float] = []  # compute time minus memory time: its sign is the bound
    model = None  # resolved once, unless the sweep changes the model itself
    with shared_evaluators():  # points on one device share its roofs and evaluated rows
        for index, value in enumerate(values):
            budget.check()
            point = _point_request(request_model, request.request, path, value, index)
            if request.endpoint == "model" and index == 0:
                model = resolve_model(point, catalog)
                if path[0] == "model":
                    _check_config_sweep_budget(len(values), model[1])
                    model = None
            if request.endpoint == "operator":
                answer = analyze_operator(point, catalog.get(point.device_id), catalog.measured(point.device_id))
                rows.append(SweepRow(value=value, time_s=answer.time_s, bound=answer.bound, flops=answer.flops,
                                     bytes=answer.bytes.total, arithmetic_intensity=answer.arithmetic_intensity,
                                     mfu=answer.mfu, expected_time_s=answer.expected.time_s if answer.expected else None))
                margins.append(answer.compute_time_s - max(level.time_s for level in answer.levels))
                continue
            _, arch, result, prefill = run_model_analysis(point, catalog, explain=False, model=model)
            metrics = serving_metrics(point, result, prefill)
            fits = step_memory_for(point, arch, catalog.get(point.device_id))[0].fits
            expected = None if point.calibration == "none" else step_expected(
                result.rows,
                device_id=point.device_id, measured=catalog.measured(point.device_id), engine=point.engine)
            row, margin = _model_row(value, result.totals, result.mfu, ttft_s=metrics["ttft_s"],
                                     tpot_s=metrics["tpot_s"], tokens_per_s=metrics["tokens_per_s"], fits=fits,
                                     expected_time_s=expected["time_s"] if expected else None)
            rows.append(row)
            margins.append(margin)
    return SweepResult(endpoint=request.endpoint, parameter=request.parameter, rows=rows,
                       crossover=_crossovers(rows, margins), critical_m=_critical_m(request, catalog),
                       largest_feasible_value=_largest_feasible(rows))


def _largest_feasible(rows: list[SweepRow]) -> float | None:
    """The largest swept value whose step fits in memory (model sweeps; None for operators or when none fits)."""
    return max((row.value for row in rows if row.fits), default=None)


# A sweep over a field of an inline config parses the config at every point, at a cost that grows with
# its layers: points x layers is bounded (a 65,536-layer config may be swept over 4 points, a 32-layer one
# over every point allowed).
MAX_CONFIG_SWEEP_LAYER_POINTS = 2**18


def _check_config_sweep_budget(points: int, arch) -> None:
    if points * arch.layers > MAX_CONFIG_SWEEP_LAYER_POINTS:
        reason = (f"{points} points x {arch.layers} layers = {points * arch.layers:,} config parses per layer, over "
                  f"the {MAX_CONFIG_SWEEP_LAYER_POINTS:,} a sweep of the config itself may cost; sweep fewer points")
        raise Unprocessable(reason, [{"loc": "body.values", "msg": reason}])


def _crossovers(rows: list[SweepRow], margins: list[float]) -> list[Crossover]:
    found = []
    for (a, b), (ma, mb) in zip(zip(rows, rows[1:]), zip(margins, margins[1:])):
        if a.bound != b.bound:
            estimate = a.value + (b.value - a.value) * (ma / (ma - mb)) if ma != mb else b.value
            found.append(Crossover(before=a.value, after=b.value, from_bound=a.bound, to_bound=b.bound, estimate=estimate))
    return found


def _critical_m(request: SweepRequest, catalog: DeviceCatalog) -> CriticalM | None:
    """Intensity = ridge solved for M: 2bNK M = R (b M (K s_a + N s_c) + B_bytes), B_bytes = K N s_b (per item if
    the weight is not shared); the bias is left out of the closed form and the integer is checked exactly."""
    operator = request.request.get("operator")
    if request.endpoint != "operator" or not isinstance(operator, dict) or operator.get("kind") != "matmul":
        return None
    base = _point_request(OperatorAnalysisRequest, request.request, ["operator", "m"], 1, 0)
    op, device = base.operator, catalog.get(base.device_id)
    measured, mode = catalog.measured(device.id), RoofMode(base.roofs)
    a, b, c = (op.a_dtype or op.dtype), (op.b_dtype or op.dtype), (op.c_dtype or op.dtype)
    s_a, s_b, s_c = bytes_per_element(a), bytes_per_element(b), bytes_per_element(c)
    compute_dtype = op.compute_dtype or (a if s_a >= s_b else b)
    roof, _ = select_compute_roof(device, measured, compute_dtype, "tensor", mode)
    ridge = roof.flops_per_s / require_memory_roof(device, measured, "hbm", mode).bytes_per_s
    weight = op.k * op.n * s_b * (1 if op.weight_shared else op.batch)
    denominator = op.batch * (2 * op.n * op.k - ridge * (op.k * s_a + op.n * s_c))
    if denominator <= 0:
        return CriticalM(real=None, smallest_integer=None, ridge_point=ridge)
    real = ridge * weight / denominator
    smallest = None
    for m in range(max(1, math.floor(real) - 2), math.ceil(real) + 64):
        check = analyze_operator(_point_request(OperatorAnalysisRequest, request.request, ["operator", "m"], m, 0),
                                 device, measured)
        if check.bound == "compute":
            smallest = m
            break
    return CriticalM(real=real, smallest_integer=smallest, ridge_point=ridge)


class Ranked(NamedTuple):
    """One device's figures in a comparison: its bound and, where a calibration applies, its expectation."""

    device_id: str
    time_s: float
    bound: str
    mfu: float | None
    tokens_per_s: float | None
    expected_time_s: float | None
    calibration_id: str | None


def _operator_entry(point: Any, catalog: DeviceCatalog, device_id: str) -> Ranked:
    answer = analyze_operator(point, catalog.get(device_id), catalog.measured(device_id))
    expected = answer.expected
    return Ranked(device_id, answer.time_s, answer.bound, answer.mfu, None, expected.time_s if expected else None,
                  expected.calibration_id if expected else None)


def _model_entry(point: Any, catalog: DeviceCatalog, device_id: str) -> Ranked | CompareInfeasible:
    _, arch, result, prefill = run_model_analysis(point, catalog)
    memory = step_memory_for(point, arch, catalog.get(device_id))[0]
    if not memory.fits:
        return CompareInfeasible(device_id=device_id, required_bytes=memory.required_bytes,
                                 usable_bytes=memory.usable_bytes, shortfall_bytes=memory.shortfall_bytes)
    t = result.totals
    bound = _dominant({"memory": t.memory_bound_time_share, "compute": t.compute_bound_time_share,
                       "interconnect": t.interconnect_time_share})
    expected = None if point.calibration == "none" else step_expected(
        result.rows,
        device_id=device_id, measured=catalog.measured(device_id), engine=point.engine)
    return Ranked(device_id, t.time_s, bound, result.mfu, serving_metrics(point, result, prefill)["tokens_per_s"],
                  expected["time_s"] if expected else None, ", ".join(expected["calibrations"]) if expected else None)


def _serving_entry(point: Any, catalog: DeviceCatalog, device_id: str) -> Ranked | CompareInfeasible:
    answer = analyze_serving_request(point, catalog)
    bound = answer.bound
    if not bound.fits:
        short = max((pool.memory for pool in bound.pools), key=lambda memory: memory.shortfall_bytes)
        return CompareInfeasible(device_id=device_id, required_bytes=short.required_bytes,
                                 usable_bytes=short.usable_bytes, shortfall_bytes=short.shortfall_bytes)
    expected = answer.expected
    return Ranked(device_id, bound.tpot_s, bound.limited_by, None, bound.output_tokens_per_s,
                  expected.tpot_s if expected else None, expected.calibration.id if expected else None)


ENTRIES = {"operator": _operator_entry, "model": _model_entry, "serving": _serving_entry}
TIME_MEANINGS = {"operator": "the operator's time", "model": "the step's time",
                 "serving": "TPOT, the time per output token after the first"}


def compare_devices(request: CompareRequest, catalog: DeviceCatalog) -> CompareResult:
    request_model = REQUEST_MODELS[request.endpoint]
    entries: list[Ranked] = []
    errors: list[CompareError] = []
    infeasible: list[CompareInfeasible] = []
    for device_id in dict.fromkeys(request.device_ids):
        budget.check()
        try:
            point: Any = request_model.model_validate({**request.request, "device_id": device_id})
        except ValidationError as exc:
            raise invalid_nested(exc, ["body", "request"]) from None
        try:
            entry = ENTRIES[request.endpoint](point, catalog, device_id)
        except ServiceError as exc:
            errors.append(CompareError(device_id=device_id, error=exc.code, detail=exc.detail))
            continue
        (infeasible if isinstance(entry, CompareInfeasible) else entries).append(entry)  # type: ignore[arg-type]
    # Bounds alone rank hardware wrongly where engines reach their roofs unevenly: expectations rank when every
    # device has one (a mix of expectations and bounds would compare unlike figures).
    ranked_by = "expected" if entries and all(e.expected_time_s is not None for e in entries) else "bound"

    def ranked_time(entry: Ranked) -> float:
        return entry.expected_time_s if ranked_by == "expected" else entry.time_s  # type: ignore[return-value]

    entries.sort(key=ranked_time)
    fastest = ranked_time(entries[0]) if entries else 1.0
    ranking = [CompareEntry(rank=i + 1, device_id=e.device_id, time_s=e.time_s, bound=e.bound, mfu=e.mfu,
                            tokens_per_s=e.tokens_per_s, expected_time_s=e.expected_time_s,
                            calibration_id=e.calibration_id, relative_time=ranked_time(e) / fastest)
               for i, e in enumerate(entries)]
    return CompareResult(endpoint=request.endpoint, ranking=ranking, errors=errors, infeasible=infeasible,
                         ranked_by=ranked_by, time_meaning=TIME_MEANINGS[request.endpoint])
