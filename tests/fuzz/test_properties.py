"""Property fuzzing of the two parsers that take free-form JSON: model configs and fusion graphs.
Whatever arrives, the answer is a 2xx or a 4xx in the service's error shape, never a 5xx."""

import copy

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.main import create_app
from service.persistence.catalog import model_catalog

FUZZ = settings(max_examples=int(__import__("os").environ.get("FUZZ_EXAMPLES", 150)), deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

json_scalars = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False, allow_infinity=False) \
    | st.text(max_size=12)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.text(max_size=8), inner, max_size=4), max_leaves=12)
CONFIGS = [entry["config"] for entry in model_catalog()]


@pytest.fixture(scope="module")
def fuzz_client(tmp_path_factory):
    from service.runtime.config import Settings

    path = tmp_path_factory.mktemp("fuzz") / "fuzz.db"
    with TestClient(create_app(Settings(database_url=f"sqlite:///{path}", log_level="ERROR")),
                    raise_server_exceptions=False) as client:
        yield client


def assert_handled(response):
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        body = response.json()
        assert set(body) == {"error", "detail", "fields"}, body


@st.composite
def mutated_configs(draw):
    config = copy.deepcopy(draw(st.sampled_from(CONFIGS)))
    for _ in range(draw(st.integers(1, 4))):
        key = draw(st.sampled_from(sorted(config)))
        if draw(st.booleans()):
            config.pop(key)
        else:
            config[key] = draw(json_values | st.integers(-5, 2**41))
    return config


@FUZZ
@given(config=mutated_configs() | json_values)
def test_model_configs_never_cause_a_server_error(fuzz_client, config):
    body = {"device_id": "nvidia-h100-sxm", "phase": "decode", "batch_size": 2, "seq_len": 64, "model": config}
    assert_handled(fuzz_client.post("/v1/analyze/model", json=body))
    assert_handled(fuzz_client.post("/v1/analyze/kv-capacity", json={
        "device_id": "nvidia-h100-sxm", "context_len": 128, "model": config}))


NAMES = ["a", "b", "c", "d", "e"]
KINDS = ["elementwise", "matmul", "rmsnorm", "layernorm", "softmax", "rope", "attention", "embedding",
         "grouped_matmul", "convolution"]


@st.composite
def graphs(draw):
    tensors = {name: {"shape": draw(st.lists(st.integers(1, 64), min_size=1, max_size=4)),
                      "dtype": draw(st.sampled_from(["bf16", "fp32", "int32", "fp8"]))}
               for name in draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=5, unique=True))}
    ops = []
    for index in range(draw(st.integers(1, 4))):
        op = {"name": f"op{index}", "kind": draw(st.sampled_from(KINDS)),
              "inputs": draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3)),
              "outputs": [draw(st.sampled_from(NAMES))]}
        if draw(st.booleans()):
            op["op"] = draw(st.sampled_from(["relu", "mul", "add", "silu", "tanh"]))
        if draw(st.booleans()):
            op[draw(st.text(max_size=6))] = draw(json_values)
        ops.append(op)
    body = {"device_id": "nvidia-h100-sxm", "tensors": tensors, "ops": ops}
    if draw(st.booleans()):
        body["groups"] = draw(st.lists(st.lists(st.sampled_from([o["name"] for o in ops] + ["zz"]), max_size=3), max_size=3))
    return body


@FUZZ
@given(body=graphs() | json_values)
def test_fusion_graphs_never_cause_a_server_error(fuzz_client, body):
    assert_handled(fuzz_client.post("/v1/analyze/fusion", json=body))
