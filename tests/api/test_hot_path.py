"""The hot path (service/api/hot_path.py) answers plainly valid analysis requests itself and hands everything
else to the routes: either way a client gets the same status, headers that matter and bytes as from the
routes alone (the service with ROOFLINE_HOT_PATH=false)."""

import dataclasses
import json

import pytest
from fastapi.testclient import TestClient

from service.api import hot_path
from service.api.examples import KV_EXAMPLES, MODEL_EXAMPLES, OPERATOR_EXAMPLES
from service.main import create_app

BAD_MATMUL = {"device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": 0, "n": 1, "k": 1}}
CASES = (
    [("/v1/analyze/operator", example["value"]) for example in OPERATOR_EXAMPLES.values()]
    + [("/v1/analyze/model", example["value"]) for example in MODEL_EXAMPLES.values()]  # one is an inline config
    + [("/v1/analyze/kv-capacity", example["value"]) for example in KV_EXAMPLES.values()]
    + [("/v1/analyze/operator", BAD_MATMUL),  # 422 located at body.operator.m
       ("/v1/analyze/operator", {**BAD_MATMUL, "device_id": "no-such-device"}),
       ("/v1/analyze/model", {"device_id": "nvidia-h100-sxm", "model_id": "no-such-model", "phase": "decode",
                              "batch_size": 1, "seq_len": 16}),
       ("/v1/analyze/model", {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "phase": "decode",
                              "batch_size": 1, "seq_len": 10_000_000}),  # past the model's positions
       ("/v1/analyze/operator", OPERATOR_EXAMPLES["matmul"]["value"] | {"unexpected": 1})]
)


@pytest.fixture
def both(settings):
    with TestClient(create_app(settings)) as hot, \
            TestClient(create_app(settings.model_copy(update={"hot_path": False}))) as routes_only:
        yield hot, routes_only


@pytest.fixture
def hot_answers(monkeypatch):
    """Counts the requests the hot path itself answered."""
    answered = []
    for path, hot in hot_path.HOT.items():
        def spy(request, catalog, answer=hot.analysis.answer_json, path=path):
            payload = answer(request, catalog)
            answered.append(path)
            return payload
        # The hot path's own copy of the registry entry writes through the spy; the routes' entry is untouched.
        spied = dataclasses.replace(hot.analysis, write_json=spy)
        monkeypatch.setitem(hot_path.HOT, path, dataclasses.replace(hot, analysis=spied))
    return answered


@pytest.mark.parametrize("path,body", CASES)
def test_the_hot_path_answers_as_the_routes_do(both, hot_answers, path, body):
    hot, routes_only = both
    expected = routes_only.post(path, json=body)
    got = hot.post(path, json=body)
    assert (got.status_code, got.headers["content-type"], got.content) == (
        expected.status_code, expected.headers["content-type"], expected.content)
    assert got.headers["x-request-id"]
    inline_config = "model" in body
    assert hot_answers == ([path] if expected.status_code == 200 and not inline_config else [])


def test_bodies_the_hot_path_leaves_to_the_routes(both, hot_answers):
    hot, routes_only = both
    raw = json.dumps(OPERATOR_EXAMPLES["matmul"]["value"])
    for headers, content in (({"content-type": "text/plain"}, raw), ({"content-type": "application/json"}, raw[:-1]),
                             ({"content-type": "application/json"}, "")):
        expected = routes_only.post("/v1/analyze/operator", content=content, headers=headers)
        got = hot.post("/v1/analyze/operator", content=content, headers=headers)
        assert (got.status_code, got.content) == (expected.status_code, expected.content)
        assert 400 <= got.status_code < 500  # a refusal, in the routes' words
    assert hot_answers == []


def _sample(metrics: str, series: str) -> float:
    """The value of one series in a Prometheus text page (0 when absent)."""
    line = next((line for line in metrics.splitlines() if line.startswith(series + " ")), None)
    return float(line.split()[-1]) if line else 0.0


def test_hot_answers_are_counted_and_labelled_by_their_route(both):
    hot, _ = both
    request_series = 'roofline_http_requests_total{method="POST",route="/v1/analyze/operator",status="200"}'
    analysis_series = 'roofline_analyses_total{kind="operator:matmul"}'
    before = hot.get("/metrics").text  # the registry is the process's: compare, not count from zero
    assert hot.post("/v1/analyze/operator", json=OPERATOR_EXAMPLES["matmul"]["value"]).status_code == 200
    after = hot.get("/metrics").text
    assert _sample(after, request_series) == _sample(before, request_series) + 1
    assert _sample(after, analysis_series) == _sample(before, analysis_series) + 1
