"""dstack's DeepSeek-R1 serving runs on 8 H200s and 8 MI300Xs (service/data/serving-runs/dstack-deepseek-r1-h200-mi300x.json,
its `source` and `engines` say where each number and launch command comes from) as the deployments they measured: one
run to one POST /v1/analyze/serving body (bench/dstack_runs.py holds the bound and `expected` to them). Neither device
has runs in what the service ships otherwise, so these are expectations checked where nobody measured.

How a run is read:
- the model is DeepSeek-V3's architecture in its fp8 checkpoint (weights and the matmuls' activations in fp8, 128 x 128
  blocks); the cache in bf16, each engine's default ("auto": the model's dtype) as launched;
- the layout each launch command gives: 8-way tensor parallelism, SGLang's H200 run with attention data parallelism
  (--enable-dp-attention: 8 attention groups); TensorRT-LLM's experts, over 4 devices and two-way split by width
  (--ep_size 4), are read as every expert split by width over the 8 (the service takes expert parallelism of 1 or of
  the worker's devices), and its launch's --max_batch_size 512 and --max_num_tokens 16384 as its scheduler's;
- the client: a closed loop at the run's concurrency, every prompt and output exactly the stated lengths; the runs sent
  500 prompts, the request sends 500 / concurrency a unit of concurrency, at most 20 (the service's limit), so the
  runs at 4 and 8 in flight are simulated over 80 and 160 prompts.

The engines are those of early 2025 (SGLang 0.4.2-0.4.3, vLLM 0.7, TensorRT-LLM 0.17), the kernel tables and engine
lines of late 2026: where the expectation is faster than a run, that is the engines' progress since, which the
runs cannot show.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from schemas.serving import MAX_PROMPTS_PER_CONCURRENCY
from service.persistence.catalog import DATA_DIR
from service.translation.serving.inferencex import FP8_BLOCK_SCALED

DSTACK_PATH = DATA_DIR / "serving-runs" / "dstack-deepseek-r1-h200-mi300x.json"
# DeepSeek's fp8 checkpoint as InferenceX's runs state it, the cache at the engines' default.
FP8_CHECKPOINT = FP8_BLOCK_SCALED | {"kv_cache": "bf16"}
# Each launch command's layout and scheduler, beyond 8-way tensor parallelism (the module's docstring).
LAYOUTS: dict[tuple[str, str], dict[str, Any]] = {
    ("nvidia-h200-sxm", "sglang"): {"attention_data_parallel": 8},
    ("nvidia-h200-sxm", "trt"): {"scheduler": {"max_running": 512, "step_tokens": 16384}},
}


@lru_cache
def dstack_data() -> dict[str, Any]:
    return json.loads(DSTACK_PATH.read_text())


def dstack_runs() -> list[dict[str, Any]]:
    return dstack_data()["runs"]


def serving_body(run: dict[str, Any], calibration: str = "kernels") -> dict[str, Any]:
    """The POST /v1/analyze/serving body of one run (the module's docstring)."""
    prompts = max(1, min(MAX_PROMPTS_PER_CONCURRENCY, round(run["prompts"] / run["concurrency"])))
    return {"model_id": dstack_data()["model_id"], "device_id": run["device_id"], "engine": run["engine"],
            "input_len": run["input_len"], "output_len": run["output_len"], "concurrency": run["concurrency"],
            "tensor_parallel": 8, "dtypes": FP8_CHECKPOINT, "calibration": calibration,
            "workload": {"prompts_per_concurrency": prompts},
            **LAYOUTS.get((run["device_id"], run["engine"]), {})}
