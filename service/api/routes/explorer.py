"""The roofline explorer: its pages and their assets, served by the service itself (no CDN, no build step)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from fastapi import APIRouter, HTTPException, Response

router = APIRouter(include_in_schema=False)
FILES = Path(__file__).resolve().parents[1] / "explorer"
ASSETS = {"explore.js": "application/javascript", "roofline.js": "application/javascript", "explore.css": "text/css",
          "serving.js": "application/javascript", "form.js": "application/javascript", "plan.js": "application/javascript",
          "compare.js": "application/javascript", "calibrations.js": "application/javascript"}


@lru_cache
def _read(name: str) -> bytes:
    return (FILES / name).read_bytes()


@router.get("/explore")
async def explore() -> Response:
    return Response(_read("explore.html"), media_type="text/html; charset=utf-8")


@router.get("/explore/serving")
async def explore_serving() -> Response:
    return Response(_read("serving.html"), media_type="text/html; charset=utf-8")


@router.get("/explore/plan")
async def explore_plan() -> Response:
    return Response(_read("plan.html"), media_type="text/html; charset=utf-8")


@router.get("/explore/compare")
async def explore_compare() -> Response:
    return Response(_read("compare.html"), media_type="text/html; charset=utf-8")


@router.get("/explore/calibrations")
async def explore_calibrations() -> Response:
    return Response(_read("calibrations.html"), media_type="text/html; charset=utf-8")


@router.get("/explore/assets/{name}")
async def explore_asset(name: str) -> Response:
    if name not in ASSETS:
        raise HTTPException(status_code=404)
    return Response(_read(name), media_type=ASSETS[name], headers={"Cache-Control": "public, max-age=3600"})
