"""/healthz answers within 100 ms while the costliest request of each kind is in flight on the same
(single) worker: nothing CPU-heavy runs on the event loop."""

import statistics
import threading
import time

import httpx

from service.persistence.catalog import model_catalog

GEMMA = next(e for e in model_catalog() if e["id"] == "gemma-2-9b")["config"]
DEEP_GEMMA = {**GEMMA, "num_hidden_layers": 65536}
DEVICES = ["nvidia-h100-sxm", "nvidia-a100-80gb-sxm", "amd-mi300x", "nvidia-l40s"]


def costliest_requests() -> list[tuple[str, dict]]:
    step = {"device_id": "nvidia-h100-sxm", "model": DEEP_GEMMA, "phase": "prefill", "seq_len": 4096, "batch_size": 8}
    ops = [{"name": f"op{i}", "kind": "elementwise", "op": "relu", "inputs": [f"t{i}"], "outputs": [f"t{i + 1}"]}
           for i in range(64)]
    return [
        ("/v1/analyze/model", step),
        ("/v1/analyze/kv-capacity", {"device_id": "nvidia-h100-sxm", "model": DEEP_GEMMA, "context_len": 8192}),
        ("/v1/analyze/sweep", {"endpoint": "model", "parameter": "batch_size",
                               "range": {"start": 1, "stop": 4096, "step": 1},
                               "request": {**step, "model": GEMMA, "seq_len": 16}}),
        ("/v1/analyze/compare", {"endpoint": "model", "device_ids": DEVICES * 16,
                                 "request": {"model": DEEP_GEMMA, "phase": "prefill", "seq_len": 4096}}),
        ("/v1/analyze/fusion", {"device_id": "nvidia-h100-sxm",
                                "tensors": {f"t{i}": {"shape": [4096, 4096]} for i in range(65)}, "ops": ops}),
        ("/v1/plot/roofline", {"device_id": "nvidia-h100-sxm", "format": "png", "points": [
            {"name": f"p{i}", "endpoint": "model", "request": {"model": GEMMA, "phase": "decode", "seq_len": 1024 + i}}
            for i in range(64)]}),
    ]


def test_healthz_stays_fast_while_the_costliest_requests_run(live_server):
    statuses: list[int] = []

    def send(path, body):
        with httpx.Client(base_url=live_server, timeout=120) as client:
            statuses.append(client.post(path, json=body).status_code)

    workers = [threading.Thread(target=send, args=request) for request in costliest_requests()]
    for worker in workers:
        worker.start()
    probes = []
    with httpx.Client(base_url=live_server, timeout=10) as client:
        time.sleep(0.2)  # the heavy requests are parsed and running
        while any(w.is_alive() for w in workers) and len(probes) < 40:
            started = time.perf_counter()
            assert client.get("/healthz").status_code == 200
            probes.append(time.perf_counter() - started)
            time.sleep(0.02)
    for worker in workers:
        worker.join(120)
    assert len(statuses) == len(workers) and all(status == 200 for status in statuses), statuses
    print(f"{len(probes)} probes, median {statistics.median(probes) * 1000:.1f} ms, max {max(probes) * 1000:.1f} ms")
    assert len(probes) >= 3, "the heavy requests finished before /healthz could be probed"
    # The median probe answers within 100 ms and nine in ten within 250 ms. A probe waits for the GIL that six busy
    # worker threads pass around (every 5 ms each): on this shared 2-core machine on a slow day nine in ten took up to
    # 101 ms (CI, 2026-12-07). Work on the event loop would hold it for a whole heavy request, seconds.
    assert statistics.median(probes) < 0.1, probes
    assert sorted(probes)[int(len(probes) * 0.9) - 1] < 0.25, probes
