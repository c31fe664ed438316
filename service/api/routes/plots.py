"""Roofline charts (SVG or PNG)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response

from schemas.common import DTypeName, MemoryLevelName
from schemas.plots import PlotRequest
from service.api.deps import CatalogDep, DevicePath
from service.api.responses import NOT_FOUND
from service.translation.charts import MEDIA_TYPES, chart, plot_request

router = APIRouter(tags=["plots"])
IMAGE = {200: {"content": {"image/svg+xml": {}, "image/png": {}}, "description": "The chart"}}


@router.get("/v1/devices/{device_id}/roofline.svg", summary="A device's roofline chart", operation_id="device_roofline",
            response_class=Response, responses={**IMAGE, **NOT_FOUND},
            description="Log-log chart of attainable performance (TFLOP/s) against arithmetic intensity (FLOP/byte): "
                        "a flat roof per compute dtype (`dtype`, tensor unit; fp32 on vector units), a slope per memory "
                        "level, ridge points marked. Nominal roofs dashed, measured ones solid (with roofs=effective). "
                        "`format=png` for a PNG.")
def device_roofline(
    device_id: DevicePath, catalog: CatalogDep,
    dtype: Annotated[list[DTypeName] | None, Query(max_length=16, description="Compute dtypes (tensor unit), "
                                                                              "repeatable, at most 16")] = None,
    levels: Annotated[list[MemoryLevelName] | None, Query(max_length=8, description="Memory levels, repeatable, "
                                                                                  "at most 8")] = None,
    roofs: Literal["nominal", "effective"] = "effective",
    format: Literal["svg", "png"] = "svg",
) -> Response:
    compute = [(d, "vector" if d in ("fp32", "fp64") and not catalog.get(device_id).peak(d, "tensor") else "tensor")
               for d in dtype] if dtype else None
    image = chart(catalog, device_id, roofs=roofs, compute=compute, levels=levels, points=[], image_format=format)
    return Response(image, media_type=MEDIA_TYPES[format])


@router.post("/v1/plot/roofline", summary="Chart analysed workloads on a roofline", operation_id="plot_roofline",
             response_class=Response, responses={**IMAGE, **NOT_FOUND},
             description="Runs each point's operator or model analysis on the device and places it on the roofline "
                         "at (FLOP/byte, attainable TFLOP/s), labelled with its name and bound.")
def plot_roofline(body: PlotRequest, catalog: CatalogDep) -> Response:
    return Response(plot_request(body, catalog), media_type=MEDIA_TYPES[body.format])
