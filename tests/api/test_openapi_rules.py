"""The OpenAPI document states the rules a request's validators apply across its fields (exactly one of two
fields, not both, a citation for each number given, an hbm level or the numbers to derive it): each body here
is held against the document (jsonschema, draft 2020-12) and against the service, and both must agree.
Before the rules were stated, the positive fuzz run had 2,453 of its 3,915 schema-valid bodies refused."""

import copy
import json
from decimal import Decimal

import pytest
from jsonschema import Draft202012Validator

from schemas.devices import H100_EXAMPLE
from tests.conftest import AUTH


@pytest.fixture(scope="module")
def document():
    from service.main import create_app
    from service.runtime.config import Settings
    return create_app(Settings(database_url="sqlite://", migrate_on_start=False)).openapi()


def valid_by_document(document, component, body):
    schema = {"$ref": f"#/components/schemas/{component}", "components": document["components"]}
    return Draft202012Validator(schema).is_valid(body)


MODEL = {"device_id": "nvidia-h100-sxm", "phase": "decode", "batch_size": 1, "seq_len": 128}
INLINE = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
          "num_attention_heads": 4, "vocab_size": 1000, "hidden_act": "silu"}
MODEL_CASES = [
    ("a catalog model", {**MODEL, "model_id": "llama-3.1-8b"}, True),
    ("an inline model, model_id null", {**MODEL, "model": INLINE, "model_id": None}, True),
    ("both", {**MODEL, "model_id": "llama-3.1-8b", "model": INLINE}, False),
    ("neither", dict(MODEL), False),
    ("both memory figures", {**MODEL, "model_id": "llama-3.1-8b", "memory_utilization": 0.8,
                             "memory_capacity_bytes": 8e10}, False),
    ("one memory figure, the other null", {**MODEL, "model_id": "llama-3.1-8b", "memory_utilization": 0.8,
                                           "memory_capacity_bytes": None}, True),
]


@pytest.mark.parametrize(("case", "body", "accepted"), MODEL_CASES, ids=[c[0] for c in MODEL_CASES])
def test_model_choice_and_memory_rules_are_stated(document, client, case, body, accepted):
    assert valid_by_document(document, "ModelAnalysisRequest", body) is accepted
    response = client.post("/v1/analyze/model", json=body)
    assert (response.status_code == 200) is accepted, response.text


SWEEP = {"endpoint": "operator", "parameter": "operator.m",
         "request": {"device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": 1, "n": 64, "k": 64}}}
SWEEP_CASES = [
    ("values", {**SWEEP, "values": [1, 2]}, True),
    ("values and range", {**SWEEP, "values": [1], "range": {"start": 1, "stop": 4, "num": 4}}, False),
    ("a range with step and num", {**SWEEP, "range": {"start": 1, "stop": 4, "num": 4, "step": 1}}, False),
    ("a log range", {**SWEEP, "range": {"start": 1, "stop": 64, "num": 4, "scale": "log"}}, True),
    ("a log range by step", {**SWEEP, "range": {"start": 1, "stop": 64, "step": 1, "scale": "log"}}, False),
    ("a log range, num null", {**SWEEP, "range": {"start": 1, "stop": 64, "step": 1, "num": None, "scale": "log"}}, False),
    ("a log range from 0", {**SWEEP, "range": {"start": 0, "stop": 64, "num": 4, "scale": "log"}}, False),
]


@pytest.mark.parametrize(("case", "body", "accepted"), SWEEP_CASES, ids=[c[0] for c in SWEEP_CASES])
def test_sweep_rules_are_stated(document, client, case, body, accepted):
    assert valid_by_document(document, "SweepRequest", body) is accepted
    assert (client.post("/v1/analyze/sweep", json=body).status_code == 200) is accepted


def device(**changes):
    body = {**copy.deepcopy(H100_EXAMPLE), "id": "rules-test"}
    for key, value in changes.items():
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value
    return body


MICRO = {"units": 132, "clock_hz": 1.83e9, "tensor_fma_per_unit_per_cycle": {"bf16": 1024},
         "memory_bus_width_bits": 5120, "memory_transfers_per_s_per_pin": 5.2e9}
DEVICE_CASES = [
    ("the example", device(), True),
    ("tdp_w without its source", device(tdp_w=700), False),
    ("tdp_w null, no source needed", device(tdp_w=None) | {"tdp_w": None}, True),
    ("tdp_w with its source", device(tdp_w=700, citations={**H100_EXAMPLE["citations"], "tdp_w": "datasheet"}), True),
    ("no citation for the capacity", device(citations={"sm_count": "whitepaper"}), False),
    ("no peaks", device(compute_peaks=[]), False),
    ("no peaks, FMA rates to derive them", device(compute_peaks=[], microarchitecture=MICRO), True),
    ("no hbm level", device(memory_levels=[{"level": "l2", "bandwidth_bytes_per_s": 1e13, "citation": "x"}]), False),
    ("no hbm level, bus width and rate", device(memory_levels=[], microarchitecture=MICRO), True),
    ("no hbm level, bus width only", device(memory_levels=[], microarchitecture={
        k: v for k, v in MICRO.items() if k != "memory_transfers_per_s_per_pin"}), False),
]


@pytest.mark.parametrize(("case", "body", "accepted"), DEVICE_CASES, ids=[c[0] for c in DEVICE_CASES])
def test_device_rules_are_stated(document, client, case, body, accepted):
    assert valid_by_document(document, "DeviceCreate", body) is accepted
    assert (client.post("/v1/devices", json=body, headers=AUTH).status_code == 201) is accepted


ATTENTION = {"kind": "attention", "heads": 8, "head_dim": 64, "q_len": 128}
ATTENTION_CASES = [
    ("causal with a window", {**ATTENTION, "causal": True, "window": 64}, True),
    ("a window without causal", {**ATTENTION, "window": 64}, False),
    ("not causal, no window", {**ATTENTION, "window": None}, True),
]


@pytest.mark.parametrize(("case", "operator", "accepted"), ATTENTION_CASES, ids=[c[0] for c in ATTENTION_CASES])
def test_the_sliding_window_rule_is_stated(document, client, case, operator, accepted):
    # The rule is the cost model's (it refuses the body after validation), stated in the document all the same.
    assert valid_by_document(document, "AttentionOp", operator) is accepted
    body = {"device_id": "nvidia-h100-sxm", "operator": operator}
    assert (client.post("/v1/analyze/operator", json=body).status_code == 200) is accepted


def test_a_price_keyed_by_no_device_id_is_refused_by_the_document(document):
    # pydantic writes the key pattern as patternProperties, which leave other keys free; closed here.
    plan = {"model_id": "llama-3.1-8b", "device_ids": ["nvidia-h100-sxm"], "total_devices": 1, "input_len": 1,
            "output_len": 1}
    assert valid_by_document(document, "ServingPlanRequest", {**plan, "price_per_device_hour": {"nvidia-h100-sxm": 2}})
    assert not valid_by_document(document, "ServingPlanRequest", {**plan, "price_per_device_hour": {"NOT AN ID": 2}})


def test_integer_bounds_are_printed_exactly(document):
    """An integer bound above 2^53 prints as a rounded float: 2^60 as 1.152921504606847e+18, which a reader
    takes for 1,152,921,504,606,847,000, above the 1,152,921,504,606,846,976 enforced (the fuzzer sent it)."""
    def bounds(node):
        if isinstance(node, dict):
            if node.get("type") == "integer":
                yield from (node[key] for key in ("maximum", "minimum", "exclusiveMaximum", "exclusiveMinimum")
                            if key in node)
            for value in node.values():
                yield from bounds(value)
        elif isinstance(node, list):
            for item in node:
                yield from bounds(item)
    found = list(bounds(document))
    assert len(found) > 20
    assert [value for value in found if Decimal(json.dumps(value)) != int(value)] == []


SUBNORMAL = 5e-324  # the smallest positive float: valid as "> 0", and a divisor that overflows
ONCE_A_500 = [
    # rate x output tokens underflowed to 0 tokens/s, then divided: ZeroDivisionError.
    ("/v1/plan/serving", {"model_id": "llama-3.1-8b", "device_ids": ["nvidia-h100-sxm"], "total_devices": 8,
                          "input_len": 4000, "output_len": 500, "target_requests_per_s": SUBNORMAL},
     "body.target_requests_per_s"),
    # the devices a deadline needs: ceil(FLOPs / (peak x MFU x 5e-324 days)) overflowed: OverflowError.
    ("/v1/plan/training", {"model_id": "llama-2-7b", "device_id": "nvidia-h100-sxm", "num_devices": 1000,
                           "seq_len": 4096, "total_tokens": 2e12, "deadline_days": SUBNORMAL}, "body.deadline_days"),
    # a derived peak of 238 x 1.25e308 x 2 x clock is infinite, and the stored device failed its own schema.
    ("/v1/devices", device(microarchitecture={**MICRO, "tensor_fma_per_unit_per_cycle": {"fp16": 1.25e308}}),
     "body.microarchitecture.tensor_fma_per_unit_per_cycle.fp16"),
]


@pytest.mark.parametrize(("path", "body", "field"), ONCE_A_500, ids=[c[2] for c in ONCE_A_500])
def test_bodies_that_once_reached_a_500_are_refused_by_their_bounds(document, client, path, body, field):
    response = client.post(path, json=body, headers=AUTH)
    assert response.status_code == 422, response.text
    assert [f["loc"] for f in response.json()["fields"]] == [field]
