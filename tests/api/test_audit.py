"""The audit trail: each write committed, with who, what and when, recorded in the write's own transaction; a
refused write, an analysis and a request without a writer's token record nothing."""

from tests.conftest import AUTH

HBM = {"kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": 3.0e12, "tool": "nvbandwidth"}
PATH = "/v1/devices/nvidia-h100-sxm/benchmarks"


def test_writes_are_recorded_with_their_writer_and_request_id(client):
    created = client.post(PATH, json=HBM, headers={**AUTH, "X-Request-ID": "audit-1"})
    refused = client.post(PATH, json={**HBM, "bytes_per_s": -1}, headers=AUTH)
    anonymous = client.post(PATH, json=HBM)
    assert (created.status_code, refused.status_code, anonymous.status_code) == (201, 422, 401)
    client.post("/v1/analyze/operator", headers=AUTH, json={  # an analysis writes nothing: not recorded
        "device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": 1, "n": 8, "k": 8, "dtype": "bf16"}})
    deleted = client.delete(f"{PATH}/{created.json()['id']}", headers=AUTH)
    assert deleted.status_code == 204
    entries = client.get("/v1/audit").json()
    assert [(e["method"], e["path"]) for e in entries] == [("DELETE", f"{PATH}/{created.json()['id']}"), ("POST", PATH)]
    assert {e["writer"] for e in entries} == {"tester"} and entries[-1]["request_id"] == "audit-1"
    assert client.get("/v1/audit", params={"writer": "someone-else"}).json() == []
    assert client.get("/v1/audit", params={"limit": 1}).json()[0]["method"] == "DELETE"
