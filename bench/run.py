"""Throughput and latency of the service as it runs in production, against a ceiling measured in the
same run: `make bench` (or `python bench/run.py`). Every analysis endpoint is driven with a thousand
distinct bodies (shapes, batches, contexts, models, devices drawn from a fixed seed; the batch endpoint
with twenty bodies of a thousand distinct items each), so no cache of answers can stand in for the work.

Each configuration (1 and 2 uvicorn workers) serves the service on a fresh SQLite database and the
ceiling app (bench/ceiling.py) the same way; wrk drives the ceiling and then each endpoint from a separate
process at concurrency 32, in several rounds, and the table reports the medians over the rounds of
requests/s, p50 and p99 latency and the ratio to the ceiling's requests/s of the same round, and each
worker's resident memory at the end (and its peak). BENCH_SECONDS (default 5) sets the length of one run (a batch
endpoint's runs are four times as long), BENCH_ROUNDS (3) the number of rounds.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
SECONDS = int(os.environ.get("BENCH_SECONDS", "5"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
CONNECTIONS, THREADS = 32, 2
BATCH_CONNECTIONS = 2
# wrk counts the requests that completed within the run: a batch of model steps takes over a second, so in a
# 5 s run the two still in flight at the end are a quarter of the work, uncounted (and the figure moves in steps
# of a fifth). Four times as long keeps that under a tenth.
BATCH_SECONDS = 4 * SECONDS
TOKEN = "bench-token"

DISTINCT_BODIES = 1000
BATCH_BODIES, BATCH_ITEMS = 20, 1000
DEVICES = ["nvidia-h100-sxm", "nvidia-a100-80gb-sxm", "nvidia-h200-sxm", "amd-mi300x", "nvidia-l40s"]
MODELS = ["llama-3.1-8b", "llama-3.1-70b", "mistral-7b-v0.1", "qwen2.5-7b-instruct", "gemma-2-9b"]


def matmul_body(rng) -> dict:
    return {"device_id": rng.choice(DEVICES), "operator": {"kind": "matmul", "m": rng.randint(1, 8192),
                                                           "n": rng.randint(256, 8192), "k": rng.randint(256, 8192)}}


def attention_body(rng) -> dict:
    heads = rng.choice([8, 16, 32, 64])
    return {"device_id": rng.choice(DEVICES), "operator": {
        "kind": "attention", "heads": heads, "kv_heads": heads // rng.choice([1, 2, 4, 8]), "head_dim": 128,
        "q_len": rng.randint(1, 8192), "causal": True}}


def model_70b_body(rng) -> dict:
    return {"device_id": rng.choice(DEVICES), "model_id": "llama-3.1-70b", "phase": "decode",
            "batch_size": rng.randint(1, 64), "seq_len": rng.randint(512, 8192), "tensor_parallel": 4}


def model_body(rng) -> dict:
    return {"device_id": rng.choice(DEVICES), "model_id": rng.choice(MODELS), "phase": rng.choice(["prefill", "decode"]),
            "batch_size": rng.randint(1, 32), "seq_len": rng.randint(128, 8192)}


def kv_body(rng) -> dict:
    return {"device_id": rng.choice(DEVICES), "model_id": rng.choice(MODELS), "context_len": rng.randint(128, 8192),
            "memory_utilization": rng.choice([0.8, 0.9, 0.95])}


def sweep_body(rng) -> dict:
    return {"endpoint": "model", "parameter": "seq_len", "range": {"start": 16, "stop": 4096, "step": 16},
            "request": {"device_id": rng.choice(DEVICES), "model_id": rng.choice(MODELS), "phase": "decode",
                        "batch_size": rng.randint(1, 64)}}


def plan_body(rng) -> dict:
    return {"model_id": "llama-3.1-8b", "device_ids": ["nvidia-h100-sxm"], "total_devices": 8,
            "input_len": rng.randint(500, 8000), "output_len": rng.randint(64, 1024),
            "slo": {"ttft_s": 1.0, "tpot_s": 0.02}}


def batch_body(rng, analysis: str, make) -> dict:
    return {"items": [{"id": str(i), "analysis": analysis, "request": make(rng)} for i in range(BATCH_ITEMS)]}


# name: (method, path, body maker, bodies, analyses per request). Bodies come from a fixed seed, a thousand
# distinct ones per endpoint, so that no cache of answers can stand in for the analyses.
ENDPOINTS = {
    "healthz": ("GET", "/healthz", None, 1, 1),
    "operator: matmul": ("POST", "/v1/analyze/operator", matmul_body, DISTINCT_BODIES, 1),
    "operator: attention": ("POST", "/v1/analyze/operator", attention_body, DISTINCT_BODIES, 1),
    "model: llama-3.1-70b decode tp4": ("POST", "/v1/analyze/model", model_70b_body, DISTINCT_BODIES, 1),
    "kv-capacity": ("POST", "/v1/analyze/kv-capacity", kv_body, DISTINCT_BODIES, 1),
    "sweep: 256 points": ("POST", "/v1/analyze/sweep", sweep_body, DISTINCT_BODIES, 1),
    "plan: 8 x H100, TP 1-8, c <= 512": ("POST", "/v1/plan/serving", plan_body, 200, 1),
    "batch: 1,000 operators": ("POST", "/v1/analyze/batch",
                               lambda rng: batch_body(rng, "operator", matmul_body), BATCH_BODIES, BATCH_ITEMS),
    "batch: 1,000 model steps": ("POST", "/v1/analyze/batch",
                                 lambda rng: batch_body(rng, "model", model_body), BATCH_BODIES, BATCH_ITEMS),
}
# Targets per worker (one worker): requests/s ratios to the ceiling, and analyses/s of the batch endpoint.
TARGET_ANALYSES_PER_S = {"batch: 1,000 operators": 20_000, "batch: 1,000 model steps": 4_000}
UNTIMED = ("sweep", "ceiling", "plan", "batch")
# BENCH_ONLY="model,batch" drives only the endpoints whose names contain one of the words (and the ceiling), and
# BENCH_WORKERS="1" only that configuration: for a quick look at one change; the full run is the reference.
ONLY = [word for word in os.environ.get("BENCH_ONLY", "").split(",") if word]
WORKERS = [int(count) for count in os.environ.get("BENCH_WORKERS", "1,2").split(",")]
TARGET_RATIO = {"operator: matmul": 0.5, "operator: attention": 0.5, "model: llama-3.1-70b decode tp4": 1 / 3}


def ensure_wrk() -> str:
    found = shutil.which("wrk")
    if found:
        return found
    print("installing wrk (Debian package)...", file=sys.stderr)
    subprocess.run(["apt-get", "update", "-qq"], check=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", "wrk"], check=True, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    return shutil.which("wrk")


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serve(app: str, workers: int, env: dict) -> tuple[subprocess.Popen, str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
         "--no-access-log", "--log-level", "warning"],
        cwd=ROOT, env={**os.environ, **env}, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(base + ("/healthz" if "service" in app else "/"), timeout=1).status_code == 200:
                return process, base
        except httpx.TransportError:
            time.sleep(0.1)
    raise SystemExit(f"{app} did not start")


def worker_pids(process: subprocess.Popen) -> list[int]:
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == process.pid:
                children.append(int(entry.name))
    # One worker: uvicorn serves in the process itself; several: in children (one is a resource tracker).
    return [pid for pid in children if "uvicorn" in Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
            or "multiprocessing" in Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")] or [process.pid]


def rss_mb(pid: int) -> tuple[float, float]:
    """(resident now, peak resident) of a process, MB."""
    fields = {line.split(":")[0]: int(line.split()[1]) / 1024
              for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith(("VmRSS:", "VmHWM:"))}
    return fields.get("VmRSS", float("nan")), fields.get("VmHWM", float("nan"))


def stop(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=30)


def lua_script(directory: Path, name: str, method: str, bodies: list[dict] | None) -> Path:
    """A wrk script sending `bodies` in turn (each connection's requests walk the list)."""
    script = directory / f"{re.sub(r'[^a-z0-9]+', '-', name.lower())}.lua"
    lines = [f'wrk.method = "{method}"']
    if bodies:
        lines.append("local bodies = {")
        lines += [f"  [==[{json.dumps(body)}]==]," for body in bodies]
        lines += ["}", "local i = 0", "request = function()", "  i = i % #bodies + 1",
                  f'  return wrk.format("{method}", nil, {{["Content-Type"] = "application/json"}}, bodies[i])', "end"]
    script.write_text("\n".join(lines) + "\n")
    return script


def endpoint_bodies(name: str, make, count: int) -> list[dict] | None:
    if make is None:
        return None
    rng = random.Random(f"{name}-7")  # a fixed seed per endpoint: the same bodies in every run
    return [make(rng) for _ in range(count)]


def to_ms(text: str) -> float:
    value, unit = re.match(r"([\d.]+)(us|ms|s)", text).groups()
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


def drive(wrk: str, url: str, script: Path, connections: int = CONNECTIONS, seconds: int = SECONDS) -> dict:
    out = subprocess.run([wrk, f"-t{THREADS}", f"-c{connections}", f"-d{seconds}s", "--timeout", "30s", "--latency",
                          "-s", str(script), url], capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p50 = to_ms(re.search(r"\s50%\s+(\S+)", out).group(1))
    p99 = to_ms(re.search(r"\s99%\s+(\S+)", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"rps": rps, "p50": p50, "p99": p99, "errors": int(errors.group(1)) if errors else 0}


def median_outcome(runs: list[dict], ceilings: list[dict]) -> dict:
    """Medians over the rounds; each round's ratio is against the ceiling driven just before it."""
    return {"rps": statistics.median(r["rps"] for r in runs), "p50": statistics.median(r["p50"] for r in runs),
            "p99": statistics.median(r["p99"] for r in runs), "errors": sum(r["errors"] for r in runs),
            "ratio": statistics.median(r["rps"] / c["rps"] for r, c in zip(runs, ceilings))}


def main() -> None:
    wrk = ensure_wrk()
    if ONLY:
        for name in [name for name in ENDPOINTS if not any(word in name for word in ONLY)]:
            del ENDPOINTS[name]
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        scripts = {name: lua_script(scratch, name, method, endpoint_bodies(name, make, count))
                   for name, (method, _, make, count, _) in ENDPOINTS.items()}
        get_script = lua_script(scratch, "ceiling", "GET", None)
        for workers in WORKERS:
            database = scratch / f"bench-{workers}.db"
            # The access log on, sampled as the README advises for a scheduler's hot path (errors always
            # logged, one success in a hundred); its cost per line is what `make bench-access-log` measures.
            # MALLOC_ARENA_MAX as `make serve` and the image set it.
            env = {"ROOFLINE_DATABASE_URL": f"sqlite:///{database}", "ROOFLINE_API_TOKENS": f"bench={TOKEN}",
                   "ROOFLINE_LOG_LEVEL": "INFO", "ROOFLINE_ACCESS_LOG_SAMPLE": "0.01", "MALLOC_ARENA_MAX": "2"}
            subprocess.run([sys.executable, "-m", "service.persistence.migrate"], cwd=ROOT, env={**os.environ, **env}, check=True,
                           stdout=subprocess.DEVNULL)
            # Both servers stay up (an idle one costs nothing); every round drives the ceiling and then each
            # endpoint, so a slow spell of this shared machine lowers a ratio's numerator and denominator alike.
            ceiling_process, ceiling_url = serve("bench.ceiling:app", workers, {})
            service, base = serve("service.main:app", workers, env)
            ceilings, runs = [], {name: [] for name in ENDPOINTS}
            for _ in range(ROUNDS):
                ceilings.append(drive(wrk, ceiling_url + "/", get_script))
                for name, (_, path, *_) in ENDPOINTS.items():
                    # A batch is a scheduler's bulk call, not one of 32 concurrent users: two in flight, so that
                    # the figure is analyses/s of the endpoint, not of a queue of abandoned requests.
                    if name.startswith("batch"):
                        runs[name].append(drive(wrk, base + path, scripts[name], BATCH_CONNECTIONS, BATCH_SECONDS))
                    else:
                        runs[name].append(drive(wrk, base + path, scripts[name]))
            rss = [rss_mb(pid) for pid in worker_pids(service)]
            stop(service)
            stop(ceiling_process)
            results.append({"workers": workers, "endpoint": "ceiling (bare FastAPI)",
                            **median_outcome(ceilings, ceilings)})
            for name, (*_, analyses) in ENDPOINTS.items():
                results.append({"workers": workers, "endpoint": name, "analyses": analyses,
                                **median_outcome(runs[name], ceilings)})
            results.append({"workers": workers, "endpoint": "resident per worker after the run (peak), MB", "rss": rss})
    report(results)


def report(results: list[dict]) -> None:
    print(f"\nwrk -t{THREADS} -c{CONNECTIONS} -d{SECONDS}s per run (batches: -c{BATCH_CONNECTIONS} "
          f"-d{BATCH_SECONDS}s), {ROUNDS} rounds, medians; ratio = requests/s over "
          "the ceiling's in the same round and configuration; this machine: " + f"{os.cpu_count()} CPUs\n")
    print("| workers | endpoint | requests/s | p50 ms | p99 ms | ratio to ceiling | non-2xx | target |")
    print("|---|---|---|---|---|---|---|---|")
    for row in results:
        if "rss" in row:
            # The target is the resident memory a worker keeps after a long run of distinct bodies (nothing
            # grows without bound); the peak is printed beside it, for sizing.
            worst = max(now for now, _ in row["rss"])
            print(f"| {row['workers']} | {row['endpoint']} | "
                  f"{', '.join(f'{now:.0f} ({peak:.0f})' for now, peak in row['rss'])} | | | | | "
                  f"{'met' if worst < 150 else 'MISSED'} (< 150) |")
            continue
        target = []
        name = row["endpoint"]
        if name in TARGET_ANALYSES_PER_S and row["workers"] == 1:
            per_s = row["rps"] * row["analyses"]
            target.append(f"{per_s:,.0f} analyses/s: " + ("met" if per_s >= TARGET_ANALYSES_PER_S[name] else "MISSED")
                          + f" >= {TARGET_ANALYSES_PER_S[name]:,}")
        if row["endpoint"] in TARGET_RATIO and row["workers"] == 1:
            target.append(("met" if row["ratio"] >= TARGET_RATIO[row["endpoint"]] else "MISSED")
                          + f" ratio >= {TARGET_RATIO[row['endpoint']]:.2f}")
        if not name.startswith(UNTIMED) and row["workers"] == 2:
            target.append(("met" if row["p99"] < 50 else "MISSED") + " p99 < 50 ms")
        print(f"| {row['workers']} | {row['endpoint']} | {row['rps']:,.0f} | {row['p50']:.2f} | {row['p99']:.2f} | "
              f"{row['ratio']:.2f} | {row['errors']} | {'; '.join(target)} |")


if __name__ == "__main__":
    main()
