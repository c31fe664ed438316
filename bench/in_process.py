"""Per-request cost of the service's request path, in process, against the bare FastAPI ceiling:
`make bench-in-process` (or `python bench/in_process.py [endpoint ...]`).

Every request goes through the whole ASGI application (middleware, routing, validation, analysis,
serialisation) but no socket, so the figures isolate the application's own cost from the server's and the
load generator's. Rounds interleave the endpoints, so a burst of noise on a shared machine hits all of them
alike; the table gives the median microseconds per request and the median per-round ratio to the ceiling.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.ceiling import app as ceiling
from bench.run import ENDPOINTS, endpoint_bodies

REQUESTS_PER_ROUND = int(os.environ.get("BENCH_REQUESTS", "1000"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "7"))
# Milliseconds to seconds, not microseconds: make bench-sweep, bench-plan and bench measure these.
SKIPPED = {"sweep: 256 points", "plan: 8 x H100, TP 1-8, c <= 512", "batch: 1,000 operators", "batch: 1,000 model steps"}


def asgi_request(method: str, path: str, body: dict | None) -> tuple[dict, bytes]:
    raw = json.dumps(body).encode() if body is not None else b""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "path": path,
             "raw_path": path.encode(), "query_string": b"", "root_path": "", "scheme": "http",
             "headers": [(b"host", b"bench"), (b"content-type", b"application/json"),
                         (b"content-length", str(len(raw)).encode())],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    return scope, raw


async def call(app, scope: dict, raw: bytes) -> int:
    delivered = False
    status = 0

    async def receive():
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": raw, "more_body": False}
        return {"type": "http.disconnect"}

    async def send(message):
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(dict(scope), receive, send)
    return status


async def per_request_us(app, requests: list[tuple[dict, bytes]]) -> float:
    """Microseconds per request over REQUESTS_PER_ROUND requests walking the distinct bodies."""
    start = time.perf_counter()
    for index in range(REQUESTS_PER_ROUND):
        await call(app, *requests[index % len(requests)])
    return (time.perf_counter() - start) / REQUESTS_PER_ROUND * 1e6


def endpoint_requests(name: str) -> list[tuple[dict, bytes]]:
    method, path, make, count, _ = ENDPOINTS[name]
    return [asgi_request(method, path, body) for body in (endpoint_bodies(name, make, count) or [None])]


async def measure(names: list[str]) -> None:
    os.environ["ROOFLINE_DATABASE_URL"] = f"sqlite:///{tempfile.mkdtemp()}/bench.db"
    os.environ["ROOFLINE_LOG_LEVEL"] = "WARNING"
    from service.main import create_app

    service = create_app()
    cases = {"ceiling": (ceiling, [asgi_request("GET", "/", None)])}
    cases |= {name: (service, endpoint_requests(name)) for name in names}
    async with service.router.lifespan_context(service):
        for name, (app, requests) in cases.items():
            for scope, raw in requests:
                status = await call(app, scope, raw)
                if status != 200:
                    raise SystemExit(f"{name}: status {status}")
        times = {name: [] for name in cases}
        for _ in range(ROUNDS):
            for name, (app, requests) in cases.items():
                times[name].append(await per_request_us(app, requests))
    print(f"{'endpoint':36s} {'us/request':>10s} {'x ceiling':>9s}")
    for name, samples in times.items():
        ratio = statistics.median(s / c for s, c in zip(samples, times["ceiling"]))
        print(f"{name:36s} {statistics.median(samples):10.1f} {ratio:9.2f}")
    print(f"({ROUNDS} interleaved rounds of {REQUESTS_PER_ROUND} requests; medians)")


def main() -> None:
    names = sys.argv[1:] or [name for name in ENDPOINTS if name not in SKIPPED]
    asyncio.run(measure(names))


if __name__ == "__main__":
    main()
