"""Device catalog over HTTP: reads open, writes authenticated, the analysis cache refreshed on write."""

import copy
import hashlib

import pytest
from fastapi.testclient import TestClient

from service.main import create_app
from service.runtime.config import Settings
from tests.conftest import AUTH

NEW_DEVICE = {
    "id": "lab-h100-capped",
    "name": "H100 SXM capped at 500 W",
    "vendor": "NVIDIA",
    "memory_capacity_bytes": 80 * 2**30,
    "compute_peaks": [{"dtype": "bf16", "unit": "tensor", "flops_per_s": 800e12, "citation": "lab sheet 12"}],
    "memory_levels": [{"level": "hbm", "bandwidth_bytes_per_s": 3.0e12, "citation": "lab sheet 12"}],
    "tdp_w": 500,
    "citations": {"memory_capacity_bytes": "lab sheet 12", "tdp_w": "nvidia-smi -pl 500"},
}


def test_health_and_readiness(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json()["status"] == "ok"


def test_list_and_get(client):
    devices = client.get("/v1/devices").json()
    by_id = {d["id"]: d for d in devices}
    h100 = by_id["nvidia-h100-sxm"]
    assert h100["memory_capacity_bytes"] == 80 * 2**30  # "80 GB" of 16 GiB HBM3 stacks
    assert h100["hbm_bandwidth_bytes_per_s"] == 3.35e12
    # The dense fp8 figure, half of the 3,958 TFLOP/s the datasheet quotes with sparsity.
    assert h100["peak_tensor_flops_per_s"] == 1978.9e12
    full = client.get("/v1/devices/nvidia-h100-sxm").json()
    assert full["origin"] == "catalog"
    assert full["memory_capacity_marketing"] == "80 GB"
    assert {(p["dtype"], p["unit"]) for p in full["compute_peaks"]} >= {("bf16", "tensor"), ("fp32", "vector")}


def test_get_unknown_is_404(client):
    response = client.get("/v1/devices/nope")
    assert response.status_code == 404
    assert response.json()["error"] == "device_not_found"


def test_create_analyze_replace_delete(client):
    response = client.post("/v1/devices", json=NEW_DEVICE, headers=AUTH)
    assert response.status_code == 201, response.text
    assert response.json()["origin"] == "user"
    assert client.post("/v1/devices", json=NEW_DEVICE, headers=AUTH).status_code == 409

    gemv = {"device_id": "lab-h100-capped", "operator": {"kind": "matmul", "m": 1, "n": 4096, "k": 4096}}
    first = client.post("/v1/analyze/operator", json=gemv).json()
    assert first["memory_roof"]["bytes_per_s"] == 3.0e12

    replacement = copy.deepcopy(NEW_DEVICE)
    del replacement["id"]
    replacement["memory_levels"][0]["bandwidth_bytes_per_s"] = 2.5e12
    response = client.put("/v1/devices/lab-h100-capped", json=replacement, headers=AUTH)
    assert response.status_code == 200
    second = client.post("/v1/analyze/operator", json=gemv).json()
    # Same bytes over 2.5e12 instead of 3.0e12 bytes/s: the time grows by 3.0 / 2.5.
    assert second["time_s"] == pytest.approx(first["time_s"] * 3.0 / 2.5)

    assert client.delete("/v1/devices/lab-h100-capped", headers=AUTH).status_code == 204
    assert client.get("/v1/devices/lab-h100-capped").status_code == 404
    assert client.post("/v1/analyze/operator", json=gemv).status_code == 404


@pytest.mark.parametrize("mutate, loc_fragment", [
    (lambda d: d.update(memory_levels=[{"level": "l2", "bandwidth_bytes_per_s": 1e12, "citation": "x"}]), "hbm"),
    (lambda d: d["compute_peaks"][0].update(flops_per_s=-1), "flops_per_s"),
    (lambda d: d["compute_peaks"][0].update(citation=""), "citation"),
    (lambda d: d.update(citations={}), "citations"),
    (lambda d: d.update(id="Has Spaces"), "id"),
    (lambda d: d["compute_peaks"].append(dict(d["compute_peaks"][0])), "duplicate"),
    # fp8_e4m3 computes at the fp8 peak: a peak declared in it was stored and never found (/roofs answered 500).
    (lambda d: d["compute_peaks"][0].update(dtype="fp8_e4m3"), "compute_peaks.0.dtype"),
])
def test_invalid_devices_are_422(client, mutate, loc_fragment):
    device = copy.deepcopy(NEW_DEVICE)
    mutate(device)
    response = client.post("/v1/devices", json=device, headers=AUTH)
    assert response.status_code == 422
    body = response.json()
    assert loc_fragment in body["detail"]
    assert client.get(f"/v1/devices/{NEW_DEVICE['id']}").status_code == 404  # nothing half-written


def test_put_unknown_is_404(client):
    body = {k: v for k, v in NEW_DEVICE.items() if k != "id"}
    assert client.put("/v1/devices/nope", json=body, headers=AUTH).status_code == 404


def write_operations(app):
    """Every non-GET operation of the OpenAPI document, with a concrete path."""
    for path, item in app.openapi()["paths"].items():
        for method in item:
            # POSTs under /v1/analyze, /v1/plan and /v1/plot compute answers and write nothing: they are reads.
            if method.upper() not in {"GET", "HEAD", "OPTIONS"} and not path.startswith(("/v1/analyze", "/v1/plan", "/v1/plot")):
                yield method.upper(), path.replace("{device_id}", "nvidia-t4").replace("{benchmark_id}", "1")


@pytest.mark.parametrize("headers", [
    {},
    {"Authorization": "Basic dGVzdDp0ZXN0"},
    {"Authorization": "Bearer"},
    {"Authorization": "Bearer wrong-token"},
    {"Authorization": "Bearer test-token-7f3a-but-longer"},
])
def test_every_write_refuses_bad_credentials(client, headers):
    operations = list(write_operations(client.app))
    assert {method for method, _ in operations} >= {"POST", "PUT", "DELETE"}
    for method, path in operations:
        response = client.request(method, path, json=NEW_DEVICE, headers=headers)
        assert response.status_code == 401, (method, path)
        assert response.json()["error"] == "unauthorized"
        assert "test-token" not in response.text
    assert client.get("/v1/devices/nvidia-t4").status_code == 200  # nothing was deleted


def test_with_no_token_configured_writes_say_how_to_enable_them(database_url):
    settings = Settings(database_url=database_url, api_tokens="")
    with TestClient(create_app(settings)) as client:
        response = client.delete("/v1/devices/nvidia-t4", headers={"Authorization": "Bearer anything"})
    assert response.status_code == 401
    assert "ROOFLINE_API_TOKENS" in response.json()["detail"]


def test_openapi_shows_an_example_per_operator_kind(client):
    spec = client.get("/openapi.json").json()
    body = spec["paths"]["/v1/analyze/operator"]["post"]["requestBody"]["content"]["application/json"]
    kinds = {example["value"]["operator"]["kind"] for example in body["examples"].values()}
    assert kinds == {"matmul", "grouped_matmul", "elementwise", "layernorm", "rmsnorm", "softmax", "embedding", "rope",
                     "attention", "sparse_index", "causal_conv1d", "recurrent_scan"}


def test_token_labels_never_expose_the_token():
    tokens = Settings(api_tokens="ops=alpha-secret, bare-secret ,").writer_tokens()
    assert tokens[hashlib.sha256(b"alpha-secret").digest()] == "ops"
    assert tokens[hashlib.sha256(b"bare-secret").digest()] == "token-2"
    assert all("secret" not in label for label in tokens.values())


def test_a_replaced_catalog_device_says_so_and_can_be_restored(client):
    original = client.get("/v1/devices/nvidia-h100-sxm").json()
    assert original["origin"] == "catalog"
    two_peaks = {"name": "H100 (two peaks)", "vendor": "NVIDIA", "memory_capacity_bytes": 85899345920,
                 "compute_peaks": [{"dtype": "bf16", "unit": "tensor", "flops_per_s": 1e15, "citation": "docs example"}],
                 "memory_levels": [{"level": "hbm", "bandwidth_bytes_per_s": 3e12, "citation": "docs example"}],
                 "citations": {"memory_capacity_bytes": "docs example"}}
    replaced = client.put("/v1/devices/nvidia-h100-sxm", headers=AUTH, json=two_peaks)
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["origin"] == "catalog_modified"
    restored = client.post("/v1/devices/nvidia-h100-sxm/restore", headers=AUTH)
    assert restored.status_code == 200
    assert restored.json() == {**original, "updated_at": restored.json()["updated_at"],
                               "created_at": restored.json()["created_at"]}
    # Deleted, then restored: it comes back as it ships.
    assert client.delete("/v1/devices/nvidia-a100-80gb-sxm", headers=AUTH).status_code == 204
    back = client.post("/v1/devices/nvidia-a100-80gb-sxm/restore", headers=AUTH)
    assert back.status_code == 200 and back.json()["origin"] == "catalog"
    assert client.post("/v1/devices/nvidia-h100-sxm/restore").status_code == 401
    assert client.post("/v1/devices/lab-card/restore", headers=AUTH).status_code == 404


def test_every_path_parameter_has_an_example(client):
    document = client.get("/openapi.json").json()
    missing = [f"{method.upper()} {path} {p['name']}" for path, item in document["paths"].items()
               for method, operation in item.items() for p in operation.get("parameters", [])
               if p["in"] == "path" and not (p.get("examples") or p.get("example") or p["schema"].get("examples"))]
    assert missing == []


def test_catalog_citations_are_a_title_and_an_address_not_notes(client):
    import re

    sources = []
    for summary in client.get("/v1/devices").json():
        device = client.get(f"/v1/devices/{summary['id']}").json()
        sources += [p["citation"] for p in device["compute_peaks"]] + [m["citation"] for m in device["memory_levels"]]
        sources += list(device["citations"].values())
    assert sources
    for source in sources:
        assert "seen;" not in source and " ; " not in source, source
        assert re.search(r"\(https?://\S+\)", source) or source.startswith("team datasheet collection"), source


def test_an_unknown_id_suggests_the_nearest_known_ones(client):
    body = {"operator": {"kind": "matmul", "m": 1, "n": 4096, "k": 4096}}
    detail = client.post("/v1/analyze/operator", json={**body, "device_id": "h100"}).json()["detail"]
    assert "did you mean nvidia-h100-pcie, nvidia-h100-sxm?" in detail  # both contain what was asked
    step = {"device_id": "nvidia-h100-sxm", "phase": "decode", "batch_size": 1, "seq_len": 16}
    detail = client.post("/v1/analyze/model", json={**step, "model_id": "llama-3-8b"}).json()["detail"]
    assert "did you mean llama-3.1-8b" in detail  # a close reading
    detail = client.post("/v1/analyze/operator", json={**body, "device_id": "zzzz"}).json()["detail"]
    assert "did you mean" not in detail and "GET /v1/devices lists the known ids" in detail


def test_a_measured_peak_is_declared_in_the_dtype_it_is_looked_up_by(client):
    refused = client.post("/v1/devices/nvidia-h100-sxm/benchmarks", headers=AUTH, json={
        "kind": "compute", "dtype": "fp8_e5m2", "unit": "tensor", "flops_per_s": 1.5e15, "tool": "cublasLt"})
    assert refused.status_code == 422 and refused.json()["fields"][0]["loc"] == "body.dtype"
    assert client.get("/v1/devices/nvidia-h100-sxm/roofs").status_code == 200
