"""What a calibrated operator or model-step answer costs beside an uncalibrated one, and what fitting a calibration
costs.

Through the whole ASGI app in one process: distinct matmuls on the H100 analysed with the shipped calibration
(the default), with one fitted to 10,000 submitted timings (engine named), and with none (calibration 'none'),
interleaved round by round, every request a distinct shape so no cache serves it; the same for distinct Llama 3.1 8B
decode steps (each step's matmul rows expected); then the fit of 10,000 timings alone, and the write of 10,000
timings that stores and fits them.

    .venv/bin/python bench/kernel_calibration.py      (make bench-calibration)
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
import numpy as np

ROUNDS = 7
PER_ROUND = 300
TOKEN = "bench-writer-token"


def shapes(count: int, seed: int) -> list[tuple[int, int, int]]:
    rng = np.random.default_rng(seed)
    return [tuple(int(x) for x in rng.integers(1, 16384, size=3)) for _ in range(count)]


async def main() -> None:
    os.environ.setdefault("ROOFLINE_LOG_LEVEL", "WARNING")
    from service.core.expectations.kernels import fit_kernel_terms
    from service.main import create_app
    from service.runtime.config import Settings

    rng = np.random.default_rng(1)
    sizes = rng.integers(1, 16384, size=(10_000, 3))
    compute = 2 * sizes.prod(axis=1) / 989.4e12
    memory = (sizes[:, 0] * sizes[:, 2] + sizes[:, 2] * sizes[:, 1] + sizes[:, 0] * sizes[:, 1]) * 2 / 3.35e12
    measured = (3e-6 + np.maximum(compute / 0.75, memory / 0.8)) * np.exp(rng.normal(0, 0.1, 10_000))
    fits = []
    for _ in range(5):
        started = time.perf_counter()
        fit_kernel_terms(compute, memory, measured, sizes)
        fits.append(time.perf_counter() - started)

    timings: dict[str, list[float]] = {"shipped": [], "measured": [], "none": []}
    steps: dict[str, list[float]] = {"shipped": [], "measured": [], "none": []}
    with tempfile.TemporaryDirectory() as folder:
        app = create_app(Settings(database_url=f"sqlite:///{folder}/bench.db", log_level="WARNING",
                                  api_tokens=f"bench={TOKEN}"))
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://bench", timeout=120) as client:
                body = {"engine": "benchlib", "source": "synthetic", "timings": [
                    {"operator": {"kind": "matmul", "m": int(m), "n": int(n), "k": int(k)}, "time_s": float(t)}
                    for (m, n, k), t in zip(sizes, measured, strict=True)]}
                started = time.perf_counter()
                response = await client.post("/v1/devices/nvidia-h100-sxm/kernel-timings", json=body,
                                             headers={"Authorization": f"Bearer {TOKEN}"})
                write = time.perf_counter() - started
                assert response.status_code == 201, response.text[:300]
                options = {"shipped": {}, "measured": {"engine": "benchlib"}, "none": {"calibration": "none"}}
                for round_ in range(ROUNDS):
                    order = list(options) if round_ % 2 == 0 else list(reversed(options))
                    for offset, name in enumerate(order):
                        batch = shapes(PER_ROUND, seed=round_ * 10 + offset)
                        started = time.perf_counter()
                        for m, n, k in batch:
                            answer = await client.post("/v1/analyze/operator", json={
                                "device_id": "nvidia-h100-sxm", **options[name],
                                "operator": {"kind": "matmul", "m": m, "n": n, "k": k}})
                            assert answer.status_code == 200, answer.text[:300]
                            assert (answer.json()["expected"] is None) == (name == "none")
                        timings[name].append((time.perf_counter() - started) / PER_ROUND)
                    for offset, name in enumerate(order):
                        started = time.perf_counter()
                        for index in range(PER_ROUND):
                            answer = await client.post("/v1/analyze/model", json={
                                "device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "phase": "decode",
                                "batch_size": 1 + index % 64, "seq_len": 1 + round_ * 3 * PER_ROUND + offset * PER_ROUND
                                + index, **options[name]})
                            assert answer.status_code == 200, answer.text[:300]
                            assert (answer.json()["expected"] is None) == (name == "none")
                        steps[name].append((time.perf_counter() - started) / PER_ROUND)
    shipped, fitted, bare = (statistics.median(timings[name]) for name in ("shipped", "measured", "none"))
    print(f"fit of 10,000 timings (formula and 5-fold check): {statistics.median(fits):.3f} s (median of 5)")
    print(f"write of 10,000 timings, stored and fitted:       {write:.2f} s (once)")
    print(f"operator analysis, no calibration:     {bare * 1e6:.0f} us per request (median of {ROUNDS} rounds)")
    print(f"  with the shipped calibration:       {shipped * 1e6:.0f} us; {shipped / bare:.2f} x (target <= 1.2 x)")
    print(f"  with one fitted to 10,000 timings:  {fitted * 1e6:.0f} us; {fitted / bare:.2f} x (target <= 1.2 x)")
    shipped, fitted, bare = (statistics.median(steps[name]) for name in ("shipped", "measured", "none"))
    print(f"model decode step, no calibration:     {bare * 1e6:.0f} us per request (median of {ROUNDS} rounds)")
    print(f"  with the shipped calibration:       {shipped * 1e6:.0f} us; {shipped / bare:.2f} x (target <= 1.2 x)")
    print(f"  with one fitted to 10,000 timings:  {fitted * 1e6:.0f} us; {fitted / bare:.2f} x (target <= 1.2 x)")


if __name__ == "__main__":
    asyncio.run(main())
