"""A batch's model steps are costed together as arrays (service/translation/models/batches.py); each answer must be
exactly the bytes /v1/analyze/model sends for the same request, whatever the model, device, roofs, dtypes, memory
options and what-ifs, and whatever the arrays cannot answer exactly must be left to the per-step path."""

import json
import random

from schemas.models import ModelAnalysisRequest
from service.runtime.errors import ServiceError
from service.translation.models.analyses import model_answer_json
from service.translation.models.batches import MIN_GROUP, ModelStepAnswers, is_plain_model_step
from tests.conftest import assert_batch_answers_as_endpoint

MODELS = ["llama-3.1-8b", "llama-3.1-70b", "mistral-7b-v0.1", "gemma-2-9b", "qwen3-8b", "tinyllama-1.1b-chat",
          "phi-3-mini-4k-instruct", "mixtral-8x7b"]
DEVICES = ["nvidia-h100-sxm", "nvidia-a100-80gb-sxm", "amd-mi300x", "nvidia-l40s", "google-tpu-v5e", "nvidia-a10g",
           "nvidia-h200-sxm", "nvidia-b200"]


def step_bodies(rng: random.Random, count: int) -> list[dict]:
    bodies = []
    for _ in range(count):
        body = {"device_id": rng.choice(DEVICES), "model_id": rng.choice(MODELS), "phase": rng.choice(["prefill", "decode"]),
                "batch_size": rng.choice([1, 2, rng.randint(1, 64), rng.randint(1, 1024)]),
                "seq_len": rng.choice([1, 2, rng.randint(1, 4096), rng.randint(1, 150_000)]),
                "tensor_parallel": rng.choice([1, 1, 2, 4])}
        if rng.random() < 0.2:
            body["dtypes"] = rng.choice([{"weights": "int4", "weight_group_size": 128}, {"kv_cache": "fp8"},
                                         {"weights": "fp8", "activations": "fp8", "kv_cache": "fp8"}])
        if rng.random() < 0.2:
            body |= rng.choice([{"memory_utilization": 0.9}, {"memory_capacity_bytes": 4e10}, {"workspace_bytes": 2e9},
                                {"block_size": 64}])
        if rng.random() < 0.1:
            body["speedups"] = [{"target": rng.choice(["attention", "matmul", "memory"]), "factor": 2}]
        if rng.random() < 0.1:
            body["measured_time_s"] = 0.02
        if rng.random() < 0.1:
            body |= rng.choice([{"sustained_clock_hz": 1.4e9}, {"collective_latency_s": 2e-5}, {"roofs": "nominal"},
                                {"roofs": "measured"}])
        if rng.random() < 0.05:
            body["attention_implementation"] = "naive"
        if rng.random() < 0.2:  # the expectation's kernel tables are chosen by engine; none at all when not asked
            body |= rng.choice([{"engine": "vllm"}, {"engine": "sglang"}, {"calibration": "none"}])
        bodies.append(body)
    return bodies


def outcome(answer) -> bytes | tuple | None:
    """An answer's bytes, or the error it raised (a speedup whose target matches no row is refused either way)."""
    try:
        return answer()
    except ServiceError as exc:
        return exc.status_code, exc.detail, exc.fields


def alone(request, catalog) -> bytes | tuple:
    return outcome(lambda: model_answer_json(request, catalog))


def test_every_step_from_the_arrays_is_the_per_step_answer(catalog_with_measurements):
    catalog = catalog_with_measurements
    bodies = step_bodies(random.Random(11), 2500)
    requests = [ModelAnalysisRequest.model_validate(body) for body in bodies]
    answers = ModelStepAnswers(((i, r) for i, r in enumerate(requests) if is_plain_model_step(r)), catalog)
    compared = measured = with_what_ifs = interconnect = 0
    for index, request in enumerate(requests):
        answer = outcome(lambda index=index: answers.answer(index))
        if answer is None:
            continue
        assert answer == alone(request, catalog), bodies[index]
        compared += 1
        if isinstance(answer, tuple):
            continue
        parsed = json.loads(answer)
        measured += parsed["memory_roof_source"] == "measured"
        with_what_ifs += bool(parsed["what_if"])
        interconnect += any(row["bound"] == "interconnect" for row in parsed["rows"])
    # Most steps are costed together (the rest: MoE models, refused roofs and splits, steps past their model's
    # positions or the exact domain), and the comparison covered measured roofs, what-ifs and collectives.
    assert compared > 1200, compared
    assert measured > 20 and with_what_ifs > 20 and interconnect > 100, (measured, with_what_ifs, interconnect)


def test_what_the_arrays_leave_is_answered_one_by_one(catalog_with_measurements):
    catalog = catalog_with_measurements
    step = {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "phase": "prefill", "batch_size": 2}
    bodies = [
        *({**step, "seq_len": 200_000 + i} for i in range(MIN_GROUP)),  # past the model's 131,072 positions: a 422
        *({**step, "model_id": "llama-3.1-70b", "batch_size": 64, "seq_len": 100_000 + i} for i in range(MIN_GROUP)),
        *({**step, "model_id": "mixtral-8x7b", "seq_len": 100 + i} for i in range(MIN_GROUP)),  # experts: one by one
        *({**step, "device_id": "nvidia-a10g", "tensor_parallel": 2, "seq_len": 10 + i} for i in range(MIN_GROUP)),
        *({**step, "seq_len": 100 + i, "output_len": 10} for i in range(MIN_GROUP)),  # e2e sums decode steps alone
        *({**step, "seq_len": 100 + i, "phase": "decode"} for i in range(MIN_GROUP - 1)),  # a group too small
    ]
    requests = [ModelAnalysisRequest.model_validate(body) for body in bodies]
    answers = ModelStepAnswers(((i, r) for i, r in enumerate(requests) if is_plain_model_step(r)), catalog)
    assert [answers.answer(index) for index in range(len(requests))] == [None] * len(requests)
    # The 70B prefill of 64 x 100,000 tokens (9e17 FLOPs) is past the exact domain, not refused: it has an answer.
    assert isinstance(alone(requests[MIN_GROUP], catalog), bytes)
    assert alone(requests[0], catalog)[0] == 422


def test_a_batch_of_steps_answers_each_as_its_endpoint(client):
    rng = random.Random(13)
    bodies = step_bodies(rng, 200)
    bodies[5]["seq_len"] = 0  # one bad item: its own 422, the rest answered
    assert_batch_answers_as_endpoint(client, "model", bodies, bad=5, sampled=rng.sample(range(len(bodies)), 50))
