"""Measured roofs end to end: submissions override nominal roofs, with provenance in every answer."""

import threading
from datetime import UTC, datetime

import httpx
import pytest

from tests.conftest import AUTH

H100 = "nvidia-h100-sxm"
NOMINAL_HBM = 3.35e12
NOMINAL_BF16 = 989.4e12
GEMV = {"kind": "matmul", "m": 1, "n": 4096, "k": 4096}  # 33,570,816 bytes, clearly memory-bound
GEMV_BYTES = 4096 * 4096 * 2 + 2 * 4096 * 2


def submit_hbm(client, value, **extra):
    body = {"kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": value, "tool": "nvbandwidth", **extra}
    return client.post(f"/v1/devices/{H100}/benchmarks", json=body, headers=AUTH)


def analyze(client, operator=GEMV, **options):
    response = client.post("/v1/analyze/operator", json={"device_id": H100, "operator": operator, **options})
    assert response.status_code == 200, response.text
    return response.json()


def test_measured_hbm_overrides_nominal_for_later_analyses(client):
    before = analyze(client)
    assert before["memory_roof"]["source"] == "nominal"
    assert before["time_s"] == pytest.approx(GEMV_BYTES / NOMINAL_HBM)

    for value in (2.8e12, 3.0e12, 2.9e12):
        response = submit_hbm(client, value, host="cluster-a/node-1")
        assert response.status_code == 201, response.text
        assert response.json()["submitted_by"] == "tester"

    after = analyze(client)
    # Median of 2.8, 3.0 and 2.9 TB/s is 2.9e12 bytes/s.
    assert after["memory_roof"] == {**after["memory_roof"], "source": "measured", "bytes_per_s": 2.9e12}
    # Lean answers carry no citation text: which measurements made the roof is on GET .../roofs.
    assert "citation" not in after["memory_roof"]
    hbm = next(m for m in client.get("/v1/devices/nvidia-h100-sxm/roofs").json()["memory"] if m["level"] == "hbm")
    assert hbm["measured"]["count"] == 3 and hbm["measured"]["median"] == 2.9e12
    assert after["time_s"] == pytest.approx(GEMV_BYTES / 2.9e12)
    assert after["ridge_point"] == pytest.approx(NOMINAL_BF16 / 2.9e12)
    # At the roof on the slope, MFU = I * B_effective / P_nominal: it drops with the measured bandwidth.
    assert after["mfu"] == pytest.approx(after["arithmetic_intensity"] * 2.9e12 / NOMINAL_BF16)

    nominal = analyze(client, roofs="nominal")
    assert nominal["memory_roof"]["source"] == "nominal"
    assert nominal["time_s"] == before["time_s"]

    roofs = client.get(f"/v1/devices/{H100}/roofs").json()
    hbm = next(m for m in roofs["memory"] if m["level"] == "hbm")
    assert hbm["nominal_bytes_per_s"] == NOMINAL_HBM and hbm["effective_bytes_per_s"] == 2.9e12
    assert hbm["measured"]["count"] == 3 and (hbm["measured"]["min"], hbm["measured"]["max"]) == (2.8e12, 3.0e12)
    ridge = next(r for r in roofs["ridge_points"] if (r["dtype"], r["unit"]) == ("bf16", "tensor"))
    assert ridge["nominal"] == pytest.approx(NOMINAL_BF16 / NOMINAL_HBM)
    assert ridge["effective"] == pytest.approx(NOMINAL_BF16 / 2.9e12)


def test_deleting_a_bad_measurement_restores_the_roof(client):
    bad = submit_hbm(client, 1.0e12).json()
    assert analyze(client)["memory_roof"]["bytes_per_s"] == 1.0e12
    assert client.delete(f"/v1/devices/{H100}/benchmarks/{bad['id']}", headers=AUTH).status_code == 204
    assert analyze(client)["memory_roof"]["source"] == "nominal"
    assert client.delete(f"/v1/devices/{H100}/benchmarks/{bad['id']}", headers=AUTH).status_code == 404


def test_measured_mode_needs_a_measurement(client):
    response = client.post("/v1/analyze/operator", json={"device_id": H100, "operator": GEMV, "roofs": "measured"})
    assert response.status_code == 422
    assert response.json()["fields"][0]["loc"] == "body.roofs"
    submit_hbm(client, 3.0e12)
    compute = {"kind": "compute", "dtype": "bf16", "unit": "tensor", "flops_per_s": 7.0e14, "tool": "gemm sweep"}
    assert client.post(f"/v1/devices/{H100}/benchmarks", json=compute, headers=AUTH).status_code == 201
    body = analyze(client, roofs="measured")
    assert body["compute_roof"]["source"] == body["memory_roof"]["source"] == "measured"
    assert body["compute_roof"]["flops_per_s"] == 7.0e14


def test_compute_measurement_moves_the_ridge_and_mfu_stays_against_nominal(client):
    compute = {"kind": "compute", "dtype": "bf16", "unit": "tensor", "flops_per_s": 6.0e14, "tool": "gemm"}
    assert client.post(f"/v1/devices/{H100}/benchmarks", json=compute, headers=AUTH).status_code == 201
    body = analyze(client, {"kind": "matmul", "m": 8192, "n": 8192, "k": 8192})
    assert body["bound"] == "compute"
    assert body["time_s"] == pytest.approx(2 * 8192**3 / 6.0e14)
    assert body["mfu"] == pytest.approx(6.0e14 / NOMINAL_BF16)


@pytest.mark.parametrize("body, loc", [
    ({"kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": -1, "tool": "x"}, "body.bytes_per_s"),
    ({"kind": "memory_bandwidth", "level": "l3", "bytes_per_s": 1e12, "tool": "x"}, "body.level"),
    ({"kind": "compute", "dtype": "fp7", "unit": "tensor", "flops_per_s": 1e12, "tool": "x"}, "body.dtype"),
    ({"kind": "compute", "dtype": "bf16", "unit": "matrix", "flops_per_s": 1e12, "tool": "x"}, "body.unit"),
    ({"kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": 1e12}, "body.tool"),
    # 3.6e12 is 7.5 % above the nominal 3.35e12: beyond the 5 % tolerance without a reason.
    ({"kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": 3.6e12, "tool": "x"}, "body.bytes_per_s"),
])
def test_invalid_submissions_are_422(client, body, loc):
    response = client.post(f"/v1/devices/{H100}/benchmarks", json=body, headers=AUTH)
    assert response.status_code == 422, response.text
    assert loc in [f["loc"] for f in response.json()["fields"]]
    assert client.get(f"/v1/devices/{H100}/benchmarks").json() == []


def test_non_finite_submission_is_422(client):
    raw = '{"kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": Infinity, "tool": "x"}'
    response = client.post(f"/v1/devices/{H100}/benchmarks", content=raw,
                           headers={**AUTH, "Content-Type": "application/json"})
    assert response.status_code == 422


def test_above_nominal_with_a_reason_is_accepted(client):
    # 3.5e12 is 4.5 % above nominal (inside the tolerance); 3.6e12 needs the reason.
    assert submit_hbm(client, 3.5e12).status_code == 201
    response = submit_hbm(client, 3.6e12, exceeds_nominal_reason="HBM overclocked to 5.6 Gbps per pin")
    assert response.status_code == 201
    assert response.json()["exceeds_nominal_reason"].startswith("HBM overclocked")


def test_listing_filters(client):
    submit_hbm(client, 3.0e12, host="a")
    submit_hbm(client, 2.9e12, host="b")
    compute = {"kind": "compute", "dtype": "bf16", "unit": "tensor", "flops_per_s": 7e14, "tool": "gemm", "host": "a"}
    client.post(f"/v1/devices/{H100}/benchmarks", json=compute, headers=AUTH)
    url = f"/v1/devices/{H100}/benchmarks"
    assert len(client.get(url).json()) == 3
    assert [b["bytes_per_s"] for b in client.get(url, params={"kind": "memory_bandwidth"}).json()] == [3.0e12, 2.9e12]
    assert len(client.get(url, params={"host": "a"}).json()) == 2
    assert client.get(url, params={"level": "l3"}).status_code == 422
    assert client.get("/v1/devices/nope/benchmarks").status_code == 404


ERT = {"empirical": {
    "gflops": {"data": [["FP64 GFLOPs", 7068.9], ["INT8 GOPs", 1.0]]},
    "gbytes": {"data": [["L1", 14029.3], ["L2", 2996.8], ["DRAM", 828.8], ["L3", 100.0]]},
}}


def test_ert_import_maps_levels_and_units(client):
    device = "nvidia-v100-sxm2-32gb"  # nominal: fp64 vector 7.8e12, HBM 9e11, L2 3.13e12, smem 1.567e13
    response = client.post(f"/v1/devices/{device}/benchmarks/ert", json={"tool": "ERT 1.1.0", "roofline": ERT}, headers=AUTH)
    assert response.status_code == 201, response.text
    body = response.json()
    created = {(b["kind"], b["dtype"] or b["level"]): b for b in body["created"]}
    assert created[("compute", "fp64")]["flops_per_s"] == pytest.approx(7068.9e9)
    assert created[("compute", "fp64")]["unit"] == "vector"
    assert created[("memory_bandwidth", "hbm")]["bytes_per_s"] == pytest.approx(828.8e9)
    assert created[("memory_bandwidth", "l2")]["bytes_per_s"] == pytest.approx(2996.8e9)
    assert created[("memory_bandwidth", "smem")]["bytes_per_s"] == pytest.approx(14029.3e9)
    assert len(body["skipped"]) == 2  # INT8 GOPs, L3
    roofs = client.get(f"/v1/devices/{device}/roofs").json()
    hbm = next(m for m in roofs["memory"] if m["level"] == "hbm")
    assert (hbm["source"], hbm["effective_bytes_per_s"]) == ("measured", pytest.approx(828.8e9))


def test_ert_import_is_all_or_nothing(client):
    device = "nvidia-v100-sxm2-32gb"
    broken = {"empirical": {"gflops": {"data": [["FP64 GFLOPs", 7068.9]]}, "gbytes": {"data": [["DRAM", "fast"]]}}}
    response = client.post(f"/v1/devices/{device}/benchmarks/ert", json={"roofline": broken}, headers=AUTH)
    assert response.status_code == 422
    assert response.json()["fields"][0]["loc"] == "body.roofline.empirical.gbytes.data.0"
    assert client.get(f"/v1/devices/{device}/benchmarks").json() == []


def test_achieved_versus_attainable(client):
    submit_hbm(client, 2.5e12)
    # Measured 20 us for the GEMV: achieved FLOP/s = 33,554,432 / 20e-6; bandwidth = 33,570,816 bytes / 20e-6.
    body = analyze(client, measured_time_s=20e-6)
    achieved = body["achieved"]
    assert achieved["flops_per_s"] == pytest.approx(2 * 4096 * 4096 / 20e-6)
    assert achieved["bandwidth_bytes_per_s"] == pytest.approx(GEMV_BYTES / 20e-6)
    assert achieved["mfu"] == pytest.approx(2 * 4096 * 4096 / 20e-6 / NOMINAL_BF16)
    # The effective (measured) roof is 2.5e12: the lower bound is GEMV_BYTES / 2.5e12, about 13.4 us.
    assert achieved["roof_fraction"] == pytest.approx(GEMV_BYTES / 2.5e12 / 20e-6)
    assert achieved["bandwidth_fraction"] == pytest.approx(GEMV_BYTES / 20e-6 / 2.5e12)


def test_hierarchical_roofline_names_the_binding_level(client):
    # V100 has nominal L2 (3.13e12) and HBM (9e11) bandwidths. A 4096^3 fp16 matmul with 16x16 tiles
    # fetches A 256 times and B 256 times from L2: 2 * 256 * 33,554,432 bytes + C 33,554,432 bytes.
    operator = {"kind": "matmul", "m": 4096, "n": 4096, "k": 4096, "dtype": "fp16", "tile": {"m": 16, "n": 16, "k": 16}}
    response = client.post("/v1/analyze/operator", json={"device_id": "nvidia-v100-sxm2-32gb", "operator": operator})
    body = response.json()
    levels = {level["level"]: level for level in body["levels"]}
    l2_bytes = 2 * 256 * 4096 * 4096 * 2 + 4096 * 4096 * 2
    assert levels["l2"]["bytes"] == l2_bytes
    assert levels["hbm"]["bytes"] == 3 * 4096 * 4096 * 2
    # L2: 17.2 GB / 3.13 TB/s = 5.50 ms > compute 137.4 GFLOP / 125 TFLOP/s = 1.10 ms: L2-bound.
    assert body["bound"] == "memory" and body["binding_level"] == "l2"
    assert body["time_s"] == pytest.approx(l2_bytes / 3.13e12)
    # The headline stays HBM's: 2 * 4096^3 FLOP / (3 * 4096^2 * 2 bytes) = 4096 / 3 FLOP/byte, ridge 125e12 / 9e11.
    assert body["arithmetic_intensity"] == pytest.approx(4096 / 3)
    assert body["ridge_point"] == pytest.approx(125e12 / 9e11)
    assert body["memory_time_s"] == pytest.approx(3 * 4096 * 4096 * 2 / 9e11)
    assert body["memory_roof"]["level"] == "hbm"
    assert levels["l2"]["arithmetic_intensity"] == pytest.approx(2 * 4096**3 / l2_bytes)
    # Profiler-supplied traffic replaces the model.
    profiled = client.post("/v1/analyze/operator", json={
        "device_id": "nvidia-v100-sxm2-32gb", "operator": operator, "bytes_by_level": {"l2": 1e9, "smem": 1e10}}).json()
    assert {level["level"]: level["bytes"] for level in profiled["levels"]} == {"hbm": 3 * 4096 * 4096 * 2, "l2": 1e9, "smem": 1e10}
    assert profiled["bound"] == "compute" and profiled["binding_level"] is None


def test_sustained_clock_what_if_scales_compute_roofs(client):
    operator = {"kind": "matmul", "m": 8192, "n": 8192, "k": 8192}
    # H100 SXM boost clock 1.98 GHz; at 1.5 GHz the bf16 roof is 989.4e12 * 1.5 / 1.98.
    body = analyze(client, operator, sustained_clock_hz=1.5e9)
    assert body["compute_roof"]["flops_per_s"] == pytest.approx(NOMINAL_BF16 * 1.5 / 1.98)
    assert body["mfu"] == pytest.approx(1.5 / 1.98)


def test_concurrent_submissions_all_persist(live_server):
    """8 writers x 10 submissions through a real uvicorn server: nothing lost, no "database is locked"."""
    base = live_server
    statuses, errors = [], []

    def writer(index):
        with httpx.Client(base_url=base, headers=AUTH, timeout=30) as http:
            for n in range(10):
                body = {"kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": 2.0e12 + index * 1e10 + n * 1e8,
                        "tool": f"writer-{index}", "measured_at": datetime.now(UTC).isoformat()}
                response = http.post(f"/v1/devices/{H100}/benchmarks", json=body)
                statuses.append(response.status_code)
                if response.status_code != 201:
                    errors.append(response.text)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stored = httpx.get(f"{base}/v1/devices/{H100}/benchmarks").json()
    assert errors == []
    assert statuses.count(201) == 80
    assert len(stored) == 80


def test_profile_inherits_nominal_specs_and_keeps_its_own_measurements(client):
    body = {"id": "h100-cluster-b-500w", "tdp_w": 500, "citations": {"tdp_w": "nvidia-smi -pl 500"}}
    response = client.post(f"/v1/devices/{H100}/profiles", json=body, headers=AUTH)
    assert response.status_code == 201, response.text
    profile = response.json()
    assert profile["base_device_id"] == H100 and profile["tdp_w"] == 500
    base = client.get(f"/v1/devices/{H100}").json()
    assert profile["compute_peaks"] == base["compute_peaks"]
    body = {"kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": 2.6e12, "tool": "nvbandwidth"}
    assert client.post("/v1/devices/h100-cluster-b-500w/benchmarks", json=body, headers=AUTH).status_code == 201
    on_profile = client.post("/v1/analyze/operator", json={"device_id": "h100-cluster-b-500w", "operator": GEMV}).json()
    assert on_profile["memory_roof"] == {**on_profile["memory_roof"], "source": "measured", "bytes_per_s": 2.6e12}
    assert analyze(client)["memory_roof"]["source"] == "nominal"  # the base keeps its own roofs
    assert client.post("/v1/devices/nope/profiles", json={"id": "x-1"}, headers=AUTH).status_code == 404


def test_device_created_from_microarchitecture_numbers(client):
    # 132 units x 2048 bf16 FMA/cycle x 2 x 1.83e9 Hz = 989.4e12 FLOP/s (to 0.1 %);
    # 5120-bit bus x 5.24e9 transfers/s / 8 = 3.3536e12 bytes/s.
    body = {"id": "derived-h100", "name": "H100 from first principles", "vendor": "NVIDIA",
            "memory_capacity_bytes": 80 * 2**30, "citations": {"memory_capacity_bytes": "5 x 16 GiB HBM3 stacks"},
            "microarchitecture": {"units": 132, "clock_hz": 1.83e9, "tensor_fma_per_unit_per_cycle": {"bf16": 2048},
                                  "memory_bus_width_bits": 5120, "memory_transfers_per_s_per_pin": 5.24e9}}
    response = client.post("/v1/devices", json=body, headers=AUTH)
    assert response.status_code == 201, response.text
    device = response.json()
    [peak] = device["compute_peaks"]
    assert peak["flops_per_s"] == pytest.approx(132 * 2048 * 2 * 1.83e9)
    assert peak["citation"].startswith("derived:")
    assert device["memory_levels"][0]["bandwidth_bytes_per_s"] == pytest.approx(3.3536e12)
    assert device["derived_peaks"][0]["datasheet_flops_per_s"] == pytest.approx(peak["flops_per_s"])
    incomplete = {**body, "id": "derived-2", "microarchitecture": {"units": 1, "clock_hz": 1e9}}
    assert client.post("/v1/devices", json=incomplete, headers=AUTH).status_code == 422


def test_timestamps_come_back_in_utc(client):
    body = {"kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": 3e12, "tool": "x",
            "measured_at": "2026-11-30T12:00:00+02:00"}
    created = client.post(f"/v1/devices/{H100}/benchmarks", json=body, headers=AUTH).json()
    listed = client.get(f"/v1/devices/{H100}/benchmarks").json()[0]
    assert created["measured_at"] == listed["measured_at"] == "2026-11-30T10:00:00Z"


def test_a_value_far_below_nominal_is_refused_unless_explained(client):
    """2,900 'bytes/s' is GB/s typed into a bytes/s field: 2.9e3 / 3.35e12 = 8.7e-10 of the H100's nominal HBM,
    far below the 10 % floor. Accepted, it would have halved the median with one real 2.9e12 measurement."""
    slip = {"kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": 2900, "tool": "nvbandwidth"}
    refused = client.post("/v1/devices/nvidia-h100-sxm/benchmarks", headers=AUTH, json=slip)
    assert refused.status_code == 422
    assert refused.json()["fields"][0]["loc"] == "body.bytes_per_s"
    assert "off_nominal_reason" in refused.json()["fields"][0]["msg"]
    # 0.10 * 3.35e12 = 3.35e11 is the floor: just above it is plausible, just below is not.
    assert client.post("/v1/devices/nvidia-h100-sxm/benchmarks", headers=AUTH,
                       json={**slip, "bytes_per_s": 3.36e11}).status_code == 201
    assert client.post("/v1/devices/nvidia-h100-sxm/benchmarks", headers=AUTH,
                       json={**slip, "bytes_per_s": 3.34e11}).status_code == 422
    explained = client.post("/v1/devices/nvidia-h100-sxm/benchmarks", headers=AUTH,
                            json={**slip, "off_nominal_reason": "card stuck at PCIe gen1 clocks, kept on purpose"})
    assert explained.status_code == 201 and explained.json()["off_nominal_reason"].startswith("card stuck")


def test_a_compute_roof_the_device_lacks_is_refused_unless_explained_and_never_breaks_reads(client):
    """The A100 has no fp8 tensor peak: an fp8 measurement is most likely a wrong dtype."""
    fp8 = {"kind": "compute", "dtype": "fp8", "unit": "tensor", "flops_per_s": 6e14, "tool": "gemm"}
    refused = client.post("/v1/devices/nvidia-a100-80gb-sxm/benchmarks", headers=AUTH, json=fp8)
    assert refused.status_code == 422 and refused.json()["fields"][0]["loc"] == "body.flops_per_s"
    explained = client.post("/v1/devices/nvidia-a100-80gb-sxm/benchmarks", headers=AUTH,
                            json={**fp8, "off_nominal_reason": "emulated fp8 kernel, recorded for comparison"})
    assert explained.status_code == 201
    roofs = client.get("/v1/devices/nvidia-a100-80gb-sxm/roofs")
    assert roofs.status_code == 200, roofs.text
    assert client.get("/v1/devices/nvidia-a100-80gb-sxm/roofline.svg").status_code == 200


@pytest.mark.parametrize("record, loc", [
    # Two of these, accepted with a reason, made the median overflow to inf (null on /roofs, infinite bandwidth).
    ({"kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": 1.7e308, "exceeds_nominal_reason": "x"}, "body.bytes_per_s"),
    # This one turned the chart's axis range into an overflow (500).
    ({"kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": 5e-324, "off_nominal_reason": "x"}, "body.bytes_per_s"),
    ({"kind": "compute", "dtype": "bf16", "unit": "tensor", "flops_per_s": 1e30, "exceeds_nominal_reason": "x"},
     "body.flops_per_s"),
    # A time that cannot be converted to UTC (year 0) answered 500.
    ({"kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": 3e12, "measured_at": "0001-01-01T00:00:00+14:00"},
     "body.measured_at"),
])
def test_values_that_would_break_later_reads_are_refused(client, record, loc):
    response = client.post("/v1/devices/nvidia-h100-sxm/benchmarks", headers=AUTH, json={**record, "tool": "t"})
    assert response.status_code == 422, response.text
    assert response.json()["fields"][0]["loc"] == loc
    assert client.get("/v1/devices/nvidia-h100-sxm/roofs").status_code == 200


def test_the_largest_accepted_values_keep_every_read_finite(client):
    """The bounds' extremes, twice each (a median of two): /roofs, an analysis and the chart stay finite."""
    for _ in range(2):
        for value in (1e18, 1e3):
            assert client.post("/v1/devices/nvidia-h100-sxm/benchmarks", headers=AUTH, json={
                "kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": value, "tool": "t",
                "exceeds_nominal_reason": "bound test", "off_nominal_reason": "bound test"}).status_code == 201
    roofs = client.get("/v1/devices/nvidia-h100-sxm/roofs")
    assert roofs.status_code == 200
    hbm = next(m for m in roofs.json()["memory"] if m["level"] == "hbm")
    # The median of 1e18, 1e3, 1e18, 1e3 is the midpoint of 1e3 and 1e18.
    assert hbm["effective_bytes_per_s"] == pytest.approx((1e18 + 1e3) / 2)
    body = analyze(client)
    assert body["ridge_point"] > 0 and body["time_s"] > 0
    assert client.get("/v1/devices/nvidia-h100-sxm/roofline.svg").status_code == 200


def test_a_measured_time_on_a_roof_without_a_nominal_peak_answers_with_mfu_undefined(client):
    """With only a measured fp8 roof on the A100 (no fp8 datasheet peak), MFU has no denominator: the answer
    says so (null and a note) instead of failing its finiteness check on the missing value (that was a 500)."""
    fp8 = {"kind": "compute", "dtype": "fp8", "unit": "tensor", "flops_per_s": 6e14, "tool": "gemm",
           "off_nominal_reason": "emulated fp8 kernel, recorded for comparison"}
    assert client.post("/v1/devices/nvidia-a100-80gb-sxm/benchmarks", headers=AUTH, json=fp8).status_code == 201
    # 2 * 4096^3 FLOPs = 137,438,953,472; in 1 ms that is 1.374e14 FLOP/s achieved.
    answer = client.post("/v1/analyze/operator", json={
        "device_id": "nvidia-a100-80gb-sxm", "measured_time_s": 1e-3,
        "operator": {"kind": "matmul", "m": 4096, "n": 4096, "k": 4096, "dtype": "fp8_e5m2"}})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["compute_roof"]["source"] == "measured" and body["mfu"] is None
    assert body["achieved"]["mfu"] is None
    assert body["achieved"]["flops_per_s"] == pytest.approx(2 * 4096**3 / 1e-3)
    assert any(note.startswith("mfu: not defined") for note in body["assumptions"]), body["assumptions"]


def test_a_measured_collective_latency_replaces_the_default(client):
    """A small all-reduce measured at 1.6 us (graph-captured) replaces the 2 us default in every tensor-parallel
    collective, with roofs 'effective'; 'nominal' keeps the default. Decode of Llama-3.1-70B at batch 32, TP 4:
    the all-reduce of [32, 8192] bf16 moves 786,432 bytes per device as a ring counts it; the H100's NVSwitch reduces
    in the network, so half of them cross its link, 393,216 bytes, 0.8738 us at 450 GB/s."""
    body = {"kind": "collective_latency", "link": "intra_node", "seconds": 1.6e-6,
            "tool": "nccl-tests all_reduce_perf -b 8 -e 8 -G 1"}
    created = client.post(f"/v1/devices/{H100}/benchmarks", json=body, headers=AUTH)
    assert created.status_code == 201, created.text
    assert (created.json()["link"], created.json()["seconds"], created.json()["level"]) == ("intra_node", 1.6e-6, None)
    listed = client.get(f"/v1/devices/{H100}/benchmarks", params={"kind": "collective_latency"}).json()
    assert [b["seconds"] for b in listed] == [1.6e-6]
    step = {"device_id": H100, "model_id": "llama-3.1-70b", "phase": "decode", "batch_size": 32, "seq_len": 1024,
            "tensor_parallel": 4}

    def allreduce_time(roofs):
        rows = client.post("/v1/analyze/model", json={**step, "roofs": roofs}).json()["rows"]
        return next(r["time_s"] for r in rows if r["name"] == "attn_allreduce")

    bare = 393_216 / 450e9
    assert allreduce_time("effective") == pytest.approx(1.6e-6 + bare)
    assert allreduce_time("nominal") == pytest.approx(2e-6 + bare)
    # A training step's tensor-parallel collectives use it too.
    training = client.post("/v1/analyze/training", json={"device_id": H100, "model_id": "llama-3.1-8b",
                                                         "seq_len": 4096, "tensor_parallel": 4}).json()
    assert next(c for c in training["communication"] if c["group"] == "tensor")["latency_s"] == 1.6e-6
    roofs = {view["link"]: view for view in client.get(f"/v1/devices/{H100}/roofs").json()["links"]}
    assert (roofs["intra_node"]["effective_latency_s"], roofs["intra_node"]["latency_source"]) == (1.6e-6, "measured")
    assert (roofs["inter_node"]["effective_latency_s"], roofs["inter_node"]["latency_source"]) == (1e-5, "nominal")
    # Seconds typed as microseconds are a unit slip.
    slip = client.post(f"/v1/devices/{H100}/benchmarks", json={**body, "seconds": 1.6}, headers=AUTH)
    assert slip.status_code == 422 and slip.json()["fields"][0]["loc"] == "body.seconds"
