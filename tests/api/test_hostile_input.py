"""Hostile input gets a 4xx and the service stays responsive; reads never need a token."""

import pytest

from tests.conftest import AUTH


def test_oversized_bodies_are_413(client):
    huge = b'{"device_id": "' + b"x" * 2_000_000 + b'"}'
    response = client.post("/v1/analyze/operator", content=huge, headers={"Content-Type": "application/json"})
    assert response.status_code == 413 and response.json()["error"] == "payload_too_large"

    def chunks():  # no Content-Length: the limit is enforced while reading
        for _ in range(40):
            yield b"x" * 65536

    streamed = client.post("/v1/devices", content=chunks(), headers={**AUTH, "Content-Type": "application/json"})
    assert streamed.status_code == 413
    assert client.get("/healthz").status_code == 200


@pytest.mark.parametrize("raw", [
    "[" * 50_000 + "]" * 50_000,
    '{"a":' * 20_000 + "1" + "}" * 20_000,
    '{"device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": 1e400, "n": 1, "k": 1}}',
    '{"device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": -Infinity, "n": 1, "k": 1}}',
    "\xff\xfe garbage",
])
def test_malformed_nested_and_non_finite_json_is_4xx(client, raw):
    response = client.post("/v1/analyze/operator", content=raw.encode("utf-8", "surrogateescape"),
                           headers={"Content-Type": "application/json"})
    assert 400 <= response.status_code < 500
    assert set(response.json()) == {"error", "detail", "fields"}
    assert client.get("/healthz").status_code == 200


@pytest.mark.parametrize("body", [
    {"device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": 2**62, "n": 2**62, "k": 2**62}},
    {"device_id": "nvidia-h100-sxm", "operator": {"kind": "attention", "heads": 2**40, "head_dim": 2**40, "q_len": 2**40}},
    {"device_id": "nvidia-h100-sxm", "operator": {"kind": "elementwise", "op": "add", "shape": [2**40] * 8}},
    {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "phase": "prefill", "seq_len": 2**24,
     "batch_size": 2**24},
])
def test_absurd_dimensions_are_refused(client, body):
    path = "/v1/analyze/model" if "model_id" in body else "/v1/analyze/operator"
    assert client.post(path, json=body).status_code == 422


def test_sweep_point_limit(client):
    request = {"device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": 1, "n": 8, "k": 8}}
    response = client.post("/v1/analyze/sweep", json={"endpoint": "operator", "request": request,
                                                      "parameter": "operator.m", "range": {"start": 1, "stop": 1e9, "step": 1}})
    assert response.status_code == 422


def test_reads_never_need_a_token(client):
    spec = client.get("/openapi.json").json()
    for path, item in spec["paths"].items():
        if "get" in item and "{" not in path:
            assert client.get(path).status_code == 200, path
    assert client.get("/v1/devices/nvidia-h100-sxm").status_code == 200
    assert client.get("/v1/devices/nvidia-h100-sxm/benchmarks").status_code == 200
    assert client.post("/v1/analyze/operator", json={
        "device_id": "nvidia-h100-sxm", "operator": {"kind": "softmax", "shape": [8]}}).status_code == 200


def test_values_the_database_cannot_hold_are_422_and_write_nothing(client):
    # PostgreSQL refuses NUL characters in text; SQLite stores them. Either way: no 5xx, no partial write.
    body = {"kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": 3e12, "tool": "nul\u0000tool"}
    response = client.post("/v1/devices/nvidia-h100-sxm/benchmarks", json=body, headers=AUTH)
    assert response.status_code in (201, 422)
    if response.status_code == 422:
        assert client.get("/v1/devices/nvidia-h100-sxm/benchmarks").json() == []
    assert client.delete("/v1/devices/nvidia-h100-sxm/benchmarks/2498999382295761", headers=AUTH).status_code == 422
    assert client.get("/v1/devices/nul%00id").status_code in (404, 422)
