"""The roofline explorer: its pages and their assets, served by the service itself (no CDN, no build step). Each
page's own part (its heading, introduction and content) is a file in service/api/explorer; the shell around it (the
document head, the navigation between the pages, the scripts) is written here, once for all of them."""

from __future__ import annotations

from functools import lru_cache
from html import escape
from pathlib import Path
from typing import NamedTuple

from fastapi import APIRouter, HTTPException, Response

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


RESULTS = ("results", "the results")
PAGES = (
    Page("", "Model step and operator", "Roofline explorer", RESULTS, ("roofline.js", "explore.js")),
    Page("serving", "Serving deployment", "Serving deployment", RESULTS, ("form.js", "serving.js")),
    Page("plan", "Serving plan", "Serving plan", RESULTS, ("form.js", "plan.js")),
    Page("compare", "Device comparison", "Device comparison", RESULTS, ("form.js", "compare.js")),
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


@lru_cache
def _page(page: Page) -> bytes:
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
    return head.encode() + _read(f"{page.name or 'explore'}.html") + f"{scripts}</body>\n</html>\n".encode()


def _serve(page: Page):
    async def serve() -> Response:
        return Response(_page(page), media_type="text/html; charset=utf-8")

    return serve


for _each in PAGES:
    router.add_api_route("/explore" + (f"/{_each.name}" if _each.name else ""), _serve(_each), methods=["GET"])


@router.get("/explore/assets/{name}")
async def explore_asset(name: str) -> Response:
    if name not in ASSETS:
        raise HTTPException(status_code=404)
    return Response(_read(name), media_type=ASSETS[name], headers={"Cache-Control": "public, max-age=3600"})
