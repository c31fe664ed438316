"""The deployment planner's cost beside one model analysis, both through the whole ASGI app in one process
(no socket), interleaved round by round, with distinct bodies so no cache answers for the work.

    .venv/bin/python bench/plan.py

Prints the median milliseconds per request of each and their ratios (target: a planner search over one
device's tensor-parallel sizes and concurrencies up to 512 within 25 x one model analysis, for a dense model and
for a MoE one, Qwen3-30B-A3B).
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

ROUNDS, PER_ROUND = 7, 20


async def main() -> None:
    os.environ.setdefault("ROOFLINE_LOG_LEVEL", "WARNING")
    from service.main import create_app
    from service.runtime.config import Settings

    with tempfile.TemporaryDirectory() as folder:
        app = create_app(Settings(database_url=f"sqlite:///{folder}/bench.db", log_level="WARNING"))
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
                timings: dict[str, list[float]] = {"model analysis": [], "serving plan": [], "moe plan": []}
                counter = 0
                for _ in range(ROUNDS):
                    for name in timings:
                        started = time.perf_counter()
                        for _ in range(PER_ROUND):
                            counter += 1
                            if name == "model analysis":
                                body = {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "phase": "decode",
                                        "batch_size": 1 + counter % 64, "seq_len": 1024 + counter}
                                response = await client.post("/v1/analyze/model", json=body)
                            else:
                                model = "llama-3.1-8b" if name == "serving plan" else "qwen3-30b-a3b"
                                body = {"model_id": model, "device_ids": ["nvidia-h100-sxm"], "total_devices": 8,
                                        "input_len": 3000 + counter, "output_len": 500, "slo": {"ttft_s": 1.0, "tpot_s": 0.02}}
                                response = await client.post("/v1/plan/serving", json=body)
                            assert response.status_code == 200, response.text[:200]
                        timings[name].append((time.perf_counter() - started) / PER_ROUND)
    model, plan, moe = (statistics.median(timings[n]) for n in ("model analysis", "serving plan", "moe plan"))
    print(f"model analysis (llama-3.1-8b decode):                      {model * 1e3:.3f} ms per request (median of {ROUNDS} rounds)")
    for name, value in (("dense serving plan (llama-3.1-8b, 8 x H100, c <= 512)", plan),
                        ("MoE serving plan (qwen3-30b-a3b, 8 x H100, c <= 512)", moe)):
        print(f"{name}: {value * 1e3:.3f} ms per request, {value / model:.1f} x   target <= 25 x: "
              f"{'met' if value / model <= 25 else 'MISSED'}")


if __name__ == "__main__":
    asyncio.run(main())
