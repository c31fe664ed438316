"""MLPerf Inference v5.1's Llama 2 70B Offline results (service/data/serving-runs/mlperf-inference-v5.1-llama2-70b.json)
as the deployments they measured: one device to one POST /v1/analyze/serving body, each system's tokens/s to a
figure per accelerator (bench/mlperf_inference.py holds the bound and `expected` to them).

How a result is read (the file's `sources` and `kept` say where each number comes from):
- Offline sends every sample at once, so the deployment runs full: the concurrency is the whole set (24,576 samples),
  and the bound's running batch is what the memory holds;
- the lengths are the set's means: 222 prompt tokens (OpenOrca's, 48 to 1,021) and 302 generated (the tokens a
  sample of a submitted run; the per-sample lengths the model generates are not published). Every matmul's work is
  linear in the tokens, so the means give the set's; attention's grows faster than linearly, so the means give less
  of it than the set holds, and the bound at the means stays above the set's;
- one engine a device where the weights leave room for the cache (one H100's 80 GB do not hold 70 GB of fp8 weights
  and a useful cache: two a worker), each the submitters' engine (TensorRT-LLM on NVIDIA, vLLM on AMD) in their
  precision (NVFP4 on Blackwell, fp8 elsewhere, the cache in fp8): the results state the engine and precision, not
  the layout, which is this module's choice.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache

from service.persistence.catalog import DATA_DIR

MLPERF_PATH = DATA_DIR / "serving-runs" / "mlperf-inference-v5.1-llama2-70b.json"


@dataclass(frozen=True)
class OfflineResult:
    public_id: str
    submitter: str
    system: str
    device_id: str
    nodes: int
    accelerators_per_node: int
    tokens_per_s: float  # generated, the whole system

    @property
    def tokens_per_s_per_device(self) -> float:
        return self.tokens_per_s / (self.nodes * self.accelerators_per_node)


@lru_cache
def mlperf_offline() -> dict:
    return json.loads(MLPERF_PATH.read_text())


def offline_results() -> list[OfflineResult]:
    return [OfflineResult(**system) for system in mlperf_offline()["systems"]]


def measured_per_device() -> dict[str, list[float]]:
    """Each device's results, generated tokens/s per accelerator."""
    out: dict[str, list[float]] = defaultdict(list)
    for result in offline_results():
        out[result.device_id].append(result.tokens_per_s_per_device)
    return dict(out)


def offline_body(device_id: str, *, engine: str | None = None, calibration: str = "kernels") -> dict:
    """The POST /v1/analyze/serving body of the device's Offline deployment on 8 devices (module docstring); `engine`:
    another engine than the submitters' (a what-if)."""
    data = mlperf_offline()
    deployment, workload = data["deployments"][device_id], data["workload"]
    return {"model_id": data["model_id"], "device_id": device_id, "input_len": round(workload["input_mean"]),
            "output_len": workload["output_len"], "concurrency": workload["samples"],
            "tensor_parallel": deployment["tensor_parallel"], "workers": 8 // deployment["tensor_parallel"],
            "engine": engine or deployment["engine"], "calibration": calibration,
            "dtypes": {"scheme": deployment["scheme"], "kv_cache": "fp8"}}


def median_per_device() -> dict[str, float]:
    return {device: statistics.median(values) for device, values in measured_per_device().items()}
