"""`roofline measure` on this machine: how long the quick and the full grids take and how many timings each holds,
the calibrations the service fits to the quick run (their cross-validated error), and the expected time of ten
matmuls the grid never timed against fresh timings of them.

    .venv/bin/python bench/measure.py [--device cpu] [--full-budget 300]      (make bench-measure)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

HELD_OUT = 10
TOKEN = "bench-measure-token"


def held_out_shapes(count: int, seed: int = 7) -> list[tuple[int, int, int, str]]:
    """Shapes inside the quick grid's range but on none of its points: m from 2 to 500, n and k multiples of 64."""
    import random

    rng = random.Random(seed)
    return [(rng.randint(2, 500), 64 * rng.randint(16, 64), 64 * rng.randint(16, 64), dtype)
            for dtype in ("fp32", "bf16") for _ in range(count // 2)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--full-budget", type=float, default=300.0)
    args = parser.parse_args()
    os.environ.setdefault("ROOFLINE_LOG_LEVEL", "WARNING")
    import torch
    from fastapi.testclient import TestClient

    from service.main import create_app
    from service.measure.collect import measure
    from service.measure.kernels import time_matmul
    from service.measure.upload import upload
    from service.runtime.config import Settings

    with tempfile.TemporaryDirectory() as folder:
        quick = measure(args.device, quick=True, budget_s=600, out=Path(folder) / "quick", quiet=True)
        full = measure(args.device, quick=False, budget_s=args.full_budget, out=Path(folder) / "full", quiet=True)
        print(f"{quick.environment['device_name']} ({args.device}, torch {quick.environment['torch']})")
        for name, run in (("quick", quick), ("full", full)):
            print(f"{name} grid: {len(run.timings)} matmuls and {len(run.benchmarks)} roofs in {run.elapsed_s:.1f} s"
                  + (f" (stopped at its {args.full_budget:.0f} s budget)" if run.stopped_at_budget else ""))
        for roof in quick.benchmarks:
            value = (f"{roof['flops_per_s'] / 1e9:.1f} GFLOP/s" if roof["kind"] == "compute"
                     else f"{roof['bytes_per_s'] / 1e9:.2f} GB/s")
            print(f"  {roof['kind']} {roof.get('dtype', roof.get('level'))}: {value}")

        settings = Settings(database_url=f"sqlite:///{folder}/bench.db", log_level="WARNING",
                            api_tokens=f"bench={TOKEN}")
        with TestClient(create_app(settings)) as client:
            result = upload(client, Path(folder) / "quick", "measured-device", TOKEN, create_device=True)
            for fit in result["calibrations"]:
                print(f"calibration {fit['id']}: {fit['fitted_on']} timings, {fit['checked_by']}: "
                      f"{fit['median_error']:.1%} median, {fit['p90_error']:.1%} p90")
            errors, above = [], 0
            for m, n, k, dtype in held_out_shapes(HELD_OUT):
                measured = time_matmul(torch, args.device, m, n, k, dtype)
                answer = client.post("/v1/analyze/operator", json={
                    "device_id": "measured-device", "engine": "pytorch",
                    "operator": {"kind": "matmul", "m": m, "n": n, "k": k, "dtype": dtype}}).json()
                expected = answer["expected"]["time_s"]
                errors.append(abs(expected / measured - 1))
                above += answer["time_s"] > measured
                print(f"  held out {dtype} {m} x {n} x {k}: measured {measured * 1e3:.3f} ms, expected "
                      f"{expected * 1e3:.3f} ms ({expected / measured - 1:+.1%}), bound {answer['time_s'] * 1e3:.3f} ms")
            print(f"ten held-out matmuls, fresh timings: median error {statistics.median(errors):.1%}, "
                  f"worst {max(errors):.1%}; the bound above the measured time on {above} of them")


if __name__ == "__main__":
    main()
