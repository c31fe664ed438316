"""The golden answers: a fixed set of requests and the SHA-256 of every answer's bytes.

A refactor that claims "behaviour unchanged" must leave every hash as it is (tests/golden/test_golden.py checks
them). When a change is *meant* to change answers, regenerate and commit both files with the change:

    .venv/bin/python -m tests.golden.record          # writes requests.jsonl and answers.json beside this file

`requests.jsonl` is built here from a fixed seed, so the set is the same on every machine; `answers.json` maps each
request's id to its status code and the SHA-256 of the answer body. Writes (measured roofs) come first, in order, so
the analyses after them see the same database state.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REQUESTS = HERE / "requests.jsonl"
ANSWERS = HERE / "answers.json"
TOKEN = "golden-token"

DEVICES = ["nvidia-t4", "nvidia-a10g", "nvidia-a100-80gb-sxm", "nvidia-h100-sxm", "nvidia-h200-sxm", "nvidia-b200",
           "nvidia-l40s", "amd-mi300x", "google-tpu-v5e", "apple-m2-ultra"]
MODELS = ["llama-3.1-8b", "llama-3.1-70b", "llama-2-7b", "tinyllama-1.1b-chat", "mistral-7b-v0.1", "mixtral-8x7b",
          "qwen2.5-7b-instruct", "qwen3-8b", "qwen3-30b-a3b", "gemma-2-9b", "phi-3-mini-4k-instruct", "deepseek-v3"]
DTYPE_SETS = [None, {"weights": "fp8"}, {"weights": "int4"}, {"weights": "fp8", "activations": "fp8"},
              {"kv_cache": "fp8"}]
INLINE_LLAMA = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
                "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000, "hidden_act": "silu",
                "tie_word_embeddings": False}
GENERIC = {"format": "generic", "hidden": 1024, "layers": 8, "heads": 16, "kv_heads": 4, "vocab": 50000, "intermediate": 4096,
           "experts": 8, "top_k": 2, "expert_intermediate": 1024, "sliding_window": 512}


def _operator_examples() -> list[dict]:
    from schemas.common import example_of
    from schemas.operators import OPERATOR_MODELS
    return [example_of(model) for model in OPERATOR_MODELS]


def build_requests() -> list[dict]:
    """Every endpoint that answers an analysis, over the catalog, the dtypes and the options; errors too."""
    from schemas.fusion import SWIGLU_EXAMPLE
    from schemas.plans import PLAN_EXAMPLE
    from schemas.training import TRAINING_EXAMPLE

    rng = random.Random(20261202)
    requests: list[dict] = []

    def add(path: str, body: dict, *, write: bool = False) -> None:
        # Named by its content, so a request added later (a new kind's example) leaves every other one's name.
        name = hashlib.sha256(json.dumps([path, body], sort_keys=True).encode()).hexdigest()[:16]
        if any(request["id"] == name for request in requests):
            return  # the same request twice answers the same bytes
        requests.append({"id": name, "path": path, "body": body, "write": write})

    for benchmark in ({"kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": 2.9e12, "tool": "golden"},
                      {"kind": "compute", "dtype": "bf16", "unit": "tensor", "flops_per_s": 7.2e14, "tool": "golden"}):
        add("/v1/devices/nvidia-h100-sxm/benchmarks", {**benchmark, "measured_at": "2026-01-01T00:00:00Z"},
            write=True)

    for device in DEVICES:
        for operator in _operator_examples():
            add("/v1/analyze/operator", {"device_id": device, "operator": operator})
    for _ in range(150):
        operator = {"kind": "matmul", "m": rng.choice([1, 7, 64, 333, 4096, 16384]),
                    "n": rng.choice([128, 4096, 14336]), "k": rng.choice([64, 4096, 8192]),
                    "dtype": rng.choice(["bf16", "fp16", "fp8", "fp32", "int8"]),
                    "bias": rng.random() < 0.3, "apply_efficiency": rng.random() < 0.2}
        if rng.random() < 0.2:
            operator["b_dtype"] = "int4"
        body = {"device_id": rng.choice(DEVICES), "operator": operator,
                "roofs": rng.choice(["effective", "effective", "nominal"])}
        if rng.random() < 0.2:
            body["measured_time_s"] = rng.choice([1e-5, 3e-4, 2e-2])
        add("/v1/analyze/operator", body)
    for _ in range(40):
        add("/v1/analyze/operator", {"device_id": rng.choice(DEVICES), "operator": {
            "kind": "attention", "batch": rng.choice([1, 8]), "q_len": rng.choice([1, 512, 4096]),
            "kv_len": rng.choice([512, 4096, 32768]), "heads": 32, "kv_heads": rng.choice([8, 32]), "head_dim": 128,
            "causal": rng.random() < 0.5, "dtype": rng.choice(["bf16", "fp8"])}})

    for model in MODELS:
        for phase in ("prefill", "decode"):
            for tensor_parallel in (1, 4):
                for dtypes in DTYPE_SETS:
                    body = {"device_id": rng.choice(DEVICES[2:6]), "model_id": model, "phase": phase,
                            "batch_size": rng.choice([1, 8, 64]), "seq_len": rng.choice([128, 2048, 8192]),
                            "tensor_parallel": tensor_parallel}
                    if dtypes:
                        body["dtypes"] = dtypes
                    if phase == "decode" and rng.random() < 0.3:
                        body["output_len"] = 256
                    add("/v1/analyze/model", body)
        add("/v1/analyze/kv-capacity", {"device_id": "nvidia-h100-sxm", "model_id": model, "context_len": 8192,
                                        "tensor_parallel": 2})
        add("/v1/analyze/training", {**TRAINING_EXAMPLE, "model_id": model})
    add("/v1/analyze/model", {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "phase": "decode",
                              "batch_size": 32, "seq_len": 4096, "roofs": "measured"})
    add("/v1/analyze/model", {"device_id": "nvidia-l4", "phase": "decode", "batch_size": 1, "seq_len": 1024,
                              "model": INLINE_LLAMA})
    add("/v1/analyze/model", {"device_id": "nvidia-h100-sxm", "phase": "prefill", "batch_size": 2, "seq_len": 1024,
                              "model": GENERIC})
    from tests.core.transformer.test_generic_layers import GPT_OSS_20B
    add("/v1/analyze/model", {"device_id": "nvidia-h100-sxm", "phase": "decode", "batch_size": 8, "seq_len": 32768,
                              "model": GPT_OSS_20B})
    add("/v1/analyze/training", TRAINING_EXAMPLE)
    # Training as run at scale: sequence parallelism and each pipeline schedule.
    scaled = {**TRAINING_EXAMPLE, "model_id": "llama-3.1-70b", "tensor_parallel": 8, "pipeline_parallel": 4,
              "gradient_accumulation_steps": 16, "data_parallel": 4, "sequence_parallel": True}
    for schedule in ({"pipeline_schedule": "1f1b"}, {"pipeline_schedule": "zero_bubble"},
                     {"pipeline_schedule": "interleaved", "virtual_pipeline_stages": 5}):
        add("/v1/analyze/training", {**scaled, **schedule})
    add("/v1/analyze/training", {**scaled, "seq_len": 65536, "context_parallel": 8, "gradient_accumulation_steps": 4})
    add("/v1/analyze/training", {**TRAINING_EXAMPLE, "model_id": "qwen3-30b-a3b", "tensor_parallel": 2,
                                 "sequence_parallel": True, "expert_parallel": 8})
    add("/v1/analyze/training", {**TRAINING_EXAMPLE, "dtypes": {"fp8_recipe": "delayed"}})
    add("/v1/analyze/training", {**TRAINING_EXAMPLE, "dtypes": {"fp8_recipe": "mxfp8"}, "device_id": "nvidia-b200"})
    add("/v1/plan/training", {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-70b", "num_devices": 512,
                              "total_tokens": 15e12, "seq_len": 8192, "global_batch_tokens": 16 * 2**20,
                              "zero_stage": 1, "search": True})
    add("/v1/analyze/fusion", {**SWIGLU_EXAMPLE, "device_id": "nvidia-a100-80gb-sxm"})
    add("/v1/analyze/fusion", SWIGLU_EXAMPLE)
    add("/v1/analyze/sweep", {"endpoint": "operator", "parameter": "operator.m", "values": [1, 16, 64, 256, 1024, 4096],
                              "request": {"device_id": "nvidia-h100-sxm",
                                          "operator": {"kind": "matmul", "m": 1, "n": 4096, "k": 4096}}})
    add("/v1/analyze/sweep", {"endpoint": "model", "parameter": "batch_size", "range": {"start": 1, "stop": 256, "num": 24},
                              "request": {"device_id": "nvidia-h100-sxm", "model_id": "mixtral-8x7b", "phase": "decode",
                                          "batch_size": 1, "seq_len": 4096, "tensor_parallel": 2}})
    add("/v1/analyze/sweep", {"endpoint": "model", "parameter": "seq_len", "values": [512, 4096, 8000],
                              "request": {"device_id": "nvidia-h200-sxm", "model_id": "gemma-2-9b", "phase": "decode",
                                          "batch_size": 16, "seq_len": 1}})
    add("/v1/analyze/compare", {"endpoint": "model", "device_ids": DEVICES,
                                "request": {"model_id": "llama-3.1-70b", "phase": "decode", "batch_size": 32,
                                            "seq_len": 4096, "tensor_parallel": 2}})
    add("/v1/plan/serving", PLAN_EXAMPLE)
    add("/v1/plan/serving", {**PLAN_EXAMPLE, "model_id": "mixtral-8x7b", "device_ids": ["nvidia-h100-sxm", "amd-mi300x"]})
    add("/v1/plan/training", {"device_id": "nvidia-a100-80gb-sxm", "model_id": "llama-2-7b", "num_devices": 1000,
                              "total_tokens": 2e12, "seq_len": 4096, "mfu": 0.4, "price_per_device_hour": 2.0})
    with (HERE.parent / "data" / "batch_example.jsonl").open() as lines:
        add("/v1/analyze/batch", {"items": [json.loads(line) for line in lines if line.strip()]})

    # The families of 2025-26: the catalog's gpt-oss, a checkpoint's own formats, and inline configs of the others.
    from tests.core.transformer.test_families import CASES
    for model in ("gpt-oss-20b", "gpt-oss-120b", "deepseek-v3"):
        for phase in ("prefill", "decode"):
            add("/v1/analyze/model", {"device_id": "nvidia-h200-sxm", "model_id": model, "phase": phase,
                                      "batch_size": 8, "seq_len": 4096, "tensor_parallel": 8})
        add("/v1/analyze/kv-capacity", {"device_id": "nvidia-h200-sxm", "model_id": model, "context_len": 32768,
                                        "tensor_parallel": 8})
    add("/v1/analyze/model", {"device_id": "nvidia-h200-sxm", "model_id": "deepseek-v3", "phase": "decode",
                              "batch_size": 8, "seq_len": 4096, "tensor_parallel": 8, "dtypes": {"weights": "fp8"}})
    for *_, config in CASES[2:]:
        add("/v1/analyze/model", {"device_id": "nvidia-h100-sxm", "phase": "decode", "batch_size": 4, "seq_len": 1000,
                                  "output_len": 50, "model": config})
    # Charts (SVG, deterministic: fixed hash salt, no dates) and the refusals below are answers too.
    from schemas.common import example_of
    from schemas.plots import PlotRequest
    add("/v1/plot/roofline", example_of(PlotRequest))
    add("/v1/plot/roofline", {"device_id": "amd-mi300x", "roofs": "nominal"})
    add("/v1/plot/model-roofline", {"device_id": "nvidia-h100-sxm", "model_id": "mixtral-8x7b", "phase": "decode",
                                    "batch_size": 16, "seq_len": 4096, "tensor_parallel": 2})
    add("/v1/plot/step-breakdown", {"device_id": "nvidia-a100-80gb-sxm", "model_id": "llama-3.1-8b", "phase": "decode",
                                    "batch_size": 1, "seq_len": 2048, "batch_sizes": [1, 16, 128]})
    add("/v1/plot/sweep", {"endpoint": "model", "parameter": "batch_size", "values": [1, 4, 16, 64, 256, 1024],
                           "request": {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-70b", "phase": "decode",
                                       "batch_size": 1, "seq_len": 4096, "tensor_parallel": 4}})
    add("/v1/plot/sweep", {"endpoint": "operator", "parameter": "operator.m", "range": {"start": 1, "stop": 8192, "num": 40},
                           "metric": "mfu", "request": {"device_id": "nvidia-h200-sxm",
                                                        "operator": {"kind": "matmul", "m": 1, "n": 8192, "k": 8192}}})
    add("/v1/plot/serving-plan", PLAN_EXAMPLE)
    # Refusals are answers too: their bytes name the field and the reason.
    add("/v1/analyze/operator", {"device_id": "no-such-device", "operator": _operator_examples()[0]})
    add("/v1/analyze/model", {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "phase": "decode",
                              "batch_size": 1, "seq_len": 4096, "roofs": "measured", "dtypes": {"weights": "fp8"}})
    add("/v1/analyze/model", {"device_id": "nvidia-h100-sxm", "phase": "decode", "batch_size": 1, "seq_len": 16,
                              "model": {"model_type": "unknown_family", "hidden_size": 8}})
    add("/v1/analyze/model", {"device_id": "nvidia-h100-sxm", "phase": "decode", "batch_size": 1, "seq_len": 16,
                              "model": {**INLINE_LLAMA, "num_key_value_heads": 5}})
    return requests


def answer_hashes(requests: list[dict]) -> dict[str, dict]:
    """Each request posted in order to a fresh app on a fresh SQLite database: {id: {status, sha256}}."""
    from fastapi.testclient import TestClient

    from service.main import create_app
    from service.persistence.migrate import upgrade
    from service.runtime.config import Settings

    logging.getLogger("roofline.access").disabled = True
    answers = {}
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'golden.db'}"
        upgrade(url)
        settings = Settings(database_url=url, api_tokens=f"golden={TOKEN}", migrate_on_start=False)
        with TestClient(create_app(settings)) as client:
            for request in requests:
                headers = {"Authorization": f"Bearer {TOKEN}"} if request["write"] else {}
                response = client.post(request["path"], json=request["body"], headers=headers)
                if request["write"]:
                    assert response.status_code == 201, response.text
                    continue
                answers[request["id"]] = {"status": response.status_code,
                                          "sha256": hashlib.sha256(_without_render_date(response.content)).hexdigest()}
    return answers


def _without_render_date(body: bytes) -> bytes:
    """An SVG's metadata holds the moment it was drawn: the one part of an answer that may differ by itself."""
    return re.sub(rb"<dc:date([^>]*)>[^<]*</dc:date>", rb"<dc:date\1></dc:date>", body)


def load_requests() -> list[dict]:
    with REQUESTS.open() as lines:
        return [json.loads(line) for line in lines]


def main() -> int:
    requests = build_requests()
    REQUESTS.write_text("".join(json.dumps(request, sort_keys=True) + "\n" for request in requests))
    answers = answer_hashes(requests)
    ANSWERS.write_text(json.dumps(answers, indent=1, sort_keys=True) + "\n")
    print(f"{len(answers)} golden answers written to {ANSWERS.relative_to(Path.cwd())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
