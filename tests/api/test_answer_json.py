"""The hot analyses write their answers' JSON straight from plain fields (service/translation/plain_fields.py):
those bytes must be exactly the response model's JSON, whatever the request. Each case compares the bytes the
routes send with the validated model's own serialisation of the same answer, so a field out of order, an int
where the model holds a float, an enum object or a missing default would show as a difference."""

import json
import random

import pytest

from schemas.analysis import OperatorAnalysisRequest
from schemas.models import ModelAnalysisRequest
from service.api.examples import MODEL_EXAMPLES, OPERATOR_EXAMPLES
from service.translation.models.analyses import analyze_model_request, model_answer_json
from service.translation.operators.analyses import analyze_operator_request, operator_answer_json

DEVICES = ["nvidia-h100-sxm", "nvidia-a100-80gb-sxm", "amd-mi300x", "nvidia-l4", "nvidia-b200"]
MODELS = ["llama-3.1-8b", "llama-3.1-70b", "mixtral-8x7b", "deepseek-v3", "gemma-2-9b", "qwen3-30b-a3b"]


def operator_requests(rng: random.Random) -> list[dict]:
    """Every documented operator example on several devices, with the options that change the answer's shape."""
    bodies = []
    for example in OPERATOR_EXAMPLES.values():
        for device in DEVICES:
            body = {**example["value"], "device_id": device}
            bodies.append(body)
            bodies.append({**body, "measured_time_s": rng.uniform(1e-6, 1e-2), "roofs": rng.choice(["nominal", "effective"])})
            bodies.append({**body, "bytes_by_level": {"hbm": rng.uniform(1e6, 1e9), "l2": rng.uniform(1e6, 1e10)}})
            bodies.append({**body, "sustained_clock_hz": 1.2e9})
    for _ in range(40):
        bodies.append({"device_id": rng.choice(DEVICES), "operator": {
            "kind": "matmul", "m": rng.randint(1, 8192), "n": rng.randint(1, 8192), "k": rng.randint(1, 8192),
            "batch": rng.randint(1, 8), "dtype": rng.choice(["bf16", "fp16", "fp32", "fp8_e4m3"]),
            "apply_efficiency": rng.random() < 0.5}})
    return bodies


def model_requests(rng: random.Random) -> list[dict]:
    bodies = [example["value"] for example in MODEL_EXAMPLES.values()]
    for _ in range(40):
        body = {"device_id": rng.choice(DEVICES), "model_id": rng.choice(MODELS), "phase": rng.choice(["prefill", "decode"]),
                "batch_size": rng.randint(1, 64), "seq_len": rng.randint(1, 4096),
                "tensor_parallel": rng.choice([1, 2, 8])}
        if rng.random() < 0.3:
            body["output_len"] = rng.randint(2, 512)
        if rng.random() < 0.3:
            body["measured_time_s"] = rng.uniform(1e-4, 1.0)
        if rng.random() < 0.3:
            body["speedups"] = [{"target": "attention", "factor": 2.0}, {"target": "matmul", "factor": 1.5}]
        if rng.random() < 0.2:
            body["dtypes"] = {"weights": "int4", "kv_cache": "fp8_e4m3"}
        bodies.append(body)
    return bodies


def same_bytes(bodies: list[dict], request_model, answer_json, answer_model, catalog) -> int:
    """How many bodies were answered, each with exactly the model's bytes; a body one path refuses is refused
    by the other alike (a dtype the device lacks, a model too wide for the tensor parallelism)."""
    answered = 0
    for body in bodies:
        request = request_model.model_validate(body)
        try:
            expected = answer_model(request, catalog).model_dump_json().encode()
        except Exception as exc:
            with pytest.raises(type(exc)):
                answer_json(request, catalog)
            continue
        assert answer_json(request, catalog) == expected, body
        answered += 1
    return answered


def test_operator_answers_are_the_models_bytes(catalog_with_measurements):
    catalog = catalog_with_measurements
    assert same_bytes(operator_requests(random.Random(11)), OperatorAnalysisRequest, operator_answer_json,
                      analyze_operator_request, catalog) > 150
    measured = json.loads(operator_answer_json(OperatorAnalysisRequest.model_validate(
        OPERATOR_EXAMPLES["matmul"]["value"]), catalog))
    assert measured["compute_roof"]["source"] == "measured" and measured["memory_roof"]["source"] == "measured"


def test_model_answers_are_the_models_bytes(catalog_with_measurements):
    assert same_bytes(model_requests(random.Random(12)), ModelAnalysisRequest, model_answer_json, analyze_model_request,
                      catalog_with_measurements) > 30


def test_the_routes_send_those_bytes(client):
    body = MODEL_EXAMPLES["int4-e2e"]["value"]
    expected = analyze_model_request(ModelAnalysisRequest.model_validate(body), client.app.state.catalog)
    assert client.post("/v1/analyze/model", json=body).content == expected.model_dump_json().encode()
