"""Hostile input gets a 4xx and the service stays responsive; reads never need a token."""

import pytest

from service.persistence.catalog import model_catalog
from service.translation.models import analyses as model_analyses
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


SWEEP_OPERATOR = {"device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": 1, "n": 4096, "k": 4096}}


@pytest.mark.parametrize("bad_range, loc", [
    ({"start": -1.7e308, "stop": 1.7e308, "num": 8}, "body.range.start"),
    ({"start": 1, "stop": 2**53, "step": 1e-300}, "body.range"),
    ({"start": 1, "stop": 2**40, "step": 1}, "body.range"),
    ({"start": 0, "stop": 1024, "num": 8, "scale": "log"}, "body.range"),
])
def test_sweep_ranges_that_would_overflow_or_explode_are_422s(client, bad_range, loc):
    response = client.post("/v1/analyze/sweep", json={"endpoint": "operator", "request": SWEEP_OPERATOR,
                                                      "parameter": "operator.m", "range": bad_range})
    assert response.status_code == 422, response.text
    assert any(field["loc"] == loc for field in response.json()["fields"])


def test_a_sweep_over_an_inline_config_parses_it_once(client, monkeypatch):
    """4,096 points over batch_size of a 65,536-layer inline config (one parse ~50 ms; 4,096 of them took
    97 s): the config is parsed once, not once per point."""
    parses = []
    original = model_analyses.architecture_of
    monkeypatch.setattr(model_analyses, "architecture_of", lambda *a, **k: parses.append(1) or original(*a, **k))
    config = {**next(e for e in model_catalog() if e["id"] == "gemma-2-9b")["config"], "num_hidden_layers": 65536}
    # sliding windows make the batch sweep step point by point (no closed form), the path that parsed each time
    body = {"endpoint": "model", "parameter": "batch_size", "range": {"start": 1, "stop": 4096, "step": 1},
            "request": {"device_id": "nvidia-h100-sxm", "model": config, "phase": "prefill", "seq_len": 16}}
    response = client.post("/v1/analyze/sweep", json=body)
    assert response.status_code == 200, response.text[:300]
    assert len(response.json()["rows"]) == 4096
    assert len(parses) <= 2
    # Sweeping the config itself parses at every point: bounded by points x layers.
    body = {**body, "parameter": "model.num_hidden_layers", "range": {"start": 65536, "stop": 65536 + 99, "step": 1}}
    refused = client.post("/v1/analyze/sweep", json=body)
    assert refused.status_code == 422 and refused.json()["fields"][0]["loc"] == "body.values"


def test_repeated_chart_levels_are_bounded_and_drawn_once(client):
    many = "&".join(["levels=hbm"] * 1000)
    assert client.get(f"/v1/devices/nvidia-h100-sxm/roofline.svg?{many}").status_code == 422
    svg = client.get("/v1/devices/nvidia-h100-sxm/roofline.svg?levels=hbm&levels=hbm&levels=hbm").text
    assert svg.count('id="roof-memory-hbm-nominal"') == 1
    body = {"device_id": "nvidia-h100-sxm", "levels": ["hbm"] * 3000}
    assert client.post("/v1/plot/roofline", json=body).status_code == 422
    body["levels"] = ["hbm", "hbm", "smem"]
    assert client.post("/v1/plot/roofline", json=body).status_code == 200


def test_fusion_groups_are_bounded(client):
    graph = {"device_id": "nvidia-h100-sxm", "tensors": {"x": {"shape": [8]}, "y": {"shape": [8]}},
             "ops": [{"name": "a", "kind": "elementwise", "op": "relu", "inputs": ["x"], "outputs": ["y"]}]}
    # 262,000 repeated names in ~1 MiB took 42-50 s on the event loop.
    refused = client.post("/v1/analyze/fusion", json={**graph, "groups": [["a"] * 65]})
    assert refused.status_code == 422 and refused.json()["fields"][0]["loc"].startswith("body.groups.0")
    repeated = client.post("/v1/analyze/fusion", json={**graph, "groups": [["a"] * 64]})
    assert repeated.status_code == 422
    assert repeated.json()["fields"] == [{"loc": "body.groups", "msg": "operator(s) a appear more than once in the groups"}]


def test_a_published_config_with_long_quantisation_lists_is_read(client):
    # NVIDIA's Qwen3.5-397B NVFP4 config with its ignore list grown past 2 MB (as MiniMax-M3 NVFP4's 3 MB one is): a
    # request carrying a model's config may reach ROOFLINE_MAX_MODEL_BODY_BYTES (8 MiB), others stay at 1 MiB.
    import json
    from pathlib import Path

    config = json.loads((Path(__file__).resolve().parents[1] / "data" / "aiconfigurator_model_configs"
                         / "nvidia--Qwen3.5-397B-A17B-NVFP4.json").read_text())
    q = config["quantization_config"]
    names = q["ignore"] + [f"model.language_model.layers.{i // 512}.mlp.experts.{i % 512}.down_proj.input_quantizer"
                           for i in range(30_000)]
    body = {"device_id": "nvidia-b200", "phase": "decode", "seq_len": 1024, "tensor_parallel": 8,
            "model": {**config, "quantization_config": {**q, "ignore": names}}}
    assert len(json.dumps(body)) > 2 * 1_048_576
    answer = client.post("/v1/analyze/model", json=body)
    assert answer.status_code == 200, answer.text[:300]
    assert "left in 16 bits by its lists: attention, shared_experts" in json.dumps(answer.json()["assumptions"])
    too_large = {**body, "model": {**body["model"], "padding": "x" * (8 * 1_048_576)}}
    refused = client.post("/v1/analyze/model", json=too_large)
    assert refused.status_code == 413 and "8388608" in refused.json()["detail"]
    operator = client.post("/v1/analyze/operator", json={"device_id": "nvidia-b200", "padding": "x" * 2_000_000,
                                                        "operator": {"kind": "matmul", "m": 8, "n": 8, "k": 8}})
    assert operator.status_code == 413 and "1048576" in operator.json()["detail"]


def test_the_proxy_lets_the_same_requests_carry_large_configs():
    # docker-compose.scale-out.yml's nginx must raise its limit on exactly the paths the service does.
    from pathlib import Path

    from service.runtime.limits import MODEL_BODIES

    compose = (Path(__file__).resolve().parents[2] / "docker-compose.scale-out.yml").read_text()
    locations = [line.split("location ~ ", 1)[1].rsplit(" {", 1)[0].replace("$$", "$")
                 for line in compose.splitlines() if "location ~ " in line]
    assert MODEL_BODIES.pattern in locations
