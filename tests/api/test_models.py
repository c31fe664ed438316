"""Model catalog, model analysis and KV capacity over HTTP."""

import pytest

from service.persistence.catalog import model_catalog, nominal_catalog
from tests.conftest import AUTH

TINY = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
        "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000, "hidden_act": "silu",
        "tie_word_embeddings": False}


def test_catalog_lists_every_reference_model(client):
    models = {m["id"]: m for m in client.get("/v1/models").json()}
    assert set(models) == {entry["id"] for entry in model_catalog()}
    assert models["mixtral-8x7b"]["params_active"] < models["mixtral-8x7b"]["params_total"]
    llama = client.get("/v1/models/llama-3.1-8b").json()
    assert llama["params_total"] == 8_030_261_248 and llama["kv_bytes_per_token_bf16"] == 131_072
    assert client.get("/v1/models/nope").status_code == 404


def test_create_analyze_and_delete_a_model(client):
    response = client.post("/v1/models", json={"id": "tiny", "config": TINY}, headers=AUTH)
    assert response.status_code == 201, response.text
    assert response.json()["params_total"] == 1_100_048_384  # TinyLlama's shape
    assert client.post("/v1/models", json={"id": "tiny", "config": TINY}, headers=AUTH).status_code == 409
    body = {"device_id": "nvidia-l4", "model_id": "tiny", "phase": "decode", "seq_len": 100}
    assert client.post("/v1/analyze/model", json=body).status_code == 200
    assert client.delete("/v1/models/tiny", headers=AUTH).status_code == 204
    assert client.post("/v1/analyze/model", json=body).status_code == 404
    assert client.post("/v1/models", json={"id": "x", "config": TINY}).status_code == 401


def test_unusable_config_is_422_naming_the_fields(client):
    response = client.post("/v1/models", json={"id": "broken", "config": {"model_type": "llama", "hidden_size": 64}},
                           headers=AUTH)
    assert response.status_code == 422
    locs = [f["loc"] for f in response.json()["fields"]]
    # What sizes the model has no default; the vocabulary would take LlamaConfig's (docs/concepts.md).
    assert "body.config.num_hidden_layers" in locs and "body.config.intermediate_size" in locs
    assert "body.config.vocab_size" not in locs
    inline = client.post("/v1/analyze/model", json={"device_id": "nvidia-h100-sxm", "phase": "decode", "seq_len": 8,
                                                     "model": {"model_type": "gpt_neox"}})
    assert inline.status_code == 422 and inline.json()["fields"][0]["loc"] == "body.model.model_type"
    generic = client.post("/v1/analyze/model", json={"device_id": "nvidia-h100-sxm", "phase": "decode", "seq_len": 8,
                                                      "model": {"format": "generic", "layers": 2}})
    assert generic.status_code == 422 and "body.model.hidden" in [f["loc"] for f in generic.json()["fields"]]


@pytest.mark.parametrize("body", [
    {"device_id": "nvidia-h100-sxm", "phase": "decode", "seq_len": 8},
    {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "model": TINY, "phase": "decode", "seq_len": 8},
    {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "phase": "train", "seq_len": 8},
    {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "phase": "decode", "seq_len": 0},
    {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "phase": "decode", "seq_len": 8, "tensor_parallel": 3},
])
def test_invalid_model_requests_are_422(client, body):
    assert client.post("/v1/analyze/model", json=body).status_code == 422


def test_decode_and_prefill_serving_metrics(client):
    base = {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "seq_len": 4096}
    decode = client.post("/v1/analyze/model", json={**base, "phase": "decode", "batch_size": 32}).json()
    assert decode["ttft_s"] is None and decode["tpot_s"] == decode["totals"]["time_s"]
    assert decode["tokens_per_s"] == pytest.approx(32 / decode["tpot_s"])
    assert decode["totals"]["time_s"] == pytest.approx(sum(r["total_time_s"] for r in decode["rows"]))
    assert decode["totals"]["flops"] == pytest.approx(sum(r["flops"] * r["layers"] * r["count"] for r in decode["rows"]))
    prefill = client.post("/v1/analyze/model", json={**base, "phase": "prefill", "output_len": 128}).json()
    assert prefill["ttft_s"] == prefill["totals"]["time_s"]
    assert prefill["e2e_latency_s"] > prefill["ttft_s"]
    names = {r["name"] for r in prefill["rows"]}
    assert {"embedding", "qkv_proj", "attention", "o_proj", "gate_up_proj", "down_proj", "lm_head"} <= names


def test_kv_capacity(client):
    body = {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-70b", "context_len": 8192, "tensor_parallel": 4,
            "memory_utilization": 0.9}
    result = client.post("/v1/analyze/kv-capacity", json=body).json()
    # Per device: 0.9 x the 85,520,809,984 bytes the runtime exposes = 76,968,728,985.6 usable; weights
    # 70,553,706,496 x 2 / 4 = 35,276,853,248; the profiling step's activations held back, 8,192 tokens x (8,192
    # residual + 2 x 28,672 / 4 gate-up) x 2 bytes + 256 sequences' fp32 logits 128,256 / 4 x 4 = 401,932,288;
    # KV per token 2 x (8/4) x 128 x 2 x 80 = 81,920, per request 8192 x 81,920 = 671,088,640;
    # floor(41,289,943,449.6 / 671,088,640) = 61.
    assert result["weights_bytes"] == 35_276_853_248
    assert result["activation_reserve_bytes"] == 401_932_288
    assert result["kv_bytes_per_request"] == 671_088_640
    assert result["max_concurrent_requests"] == 61
    assert result["fits"] is True
    too_small = client.post("/v1/analyze/kv-capacity", json={**body, "tensor_parallel": 1}).json()
    assert too_small["fits"] is False and too_small["max_concurrent_requests"] == 0 and too_small["shortfall_bytes"] > 0
    both = client.post("/v1/analyze/kv-capacity", json={**body, "memory_capacity_bytes": 1e9})
    assert both.status_code == 422


def preferred_dtype(device):
    tensor = {p["dtype"] for p in device["compute_peaks"] if p["unit"] == "tensor"}
    return next((d for d in ("bf16", "fp16") if d in tensor), "fp32")


def test_every_catalog_model_on_every_catalog_device(client):
    for device in nominal_catalog():
        dtype = preferred_dtype(device)
        for entry in model_catalog():
            for phase in ("prefill", "decode"):
                body = {"device_id": device["id"], "model_id": entry["id"], "phase": phase, "batch_size": 2,
                        "seq_len": 512, "dtypes": {"weights": dtype, "activations": dtype, "kv_cache": dtype}}
                response = client.post("/v1/analyze/model", json=body)
                assert response.status_code == 200, (device["id"], entry["id"], response.text)
            # TinyLlama's positions stop at 2,048: a longer context is refused, not sized.
            context = min(4096, entry["config"].get("max_position_embeddings", 4096))
            capacity = client.post("/v1/analyze/kv-capacity", json={
                "device_id": device["id"], "model_id": entry["id"], "context_len": context})
            assert capacity.status_code == 200


def test_schemes_by_name_and_weight_only_said_so(client):
    """`weights: fp8` alone is weight-only: the matmuls run at the bf16 peak, and the answer says so; w8a8-fp8 names
    fp8 activations too, so Llama-3.1-8B's 4k prefill on an H100 computes at the fp8 peak (1,979 against 989
    TFLOP/s dense): its compute-bound matmuls take half the time."""
    base = {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "phase": "prefill", "seq_len": 4096}
    weight_only = client.post("/v1/analyze/model", json={**base, "dtypes": {"weights": "fp8"}}).json()
    w8a8 = client.post("/v1/analyze/model", json={**base, "dtypes": {"scheme": "w8a8-fp8"}}).json()
    assert any("weight-only quantisation: the matmuls compute at the bf16 peak" in a for a in weight_only["assumptions"])
    assert not any("weight-only" in a for a in w8a8["assumptions"])
    mlp = [(r["name"], r["time_s"]) for r in weight_only["rows"] if r["name"] == "gate_up_proj"]
    fast = [(r["name"], r["time_s"]) for r in w8a8["rows"] if r["name"] == "gate_up_proj"]
    assert fast[0][1] == pytest.approx(mlp[0][1] / 2, rel=0.01)
    # A scheme's parts can be overridden: w4a16 with groups of 64.
    grouped = client.post("/v1/analyze/model", json={**base, "dtypes": {"scheme": "w4a16", "weight_group_size": 64}})
    assert grouped.status_code == 200
    assert any("weights int4" in a for a in grouped.json()["assumptions"])
    assert client.post("/v1/analyze/model", json={**base, "dtypes": {"scheme": "w3a3"}}).status_code == 422


def test_a_hybrid_model_over_http_holds_its_state_apart(client):
    # Qwen3-Next-80B at TP 4 on an H200, bf16: 12 attention layers x 2 (K and V) x 1 KV head a device (its 2 heads
    # replicated over 4 devices) x 256 x 2 bytes = 12,288 bytes a token; 36 Gated DeltaNet layers x 1,097,728 bytes
    # of state, their heads split 4 ways.
    body = {"device_id": "nvidia-h200-sxm", "model_id": "qwen3-next-80b-a3b", "context_len": 32768,
            "tensor_parallel": 4}
    result = client.post("/v1/analyze/kv-capacity", json=body).json()
    assert result["kv_bytes_per_token"] == 12 * 2 * 1 * 256 * 2
    assert result["state_bytes_per_request"] == 36 * 1_097_728 / 4
    assert result["kv_bytes_per_request"] == 32768 * 12_288 + 36 * 1_097_728 / 4
    assert any("recurrent layers (gated_delta)" in note for note in result["assumptions"])
    listed = client.get("/v1/models/qwen3-next-80b-a3b").json()
    assert listed["kv_bytes_per_token_bf16"] == 24_576 and listed["layers"] == "36 x recurrent MoE, 12 x MoE"
    scan = client.post("/v1/analyze/operator", json={"device_id": "nvidia-h200-sxm", "operator": {
        "kind": "recurrent_scan", "rule": "gated_delta", "seq_len": 4096, "heads": 32, "key_heads": 16,
        "key_dim": 128, "value_dim": 128}})
    assert scan.status_code == 200 and scan.json()["flops"] == 21_474_836_480  # 64 chunks x 32 heads x 10,485,760


def test_a_config_with_a_non_finite_number_is_refused(client):
    # Python's json reads Infinity and NaN, which no JSON column (PostgreSQL's) or strict client takes back.
    body = '{"id": "inf-model", "config": {"model_type": "llama", "time_step_limit": [0.0, Infinity]}}'
    response = client.post("/v1/models", content=body, headers={**AUTH, "content-type": "application/json"})
    assert response.status_code == 422
    assert "config.time_step_limit.1 is not a finite number" in response.text
    assert client.get("/v1/models/inf-model").status_code == 404


def test_every_catalog_file_is_strict_json():
    import json
    from pathlib import Path

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    for path in Path("service/data/models").glob("*.json"):
        json.loads(path.read_text(), parse_constant=refuse)
