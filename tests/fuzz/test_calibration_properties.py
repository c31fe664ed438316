"""Properties every calibrated answer keeps, over generated requests: the expectation is never below the bound, and
asking for no calibration leaves the bound exactly as it was (a calibration adds an expectation, it never moves a
bound)."""

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.main import create_app

PROPERTY = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
# The shipped calibrations and an app of their own: what these read does not change with the database's dialect.
pytestmark = pytest.mark.dialect_free
CALIBRATED = ["nvidia-h100-sxm", "nvidia-h200-sxm", "nvidia-b200"]  # the shipped GEMM calibrations' devices
sizes = st.integers(1, 2**16)


@pytest.fixture(scope="module")
def property_client(tmp_path_factory):
    from service.runtime.config import Settings

    path = tmp_path_factory.mktemp("properties") / "properties.db"
    with TestClient(create_app(Settings(database_url=f"sqlite:///{path}", log_level="ERROR"))) as client:
        yield client


def both(client, path: str, body: dict) -> tuple[dict, dict]:
    calibrated, bare = (client.post(path, json=body | extra) for extra in ({}, {"calibration": "none"}))
    assert calibrated.status_code == bare.status_code == 200, calibrated.text
    return calibrated.json(), bare.json()


@PROPERTY
@given(device=st.sampled_from(CALIBRATED), m=sizes, n=sizes, k=sizes, dtype=st.sampled_from(["bf16", "fp8"]))
def test_a_matmul_expectation_never_undercuts_its_unmoved_bound(property_client, device, m, n, k, dtype):
    calibrated, bare = both(property_client, "/v1/analyze/operator", {
        "device_id": device, "operator": {"kind": "matmul", "m": m, "n": n, "k": k, "dtype": dtype}})
    assert calibrated["expected"]["time_s"] >= calibrated["time_s"]
    assert {**calibrated, "expected": None} == bare


@PROPERTY
@given(device=st.sampled_from(CALIBRATED), model=st.sampled_from(["llama-3.1-8b", "qwen3-8b", "gemma-2-9b"]),
       phase=st.sampled_from(["prefill", "decode"]), batch=st.integers(1, 256), seq_len=st.integers(1, 8192))
def test_a_model_step_expectation_never_undercuts_its_unmoved_bound(property_client, device, model, phase, batch,
                                                                   seq_len):
    calibrated, bare = both(property_client, "/v1/analyze/model", {
        "device_id": device, "model_id": model, "phase": phase, "batch_size": batch, "seq_len": seq_len})
    assert calibrated["expected"]["time_s"] >= calibrated["totals"]["time_s"]
    assert 0 < calibrated["expected"]["calibrated_share"] <= 1
    assert {**calibrated, "expected": None} == bare


@settings(PROPERTY, max_examples=15)
@given(input_len=st.integers(1, 16384), output_len=st.integers(1, 4096), concurrency=st.integers(1, 1024),
       speculative=st.booleans())
def test_a_serving_expectation_never_undercuts_its_unmoved_bound(property_client, input_len, output_len, concurrency,
                                                                 speculative):
    body = {"model_id": "deepseek-v3", "device_id": "nvidia-b200", "engine": "sglang", "input_len": input_len,
            "output_len": output_len, "concurrency": concurrency, "dtypes": {"scheme": "w8a8-fp8", "kv_cache": "fp8"},
            "tensor_parallel": 8, "expert_parallel": 8, "attention_data_parallel": 8}
    if speculative:
        body["speculative"] = {"method": "mtp", "draft_tokens": 3, "acceptance_length": 3}
    calibrated, bare = both(property_client, "/v1/analyze/serving", body)
    expected, bound = calibrated["expected"], calibrated["bound"]
    for name in ("ttft_s", "tpot_s", "itl_s", "e2e_latency_s"):
        assert expected[name] >= bound[name] * (1 - 1e-12), name
    for name in ("requests_per_s", "output_tokens_per_s", "tokens_per_s_per_user"):
        assert expected[name] <= bound[name] * (1 + 1e-12), name
    assert calibrated["bound"] == bare["bound"] and bare["expected"] is None
