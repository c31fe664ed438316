"""Answers a planner can act on: memory on every model answer, KV budgets as serving engines compute them,
the model's position limit, devices ranked only where the workload fits. Hand derivations beside each.

Shared figures: Llama-3.1-8B has 8,030,261,248 parameters (untied head), so 16,060,522,496 bytes in bf16; its
K and V take 2 x 32 layers x 8 KV heads x 128 x 2 bytes = 131,072 bytes per token. The H100 SXM's runtime
exposes 81,559 MiB = 85,520,809,984 bytes (nvidia-smi; the catalog cites it) of its 80 GiB as built, of which a
serving engine takes 0.9 by default (vLLM's gpu_memory_utilization). Before it sizes the KV cache it holds back the
activation peak of an 8,192-token profiling step over 256 sequences: 8,192 x (4,096 residual + 28,672 gate-up) x
2 bytes + 256 x 128,256 x 4 bytes of fp32 logits = 536,870,912 + 131,334,144 = 668,205,056 bytes.
"""

import pytest

H100 = "nvidia-h100-sxm"
WEIGHTS_8B = 8_030_261_248 * 2
KV_TOKEN_8B = 131_072
H100_USABLE = 81_559 * 2**20
SERVING_USABLE = 0.9 * H100_USABLE
RESERVE_8B = 8192 * (4096 + 28_672) * 2 + 256 * 128_256 * 4


def model(client, **body):
    return client.post("/v1/analyze/model", json={"device_id": H100, "model_id": "llama-3.1-8b", **body})


def kv(client, **body):
    return client.post("/v1/analyze/kv-capacity", json={"device_id": H100, "model_id": "llama-3.1-8b", **body})


def test_a_step_that_cannot_fit_is_answered_but_says_so(client):
    """Decode at batch 1,024 over 4,096 cached tokens: each cache holds 4,097 tokens after this step, 4,112 in
    blocks of 16, so 1,024 x 4,112 x 131,072 = 551,903,297,536 bytes of KV on an 85.5 GB device."""
    response = model(client, phase="decode", batch_size=1024, seq_len=4096)
    assert response.status_code == 200
    body = response.json()
    memory = body["memory"]
    assert body["fits"] is False and memory["fits"] is False
    assert memory["kv_cache_bytes"] == 1024 * 4112 * KV_TOKEN_8B
    assert memory["weights_bytes"] == WEIGHTS_8B
    assert memory["usable_bytes"] == pytest.approx(SERVING_USABLE) and memory["capacity_bytes"] == 80 * 2**30
    assert memory["activation_bytes"] == RESERVE_8B  # 1,024 one-token steps need less than the profiling reserve
    assert memory["shortfall_bytes"] == pytest.approx(memory["required_bytes"] - SERVING_USABLE)
    assert memory["headroom_bytes"] == 0
    assert any("DOES NOT FIT" in line for line in body["assumptions"])
    assert body["tokens_per_s"] > 0  # still a what-if answer
    small = model(client, phase="decode", batch_size=32, seq_len=4096).json()
    assert small["fits"] is True and small["memory"]["headroom_bytes"] > 0


def test_a_batch_sweep_marks_each_point_and_the_largest_that_fits(client):
    """Per sequence at a 4,096-token decode: KV 4,112 x 131,072 = 538,968,064 bytes; the step's own activations
    (65,536 + 513,024 bytes a sequence) stay below the 668,205,056 held back for the profiling step up to 1,154
    sequences, so (76,968,728,985.6 - 16,060,522,496 - 668,205,056) / 538,968,064 = 111.8: batch 111 is the
    largest that fits."""
    sweep = client.post("/v1/analyze/sweep", json={
        "endpoint": "model", "parameter": "batch_size", "range": {"start": 1, "stop": 1024, "step": 1},
        "request": {"device_id": H100, "model_id": "llama-3.1-8b", "phase": "decode", "seq_len": 4096}}).json()
    assert sweep["largest_feasible_value"] == 111
    fits = {row["value"]: row["fits"] for row in sweep["rows"]}
    assert fits[111] is True and fits[112] is False and fits[1024] is False


def test_kv_budgets_use_the_memory_the_runtime_exposes_and_whole_blocks(client):
    """100-token requests: a 16-token-block engine holds 112 tokens of each, 14,680,064 bytes; the budget is 0.9 of
    the 85,520,809,984 bytes the runtime exposes (not of the 85,899,345,920 as built), less the weights and the
    profiling step's activations: floor((76,968,728,985.6 - 16,060,522,496 - 668,205,056) / 14,680,064) = 4,103
    requests, where all 80 GiB, no reserve and 100 tokens would have claimed 5,328."""
    paged = kv(client, context_len=100).json()
    assert paged["kv_bytes_per_request"] == 112 * KV_TOKEN_8B
    assert paged["usable_bytes"] == pytest.approx(SERVING_USABLE) and paged["capacity_bytes"] == 80 * 2**30
    assert paged["activation_reserve_bytes"] == RESERVE_8B
    assert paged["max_concurrent_requests"] == (SERVING_USABLE - WEIGHTS_8B - RESERVE_8B) // (112 * KV_TOKEN_8B) == 4103
    contiguous = kv(client, context_len=100, block_size=1).json()
    assert contiguous["kv_bytes_per_request"] == 100 * KV_TOKEN_8B
    # memory_utilization multiplies the usable figure, as gpu_memory_utilization multiplies CUDA's total; the
    # reserve follows profile_tokens (0: none).
    whole = kv(client, context_len=100, memory_utilization=1.0, profile_tokens=0).json()
    assert whole["usable_bytes"] == H100_USABLE and whole["activation_reserve_bytes"] == 0
    assert whole["max_concurrent_requests"] == (H100_USABLE - WEIGHTS_8B) // (112 * KV_TOKEN_8B) == 4731


def test_contexts_beyond_the_model_are_refused_and_the_model_limit_is_reported(client):
    refused = kv(client, context_len=200_000)
    assert refused.status_code == 422
    assert refused.json()["fields"][0]["loc"] == "body.context_len"
    assert "131,072" in refused.json()["fields"][0]["msg"]
    step = model(client, phase="prefill", seq_len=200_000)
    assert step.status_code == 422 and step.json()["fields"][0]["loc"] == "body.seq_len"
    grown = model(client, phase="prefill", seq_len=131_000, output_len=100)
    assert grown.status_code == 422 and grown.json()["fields"][0]["loc"] == "body.output_len"
    # Gemma-2-9B: memory would hold far more, the model's positions stop at 8,192.
    gemma = client.post("/v1/analyze/kv-capacity", json={"device_id": H100, "model_id": "gemma-2-9b", "context_len": 1024})
    assert gemma.json()["max_context_len"] == 8192 and gemma.json()["max_context_len_bound_by"] == "model"


def test_mixed_traffic_is_sized_at_its_mean_and_its_p95(client):
    """Half the requests at 1,000 tokens (1,008 in blocks), 45 % at 4,000, 5 % at 16,000: the p95 length is
    4,000 (50 % + 45 % reach 95 %); the mean cache is (0.5 x 1,008 + 0.45 x 4,000 + 0.05 x 16,000) x 131,072
    = 3,104 x 131,072 bytes."""
    mix = [{"context_len": 1000, "share": 0.5}, {"context_len": 4000, "share": 0.45},
           {"context_len": 16000, "share": 0.05}]
    body = kv(client, context_len=4000, context_mix=mix).json()["mix"]
    available = SERVING_USABLE - WEIGHTS_8B - RESERVE_8B
    assert body["p95_context_len"] == 4000
    assert body["mean_kv_bytes_per_request"] == pytest.approx(3104 * KV_TOKEN_8B)
    assert body["max_concurrent_requests"] == int(available // (3104 * KV_TOKEN_8B))
    assert body["max_concurrent_requests_at_p95"] == available // (4000 * KV_TOKEN_8B)
    assert kv(client, context_len=4000, context_mix=mix[:2]).status_code == 422  # shares sum to 0.95


def test_compare_ranks_only_devices_where_the_workload_fits(client):
    """Llama-3.1-70B at tensor parallel 4: 70,553,706,496 x 2 / 4 = 35.3 GB of weights per chip, more than a
    16 GiB TPU v5e holds."""
    body = client.post("/v1/analyze/compare", json={
        "endpoint": "model", "device_ids": [H100, "google-tpu-v5e"],
        "request": {"model_id": "llama-3.1-70b", "phase": "decode", "batch_size": 8, "seq_len": 4096,
                    "tensor_parallel": 4}}).json()
    assert [entry["device_id"] for entry in body["ranking"]] == [H100]
    [tpu] = body["infeasible"]
    assert tpu["device_id"] == "google-tpu-v5e"
    assert tpu["shortfall_bytes"] > 70_553_706_496 * 2 / 4 - 16 * 2**30


def test_a_measured_step_time_gives_the_achieved_mfu(client):
    """TinyLlama-1.1B decode at batch 1 on a T4 (65 TFLOP/s fp16 tensor): a 10 ms measured TPOT achieves
    FLOPs / 0.01 s / 65e12, the FLOPs being about 2 x 1.1e9 per token."""
    body = client.post("/v1/analyze/model", json={
        "device_id": "nvidia-t4", "model_id": "tinyllama-1.1b-chat", "phase": "decode", "seq_len": 512,
        "dtypes": {"weights": "fp16", "activations": "fp16", "kv_cache": "fp16"}, "measured_time_s": 0.01}).json()
    flops = body["totals"]["flops"]
    assert flops == pytest.approx(2 * 1.1e9, rel=0.05)
    assert body["achieved"]["mfu"] == pytest.approx(flops / 0.01 / 65e12)
    assert body["achieved"]["roof_fraction"] == pytest.approx(body["totals"]["time_s"] / 0.01)


def test_a_measured_decode_step_is_judged_by_its_bandwidth_too(client):
    """Decode is bound by memory: beside MFU the answer gives the bandwidth achieved and MBU. TinyLlama-1.1B's fp16
    weights (about 2.2 GB) read in a 10 ms step on a T4 (320 GB/s nominal HBM): about 220 GB/s, MBU about 0.69."""
    body = client.post("/v1/analyze/model", json={
        "device_id": "nvidia-t4", "model_id": "tinyllama-1.1b-chat", "phase": "decode", "seq_len": 512,
        "dtypes": {"weights": "fp16", "activations": "fp16", "kv_cache": "fp16"}, "measured_time_s": 0.01}).json()
    moved = body["totals"]["bytes"]
    assert body["achieved"]["bandwidth_bytes_per_s"] == pytest.approx(moved / 0.01)
    assert body["achieved"]["mbu"] == pytest.approx(moved / 0.01 / 320e9)
    assert 0.6 < body["achieved"]["mbu"] < 0.75


def test_tensor_parallelism_above_the_kv_heads_replicates_them(client):
    """Llama 3.1 70B has 8 K/V heads; on 16 devices vLLM and SGLang keep one K/V head a device, each replicated on
    two. Weights per device: the 8-device figure halved plus the replicas' K and V projections beyond an even share,
    80 layers x 2 x 8,192 x 128 x (1 - 8 / 16) x 2 bytes = 167,772,160; the cache a token a device: 80 layers x 2 x
    1 head x 128 x 2 bytes = 40,960 (not 20,480: a replicated head is cached on both its devices). 12 devices split
    neither the 64 query heads nor a whole number of K/V replicas: refused, naming the field."""
    body = {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-70b", "phase": "decode", "batch_size": 8,
            "seq_len": 2048}
    eight = client.post("/v1/analyze/model", json={**body, "tensor_parallel": 8}).json()["memory"]
    sixteen = client.post("/v1/analyze/model", json={**body, "tensor_parallel": 16}).json()["memory"]
    assert sixteen["weights_bytes"] == pytest.approx(eight["weights_bytes"] / 2 + 167_772_160)
    assert sixteen["kv_cache_bytes"] == pytest.approx(8 * (2048 + 1) * 40_960, rel=0.01)
    refused = client.post("/v1/analyze/model", json={**body, "tensor_parallel": 12})
    assert refused.status_code == 422 and refused.json()["fields"][0]["loc"] == "body.tensor_parallel"
    plan = client.post("/v1/plan/serving", json={"model_id": "llama-3.1-70b", "device_ids": ["nvidia-h100-sxm"],
                                                  "total_devices": 16, "input_len": 1024, "output_len": 256,
                                                  "top_n": 20}).json()
    assert 16 in {c["tensor_parallel"] for c in plan["configs"] + plan["pareto"]}
