"""A batch's plain matmuls are computed together as arrays (service/core/batched_matmul.py); each answer must be
exactly the bytes /v1/analyze/operator sends for the same request, whatever the shape, options, device and roofs,
and whatever the arrays cannot compute exactly must be left to the per-operator path."""

import json
import random

import pytest

from schemas.analysis import OperatorAnalysisRequest
from service.translation.operators.analyses import operator_answer_json
from service.translation.operators.matmul_batches import MatmulAnswers, is_plain_matmul
from tests.conftest import AUTH, assert_batch_answers_as_endpoint

DTYPES = ["bf16", "fp16", "fp32", "fp8_e4m3", "int8", "int4", "tf32", "fp64"]


def option_profiles(rng: random.Random, count: int) -> list[dict]:
    """A few combinations of a matmul's options (dtypes, bias, per-item weights, group scales, tile, efficiency),
    so that many requests share one: a batch groups matmuls by them."""
    profiles = []
    for _ in range(count):
        options = {"dtype": rng.choice(DTYPES[:5])}
        if rng.random() < 0.3:
            options["weight_shared"] = rng.random() < 0.5
        if rng.random() < 0.2:
            options["bias"] = True
        if rng.random() < 0.3:
            options |= {"a_dtype": rng.choice(DTYPES), "b_dtype": rng.choice(DTYPES), "c_dtype": rng.choice(DTYPES)}
        if rng.random() < 0.1:
            options["compute_dtype"] = rng.choice(DTYPES[:3])
        if rng.random() < 0.2:
            options |= {"b_dtype": "int4", "weight_group_size": rng.choice([32, 64, 128]), "weight_scale_bytes": 2.0}
        if rng.random() < 0.2:
            options["tile"] = {"m": rng.choice([64, 128, 256]), "n": rng.choice([64, 128, 256]), "k": 64}
        if rng.random() < 0.5:
            options["apply_efficiency"] = True
        profiles.append(options)
    return profiles


def matmul_bodies(rng: random.Random, devices: list[str], count: int) -> list[dict]:
    profiles = option_profiles(rng, 12)
    bodies = []
    for _ in range(count):
        operator = {"kind": "matmul", "m": rng.choice([1, 2, 7, 128, rng.randint(1, 8192), rng.randint(1, 10**6)]),
                    "n": rng.randint(1, 16384), "k": rng.randint(1, 16384), **rng.choice(profiles)}
        if rng.random() < 0.3:
            operator["batch"] = rng.randint(1, 64)
        bodies.append({"device_id": rng.choice(devices), "operator": operator,
                       "roofs": rng.choice(["effective", "effective", "nominal", "measured"])})
    return bodies


@pytest.fixture
def catalog(client):
    """Every catalog device, with measured HBM, L2 and bf16 roofs on the H100 (so that L2 binds in some answers)."""
    for body in ({"kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": 3.0e12, "tool": "nvbandwidth"},
                 {"kind": "memory_bandwidth", "level": "l2", "bytes_per_s": 5.5e12, "tool": "nvbandwidth"},
                 {"kind": "compute", "dtype": "bf16", "unit": "tensor", "flops_per_s": 7.0e14, "tool": "cublas"}):
        assert client.post("/v1/devices/nvidia-h100-sxm/benchmarks", json=body, headers=AUTH).status_code == 201
    # A measured fp8 roof on the A100, which has no fp8 datasheet peak: its answers have no MFU, and say why.
    fp8 = {"kind": "compute", "dtype": "fp8", "unit": "tensor", "flops_per_s": 6e14, "tool": "gemm",
           "off_nominal_reason": "emulated fp8 kernel, recorded for comparison"}
    assert client.post("/v1/devices/nvidia-a100-80gb-sxm/benchmarks", json=fp8, headers=AUTH).status_code == 201
    catalog = client.app.state.catalog
    catalog.refresh()
    return catalog


def test_every_answer_from_the_arrays_is_the_per_operator_answer(catalog, client):
    devices = [device["id"] for device in client.get("/v1/devices").json()]
    bodies = matmul_bodies(random.Random(5), devices, 3000)
    # Twenty copies of a few shapes on the H100, so that large groups are computed too, and fp8 on the A100's
    # measured roof (no MFU), with and without the shape efficiency.
    bodies += [{"device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": m, "n": 4096, "k": 4096}}
               for m in range(1, 300, 15)]
    bodies += [{"device_id": "nvidia-a100-80gb-sxm", "operator": {
        "kind": "matmul", "m": m, "n": 4096, "k": 1000, "dtype": "fp8_e4m3", "apply_efficiency": m % 2 == 0}}
        for m in range(1, 400, 7)]
    requests = [OperatorAnalysisRequest.model_validate(body) for body in bodies]
    answers = MatmulAnswers(enumerate(requests), catalog)
    compared = bound_by = no_mfu = 0
    seen_bounds = set()
    for index, request in enumerate(requests):
        answer = answers.answer(index)
        if answer is None:
            continue
        assert answer == operator_answer_json(request, catalog), bodies[index]
        compared += 1
        parsed = json.loads(answer)
        seen_bounds.add((parsed["bound"], parsed["binding_level"], parsed["shape_efficiency"]["applied"]))
        bound_by += parsed["compute_roof"]["source"] == "measured"
        no_mfu += parsed["mfu"] is None
    # Most requests are computed together (the rest: refused roofs, shapes past the exact domain, lone groups), and
    # the comparison covered compute- and memory-bound answers, L2 binding, measured roofs and scaled compute roofs.
    assert compared > 1500, compared
    assert {("compute", None, True), ("memory", "hbm", False), ("memory", "l2", False)} <= seen_bounds, seen_bounds
    assert bound_by > 0
    assert no_mfu > 20


def test_what_the_arrays_leave_is_answered_one_by_one(catalog):
    bodies = [
        # past the exact domain: 2 x 10^6 x 2^20 x 2^20 FLOPs
        {"device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": 10**6, "n": 2**20, "k": 2**20}},
        {"device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": 10**6, "n": 2**20, "k": 2**20}},
        # an unknown device, and a dtype the A100 has no peak for: refused one by one
        {"device_id": "no-such-device", "operator": {"kind": "matmul", "m": 8, "n": 8, "k": 8}},
        {"device_id": "no-such-device", "operator": {"kind": "matmul", "m": 9, "n": 8, "k": 8}},
        {"device_id": "nvidia-a100-80gb-sxm", "operator": {"kind": "matmul", "m": 8, "n": 8, "k": 8, "dtype": "fp4"}},
        {"device_id": "nvidia-a100-80gb-sxm", "operator": {"kind": "matmul", "m": 9, "n": 8, "k": 8, "dtype": "fp4"}},
        # a what-if is never computed in bulk
        {"device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": 8, "n": 8, "k": 8}, "measured_time_s": 1e-5},
        # a lone matmul in its group
        {"device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": 8, "n": 8, "k": 8, "bias": True}},
    ]
    requests = [OperatorAnalysisRequest.model_validate(body) for body in bodies]
    answers = MatmulAnswers(((i, r) for i, r in enumerate(requests) if is_plain_matmul(r)), catalog)
    assert [answers.answer(index) for index in range(len(requests))] == [None] * len(requests)
    assert len(answers) == 0


def test_a_batch_of_matmuls_answers_each_as_its_endpoint(client):
    rng = random.Random(9)
    bodies = matmul_bodies(rng, ["nvidia-h100-sxm", "amd-mi300x", "nvidia-l40s"], 300)
    bodies[7]["operator"]["m"] = 0  # one bad item: its own 422, the rest answered
    assert_batch_answers_as_endpoint(client, "operator", bodies, bad=7, sampled=rng.sample(range(len(bodies)), 60))


def test_a_device_named_like_a_number_gets_the_same_answers(client):
    """The bulk template marks each varying value with a unique tiny number; a device whose id reads as such a number
    (ids allow digits, '.', 'e' and '-') must not be taken for one."""
    response = client.post("/v1/devices/nvidia-h100-sxm/profiles", json={"id": "9.001e-300"}, headers=AUTH)
    assert response.status_code == 201, response.text
    catalog = client.app.state.catalog
    catalog.refresh()
    requests = [OperatorAnalysisRequest.model_validate(
        {"device_id": "9.001e-300", "operator": {"kind": "matmul", "m": m, "n": 1024, "k": 1024}}) for m in (1, 64, 4096)]
    answers = MatmulAnswers(enumerate(requests), catalog)
    assert len(answers) == 3
    for index, request in enumerate(requests):
        assert answers.answer(index) == operator_answer_json(request, catalog)
