"""Regenerates the README's images in docs/ from the service's own chart code, against a fresh SQLite
database in a temporary folder (the catalog as shipped, plus one measured HBM roof for the H100 chart).

Usage: .venv/bin/python scripts/make_readme_images.py   (writes docs/*.png; prints each file and its request)
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from schemas.plots import (  # noqa: E402
    ModelRooflinePlotRequest,
    PlotRequest,
    ServingPlanPlotRequest,
    StepBreakdownPlotRequest,
    SweepPlotRequest,
)
from service.persistence import repository  # noqa: E402
from service.persistence.catalog import DeviceCatalog  # noqa: E402
from service.persistence.db import make_engine  # noqa: E402
from service.persistence.migrate import upgrade  # noqa: E402
from service.translation.charts import (  # noqa: E402
    plot_model_roofline,
    plot_request,
    plot_serving_plan,
    plot_step_breakdown,
    plot_sweep,
)

STEP = {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "phase": "decode", "batch_size": 32,
        "seq_len": 4096, "format": "png"}
IMAGES = {
    "roofline-h100.png": (PlotRequest, plot_request, {
        "device_id": "nvidia-h100-sxm", "format": "png", "points": [
            {"name": "decode GEMV 1x4096x4096", "endpoint": "operator",
             "request": {"operator": {"kind": "matmul", "m": 1, "n": 4096, "k": 4096}}},
            {"name": "prefill GEMM 4096^3", "endpoint": "operator",
             "request": {"operator": {"kind": "matmul", "m": 4096, "n": 4096, "k": 4096}}},
            {"name": "llama-3.1-8b decode, batch 32, 4096 tokens", "endpoint": "model",
             "request": {"model_id": "llama-3.1-8b", "phase": "decode", "batch_size": 32, "seq_len": 4096}},
            {"name": "llama-3.1-8b prefill, 4096 tokens", "endpoint": "model",
             "request": {"model_id": "llama-3.1-8b", "phase": "prefill", "batch_size": 1, "seq_len": 4096}}]}),
    "model-roofline.png": (ModelRooflinePlotRequest, plot_model_roofline, {**STEP, "phase": "prefill", "batch_size": 1}),
    "step-breakdown.png": (StepBreakdownPlotRequest, plot_step_breakdown, {**STEP, "batch_sizes": [1, 8, 32, 128]}),
    "sweep.png": (SweepPlotRequest, plot_sweep, {
        "endpoint": "model", "parameter": "batch_size", "metric": "tokens_per_s", "format": "png",
        "values": [1, 2, 4, 8, 16, 32, 64, 96, 128, 160, 192, 256, 384, 512],
        "request": {k: v for k, v in STEP.items() if k != "format"}}),
    "serving-plan.png": (ServingPlanPlotRequest, plot_serving_plan, {
        "model_id": "llama-3.1-8b", "device_ids": ["nvidia-h100-sxm"], "total_devices": 8, "input_len": 4000,
        "output_len": 500, "slo": {"ttft_s": 1, "tpot_s": 0.02}, "format": "png"}),
}


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{folder}/images.db"
        upgrade(url)
        engine = make_engine(url)
        from sqlmodel import Session

        with Session(engine) as session:
            repository.add_benchmarks(session, device_id="nvidia-h100-sxm", submitted_by="make_readme_images", records=[
                {"kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": 2.9e12, "tool": "example measurement"}])
        catalog = DeviceCatalog(make_engine(url, connections=1))
        catalog.refresh()
        for name, (schema, draw, body) in IMAGES.items():
            path = ROOT / "docs" / name
            path.write_bytes(draw(schema.model_validate(body), catalog))
            print(f"{path.relative_to(ROOT)}: {draw.__name__} {json.dumps(body)}")
        catalog.close()
        engine.dispose()


if __name__ == "__main__":
    main()
