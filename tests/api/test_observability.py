"""Metrics, request ids and logs that never carry a token or a body."""

import json
import logging

from tests.conftest import AUTH, TOKEN

GEMV = {"device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": 1, "n": 4096, "k": 4096}}


def test_request_id_is_echoed_or_made(client):
    given = client.get("/healthz", headers={"X-Request-ID": "abc-123"})
    assert given.headers["x-request-id"] == "abc-123"
    made = client.get("/healthz").headers["x-request-id"]
    assert len(made) == 32
    hostile = client.get("/healthz", headers={"X-Request-ID": "bad id\nwith newline"}).headers["x-request-id"]
    assert hostile != "bad id\nwith newline" and len(hostile) == 32


def metric(text: str, name: str, **labels) -> float:
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(f"{name}{{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name}{{{wanted}}} not found")


def test_metrics_count_requests_per_route_and_analyses_per_kind(client):
    before = client.get("/metrics").text
    start = 0.0
    try:
        start = metric(before, "roofline_analyses_total", kind="operator:matmul")
    except AssertionError:
        pass
    for _ in range(3):
        assert client.post("/v1/analyze/operator", json=GEMV).status_code == 200
    client.get("/v1/devices/does-not-exist")
    text = client.get("/metrics").text
    assert metric(text, "roofline_analyses_total", kind="operator:matmul") == start + 3
    assert metric(text, "roofline_http_requests_total", route="/v1/devices/{device_id}", status="404") >= 1
    assert metric(text, "roofline_http_request_duration_seconds_count", route="/v1/analyze/operator") >= 3


def test_logs_are_json_with_the_request_id_and_no_token_or_body(client, caplog):
    caplog.set_level(logging.INFO, logger="roofline")
    logging.getLogger("roofline").addHandler(caplog.handler)
    try:
        client.post("/v1/devices/nvidia-h100-sxm/benchmarks", headers={**AUTH, "X-Request-ID": "req-42"}, json={
            "kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": 3e12, "tool": "secret-tool-name"})
        client.post("/v1/devices", headers={"Authorization": "Bearer wrong-secret"}, json={"id": "x"})
    finally:
        logging.getLogger("roofline").removeHandler(caplog.handler)
    access = [r for r in caplog.records if r.name == "roofline.access"]
    assert any(r.request_id == "req-42" and r.status == 201 and r.route == "/v1/devices/{device_id}/benchmarks"
               for r in access)
    from service.runtime.observability import JsonFormatter

    lines = [JsonFormatter().format(r) for r in caplog.records]
    assert all(json.loads(line)["request_id"] for line in lines)
    everything = "\n".join(lines)
    assert TOKEN not in everything and "wrong-secret" not in everything and "secret-tool-name" not in everything


def test_a_sampled_access_log_keeps_every_error_and_one_success_in_n(settings, caplog):
    from fastapi.testclient import TestClient

    from service.main import create_app

    caplog.set_level(logging.INFO, logger="roofline")
    with TestClient(create_app(settings.model_copy(update={"access_log_sample": 0.25}))) as sampled:
        try:
            before = metric(sampled.get("/metrics").text, "roofline_http_requests_total", route="/v1/analyze/operator",
                            status="200")
        except AssertionError:
            before = 0.0  # no such request yet in this process (the registry is the process's)
        logging.getLogger("roofline").addHandler(caplog.handler)
        try:
            for _ in range(8):
                assert sampled.post("/v1/analyze/operator", json=GEMV).status_code == 200
            for _ in range(3):
                assert sampled.get("/v1/devices/does-not-exist").status_code == 404
        finally:
            logging.getLogger("roofline").removeHandler(caplog.handler)
        metrics = sampled.get("/metrics").text
    access = [r for r in caplog.records if r.name == "roofline.access"]
    # 0.25: every 4th success (2 of 8), and each of the 3 errors; the metrics still count all 8.
    assert [r.status for r in access].count(200) == 2 and [r.status for r in access].count(404) == 3
    assert metric(metrics, "roofline_http_requests_total", route="/v1/analyze/operator", status="200") == before + 8


def test_metrics_show_the_process_and_what_is_in_flight(client):
    text = client.get("/metrics").text
    # This worker's own figures, as Prometheus' process collector names them.
    for name in ("process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds",
                 "roofline_http_requests_in_flight", "roofline_overloaded_total"):
        assert any(line.startswith(name) for line in text.splitlines()), name
    # The scrape itself is the one request in flight while it is answered.
    assert float(next(line for line in text.splitlines()
                      if line.startswith("roofline_http_requests_in_flight ")).split()[1]) == 1


def test_routes_are_labelled_as_served(client):
    client.get("/openapi.json")
    client.get("/no/such/path")
    text = client.get("/metrics").text
    assert metric(text, "roofline_http_requests_total", route="/openapi.json", status="200") >= 1
    assert metric(text, "roofline_http_requests_total", route="unmatched", status="404") >= 1
    assert 'route="unmatched",status="200"' not in text
