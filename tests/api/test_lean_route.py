"""The analyses' lean route answers as FastAPI's generic path would: the same endpoints mounted a second
time with FastAPI's own APIRoute must give the same status, error code and field locations (and the same
body on success) for well-formed and malformed requests alike."""

import pytest
from fastapi import APIRouter
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from service.api.lean_route import LeanAnalysisRoute
from service.api.routes import analyze
from service.main import create_app

MATMUL = '{"device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": 64, "n": 64, "k": 64}}'
JSON = {"Content-Type": "application/json"}

CASES = [
    ("operator", MATMUL, JSON),
    ("operator", MATMUL, {"Content-Type": "application/vnd.roofline+json"}),
    ("operator", MATMUL, {"Content-Type": "text/plain"}),
    ("operator", MATMUL, {}),
    ("operator", "", JSON),
    ("operator", '{"device_id": "nvidia-h100-sxm", "operator": ', JSON),
    ("operator", "[]", JSON),
    ("operator", "[" * 50_000 + "]" * 50_000, JSON),
    ("operator", '{"a":' * 20_000 + "1" + "}" * 20_000, JSON),
    ("operator", b"\xff\xfe garbage", JSON),
    ("operator", '{"device_id": "nvidia-h100-sxm", "device_id": "nvidia-a100-80gb-sxm", "operator": '
                 '{"kind": "matmul", "m": 64, "n": 64, "k": 64}}', JSON),
    ("operator", '{"device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": -1, "n": 1, "k": "x"}}', JSON),
    ("operator", '{"device_id": "nvidia-h100-sxm", "operator": {"kind": "warp", "m": 1}}', JSON),
    ("operator", '{"device_id": "no-such-card", "operator": {"kind": "matmul", "m": 1, "n": 1, "k": 1}}', JSON),
    ("operator", '{"device_id": "nvidia-h100-sxm", "operator": {"kind": "rmsnorm", "shape": [4, 8], "eps": NaN}}', JSON),
    ("model", '{"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "phase": "decode", "seq_len": 128}', JSON),
    ("model", '{"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "phase": "sideways"}', JSON),
    ("sweep", '{"endpoint": "operator", "parameter": "m", "values": [1, 2], "request": {"device_id": '
              '"nvidia-h100-sxm", "operator": {"kind": "matmul", "m": 1, "n": 64, "k": 64}}}', JSON),
    ("sweep", '{"endpoint": "operator", "parameter": "m", "values": []}', JSON),
]


@pytest.fixture
def client(settings):
    app = create_app(settings)
    generic = APIRouter(prefix="/generic")
    for route in analyze.router.routes:
        generic.add_api_route(route.path, route.endpoint, methods=list(route.methods), route_class_override=APIRoute)
    app.include_router(generic)
    with TestClient(app) as test_client:
        yield test_client


def outcome(response) -> tuple:
    body = response.json()
    if response.status_code == 400:
        return 400, body["error"]
    if response.status_code == 200:
        return 200, body
    return response.status_code, body["error"], sorted(field["loc"] for field in body["fields"])


def test_the_analysis_routes_are_lean():
    assert all(isinstance(route, LeanAnalysisRoute) for route in analyze.router.routes)


@pytest.mark.parametrize("endpoint, raw, headers", CASES)
def test_lean_and_generic_paths_agree(client, endpoint, raw, headers):
    lean = client.post(f"/v1/analyze/{endpoint}", content=raw, headers=headers)
    generic = client.post(f"/generic/v1/analyze/{endpoint}", content=raw, headers=headers)
    assert outcome(lean) == outcome(generic)
