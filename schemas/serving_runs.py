"""Measured serving runs a user submits (POST /v1/serving-runs): three forms of the same facts, each mapped to the
deployment POST /v1/analyze/serving takes, stored beside the service's bound at that deployment."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

from schemas.calibrations import CalibrationPublic, NotFitted, Source
from schemas.common import DeviceId, EngineName, StrictModel, all_rules, given, not_both
from schemas.models import Length, ModelChoice, ModelIdField
from schemas.serving import MAX_SERVING_CONCURRENCY, ServingLayout

MAX_RUNS = 1000
SERVING_RUN_FORMATS = ("native", "vllm-bench", "inferencex")
Concurrency = Annotated[int, Field(ge=1, le=MAX_SERVING_CONCURRENCY)]
# A measured time: above a nanosecond (a finer one is a unit mistake) and below a day.
MeasuredSeconds = Annotated[float, Field(ge=1e-9, le=86_400)]
MeasuredMilliseconds = Annotated[float, Field(ge=1e-6, le=86_400_000)]
Tokens = Annotated[int, Field(ge=1, le=2**40)]
ExceedsBoundReason = Annotated[str, Field(min_length=1, max_length=1000)]

EXCEEDS_BOUND_DOC = ("Why runs faster than the service's lower bound are right (e.g. prefix caching the bound does not "
                     "model); without it such a run is refused, naming it, and nothing is stored")


class ServingRunsBase(StrictModel):
    source: Source = Field(description="Where the runs come from (tool, version, date)")
    exceeds_bound_reason: ExceedsBoundReason | None = Field(None, description=EXCEEDS_BOUND_DOC)


class NativeRun(StrictModel):
    input_len: Length = Field(description="Prompt tokens per request")
    output_len: Length = Field(description="Generated tokens per request")
    concurrency: Concurrency = Field(description="Requests the client kept in flight")
    tpot_s: MeasuredSeconds = Field(description="Measured median time per output token after the first, seconds")
    ttft_s: MeasuredSeconds = Field(description="Measured median time to first token, seconds")
    deployment: ServingLayout | None = Field(None, description="This run's layout, where it differs from the body's")


class DeployedRuns(ServingRunsBase, ModelChoice):
    """Runs of one model on one device whose files do not say how it was deployed: the body says."""

    device_id: DeviceId
    engine: EngineName = Field(description="The serving engine that ran them: calibrations are per engine")
    deployment: ServingLayout = Field(default_factory=ServingLayout, description="The runs' layout and dtypes")


class NativeServingRuns(DeployedRuns):
    """Runs as this service names their fields."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "format": "native", "device_id": "nvidia-h200-sxm", "model_id": "deepseek-v3", "engine": "sglang",
        "source": "our load test, SGLang 0.5.6, 2026-11-30",
        "deployment": {"tensor_parallel": 8, "expert_parallel": 8, "attention_data_parallel": 8,
                       "dtypes": {"scheme": "w8a8-fp8", "kv_cache": "fp8"}},
        "runs": [{"input_len": 1024, "output_len": 1024, "concurrency": 64, "tpot_s": 0.031, "ttft_s": 0.41}]}]})
    format: Literal["native"] = Field(description="native: each run's workload and medians in this service's names")
    runs: list[NativeRun] = Field(min_length=1, max_length=MAX_RUNS, description="At most 1,000, stored all or none")


class VllmBenchResult(BaseModel):
    """The fields read of the JSON `vllm bench serve --save-result` writes (SGLang's bench_serving writes the same
    ones); its other fields (per-request lists, percentiles) are accepted and ignored."""

    model_config = ConfigDict(extra="ignore")
    completed: Tokens = Field(description="Requests that completed")
    total_input_tokens: Tokens = Field(description="Prompt tokens over the completed requests")
    total_output_tokens: Tokens = Field(description="Generated tokens over the completed requests")
    median_tpot_ms: MeasuredMilliseconds = Field(description="Median time per output token after the first, ms")
    median_ttft_ms: MeasuredMilliseconds = Field(description="Median time to first token, ms")
    max_concurrency: Concurrency | None = Field(None, description="The client's cap on requests in flight (null: none)")


class VllmBenchServingRuns(DeployedRuns):
    """Result files of vLLM's or SGLang's serving benchmark, with what the files do not record."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "format": "vllm-bench", "device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "engine": "vllm",
        "source": "vllm bench serve, vLLM 0.11, random 1024/1024",
        "deployment": {"tensor_parallel": 1, "dtypes": {"weights": "bf16", "activations": "bf16", "kv_cache": "bf16"}},
        "runs": [{"completed": 640, "total_input_tokens": 655360, "total_output_tokens": 655360,
                  "median_tpot_ms": 13.2, "median_ttft_ms": 95.0, "max_concurrency": 64}]}]})

    format: Literal["vllm-bench"] = Field(
        description="vllm-bench: each run the JSON the benchmark saved; a run's lengths are its mean prompt and output "
                    "(total tokens / completed requests, rounded), its concurrency its max_concurrency")
    concurrency: Concurrency | None = Field(
        None, description="The requests in flight of runs whose max_concurrency is null (required for those)")
    runs: list[VllmBenchResult] = Field(min_length=1, max_length=MAX_RUNS,
                                        description="At most 1,000, stored all or none")


class InferenceXMetrics(StrictModel):
    """A run's measured times: its medians, or its means where only those were kept (extracts of InferenceX's results
    such as the gpt-oss-120b runs the service ships keep means; a mean stands in for the median, and the calibration's
    source should say so)."""

    model_config = ConfigDict(extra="ignore")
    schema_rules = all_rules({"anyOf": [given("median_tpot"), given("mean_tpot")]},
                             {"anyOf": [given("median_ttft"), given("mean_ttft")]})
    median_tpot: MeasuredSeconds | None = Field(None, description="Median time per output token after the first, "
                                                                  "seconds (or mean_tpot)")
    median_ttft: MeasuredSeconds | None = Field(None, description="Median time to first token, seconds (or mean_ttft)")
    mean_tpot: MeasuredSeconds | None = Field(None, description="Mean time per output token, where no median was kept")
    mean_ttft: MeasuredSeconds | None = Field(None, description="Mean time to first token, where no median was kept")
    output_tput_per_gpu: Annotated[float, Field(gt=0, le=1e9)] = Field(
        description="Generated tokens per second per device: with the TPOT, the requests decoding at once")

    @model_validator(mode="after")
    def _a_time_of_each(self):
        for quantity in ("tpot", "ttft"):
            if getattr(self, f"median_{quantity}") is None and getattr(self, f"mean_{quantity}") is None:
                raise ValueError(f"give median_{quantity} (or, where only the mean was kept, mean_{quantity})")
        return self


PoolSize = Annotated[int, Field(ge=0, le=4096)]


class InferenceXRow(BaseModel):
    """One row of SemiAnalysis InferenceX's results (their other fields are accepted and ignored)."""

    model_config = ConfigDict(extra="ignore")
    hardware: str = Field(max_length=64, description="b200, b300, gb200, gb300, h100, h200, mi300x or mi355x")
    framework: EngineName = Field(description="The engine (sglang, vllm, trt, dynamo-trt, ...)")
    model: str = Field(max_length=64, description="dsr1: DeepSeek-R1; gptoss: gpt-oss-120b")
    precision: Literal["fp8", "fp4"] = Field(description="The weights' type: fp8 DeepSeek's block-scaled; fp4 NVFP4 "
                                                         "on NVIDIA, MXFP4 on AMD")
    spec_method: Literal["none", "mtp"] = Field(description="Speculative decoding (mtp: 3 draft tokens)")
    disagg: bool = Field(description="Separate prefill and decode pools")
    prefill_tp: PoolSize = Field(description="Tensor parallelism of a prefill worker (or its attention group)")
    prefill_ep: PoolSize = Field(description="Expert parallelism of a prefill worker (above 1: over the worker)")
    prefill_dp_attention: bool = Field(description="A prefill worker's attention one group per device")
    prefill_num_workers: PoolSize = Field(description="Prefill workers (disaggregated)")
    decode_tp: Annotated[int, Field(ge=1, le=4096)] = Field(description="Tensor parallelism of a decode worker (or its "
                                                                        "attention group)")
    decode_ep: PoolSize = Field(description="Expert parallelism of a decode worker (above 1: over the worker)")
    decode_dp_attention: bool = Field(description="A decode worker's attention one group per device")
    decode_num_workers: PoolSize = Field(description="Decode workers (disaggregated)")
    num_prefill_gpu: PoolSize = Field(description="Devices of the prefill pool")
    num_decode_gpu: PoolSize = Field(description="Devices of the decode pool")
    isl: Length = Field(description="Prompt tokens per request")
    osl: Length = Field(description="Generated tokens per request")
    conc: Concurrency = Field(description="Requests in flight")
    metrics: InferenceXMetrics = Field(description="The run's measured medians (or means) and throughput")


class InferenceXServingRuns(ServingRunsBase):
    """InferenceX rows, each mapped to its deployment as docs/serving.md describes."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "format": "inferencex", "source": "SemiAnalysis InferenceX, 2025-12-14", "runs": [{
            "hardware": "h200", "framework": "sglang", "model": "dsr1", "precision": "fp8", "spec_method": "none",
            "disagg": False, "prefill_tp": 8, "prefill_ep": 1, "prefill_dp_attention": False, "prefill_num_workers": 0,
            "decode_tp": 8, "decode_ep": 1, "decode_dp_attention": False, "decode_num_workers": 0,
            "num_prefill_gpu": 8, "num_decode_gpu": 8, "isl": 1024, "osl": 1024, "conc": 64,
            "metrics": {"median_tpot": 0.036, "median_ttft": 0.62, "output_tput_per_gpu": 210.0}}]}]})

    schema_rules = not_both("model_id", "model")
    format: Literal["inferencex"] = Field(description="inferencex: rows as SemiAnalysis InferenceX publishes them")
    device_id: DeviceId | None = Field(None, description="The device they ran on (default: each row's hardware)")
    model_id: ModelIdField | None = Field(None, description="The model they served (default: each row's, dsr1 the "
                                                            "catalog's deepseek-v3)")
    model: dict[str, Any] | None = Field(None, description="An inline config of the model they served")
    engine: EngineName | None = Field(None, description="The engine (default: each row's framework)")
    runs: list[InferenceXRow] = Field(min_length=1, max_length=MAX_RUNS, description="At most 1,000, stored all or none")


ServingRunsCreate = Annotated[Union[NativeServingRuns, VllmBenchServingRuns, InferenceXServingRuns],  # noqa: UP007
                              Field(discriminator="format")]


class ServingRunPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: int
    device_id: str
    engine: str = Field(description="The serving engine that ran it")
    model: str = Field(description="The catalog model id, or 'inline <family>'")
    precision: str = Field(description="The weights' type of its deployment")
    speculative: str = Field(description="Its speculative method, or 'none'")
    input_len: int = Field(description="Prompt tokens per request")
    output_len: int = Field(description="Generated tokens per request")
    concurrency: int = Field(description="Requests in flight")
    request: dict = Field(description="Its deployment, as POST /v1/analyze/serving takes it")
    tpot_s: float = Field(description="Measured median TPOT, seconds")
    ttft_s: float = Field(description="Measured median TTFT, seconds")
    bound_tpot_s: float = Field(description="The service's TPOT bound at its deployment when stored, seconds")
    bound_ttft_s: float = Field(description="The service's TTFT bound at its deployment when stored, seconds")
    bound_prefill_share_s: float = Field(description="The bound's prefill share a token at its deployment when stored "
                                                     "(/v1/analyze/serving's bound.prefill_share_s), seconds")
    source: str
    exceeds_bound_reason: str | None = Field(description="Why it may beat its bound, where it does")
    submitted_by: str = Field(description="Label of the token that submitted it (never the token)")
    created_at: datetime


class ServingRunsCreated(BaseModel):
    created: list[int] = Field(description="The new runs' ids")
    calibrations: list[CalibrationPublic] = Field(
        description="The serving calibrations refitted for the devices, engines, models, weights' types and "
                    "speculative methods the runs touched (one needs at least 3 runs), each followed by the "
                    "scheduling calibration fitted to the same runs where one was")
    not_fitted: list[NotFitted] = Field(
        default_factory=list, description="Each scope the runs touched that has no calibration, and why (a "
                                          "'scheduling:' scope: no scheduling calibration beside its serving one)")


