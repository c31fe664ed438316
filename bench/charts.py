"""What a chart costs beside the analysis it draws, through the whole ASGI app in one process (no socket),
interleaved round by round, with distinct bodies so no cache answers for the work.

    .venv/bin/python bench/charts.py

Prints the median milliseconds per request of a model analysis, its model-roofline chart and a serving plan's
chart, and each chart's ratio to the analysis. Charts are drawn by matplotlib on the server: the explorer waits on
the slower of its two requests, the chart.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

ROUNDS, PER_ROUND = 5, 4


def step(counter: int) -> dict:
    return {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "phase": "decode",
            "batch_size": 1 + counter % 64, "seq_len": 1024 + counter}


REQUESTS = {
    "model analysis": ("/v1/analyze/model", step),
    "model-roofline chart": ("/v1/plot/model-roofline", step),
    "serving-plan chart": ("/v1/plot/serving-plan", lambda counter: {
        "model_id": "llama-3.1-8b", "device_ids": ["nvidia-h100-sxm"], "total_devices": 8,
        "input_len": 3000 + counter, "output_len": 500, "slo": {"ttft_s": 1.0, "tpot_s": 0.02}}),
}


async def main() -> None:
    os.environ.setdefault("ROOFLINE_LOG_LEVEL", "WARNING")
    from service.main import create_app
    from service.runtime.config import Settings

    timings: dict[str, list[float]] = {name: [] for name in REQUESTS}
    with tempfile.TemporaryDirectory() as folder:
        app = create_app(Settings(database_url=f"sqlite:///{folder}/bench.db", log_level="WARNING"))
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://bench", timeout=60) as client:
                counter = 0
                for _ in range(ROUNDS):
                    for name, (path, body) in REQUESTS.items():
                        started = time.perf_counter()
                        for _ in range(PER_ROUND):
                            counter += 1
                            response = await client.post(path, json=body(counter))
                            assert response.status_code == 200, response.text[:200]
                        timings[name].append((time.perf_counter() - started) / PER_ROUND)
    medians = {name: statistics.median(values) for name, values in timings.items()}
    analysis = medians["model analysis"]
    for name, seconds in medians.items():
        ratio = "" if name == "model analysis" else f"   {seconds / analysis:,.0f} x the analysis"
        print(f"{name + ':':24s}{seconds * 1e3:9.1f} ms per request (median of {ROUNDS} rounds){ratio}")


if __name__ == "__main__":
    asyncio.run(main())
