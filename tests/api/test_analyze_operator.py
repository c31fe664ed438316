"""POST /v1/analyze/operator end to end, against the seeded nominal catalog."""

import json

import pytest

from tests.conftest import AUTH

H100 = "nvidia-h100-sxm"
# Datasheet figures of the seeded H100 SXM: 989.4e12 bf16 tensor FLOP/s (dense), 3.35e12 bytes/s HBM.
H100_BF16, H100_HBM = 989.4e12, 3.35e12


def analyze(client, operator, device_id=H100):
    return client.post("/v1/analyze/operator", json={"device_id": device_id, "operator": operator})


def test_matmul_on_h100(client):
    response = analyze(client, {"kind": "matmul", "m": 4096, "n": 4096, "k": 4096})
    assert response.status_code == 200
    body = response.json()
    assert body["flops"] == 2 * 4096**3
    assert body["bytes"] == {"read": 2 * 4096 * 4096 * 2, "written": 4096 * 4096 * 2, "total": 3 * 4096 * 4096 * 2}
    assert body["arithmetic_intensity"] == pytest.approx(4096 / 3)
    assert body["ridge_point"] == pytest.approx(H100_BF16 / H100_HBM)  # about 295.3 FLOP/byte
    assert body["bound"] == "compute"
    assert body["time_s"] == pytest.approx(2 * 4096**3 / H100_BF16)
    assert body["mfu"] == 1.0
    assert body["compute_roof"]["dtype"] == "bf16" and body["compute_roof"]["unit"] == "tensor"
    assert body["compute_roof"]["source"] == "nominal" and "citation" not in body["compute_roof"]
    assert body["memory_roof"] == {**body["memory_roof"], "level": "hbm", "bytes_per_s": H100_HBM, "source": "nominal"}
    assert any("2*batch*m*n*k" in line for line in body["assumptions"])


def test_decode_gemv_is_memory_bound(client):
    # One token through a 4096x4096 bf16 weight: I = 2*4096*4096 / (2*4096*4096 + 2*2*4096) ~ 1 FLOP/byte.
    body = analyze(client, {"kind": "matmul", "m": 1, "n": 4096, "k": 4096}).json()
    assert body["bound"] == "memory"
    assert body["time_s"] == pytest.approx((4096 * 4096 * 2 + 2 * 4096 * 2) / H100_HBM)
    assert body["mfu"] == pytest.approx(body["arithmetic_intensity"] / body["ridge_point"])


@pytest.mark.parametrize("operator, flops, total_bytes", [
    ({"kind": "elementwise", "op": "silu", "shape": [2, 3, 4]}, 96, 96),
    ({"kind": "layernorm", "shape": [4, 8], "dtype": "fp32"}, 160, 320),
    ({"kind": "rmsnorm", "shape": [4, 8]}, 128, 144),
    ({"kind": "softmax", "shape": [2, 10], "dtype": "fp16"}, 100, 80),
    ({"kind": "embedding", "tokens": 10, "hidden": 16, "vocab": 1000}, 0, 680),
    ({"kind": "rope", "batch": 2, "seq_len": 3, "heads": 4, "head_dim": 8}, 576, 864),
    ({"kind": "attention", "heads": 2, "head_dim": 4, "q_len": 3}, 378, 192),
])
def test_every_operator_kind(client, operator, flops, total_bytes):
    # The counts are the hand derivations of tests/core/test_operators.py, seen through HTTP.
    response = analyze(client, operator)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["kind"] == operator["kind"]
    assert (body["flops"], body["bytes"]["total"]) == (flops, total_bytes)
    expected_unit = "tensor" if operator["kind"] == "attention" else "vector"
    assert body["compute_roof"]["unit"] == expected_unit
    assert body["assumptions"]


def test_unknown_device_is_404(client):
    response = analyze(client, {"kind": "softmax", "shape": [8]}, device_id="no-such-gpu")
    assert response.status_code == 404
    assert response.json()["error"] == "device_not_found"


@pytest.mark.parametrize("operator, loc", [
    ({"kind": "matmul", "m": 0, "n": 1, "k": 1}, "body.operator.m"),
    ({"kind": "matmul", "n": 1, "k": 1}, "body.operator.m"),
    ({"kind": "matmul", "m": 1, "n": 1, "k": 1, "dtype": "fp7"}, "body.operator.dtype"),
    ({"kind": "matmul", "m": 1, "n": 1, "k": 1, "mm": 3}, "body.operator.mm"),
    ({"kind": "convolution"}, "body.operator.kind"),
    ({"kind": "elementwise", "op": "tanh", "shape": [4]}, "body.operator.op"),
    ({"kind": "attention", "heads": 6, "kv_heads": 4, "head_dim": 64, "q_len": 8}, "body.operator.kv_heads"),
    # C [batch, m, n] would hold 2**80 elements; the error is reported on n, with the tensor named.
    ({"kind": "matmul", "m": 2**40, "n": 2**40, "k": 2}, "body.operator.n"),
    ({"kind": "matmul", "m": 2**41, "n": 1, "k": 1}, "body.operator.m"),
    ({"kind": "elementwise", "op": "x", "shape": [4], "flops_per_element": -1}, "body.operator.flops_per_element"),
])
def test_invalid_operators_are_422_naming_the_field(client, operator, loc):
    response = analyze(client, operator)
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error"] in {"validation_error", "unprocessable"}
    assert loc in [field["loc"] for field in body["fields"]]


def test_missing_peak_for_dtype_is_422(client):
    response = analyze(client, {"kind": "matmul", "m": 8, "n": 8, "k": 8, "dtype": "fp8"}, "nvidia-a100-80gb-sxm")
    assert response.status_code == 422
    assert "no tensor peak for fp8" in response.json()["detail"]


@pytest.mark.parametrize("raw", [
    '{"device_id": "nvidia-h100-sxm", "operator": {"kind": "elementwise", "op": "x", "shape": [4], "flops_per_element": NaN}}',
    '{"device_id": "nvidia-h100-sxm", "operator": {"kind": "elementwise", "op": "x", "shape": [4], "flops_per_element": Infinity}}',
    '[]',
])
def test_non_finite_and_wrongly_shaped_bodies_are_422(client, raw):
    response = client.post("/v1/analyze/operator", content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == 422
    assert response.json()["error"] == "validation_error"


def test_a_body_cut_short_is_malformed_json_a_400(client):
    response = client.post("/v1/analyze/operator", content='{"device_id": "nvidia-h100-sxm", "operator": ',
                           headers={"Content-Type": "application/json"})
    assert response.status_code == 400 and response.json()["error"] == "malformed_json"


def test_huge_flops_per_element_cannot_produce_infinity(client):
    response = analyze(client, {"kind": "elementwise", "op": "x", "shape": [2**26, 2**26], "flops_per_element": 1e300})
    assert response.status_code == 422
    assert "inf" not in json.dumps(response.json()).lower().replace("information", "")


def test_matmul_shape_efficiency_reported_and_applied(client):
    operator = {"kind": "matmul", "m": 4096, "n": 4096, "k": 4096}
    plain = analyze(client, operator).json()
    shape = plain["shape_efficiency"]
    assert shape["tiles"] == 1024 and shape["sm_count"] == 132 and not shape["applied"]
    assert shape["wave_efficiency"] == pytest.approx(1024 / 132 / 8)
    applied = analyze(client, {**operator, "apply_efficiency": True}).json()
    # Padding is 1 for 4096 on 128x128x64 and the waves are never applied: the same time.
    assert applied["time_s"] == plain["time_s"]
    # 4000 on 128x128x64 tiles pads m and n to 32 x 128 = 4096 and k to 63 x 64 = 4032: (4000 / 4096)^2 x
    # (4000 / 4032) of the executed work is useful, and the compute-bound time grows by its inverse.
    odd = {"kind": "matmul", "m": 4000, "n": 4000, "k": 4000}
    useful = (4000 / 4096) ** 2 * (4000 / 4032)
    padded = analyze(client, {**odd, "apply_efficiency": True}).json()
    assert padded["shape_efficiency"]["padding_efficiency"] == pytest.approx(useful)
    assert padded["time_s"] == pytest.approx(analyze(client, odd).json()["time_s"] / useful)


def test_grouped_matmul_operator(client):
    operator = {"kind": "grouped_matmul", "tokens_per_expert": [250, 6, 0, 0], "n": 1024, "k": 512}
    body = analyze(client, operator).json()
    assert body["flops"] == 2 * 256 * 1024 * 512
    assert body["shape_efficiency"]["rows_with_data"] == 256
    assert body["shape_efficiency"]["rows_executed"] == 272
    assert body["shape_efficiency"]["padding_efficiency"] == pytest.approx(256 / 272)


def test_headline_figures_are_hbm_on_every_device_whatever_levels_it_models(client):
    """4096^3 bf16 matmul: F = 2 * 4096^3 = 137,438,953,472 FLOP; HBM traffic A + B + C = 3 * 4096^2 * 2
    = 100,663,296 bytes, so I = F / Q = 4096 / 3 = 1365.3 FLOP/byte on every device.
    A100 80GB SXM: ridge 312e12 / 2.039e12 = 153.0. With 128x128 tiles its L2 serves A once per column of
    tiles (32) and B once per row (32), plus C: 65 * 33,554,432 = 2,181,038,080 bytes, L2 intensity 63.0,
    L2 ridge 312e12 / 7.22e12 = 43.2, L2 time 0.302 ms < compute 0.4405 ms: compute-bound, no level binds.
    H100 SXM has no nominal L2: the same headline (its own ridge 989.4e12 / 3.35e12 = 295.3), and still after
    an L2 benchmark is submitted."""
    operator = {"kind": "matmul", "m": 4096, "n": 4096, "k": 4096, "dtype": "bf16"}
    flops, hbm_bytes, l2_bytes = 2 * 4096**3, 3 * 4096**2 * 2, 65 * 4096**2 * 2
    a100 = client.post("/v1/analyze/operator", json={"device_id": "nvidia-a100-80gb-sxm", "operator": operator}).json()
    assert a100["arithmetic_intensity"] == pytest.approx(flops / hbm_bytes) == pytest.approx(1365.33, rel=1e-5)
    assert a100["arithmetic_intensity"] == pytest.approx(a100["flops"] / a100["bytes"]["total"])
    assert a100["ridge_point"] == pytest.approx(312e12 / 2.039e12)
    assert a100["memory_time_s"] == pytest.approx(hbm_bytes / 2.039e12)
    assert a100["bound"] == "compute" and a100["binding_level"] is None
    levels = {level["level"]: level for level in a100["levels"]}
    assert levels["l2"]["arithmetic_intensity"] == pytest.approx(flops / l2_bytes) == pytest.approx(63.01, rel=1e-3)
    assert levels["l2"]["ridge_point"] == pytest.approx(312e12 / 7.22e12)
    assert levels["l2"]["time_s"] == pytest.approx(l2_bytes / 7.22e12)
    assert a100["time_s"] == pytest.approx(flops / 312e12)

    def h100():
        return client.post("/v1/analyze/operator", json={"device_id": "nvidia-h100-sxm", "operator": operator}).json()

    before = h100()
    assert before["arithmetic_intensity"] == pytest.approx(4096 / 3)
    assert before["ridge_point"] == pytest.approx(989.4e12 / 3.35e12)
    submitted = client.post("/v1/devices/nvidia-h100-sxm/benchmarks", headers=AUTH, json={
        "kind": "memory_bandwidth", "level": "l2", "bytes_per_s": 10e12, "tool": "lab"})
    assert submitted.status_code == 201, submitted.text
    after = h100()
    assert after["arithmetic_intensity"] == before["arithmetic_intensity"]
    assert after["ridge_point"] == before["ridge_point"] and after["memory_roof"]["level"] == "hbm"
    assert {level["level"] for level in after["levels"]} >= {"hbm", "l2"}


def test_an_int4_weight_matmul_is_charged_its_group_scales_as_the_model_analysis_does(client):
    """GEMV 1 x 4096 x 4096 with int4 B and bf16 A/C: B is 16,777,216 weights at 0.5 bytes plus a 2-byte scale
    per 128 = 0.515625 bytes each = 8,650,752 bytes; A 8,192 and C 8,192 bytes: 8,667,136 in all."""
    operator = {"kind": "matmul", "m": 1, "n": 4096, "k": 4096, "dtype": "bf16", "b_dtype": "int4"}
    body = analyze(client, operator).json()
    assert body["bytes"]["total"] == 4096 * 4096 * 0.515625 + 2 * 4096 * 2
    grouped = analyze(client, {**operator, "weight_group_size": 64, "weight_scale_bytes": 4}).json()
    assert grouped["bytes"]["total"] == 4096 * 4096 * (0.5 + 4 / 64) + 2 * 4096 * 2
    # An 8-bit weight has no default group.
    assert analyze(client, {**operator, "b_dtype": "int8"}).json()["bytes"]["total"] == 4096 * 4096 + 2 * 4096 * 2
