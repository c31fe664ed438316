"""The roofline explorer: its pages and their assets, served by the service itself (no CDN, no build step). Each
page's own part (its heading, introduction and content) is a file in service/api/explorer; the shell around it (the
document head, the navigation between the pages, the scripts) is written here, once for all of them."""

from __future__ import annotations

import json
from functools import lru_cache
from html import escape
from pathlib import Path
from typing import Any, NamedTuple

from fastapi import APIRouter, HTTPException, Request, Response
from starlette.concurrency import run_in_threadpool

router = APIRouter(include_in_schema=False)
FILES = Path(__file__).resolve().parents[1] / "explorer"
ASSETS = {"explore.js": "application/javascript", "roofline.js": "application/javascript", "explore.css": "text/css",
          "serving.js": "application/javascript", "form.js": "application/javascript", "plan.js": "application/javascript",
          "compare.js": "application/javascript", "calibrations.js": "application/javascript"}


class Page(NamedTuple):
    name: str  # below /explore ("" for /explore itself); its part is <name or explore>.html
    label: str  # in the navigation
    title: str
    skip_to: tuple[str, str]  # the id the skip link jumps to, and what it is
    scripts: tuple[str, ...]
    forms: tuple[str, ...] = ()  # the OpenAPI schemas its form is built from (request_schemas)


RESULTS = ("results", "the results")
PAGES = (
    Page("", "Model step and operator", "Roofline explorer", RESULTS, ("roofline.js", "explore.js")),
    Page("serving", "Serving deployment", "Serving deployment", RESULTS, ("form.js", "serving.js"),
         ("ServingAnalysisRequest",)),
    Page("plan", "Serving plan", "Serving plan", RESULTS, ("form.js", "plan.js"), ("ServingPlanRequest",)),
    Page("compare", "Device comparison", "Device comparison", RESULTS, ("form.js", "compare.js"),
         ("CompareRequest", "ServingAnalysisRequest")),
    Page("calibrations", "Calibrations", "Calibrations", ("chosen", "the chosen calibration"),
         ("form.js", "calibrations.js")),
)


@lru_cache
def _read(name: str) -> bytes:
    return (FILES / name).read_bytes()


def _href(page: Page, to: Page) -> str:
    """A link from `page` to `to`, relative (the service may be mounted below a prefix)."""
    if not page.name:
        return f"explore/{to.name}" if to.name else "explore"
    return to.name or "../explore"


def request_schemas(document: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """The part of the OpenAPI document a page's form is built from: the named schemas and every schema they refer
    to, as {"components": {"schemas": ...}} (a few kilobytes, where the whole document is 400)."""
    schemas = document["components"]["schemas"]
    kept: dict[str, Any] = {}
    waiting = list(names)
    while waiting:
        name = waiting.pop()
        if name in kept:
            continue
        kept[name] = schemas[name]
        waiting += [ref.rsplit("/", 1)[1] for ref in _refs(schemas[name])]
    return {"components": {"schemas": kept}}


def _refs(value: Any) -> list[str]:
    """Every "$ref" within a schema."""
    if isinstance(value, list):
        return [ref for item in value for ref in _refs(item)]
    if not isinstance(value, dict):
        return []
    own = [value["$ref"]] if "$ref" in value else []
    return own + [ref for item in value.values() for ref in _refs(item)]


def _inline(schemas: dict[str, Any]) -> bytes:
    """`schemas` as a JSON script element (no '<' left in it, so no text can close the element early)."""
    text = json.dumps(schemas, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")
    return f'<script type="application/json" id="request-schemas">{text}</script>\n'.encode()


def _page(page: Page, document: dict[str, Any]) -> bytes:
    assets = "explore/assets/" if not page.name else "assets/"
    links = " · ".join(f'<a href="{_href(page, to)}"' + (' aria-current="page"' if to == page else "")
                       + f">{escape(to.label)}</a>" for to in PAGES)
    title = page.title if not page.name else f"{page.title} · Roofline explorer"
    head = (f'<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n<title>{escape(title)}</title>\n'
            f'<link rel="stylesheet" href="{assets}explore.css">\n</head>\n<body>\n'
            f'<a class="skip" href="#{page.skip_to[0]}">Skip to {page.skip_to[1]}</a>\n'
            f'<header>\n  <nav aria-label="Explorer pages">{links}</nav>\n')
    scripts = "".join(f'<script src="{assets}{script}"></script>\n' for script in page.scripts)
    # A form page carries its request's schemas: it builds its form and sends its first request at once, instead
    # of first fetching and parsing the whole OpenAPI document (about 40 ms of a 170 ms first chart).
    forms = _inline(request_schemas(document, page.forms)) if page.forms else b""
    return (head.encode() + _read(f"{page.name or 'explore'}.html") + forms
            + f"{scripts}</body>\n</html>\n".encode())


def _serve(page: Page):
    async def serve(request: Request) -> Response:
        state = request.app.state
        if not hasattr(state, "explorer_pages"):
            state.explorer_pages = {}
        pages = state.explorer_pages
        body = pages.get(page.name)
        if body is None:  # once per page and app, off the event loop (the first builds the OpenAPI document)
            body = pages[page.name] = await run_in_threadpool(_page, page, request.app.openapi())
        return Response(body, media_type="text/html; charset=utf-8")

    return serve


for _each in PAGES:
    router.add_api_route("/explore" + (f"/{_each.name}" if _each.name else ""), _serve(_each), methods=["GET"])


@router.get("/explore/assets/{name}")
async def explore_asset(name: str) -> Response:
    if name not in ASSETS:
        raise HTTPException(status_code=404)
    return Response(_read(name), media_type=ASSETS[name], headers={"Cache-Control": "public, max-age=3600"})
