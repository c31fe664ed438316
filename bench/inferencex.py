"""The serving analysis against SemiAnalysis InferenceX's 1,057 measured DeepSeek-R1 runs: measured / bound per
hardware and engine, and what a serving analysis costs beside one model analysis and calibrated beside
uncalibrated, all through the whole ASGI app in one process, interleaved round by round (every run a distinct body;
the uncalibrated ones one input token longer, so no cache serves them).

    .venv/bin/python bench/inferencex.py      (make bench-inferencex)
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

ROUNDS = 7


def table(ratios: dict[tuple[str, str], list[tuple[float, float]]]) -> str:
    lines = ["| hardware | engine | runs | TPOT measured / bound: min, median, max | TTFT measured / bound: min, median |",
             "|---|---|---|---|---|"]
    for (hardware, engine), values in sorted(ratios.items()):
        tpot, ttft = [v[0] for v in values], [v[1] for v in values]
        lines.append(f"| {hardware} | {engine} | {len(values)} | {min(tpot):.2f}, {statistics.median(tpot):.2f}, "
                     f"{max(tpot):.1f} | {min(ttft):.2f}, {statistics.median(ttft):.1f} |")
    return "\n".join(lines)


async def main() -> None:
    os.environ.setdefault("ROOFLINE_LOG_LEVEL", "WARNING")
    from service.main import create_app
    from service.persistence.catalog import DATA_DIR
    from service.runtime.config import Settings
    from service.translation.inferencex import serving_request

    runs = json.loads((DATA_DIR / "serving-runs" / "inferencex-dsr1.json").read_text())["rows"]
    ratios: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    timings: dict[str, list[float]] = {"model": [], "serving": [], "uncalibrated": []}
    with tempfile.TemporaryDirectory() as folder:
        app = create_app(Settings(database_url=f"sqlite:///{folder}/bench.db", log_level="WARNING"))
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
                per_round = len(runs) // ROUNDS
                for round_ in range(ROUNDS):
                    chunk = runs[round_ * per_round:(round_ + 1) * per_round]
                    # Calibrated and uncalibrated alternate which goes first (the first warms the rows the other
                    # shares); the uncalibrated bodies are one input token longer, so no answer is reused.
                    order = ("serving", "uncalibrated") if round_ % 2 == 0 else ("uncalibrated", "serving")
                    for kind in order:
                        started = time.perf_counter()
                        for row in chunk:
                            body = serving_request(row)
                            if kind == "uncalibrated":
                                body |= {"calibration": "none", "input_len": row["isl"] + 1}
                            response = await client.post("/v1/analyze/serving", json=body)
                            assert response.status_code == 200, response.text[:200]
                            if kind == "serving":
                                bound, measured = response.json()["bound"], row["metrics"]
                                ratios[(row["hardware"], row["framework"])].append(
                                    (measured["median_tpot"] / bound["tpot_s"], measured["median_ttft"] / bound["ttft_s"]))
                        timings[kind].append((time.perf_counter() - started) / len(chunk))
                    started = time.perf_counter()
                    for index, row in enumerate(chunk):
                        body = {"device_id": "nvidia-b200", "model_id": "deepseek-v3", "phase": "decode",
                                "batch_size": 1 + index % 256, "seq_len": row["isl"] + index, "tensor_parallel": 8}
                        response = await client.post("/v1/analyze/model", json=body)
                        assert response.status_code == 200, response.text[:200]
                    timings["model"].append((time.perf_counter() - started) / len(chunk))
    print(table(ratios))
    every = [v[0] for values in ratios.values() for v in values]
    print(f"\n{len(every)} runs; TPOT measured / bound {min(every):.2f} to {max(every):.1f}, median {statistics.median(every):.2f}")
    model, serving, plain = (statistics.median(timings[name]) for name in ("model", "serving", "uncalibrated"))
    print(f"model analysis (deepseek-v3 decode, TP 8):      {model * 1e3:.3f} ms per request (median of {ROUNDS} rounds)")
    print(f"serving analysis (one InferenceX run):          {serving * 1e3:.3f} ms per request; ratio {serving / model:.1f} x")
    print(f"the same uncalibrated (calibration 'none'):     {plain * 1e3:.3f} ms per request; calibrated / "
          f"uncalibrated {serving / plain:.2f} x (target <= 1.2 x)")


if __name__ == "__main__":
    asyncio.run(main())
