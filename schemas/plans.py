"""Deployment plans: what serves a model best on a device budget, within latency targets."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, FiniteFloat, model_validator

from schemas.analysis import RoofOptions
from schemas.common import DeviceId, EngineName, PositiveFinite, StrictModel
from schemas.models import DTYPES_DOC, Length, MemoryOptions, ModelChoice, ModelDTypes, StepMemoryOut
from schemas.serving import LaunchOut, ServingPercentiles, SpeculativeDecoding

MAX_PLAN_CONCURRENCY = 512

PLAN_EXAMPLE: dict[str, Any] = {"model_id": "llama-3.1-8b", "device_ids": ["nvidia-h100-sxm"], "total_devices": 8,
                "input_len": 4000, "output_len": 500, "slo": {"ttft_s": 1.0, "tpot_s": 0.02}}


class ServingSlo(StrictModel):
    ttft_s: PositiveFinite | None = Field(None, description="Time to first token at most, seconds")
    tpot_s: PositiveFinite | None = Field(None, description="Time per output token at most, seconds")
    e2e_latency_s: PositiveFinite | None = Field(None, description="Whole request at most, seconds")
    ttft_p90_s: PositiveFinite | None = Field(None, description="90th percentile TTFT at most, seconds (judged by "
                                                                "the scheduling simulation: needs an engine)")
    ttft_p99_s: PositiveFinite | None = Field(None, description="99th percentile TTFT at most, seconds (likewise)")
    tpot_p90_s: PositiveFinite | None = Field(None, description="90th percentile TPOT at most, seconds (likewise)")
    tpot_p99_s: PositiveFinite | None = Field(None, description="99th percentile TPOT at most, seconds (likewise)")
    e2e_p90_s: PositiveFinite | None = Field(None, description="90th percentile end-to-end time at most, seconds "
                                                               "(likewise)")
    e2e_p99_s: PositiveFinite | None = Field(None, description="99th percentile end-to-end time at most, seconds "
                                                               "(likewise)")


# pydantic states a key pattern as patternProperties, which leave other keys free: additionalProperties closes them.
DevicePrices = Annotated[dict[DeviceId, PositiveFinite], Field(json_schema_extra={"additionalProperties": False})]


class ServingPlanRequest(ModelChoice, RoofOptions, MemoryOptions):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [PLAN_EXAMPLE]})
    device_ids: list[DeviceId] = Field(min_length=1, max_length=16, description="Candidate devices, each searched")
    total_devices: Annotated[int, Field(ge=1, le=1024)] = Field(description="Devices the deployment may use, per "
                                                                             "candidate device type")
    input_len: Length = Field(description="Prompt tokens per request")
    output_len: Length = Field(description="Generated tokens per request")
    target_requests_per_s: Annotated[FiniteFloat, Field(ge=1e-6)] | None = Field(
        None, description="Traffic to serve, requests/s (from 1e-6: one request in 11.6 days): each configuration "
                          "uses the fewest replicas that reach it")
    concurrency: Annotated[int, Field(ge=1, le=MAX_PLAN_CONCURRENCY)] | None = Field(
        None, description="Fix the concurrent requests per replica instead of searching 1..512")
    slo: ServingSlo = Field(default_factory=ServingSlo)
    dtypes: ModelDTypes = Field(default_factory=ModelDTypes, description=DTYPES_DOC)
    speculative: SpeculativeDecoding | None = Field(
        None, description="Speculative decoding in every configuration searched, at the acceptance length given")
    modes: list[Literal["aggregated", "disaggregated"]] = Field(["aggregated"], min_length=1, max_length=2)
    top_n: Annotated[int, Field(ge=1, le=100)] = 10
    price_per_device_hour: DevicePrices | None = Field(
        None, max_length=16, description="Price of one device for an hour, per device id (any currency); each id one "
                                         "of device_ids")
    engine: EngineName | None = Field(
        None, description="The serving engine (sglang, vllm, trt, ...): where every candidate device has an "
                          "expectation for it (its own serving calibration, or its kernel tables and the engine's "
                          "carried-over costs), the SLOs, the replicas a target needs and the ranking go by `expected`")
    calibration: Literal["auto", "kernels", "none"] = Field(
        "auto", description="auto: plan on expectations where every candidate has one (a device's own serving runs "
                            "where fitted, else its kernel tables and the engine's costs); kernels: from kernel tables "
                            "for every candidate (like with like); none: on bounds alone")

    @model_validator(mode="after")
    def _priced_devices_are_candidates(self):
        unknown = set(self.price_per_device_hour or {}) - set(self.device_ids)
        if unknown:
            raise ValueError(f"price_per_device_hour names devices that are not candidates: {sorted(unknown)}")
        return self


class ServingConfigExpected(BaseModel):
    ttft_s: float = Field(description="Expected time to first token, seconds")
    tpot_s: float = Field(description="Expected time per output token, seconds")
    e2e_latency_s: float = Field(description="ttft_s + (output_len - 1) x tpot_s, seconds")
    requests_per_s: float = Field(description="The bound's requests/s slowed as TPOT is (the same requests in flight), "
                                              "or the simulated run's where percentiles are given")
    tokens_per_s: float = Field(description="Expected output tokens per second of the whole deployment")
    tokens_per_s_per_device: float = Field(description="tokens_per_s / devices_used")
    tokens_per_s_per_user: float = Field(description="1 / tpot_s")
    calibration_id: str = Field(description="The calibration (GET /v1/calibrations/{id}): serving:<...> for a "
                                            "device's own runs, engine:<...> for an engine's carried-over costs")
    extrapolated: bool = Field(description="The workload's shape, or the deployment's concurrency or layout, lies "
                                           "outside the runs the calibration was fitted on")
    basis: Literal["runs", "kernels"] = Field(
        description="runs: the device's own serving runs; kernels: the replica composed from the device's kernel "
                    "tables, and the engine's costs fitted over the devices it was measured on")
    percentiles: ServingPercentiles | None = Field(
        None, description="Median, p90 and p99 of TTFT, TPOT and end-to-end time from the scheduling simulation of this "
                          "configuration (POST /v1/analyze/serving's, on the device's own scheduling calibration or, "
                          "basis kernels, the engine's carried over to its kernel tables): where present, ttft_s, "
                          "tpot_s and the rates are the simulation's and the configuration was ranked again on them; "
                          "null where no scheduling calibration applies or beyond the configurations simulated")


class ServingConfig(BaseModel):
    mode: Literal["aggregated", "disaggregated"]
    device_id: str
    tensor_parallel: int = Field(description="Devices of one replica")
    expert_parallel: int = Field(description="1, or tensor_parallel: a MoE model's experts split whole over the "
                                             "replica's devices (dispatch and combine all-to-alls)")
    attention_data_parallel: int = Field(description="Attention groups per replica, each with its own requests and KV "
                                                     "cache (with expert_parallel: one a device)")
    replicas: int = Field(description="Groups of tensor_parallel devices")
    prefill_replicas: int | None = Field(description="Disaggregated: replicas that prefill")
    decode_replicas: int | None = Field(description="Disaggregated: replicas that decode")
    devices_used: int
    concurrency_per_replica: int = Field(description="Requests a (decode) replica serves at once")
    ttft_s: float = Field(description="Time to first token, seconds (a lower bound: no queueing)")
    tpot_s: float = Field(description="Time per output token as a user sees it, seconds")
    e2e_latency_s: float = Field(description="ttft_s + (output_len - 1) x tpot_s, seconds")
    requests_per_s: float
    tokens_per_s: float = Field(description="Output tokens per second of the whole deployment")
    tokens_per_s_per_device: float
    tokens_per_s_per_user: float = Field(description="1 / tpot_s")
    memory: StepMemoryOut = Field(description="Per device of a (decode) replica at its concurrency")
    binding_slo: str | None = Field(description="The SLO closest to its limit (not necessarily what stops more "
                                                "concurrency: see limited_by)")
    limited_by: str | None = Field(
        None, description="What stops this shape serving more requests at once: 'slo.<field>' (the next concurrency "
                          "searched misses that SLO), 'memory' (no more requests' caches fit), 'search cap (<n>)' (the "
                          "search's concurrency limit), 'concurrency' (the request fixed it); null on the Pareto "
                          "points that miss an SLO")
    cost_per_million_output_tokens: float | None = Field(
        description="With price_per_device_hour; at the expected rate where slo_basis is 'expected'")
    expected: ServingConfigExpected | None = Field(
        None, description="What it is expected to measure, from a serving calibration (null where slo_basis is 'bound')")
    launch: LaunchOut | None = Field(
        None, description="With an engine the service knows, an aggregated configuration as the commands that start it "
                          "and benchmark it at its concurrency (POST /v1/analyze/serving's launch)")


class ServingPlan(BaseModel):
    model: str
    slo_basis: Literal["expected", "bound"] = Field(
        description="What the SLOs, the target and the ranking were judged on: 'expected' where every candidate device "
                    "has a serving calibration for the engine, else 'bound' (the assumptions say why)")
    configs: list[ServingConfig] = Field(description="Fitting and meeting every SLO, by tokens/s per device: the best "
                                                     "concurrency of each (mode, device, tensor_parallel), top_n of them")
    pareto: list[ServingConfig] = Field(description="Fitting configurations no other beats on both tokens/s per "
                                                    "device and tokens/s per user, by throughput: at most 32, evenly "
                                                    "spaced along the frontier with both ends kept")
    searched: int = Field(description="Configurations evaluated")
    skipped: list[str] = Field(description="Tensor-parallel sizes or devices left out, and why")
    assumptions: list[str]
