"""Charts (SVG or PNG): rooflines, a step's operators and time by kind, sweeps and serving plans."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal

import anyio
from fastapi import APIRouter, Query, Response

from schemas.common import DTypeName, MemoryLevelName
from schemas.plots import (
    ModelRooflinePlotRequest,
    PlotRequest,
    ServingPlanPlotRequest,
    StepBreakdownPlotRequest,
    SweepPlotRequest,
)
from service.api.deps import CatalogDep, DevicePath
from service.api.responses import INVALID, NOT_FOUND, Responses
from service.translation.charts import (
    MEDIA_TYPES,
    chart,
    plot_model_roofline,
    plot_request,
    plot_serving_plan,
    plot_step_breakdown,
    plot_sweep,
)

router = APIRouter(tags=["plots"])
# Charts render with matplotlib, 0.1-6 s each: at most CHART_THREADS at once, in worker threads of their own limiter,
# so charts waiting for one queue on the event loop and never hold the thread pool the analyses run in.
CHART_THREADS = 2
CHART_LIMITER = anyio.CapacityLimiter(CHART_THREADS)


async def drawn(render: Callable[..., bytes], *args, **kwargs) -> bytes:
    return await anyio.to_thread.run_sync(lambda: render(*args, **kwargs), limiter=CHART_LIMITER)

IMAGE: Responses = {200: {"content": {"image/svg+xml": {}, "image/png": {}}, "description": "The chart"}}
DRAWN = ("SVG keeps its labels as text, carries a <title> and a <desc> saying what it shows, and an id on every "
         "drawn element; `format: png` for a PNG.")


@router.get("/v1/devices/{device_id}/roofline.svg", summary="A device's roofline chart", operation_id="device_roofline",
            response_class=Response, responses={**IMAGE, **NOT_FOUND},
            description="Log-log chart of attainable performance (TFLOP/s) against arithmetic intensity (FLOP/byte): "
                        "a flat roof per compute dtype (`dtype`, tensor unit; fp32 on vector units) and a slope per "
                        "memory level, one colour each, every roof labelled along its line; roofs of equal height "
                        "drawn once. Nominal roofs dashed, measured ones solid in the same colour (roofs=effective). "
                        "Ridge points for `ridge` dtypes (default bf16). " + DRAWN)
async def device_roofline(
    device_id: DevicePath, catalog: CatalogDep,
    dtype: Annotated[list[DTypeName] | None, Query(max_length=16, description="Compute dtypes (tensor unit), "
                                                                              "repeatable, at most 16")] = None,
    levels: Annotated[list[MemoryLevelName] | None, Query(max_length=8, description="Memory levels, repeatable, "
                                                                                  "at most 8")] = None,
    ridge: Annotated[list[DTypeName] | None, Query(max_length=16, description="Dtypes whose HBM ridge point to "
                                                                              "mark, repeatable")] = None,
    roofs: Literal["nominal", "effective"] = "effective",
    format: Literal["svg", "png"] = "svg",
) -> Response:
    def render() -> bytes:  # the device's lookup too, off the event loop
        compute = [(d, "vector" if d in ("fp32", "fp64") and not catalog.get(device_id).peak(d, "tensor") else "tensor")
                   for d in dtype] if dtype else None
        return chart(catalog, device_id, roofs=roofs, compute=compute, levels=levels, points=[], image_format=format,
                     ridges=ridge)

    image = await drawn(render)
    return Response(image, media_type=MEDIA_TYPES[format])


@router.post("/v1/plot/roofline", summary="Chart analysed workloads on a roofline", operation_id="plot_roofline",
             response_class=Response, responses={**IMAGE, **NOT_FOUND, **INVALID},
             description="Runs each point's operator or model analysis on the device and places it at its HBM "
                         "intensity (FLOP/byte) and attainable TFLOP/s, coloured by its bound (memory: amber triangle, "
                         "compute: purple square), numbered and keyed below the chart; an operator with traffic at "
                         "other levels (L2, SMEM) gets one diamond per level, joined to it. " + DRAWN)
async def plot_roofline(body: PlotRequest, catalog: CatalogDep) -> Response:
    return Response(await drawn(plot_request, body, catalog), media_type=MEDIA_TYPES[body.format])


@router.post("/v1/plot/model-roofline", summary="A model step's operators on the roofline",
             operation_id="plot_model_roofline", response_class=Response, responses={**IMAGE, **NOT_FOUND, **INVALID},
             description="The body of /v1/analyze/model (plus `format`): every operator row of the step on the "
                         "device's HBM roofline, each marker sized by the row's share of the step's time; the largest "
                         "24 numbered and keyed with their share. " + DRAWN)
async def plot_model_roofline_route(body: ModelRooflinePlotRequest, catalog: CatalogDep) -> Response:
    return Response(await drawn(plot_model_roofline, body, catalog), media_type=MEDIA_TYPES[body.format])


@router.post("/v1/plot/step-breakdown", summary="A step's time by operator kind", operation_id="plot_step_breakdown",
             response_class=Response, responses={**IMAGE, **NOT_FOUND, **INVALID},
             description="The body of /v1/analyze/model (plus `format` and `batch_sizes`, at most 8): one horizontal "
                         "bar per batch size, stacked by operator kind (matmul, attention, norms, elementwise, "
                         "all-reduce, ...), milliseconds, each segment's share written on it. " + DRAWN)
async def plot_step_breakdown_route(body: StepBreakdownPlotRequest, catalog: CatalogDep) -> Response:
    return Response(await drawn(plot_step_breakdown, body, catalog), media_type=MEDIA_TYPES[body.format])


@router.post("/v1/plot/sweep", summary="A sweep drawn", operation_id="plot_sweep", response_class=Response,
             responses={**IMAGE, **NOT_FOUND, **INVALID},
             description="The body of /v1/analyze/sweep (plus `format`, `metric` and `log_x`): time, tokens/s or MFU "
                         "against the swept parameter, points coloured by bound and hollow where the step does not fit "
                         "in memory, each crossover a dashed vertical line with its interpolated value, the largest "
                         "value that fits starred. " + DRAWN)
async def plot_sweep_route(body: SweepPlotRequest, catalog: CatalogDep) -> Response:
    return Response(await drawn(plot_sweep, body, catalog), media_type=MEDIA_TYPES[body.format])


@router.post("/v1/plot/serving-plan", summary="A serving plan's Pareto frontier", operation_id="plot_serving_plan",
             response_class=Response, responses={**IMAGE, **NOT_FOUND, **INVALID},
             description="The body of /v1/plan/serving (plus `format`): output tokens/s per device against tokens/s "
                         "per user for the frontier's configurations, joined, and the ranked ones starred, numbered "
                         "and keyed below. " + DRAWN)
async def plot_serving_plan_route(body: ServingPlanPlotRequest, catalog: CatalogDep) -> Response:
    return Response(await drawn(plot_serving_plan, body, catalog), media_type=MEDIA_TYPES[body.format])
