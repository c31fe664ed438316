"""Which roofs and points a chart shows: defaults from the device, points from real analyses."""

from __future__ import annotations

from pydantic import ValidationError

from schemas.analysis import OperatorAnalysisRequest
from schemas.models import ModelAnalysisRequest
from schemas.plots import PlotRequest
from service.translation.operator_analyses import analyze_operator
from service.persistence.catalog import DeviceCatalog
from service.core.hardware import DeviceSpec
from service.runtime.errors import Unprocessable, invalid_nested
from service.translation.model_analyses import run_model_analysis
from service.rendering.roofline_chart import PlotPoint, roofline_figure

MEDIA_TYPES = {"svg": "image/svg+xml", "png": "image/png"}


def default_roofs(device: DeviceSpec) -> list[tuple[str, str]]:
    tensor = sorted({p.dtype for p in device.compute_peaks if p.unit == "tensor"})
    vector = [("fp32", "vector")] if device.peak("fp32", "vector") else []
    return [(d, "tensor") for d in tensor] + vector


def chart(catalog: DeviceCatalog, device_id: str, *, roofs: str, compute: list[tuple[str, str]] | None,
          levels: list[str] | None, points: list[PlotPoint], image_format: str) -> bytes:
    device = catalog.get(device_id)
    # Each roof once, whatever the request repeated: repeats drew the same line again (1,000 took 16 s).
    compute = list(dict.fromkeys(compute or default_roofs(device)))
    levels = list(dict.fromkeys(levels or [level.level.value for level in device.memory_levels]))
    try:
        return roofline_figure(device, catalog.measured(device_id), dtypes=compute,
                               levels=levels, roofs=roofs,
                               points=points, image_format=image_format)
    except ValueError as exc:
        raise Unprocessable(str(exc), [{"loc": "query.dtype", "msg": str(exc)}]) from None


def analysed_points(request: PlotRequest, catalog: DeviceCatalog) -> list[PlotPoint]:
    points = []
    for index, point in enumerate(request.points):
        body = {**point.request, "device_id": request.device_id, "roofs": request.roofs}
        try:
            parsed = (OperatorAnalysisRequest if point.endpoint == "operator" else ModelAnalysisRequest).model_validate(body)
        except ValidationError as exc:
            raise invalid_nested(exc, ["body", "points", str(index), "request"]) from None
        if point.endpoint == "operator":
            answer = analyze_operator(parsed, catalog.get(request.device_id), catalog.measured(request.device_id))
            points.append(PlotPoint(point.name, answer.arithmetic_intensity, answer.attainable_flops_per_s, answer.bound))
        else:
            _, _, result, _ = run_model_analysis(parsed, catalog, explain=False)
            t = result.totals
            bound = "compute" if t.compute_bound_time_share >= t.memory_bound_time_share else "memory"
            points.append(PlotPoint(point.name, t.flops / t.bytes, t.flops / t.time_s, bound))
    return points


def plot_request(request: PlotRequest, catalog: DeviceCatalog) -> bytes:
    """The chart POST /v1/plot/roofline draws: the device's roofs with the request's analysed points."""
    compute = [(c.dtype, c.unit) for c in request.compute] if request.compute else None
    return chart(catalog, request.device_id, roofs=request.roofs, compute=compute, levels=request.levels,
                 points=analysed_points(request, catalog), image_format=request.format)
