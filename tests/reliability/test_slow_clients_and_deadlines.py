"""Slow uploads hold a connection, never an admission slot; every request has a deadline; work whose client has
gone stops. Each of these reproduced against the tree before: 100 one-byte uploads held every slot (every /v1
request 503 `overloaded`), a 94-CPU-second plan ran on after its client gave up."""

import asyncio

import pytest

from service.core import budget
from service.core.budget import BudgetSpent
from service.runtime.config import Settings
from service.runtime.limits import Admission, AdmissionMiddleware, BodySizeLimitMiddleware
from tests.conftest import TOKEN

pytestmark = pytest.mark.dialect_free


async def answered(app, path: str, messages, stall: bool = False) -> list[dict]:
    """Runs one request through `app`: its body messages, then (stall) nothing more ever arrives."""
    sent, queue = [], list(messages)

    async def receive():
        if queue:
            return queue.pop(0)
        await asyncio.sleep(3600 if stall else 0)
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path, "headers": []}
    await app(scope, receive, send)
    return sent


def test_slow_uploads_hold_no_admission_slot_and_time_out():
    async def ok(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    app = BodySizeLimitMiddleware(AdmissionMiddleware(ok, Admission(max_in_flight=1)), max_bytes=1000, body_timeout_s=0.3)

    async def scenario():
        one_byte = [{"type": "http.request", "body": b"{", "more_body": True}]
        slow = [asyncio.create_task(answered(app, "/v1/analyze/model", one_byte, stall=True)) for _ in range(5)]
        await asyncio.sleep(0.05)
        # Five uploads stalled mid-body; the one slot is free for a request whose body has arrived.
        quick = await answered(app, "/v1/analyze/model", [{"type": "http.request", "body": b"{}", "more_body": False}])
        return quick, [await task for task in slow]

    quick, slow = asyncio.run(scenario())
    assert quick[0]["status"] == 200
    assert all(sent[0]["status"] == 408 and b"request_timeout" in sent[1]["body"] for sent in slow)


def test_work_stops_when_its_client_goes():
    steps = []

    async def long_work(scope, receive, send):
        for _ in range(200):  # 2 s of work, checked each 10 ms
            steps.append(1)
            await asyncio.sleep(0.01)
            budget.check()

    app = BodySizeLimitMiddleware(long_work, max_bytes=1000, deadline_s=60)
    messages = [{"type": "http.request", "body": b"{}", "more_body": False}]

    async def scenario():
        # The client is gone right after its body: the next read of the connection says so.
        with pytest.raises(BudgetSpent, match="client went away"):
            await answered(app, "/v1/plan/serving", messages)

    asyncio.run(scenario())
    assert len(steps) < 10


def test_a_request_past_its_deadline_is_stopped_with_a_503(database_url):
    from fastapi.testclient import TestClient

    from service.main import create_app

    settings = Settings(database_url=database_url, api_tokens=f"t={TOKEN}", request_deadline_s=1e-6)
    plan = {"model_id": "llama-3.1-8b", "device_ids": ["nvidia-h100-sxm"], "total_devices": 8, "input_len": 1000,
            "output_len": 100}
    with TestClient(create_app(settings)) as client:
        stopped = client.post("/v1/plan/serving", json=plan)
        assert stopped.status_code == 503 and stopped.json()["error"] == "deadline_exceeded"
        assert "ROOFLINE_REQUEST_DEADLINE_S" in stopped.json()["detail"]
        batch = client.post("/v1/analyze/batch", json={"items": [
            {"id": "a", "analysis": "plan-serving", "request": plan}]})
        assert batch.status_code == 200 and batch.json()["results"][0]["status"] == 503
        # The hot analyses, sub-millisecond, do not check: a deadline is for work that can run long.
        assert client.get("/healthz").status_code == 200
