"""What a request may compute is measured, not estimated: its CPU between the loops' checks stops it at
ROOFLINE_REQUEST_CPU_S (a batch's units had charged a training search 3 units for 4.6 CPU-s), and each anonymous
client's compute is charged to a budget that refills at ROOFLINE_ANONYMOUS_CPU_S_PER_S (429 with Retry-After past
it); a writer and the probes are not charged."""

import time

import pytest
from fastapi.testclient import TestClient

from service.main import create_app
from tests.conftest import AUTH

# The worker's limits, not the database's: run once, on SQLite.
pytestmark = pytest.mark.dialect_free

# A layout search over 4,096 H100s for DeepSeek-V3: 2,048 layouts, about 4 s of CPU here.
SEARCH = {"device_id": "nvidia-h100-sxm", "model_id": "deepseek-v3", "num_devices": 4096, "total_tokens": 1e13,
          "seq_len": 4096, "global_batch_tokens": 4096 * 2048, "zero_stage": 1, "search": True, "top_n": 3}
SWEEP = {"endpoint": "operator", "parameter": "operator.m", "range": {"start": 1, "stop": 4096, "step": 1},
         "request": {"device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": 1, "n": 4096, "k": 4096,
                                                                  "dtype": "bf16"}}}


def app_client(settings, **changes):
    return TestClient(create_app(settings.model_copy(update=changes)))


def test_a_request_stops_at_its_cpu_budget(settings):
    with app_client(settings, request_cpu_s=0.3) as client:
        started = time.process_time()
        stopped = client.post("/v1/plan/training", json=SEARCH, headers=AUTH)
        assert stopped.status_code == 503 and stopped.json()["error"] == "deadline_exceeded"
        assert "0.3 s of CPU" in stopped.json()["detail"]
        # A batch of four such searches is within its 20,000 units, and stops at the same budget, item by item.
        batch = client.post("/v1/analyze/batch", headers=AUTH, json={"items": [
            {"id": str(i), "analysis": "plan-training", "request": SEARCH} for i in range(4)]})
        assert [item["status"] for item in batch.json()["results"]] == [503] * 4
        # Two searches would be 8 s; the budget held both under a few seconds (a loaded machine's slack).
        assert time.process_time() - started < 3


def test_an_anonymous_client_pays_for_its_compute_and_a_writer_does_not(settings):
    with app_client(settings, anonymous_cpu_s_per_s=0.5, anonymous_burst_s=0.5) as client:
        statuses = []
        for stop in range(4096, 4000, -4):  # distinct sweeps, a quarter of a second of CPU or so each
            answer = client.post("/v1/analyze/sweep", json={**SWEEP, "range": {**SWEEP["range"], "stop": stop}})
            statuses.append(answer.status_code)
            if answer.status_code == 429:
                break
        assert statuses[0] == 200 and statuses[-1] == 429, statuses
        assert answer.json()["error"] == "too_many_requests" and int(answer.headers["retry-after"]) >= 1
        assert client.get("/healthz").status_code == 200 and client.get("/readyz").status_code == 200
        assert client.post("/v1/analyze/sweep", json=SWEEP, headers=AUTH).status_code == 200  # a writer's
        # The debt refills at 0.5 s a second: after Retry-After, the same client is served again.
        time.sleep(int(answer.headers["retry-after"]))
        assert client.get("/v1/devices").status_code == 200


def test_the_anonymous_budget_can_be_turned_off(settings):
    with app_client(settings, anonymous_cpu_s_per_s=0, anonymous_burst_s=0.01) as client:
        assert all(client.post("/v1/analyze/sweep", json=SWEEP).status_code == 200 for _ in range(3))
