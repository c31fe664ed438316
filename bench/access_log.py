"""What the access log costs per request, in process: the same service with every request logged, with one
successful request in a hundred logged, and with the access log off, in interleaved rounds over distinct
operator bodies (`make bench-access-log`; lines go to stderr, so send it to /dev/null: `2>/dev/null`)."""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.in_process import ROUNDS, call, endpoint_requests, per_request_us

ENDPOINT = "operator: matmul"


async def measure() -> None:
    from service.main import create_app
    from service.runtime.config import Settings

    database = f"sqlite:///{tempfile.mkdtemp()}/bench.db"
    variants = {"every request logged": dict(access_log_sample=1.0), "1 success in 100 logged": dict(access_log_sample=0.01),
                "access log off": dict(access_log_sample=0.0)}
    apps = {name: create_app(Settings(database_url=database, log_level="INFO", **options))
            for name, options in variants.items()}
    requests = endpoint_requests(ENDPOINT)
    times = {name: [] for name in apps}
    contexts = [app.router.lifespan_context(app) for app in apps.values()]
    for context in contexts:
        await context.__aenter__()
    try:
        for app in apps.values():
            for scope, raw in requests[:100]:
                await call(app, scope, raw)
        for _ in range(ROUNDS):
            for name, app in apps.items():
                times[name].append(await per_request_us(app, requests))
    finally:
        for context in contexts:
            await context.__aexit__(None, None, None)
    base = times["access log off"]
    print(f"{ENDPOINT}: {'us/request':>10s} {'x log off':>9s}", file=sys.stdout)
    for name, samples in times.items():
        ratio = statistics.median(s / b for s, b in zip(samples, base))
        print(f"{name:26s} {statistics.median(samples):10.1f} {ratio:9.3f}", file=sys.stdout)
    print(f"({ROUNDS} interleaved rounds of {os.environ.get('BENCH_REQUESTS', '1000')} requests; medians)")


if __name__ == "__main__":
    asyncio.run(measure())
