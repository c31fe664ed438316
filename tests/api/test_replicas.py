"""Two app instances on one database (two workers or two replicas): a write through one is used by the
other on its very next request."""

from fastapi.testclient import TestClient

from service.main import create_app
from tests.conftest import AUTH

GEMV = {"device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": 1, "n": 4096, "k": 4096}}


def test_a_write_through_one_instance_is_seen_by_the_other(settings):
    with TestClient(create_app(settings)) as first, TestClient(create_app(settings)) as second:
        assert second.post("/v1/analyze/operator", json=GEMV).json()["memory_roof"]["source"] == "nominal"
        submitted = first.post("/v1/devices/nvidia-h100-sxm/benchmarks", headers=AUTH, json={
            "kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": 3.0e12, "tool": "nvbandwidth"})
        assert submitted.status_code == 201
        roof = second.post("/v1/analyze/operator", json=GEMV).json()["memory_roof"]
        assert (roof["source"], roof["bytes_per_s"]) == ("measured", 3.0e12)

        device = {"id": "replica-card", "name": "Card", "vendor": "ACME", "memory_capacity_bytes": 2**34,
                  "compute_peaks": [{"dtype": "bf16", "unit": "tensor", "flops_per_s": 1e14, "citation": "sheet"}],
                  "memory_levels": [{"level": "hbm", "bandwidth_bytes_per_s": 1e12, "citation": "sheet"}],
                  "citations": {"memory_capacity_bytes": "sheet"}}
        assert second.post("/v1/devices", json=device, headers=AUTH).status_code == 201
        assert first.post("/v1/analyze/operator", json={**GEMV, "device_id": "replica-card"}).status_code == 200
        assert second.delete("/v1/devices/replica-card", headers=AUTH).status_code == 204
        assert first.post("/v1/analyze/operator", json={**GEMV, "device_id": "replica-card"}).status_code == 404
