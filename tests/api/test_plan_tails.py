"""A serving plan's tails: its best configurations simulated as serving deployments (POST /v1/analyze/serving's
scheduling simulation) for their percentiles, and percentile SLOs held to them. DeepSeek-V3 on 8 B200s with SGLang
in fp8 has a shipped scheduling calibration."""

from __future__ import annotations

FP8 = {"weights": "fp8", "activations": "fp8", "kv_cache": "fp8", "weight_group_size": 16384, "weight_scale_bytes": 4}
BODY = {"model_id": "deepseek-v3", "device_ids": ["nvidia-b200"], "total_devices": 8, "input_len": 1024,
        "output_len": 1024, "dtypes": FP8, "engine": "sglang", "top_n": 3}


def planned(client, **slo):
    return client.post("/v1/plan/serving", json=BODY | {"slo": {"tpot_s": 0.03, **slo}})


def analysed(client, config: dict) -> dict:
    """The configuration as a serving analysis: the whole deployment's concurrency, its replicas as workers."""
    body = {key: BODY[key] for key in ("model_id", "dtypes", "engine")} | {
        "device_id": config["device_id"], "input_len": 1024, "output_len": 1024,
        "concurrency": config["concurrency_per_replica"] * config["replicas"], "workers": config["replicas"],
        "tensor_parallel": config["tensor_parallel"], "expert_parallel": config["expert_parallel"],
        "attention_data_parallel": config["attention_data_parallel"]}
    return client.post("/v1/analyze/serving", json=body).json()["expected"]


def test_each_configuration_carries_its_simulated_percentiles(client):
    response = planned(client)
    assert response.status_code == 200
    configs = response.json()["configs"]
    assert len(configs) == 3
    for config in configs:
        percentiles = config["expected"]["percentiles"]
        assert percentiles == analysed(client, config)["percentiles"]
        assert percentiles["ttft_s"]["p50"] <= percentiles["ttft_s"]["p90"] <= percentiles["ttft_s"]["p99"]


def test_a_percentile_slo_leaves_out_the_configurations_that_miss_it(client):
    """Without it the best configurations reach a p99 TTFT above 2 s (the first of 151 requests in flight at once wait
    for the others' prompts); with slo.ttft_p99_s 2 every one returned is at or under it, and the answer says how
    many missed."""
    every = [c["expected"]["percentiles"]["ttft_s"]["p99"] for c in planned(client).json()["configs"]]
    assert max(every) > 2
    answer = planned(client, ttft_p99_s=2).json()
    assert answer["configs"]
    assert all(c["expected"]["percentiles"]["ttft_s"]["p99"] <= 2 for c in answer["configs"])
    assert any("ttft_p99_s <= 2 s" in note and "missed" in note for note in answer["assumptions"])


def test_a_percentile_slo_nothing_meets_is_a_422_naming_it(client):
    response = planned(client, ttft_p99_s=0.01)
    assert response.status_code == 422
    field = response.json()["fields"][0]
    assert field["loc"] == "body.slo.ttft_p99_s" and "closest reaches" in field["msg"]


def test_a_percentile_slo_without_an_engine_is_a_422_saying_why(client):
    body = {key: value for key, value in BODY.items() if key != "engine"} | {"slo": {"tpot_p90_s": 0.05}}
    response = client.post("/v1/plan/serving", json=body)
    assert response.status_code == 422
    field = response.json()["fields"][0]
    assert field["loc"] == "body.slo.tpot_p90_s" and "needs an engine" in field["msg"]


def test_each_configuration_carries_the_commands_that_launch_it(client):
    """The plan's configurations with the engine's launch: the same commands a serving analysis of that deployment
    gives (its replicas as workers, its concurrency over them)."""
    for config in planned(client).json()["configs"]:
        body = {key: BODY[key] for key in ("model_id", "dtypes", "engine")} | {
            "device_id": config["device_id"], "input_len": 1024, "output_len": 1024,
            "concurrency": config["concurrency_per_replica"] * config["replicas"], "workers": config["replicas"],
            "tensor_parallel": config["tensor_parallel"], "expert_parallel": config["expert_parallel"],
            "attention_data_parallel": config["attention_data_parallel"]}
        launch = client.post("/v1/analyze/serving", json=body).json()["launch"]
        assert config["launch"] == launch and "sglang.launch_server" in launch["command"]
