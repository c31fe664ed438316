"""Which roofs and points a chart shows, from real analyses: the device roofline, a model step's operators,
a step's time by operator kind, a sweep and a serving plan's frontier."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from schemas.analysis import OperatorAnalysisRequest
from schemas.models import ModelAnalysisRequest
from schemas.plots import (
    ModelRooflinePlotRequest,
    PlotRequest,
    ServingPlanPlotRequest,
    StepBreakdownPlotRequest,
    SweepPlotRequest,
)
from service.core.hardware import DeviceSpec
from service.persistence.catalog import DeviceCatalog
from service.rendering.planning_charts import (
    ServingPoint,
    StepBar,
    SweepPoint,
    pareto_figure,
    sweep_figure,
    time_by_kind_figure,
)
from service.rendering.roofline_chart import PlotPoint, roofline_figure
from service.runtime.errors import Unprocessable, invalid_nested
from service.translation.models.analyses import run_model_analysis
from service.translation.operators.analyses import analyze_operator
from service.translation.serving.plans import plan_serving
from service.translation.sweeps import run_sweep

MEDIA_TYPES = {"svg": "image/svg+xml", "png": "image/png"}


def default_roofs(device: DeviceSpec) -> list[tuple[str, str]]:
    tensor = sorted({p.dtype for p in device.compute_peaks if p.unit == "tensor"})
    vector = [("fp32", "vector")] if device.peak("fp32", "vector") else []
    return [(d, "tensor") for d in tensor] + vector


def chart(catalog: DeviceCatalog, device_id: str, *, roofs: str, compute: Sequence[tuple[str, str]] | None,
          levels: Sequence[str] | None, points: list[PlotPoint], image_format: str,
          ridges: Sequence[str] | None = None, title: str | None = None) -> bytes:
    device = catalog.get(device_id)
    # Each roof once, whatever the request repeated: repeats drew the same line again (1,000 took 16 s).
    compute = list(dict.fromkeys(compute or default_roofs(device)))
    levels = list(dict.fromkeys(levels or [level.level.value for level in device.memory_levels]))
    try:
        return roofline_figure(device, catalog.measured(device_id), dtypes=compute, levels=levels, roofs=roofs,
                               points=points, image_format=image_format, ridges=ridges, title=title)
    except ValueError as exc:
        raise Unprocessable(str(exc), [{"loc": "query.dtype", "msg": str(exc)}]) from None


def analysed_points(request: PlotRequest, catalog: DeviceCatalog) -> list[PlotPoint]:
    points = []
    for index, point in enumerate(request.points):
        body = {**point.request, "device_id": request.device_id, "roofs": request.roofs}
        try:
            parsed: Any = (OperatorAnalysisRequest if point.endpoint == "operator"
                           else ModelAnalysisRequest).model_validate(body)
        except ValidationError as exc:
            raise invalid_nested(exc, ["body", "points", str(index), "request"]) from None
        if point.endpoint == "operator":
            answer = analyze_operator(parsed, catalog.get(request.device_id), catalog.measured(request.device_id))
            levels = tuple((level.level, level.arithmetic_intensity) for level in answer.levels if level.level != "hbm")
            points.append(PlotPoint(point.name, answer.arithmetic_intensity, answer.attainable_flops_per_s,
                                    answer.bound, levels, answer.compute_roof.dtype))
        else:
            _, _, result, _ = run_model_analysis(parsed, catalog, explain=False)
            t = result.totals
            bound = "compute" if t.compute_bound_time_share >= t.memory_bound_time_share else "memory"
            points.append(PlotPoint(point.name, t.flops / t.bytes, t.flops / t.time_s, bound,
                                    dtype=parsed.dtypes.activations))
    return points


def plot_request(request: PlotRequest, catalog: DeviceCatalog) -> bytes:
    """The chart POST /v1/plot/roofline draws: the device's roofs with the request's analysed points."""
    compute = [(c.dtype, c.unit) for c in request.compute] if request.compute else None
    return chart(catalog, request.device_id, roofs=request.roofs, compute=compute, levels=request.levels,
                 points=analysed_points(request, catalog), image_format=request.format, ridges=request.ridges)


def _step_title(request: ModelAnalysisRequest, model: str) -> str:
    tp = f", TP {request.tensor_parallel}" if request.tensor_parallel > 1 else ""
    return f"{model} {request.phase}, batch {request.batch_size}, {request.seq_len} tokens{tp} on {request.device_id}"


def plot_model_roofline(request: ModelRooflinePlotRequest, catalog: DeviceCatalog) -> bytes:
    """Each operator row of the step at its intensity and attainable FLOP/s, sized by its share of the time."""
    model, _, result, _ = run_model_analysis(request, catalog, explain=False)
    total = result.totals.time_s
    points = [PlotPoint(f"{r.name} [{r.group}]" if r.group != "model" else r.name, r.flops / r.bytes,
                        r.flops / r.time_s, r.bound, share=r.total_time_s / total, dtype=request.dtypes.activations)
              for r in result.rows if r.bound != "interconnect" and r.flops > 0 and r.bytes > 0 and r.time_s > 0]
    device = catalog.get(request.device_id)
    wanted: list[tuple[str, str]] = [(request.dtypes.activations, "tensor")]
    if device.peak("fp32", "vector"):
        wanted.append(("fp32", "vector"))
    compute = [(d, u) for d, u in wanted if device.peak(d, u)] or None
    return chart(catalog, request.device_id, roofs=request.roofs, compute=compute, levels=["hbm"], points=points,
                 image_format=request.format, title=f"Operators of {_step_title(request, model)}")


def plot_step_breakdown(request: StepBreakdownPlotRequest, catalog: DeviceCatalog) -> bytes:
    bars = []
    model = request.model_id or "inline model"
    for batch in request.batch_sizes or [request.batch_size]:
        model, _, result, _ = run_model_analysis(request.model_copy(update={"batch_size": batch}), catalog, explain=False)
        by_kind: dict[str, float] = {}
        for row in result.rows:
            by_kind[row.kind] = by_kind.get(row.kind, 0.0) + row.total_time_s
        bars.append(StepBar(f"batch {batch}", tuple(sorted(by_kind.items(), key=lambda item: -item[1]))))
    title = f"Step time by operator kind: {model} {request.phase}, {request.seq_len} tokens on {request.device_id}"
    return time_by_kind_figure(bars, title=title, image_format=request.format)


METRIC_LABELS = {"time_s": "Time (s, roofline lower bound)", "tokens_per_s": "Tokens/s", "mfu": "MFU"}


def plot_sweep(request: SweepPlotRequest, catalog: DeviceCatalog) -> bytes:
    result = run_sweep(request, catalog)
    points = [SweepPoint(row.value, getattr(row, request.metric), row.bound, row.fits) for row in result.rows]
    missing = [p.value for p in points if p.metric is None or not math.isfinite(p.metric)]
    if missing:
        reason = f"{request.metric} is not defined for this sweep (first at {request.parameter} = {missing[0]:g})"
        raise Unprocessable(reason, [{"loc": "body.metric", "msg": reason}])
    values = [p.value for p in points]
    log_x = request.log_x if request.log_x is not None else (min(values) > 0 and max(values) / min(values) > 20)
    if log_x and min(values) <= 0:
        reason = "a log x axis needs positive values"
        raise Unprocessable(reason, [{"loc": "body.log_x", "msg": reason}])
    crossovers = [(c.estimate, f"{c.from_bound} to {c.to_bound}") for c in result.crossover]
    expected = [row.expected_time_s for row in result.rows if row.expected_time_s is not None]
    return sweep_figure(points, parameter=request.parameter, metric_label=METRIC_LABELS[request.metric],
                        crossovers=crossovers, largest_feasible=result.largest_feasible_value,
                        title=_sweep_title(request), image_format=request.format, log_x=log_x,
                        expected=expected if request.metric == "time_s" and len(expected) == len(points) else None)


def _sweep_title(request: SweepPlotRequest) -> str:
    """What was swept, over what: the model or operator, the device and what the sweep held fixed."""
    body = request.request
    held = {"phase": body.get("phase"), "batch": body.get("batch_size"), "context": body.get("seq_len"),
            "TP": body.get("tensor_parallel")}
    fixed = ", ".join(f"{name} {value}" for name, value in held.items()
                      if value is not None and name.lower() not in request.parameter.replace("_size", "").replace(
                          "seq_len", "context").replace("tensor_parallel", "tp").lower())
    if request.endpoint == "model":
        subject = body.get("model_id") or "inline model"
    else:
        subject = str((body.get("operator") or {}).get("kind", "operator"))
    device = body.get("device_id", "?")
    return f"{subject} on {device}: {request.parameter} swept" + (f" ({fixed})" if fixed else "")


def plot_serving_plan(request: ServingPlanPlotRequest, catalog: DeviceCatalog) -> bytes:
    """The plan's Pareto frontier and ranked configurations, each at the figures the plan ranked it on: expected
    where the plan's SLO basis is, else the bound's."""
    plan = plan_serving(request, catalog)

    def name(c) -> str:
        layout = (f" EP {c.expert_parallel}" if c.expert_parallel > 1 else "") + (
            f" DP {c.attention_data_parallel}" if c.attention_data_parallel > 1 else "")
        return (f"{c.mode} {c.device_id} TP {c.tensor_parallel}{layout} x {c.replicas}, concurrency "
                f"{c.concurrency_per_replica}")

    def ranked(c):
        return c.expected or c

    points: dict[str, ServingPoint] = {}
    for config in plan.pareto:
        points[name(config)] = ServingPoint(name(config), ranked(config).tokens_per_s_per_device,
                                            ranked(config).tokens_per_s_per_user, True, None)
    for rank, config in enumerate(plan.configs, start=1):
        found = points.get(name(config))
        points[name(config)] = ServingPoint(name(config), ranked(config).tokens_per_s_per_device,
                                            ranked(config).tokens_per_s_per_user, found is not None, rank)
    tpot = request.slo.tpot_s
    basis = "expected" if plan.slo_basis == "expected" else "bounds"
    return pareto_figure(list(points.values()), title=f"Serving {plan.model} ({basis}): throughput per device against "
                                                      "per user", image_format=request.format,
                         min_per_user=1 / tpot if tpot else None)
