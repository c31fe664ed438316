"""Sweeps, device comparison and what-if speed-ups over HTTP."""

import pytest

H100_RIDGE = 989.4e12 / 3.35e12  # 295.34 FLOP/byte


def sweep(client, **body):
    return client.post("/v1/analyze/sweep", json=body)


def test_matmul_m_sweep_crossover_between_points_and_critical_m(client):
    request = {"device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": 1, "n": 4096, "k": 4096}}
    body = sweep(client, endpoint="operator", request=request, parameter="operator.m",
                 values=[64, 128, 256, 512, 1024]).json()
    assert [r["bound"] for r in body["rows"]] == ["memory", "memory", "memory", "compute", "compute"]
    [crossover] = body["crossover"]
    assert (crossover["before"], crossover["after"]) == (256, 512)
    assert 256 < crossover["estimate"] < 512
    # I(M) = 2*M*N*K / (2*(M*K + K*N + M*N)) = 4096 M / (2M + 4096) for N = K = 4096 in bf16; I = R gives
    # M = 4096 R / (4096 - 2R) = 345.11, so the smallest compute-bound integer is 346.
    critical = body["critical_m"]
    assert critical["real"] == pytest.approx(4096 * H100_RIDGE / (4096 - 2 * H100_RIDGE))
    assert critical["smallest_integer"] == 346
    assert body["rows"][0]["arithmetic_intensity"] == pytest.approx(4096 * 64 / (2 * 64 + 4096))


def test_gemv_never_turns_compute_bound_when_n_is_tiny(client):
    # With N = 1 the intensity stays below 1 FLOP/byte for any M: the denominator 2NK - R(K + N)... is negative.
    request = {"device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": 1, "n": 1, "k": 4096}}
    body = sweep(client, endpoint="operator", request=request, parameter="operator.m", values=[1, 1000]).json()
    assert body["critical_m"]["real"] is None and body["critical_m"]["smallest_integer"] is None


def test_model_batch_sweep_with_a_range(client):
    # A short context (64 tokens), so that the KV reads do not dominate at large batches: at batch 4096 the
    # matmuls need 2 * 7.5e9 * 4096 FLOP = 62 ms at 989.4 TFLOP/s against 4096 * 65 * 131,072 bytes of cache
    # = 10.4 ms at 3.35 TB/s.
    request = {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "phase": "decode", "seq_len": 64}
    body = sweep(client, endpoint="model", request=request, parameter="batch_size",
                 range={"start": 1, "stop": 4096, "num": 13, "scale": "log"}).json()
    values = [r["value"] for r in body["rows"]]
    assert values[0] == 1 and values[-1] == 4096 and values == sorted(values)
    assert all(r["tpot_s"] > 0 and r["tokens_per_s"] > 0 for r in body["rows"])
    # Small batches are weight-streaming (memory-bound); large ones turn the matmuls compute-bound.
    assert body["rows"][0]["bound"] == "memory" and body["rows"][-1]["bound"] == "compute"
    assert len(body["crossover"]) == 1


def test_sweep_limits_and_errors(client):
    request = {"device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": 1, "n": 64, "k": 64}}
    too_many = sweep(client, endpoint="operator", request=request, parameter="operator.m",
                     range={"start": 1, "stop": 5000, "step": 1})
    assert too_many.status_code == 422
    assert sweep(client, endpoint="operator", request=request, parameter="operator.m",
                 values=list(range(1, 4098))).status_code == 422
    bad_point = sweep(client, endpoint="operator", request=request, parameter="operator.m", values=[8, 0])
    assert bad_point.status_code == 422 and bad_point.json()["fields"][0]["loc"] == "body.values.1"
    bad_path = sweep(client, endpoint="operator", request=request, parameter="device_id.x", values=[1])
    assert bad_path.status_code == 422
    # A stop far below start over a subnormal step: (stop - start) / step is -inf, no point (it raised OverflowError).
    downward = sweep(client, endpoint="operator", request=request, parameter="operator.m",
                     range={"start": 8004873173943644.0, "stop": 0.0, "step": 5e-324})
    assert downward.status_code == 422 and "no point" in downward.json()["detail"]
    ok = sweep(client, endpoint="operator", request=request, parameter="operator.m", values=list(range(1, 4097)))
    assert ok.status_code == 200 and len(ok.json()["rows"]) == 4096


def test_compare_ranks_devices(client):
    body = client.post("/v1/analyze/compare", json={
        "endpoint": "model", "device_ids": ["nvidia-a100-80gb-sxm", "nvidia-h100-sxm", "nvidia-t4", "nope"],
        "request": {"model_id": "llama-3.1-8b", "phase": "decode", "batch_size": 1, "seq_len": 1024}}).json()
    ranked = [entry["device_id"] for entry in body["ranking"]]
    # Decode at batch 1 streams the weights: the faster HBM (3.35 vs 2.039 TB/s) wins.
    assert ranked == ["nvidia-h100-sxm", "nvidia-a100-80gb-sxm"]
    first, second = body["ranking"]
    # Both have bf16 GEMM tables (the A100's AIConfigurator's too), so both are expected, and ranked so.
    assert body["ranked_by"] == "expected"
    assert second["relative_time"] == pytest.approx(second["expected_time_s"] / first["expected_time_s"])
    assert first["tokens_per_s"] == pytest.approx(1 / first["time_s"])
    errors = {e["device_id"]: e["error"] for e in body["errors"]}
    assert errors == {"nvidia-t4": "unprocessable", "nope": "device_not_found"}  # no bf16 on Turing


def test_compare_ranks_by_expected_only_when_every_device_is_calibrated(client):
    matmul = {"operator": {"kind": "matmul", "m": 4096, "n": 4096, "k": 4096, "dtype": "bf16"}, "engine": "trtllm"}
    body = client.post("/v1/analyze/compare", json={
        "endpoint": "operator", "device_ids": ["nvidia-h100-sxm", "nvidia-b200"], "request": matmul}).json()
    assert body["ranked_by"] == "expected"
    for entry in body["ranking"]:  # each device's expectation is the one its operator analysis answers
        alone = client.post("/v1/analyze/operator", json={**matmul, "device_id": entry["device_id"]}).json()
        assert entry["expected_time_s"] == alone["expected"]["time_s"] and entry["time_s"] == alone["time_s"]
        assert entry["calibration_id"] == alone["expected"]["calibration_id"]
    first, second = body["ranking"]
    assert second["relative_time"] == pytest.approx(second["expected_time_s"] / first["expected_time_s"])
    # An MI300X has no trtllm calibration: the ranking falls back to the bounds, and says so.
    mixed = client.post("/v1/analyze/compare", json={
        "endpoint": "operator", "device_ids": ["nvidia-h100-sxm", "amd-mi300x"], "request": matmul}).json()
    assert mixed["ranked_by"] == "bound" and [e["expected_time_s"] is None for e in mixed["ranking"]].count(True) == 1
    assert mixed["ranking"][1]["relative_time"] == pytest.approx(mixed["ranking"][1]["time_s"] / mixed["ranking"][0]["time_s"])


def test_serving_compare_ranks_as_the_measurements_do_where_the_bounds_do_not(client):
    """InferenceX measured DeepSeek-R1 (fp8, SGLang, MTP, TP 8, 1,024 in / 1,024 out, 4 in flight) at a median TPOT
    of 6.1 ms on an MI355X (2026-05-21) and 6.8 ms on a B200 (2026-02-06), the newest run of each. The bounds, both near
    1.03 ms, put the B200 first; the shipped calibrations for SGLang (6.2 and 6.8 ms) put the MI355X first, as
    measured. (Among the newest aggregated runs of one deployment on two devices measured 10 % apart, it is the one
    pair the bounds order wrongly and the expectations rightly.)"""
    request = {"model_id": "deepseek-v3", "input_len": 1024, "output_len": 1024, "concurrency": 4, "engine": "sglang",
               "dtypes": {"weights": "fp8", "activations": "fp8", "kv_cache": "fp8", "weight_group_size": 16384,
                          "weight_scale_bytes": 4.0},
               "speculative": {"method": "mtp", "draft_tokens": 3, "acceptance_length": 4}, "tensor_parallel": 8,
               "max_batch_per_group": 3}
    body = client.post("/v1/analyze/compare", json={"endpoint": "serving", "device_ids": ["nvidia-b200", "amd-mi355x"],
                                                    "request": request}).json()
    assert body["ranked_by"] == "expected" and body["time_meaning"].startswith("TPOT")
    by_device = {entry["device_id"]: entry for entry in body["ranking"]}
    assert [entry["device_id"] for entry in body["ranking"]] == ["amd-mi355x", "nvidia-b200"]
    assert by_device["nvidia-b200"]["time_s"] < by_device["amd-mi355x"]["time_s"]
    alone = client.post("/v1/analyze/serving", json={**request, "device_id": "amd-mi355x"}).json()
    assert by_device["amd-mi355x"]["expected_time_s"] == alone["expected"]["tpot_s"]
    assert by_device["amd-mi355x"]["time_s"] == alone["bound"]["tpot_s"]
    assert by_device["amd-mi355x"]["tokens_per_s"] == alone["bound"]["output_tokens_per_s"]
    unfit = client.post("/v1/analyze/compare", json={"endpoint": "serving", "device_ids": ["nvidia-h100-sxm", "nvidia-b200"],
                                                     "request": request}).json()
    # 671 B parameters in fp8 do not fit in 8 x 80 GB.
    assert [e["device_id"] for e in unfit["infeasible"]] == ["nvidia-h100-sxm"] and unfit["infeasible"][0]["shortfall_bytes"] > 0


def test_amdahl_what_if(client):
    base = {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "phase": "decode", "batch_size": 64,
            "seq_len": 8192}
    plain = client.post("/v1/analyze/model", json=base).json()
    attention_time = sum(r["total_time_s"] for r in plain["rows"] if r["kind"] == "attention")
    total = plain["totals"]["time_s"]
    body = client.post("/v1/analyze/model", json={**base, "speedups": [{"target": "attention", "factor": 2},
                                                                      {"target": "matmul", "factor": 4}]}).json()
    attention, matmul, both = body["what_if"]
    share = attention_time / total
    # Amdahl: speed-up = 1 / ((1 - p) + p / f); ceiling 1 / (1 - p).
    assert attention["time_share"] == pytest.approx(share)
    assert attention["speedup"] == pytest.approx(1 / ((1 - share) + share / 2))
    assert attention["ceiling"] == pytest.approx(1 / (1 - share))
    assert both["speedup"] > max(attention["speedup"], matmul["speedup"])
    unknown = client.post("/v1/analyze/model", json={**base, "speedups": [{"target": "convolution", "factor": 2}]})
    assert unknown.status_code == 422 and "matches no row" in unknown.json()["detail"]


def test_batch_sweep_answers_match_single_analyses(client):
    request = {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-70b", "phase": "decode", "seq_len": 2048,
               "tensor_parallel": 4}
    body = sweep(client, endpoint="model", request=request, parameter="batch_size", values=[1, 7, 64, 512]).json()
    for row in body["rows"]:
        single = client.post("/v1/analyze/model", json={**request, "batch_size": int(row["value"])}).json()
        assert row["tpot_s"] == pytest.approx(single["tpot_s"], rel=1e-9)
        assert row["flops"] == pytest.approx(single["totals"]["flops"], rel=1e-9)
        assert row["tokens_per_s"] == pytest.approx(single["tokens_per_s"], rel=1e-9)
        assert row["mfu"] == pytest.approx(single["mfu"], rel=1e-9)


def test_a_sweeps_expected_times_are_each_points_own(client):
    """A batch sweep of a dense model runs as two analyses and lines through them (the fast path), a context sweep of
    a prefill step point by point: either way each row's expected time is the model step's own at that point."""
    base = {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "phase": "decode", "batch_size": 8,
            "seq_len": 2048}
    for request, parameter, values in ((base, "batch_size", [1, 7, 64, 300]),
                                       ({**base, "phase": "prefill"}, "seq_len", [128, 1000, 4096])):
        body = client.post("/v1/analyze/sweep", json={"endpoint": "model", "request": request, "parameter": parameter,
                                                      "values": values}).json()
        for row in body["rows"]:
            step = client.post("/v1/analyze/model", json={**request, parameter: int(row["value"])}).json()
            assert row["expected_time_s"] == pytest.approx(step["expected"]["time_s"], rel=1e-9)
            assert row["time_s"] == pytest.approx(step["totals"]["time_s"], rel=1e-9)
            assert row["time_s"] < row["expected_time_s"]
    bare = client.post("/v1/analyze/sweep", json={"endpoint": "model", "request": {**base, "calibration": "none"},
                                                  "parameter": "batch_size", "values": [1, 2]}).json()
    assert [row["expected_time_s"] for row in bare["rows"]] == [None, None]
    operator = client.post("/v1/analyze/sweep", json={
        "endpoint": "operator", "parameter": "operator.m", "values": [1, 4096],
        "request": {"device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": 1, "n": 4096, "k": 4096}}}).json()
    alone = client.post("/v1/analyze/operator", json={"device_id": "nvidia-h100-sxm", "operator": {
        "kind": "matmul", "m": 4096, "n": 4096, "k": 4096}}).json()
    assert operator["rows"][1]["expected_time_s"] == alone["expected"]["time_s"]
