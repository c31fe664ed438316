"""ReDoc served from the service's own copy, with the one asset its bundle fetches from a CDN (the
'API docs by Redocly' logo) served locally too, so the page makes no request outside the service."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import fastapi_offline
from fastapi import APIRouter, Request, Response
from fastapi.openapi.docs import get_redoc_html

router = APIRouter(include_in_schema=False)
BUNDLE = Path(fastapi_offline.__file__).parent / "static" / "redoc.standalone.js"
CDN_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"
LOCAL_LOGO = "/docs-assets/redoc-logo.svg"
LOGO_SVG = (b'<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 16 16">'
            b'<rect width="16" height="16" rx="3" fill="#32329f"/></svg>')


@lru_cache
def redoc_bundle() -> bytes:
    return BUNDLE.read_bytes().replace(CDN_LOGO.encode(), LOCAL_LOGO.encode())


@router.get("/redoc")
async def redoc(request: Request):
    root = request.scope.get("root_path", "")
    return get_redoc_html(openapi_url=f"{root}/openapi.json", title="Roofline service - ReDoc",
                          redoc_js_url=f"{root}/docs-assets/redoc.standalone.js", with_google_fonts=False,
                          redoc_favicon_url=f"{root}/static-offline-docs/favicon.png")


@router.get("/docs-assets/redoc.standalone.js")
async def redoc_js() -> Response:
    return Response(redoc_bundle(), media_type="application/javascript",
                    headers={"Cache-Control": "public, max-age=86400"})


@router.get(LOCAL_LOGO)
async def redoc_logo() -> Response:
    return Response(LOGO_SVG, media_type="image/svg+xml")


LANDING = b"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>The roofline service</title></head>
<body><h1>The roofline service</h1>
<p>Lower bounds on the time of accelerator workloads (operators, model steps, serving and training plans), on
nominal or measured roofs.</p>
<ul><li><a href="docs">API documentation</a> (Swagger UI), or <a href="redoc">ReDoc</a></li>
<li><a href="explore">The explorer</a>: a model step on a device, drawn</li>
<li><a href="openapi.json">The OpenAPI document</a></li>
<li><a href="v1/devices">Devices</a>, <a href="v1/models">models</a>, <a href="v1/conventions">counting conventions</a></li>
</ul></body></html>"""


@router.get("/")
async def landing() -> Response:
    """Where a person who opens the service's address can go (links relative: the page works behind a prefix)."""
    return Response(LANDING, media_type="text/html")
