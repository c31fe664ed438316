"""Sweeps over one parameter, device comparison, and what-if speed-ups."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, FiniteFloat, model_validator

from schemas.common import DeviceId, StrictModel, all_rules, exactly_one_of, given

MAX_SWEEP_POINTS = 4096
# Swept values are dimensions, counts or lengths: 2^53 is float64's exact-integer range, and keeps every
# step between two ends finite.
MAX_SWEEP_MAGNITUDE = 2.0**53
SweepEnd = Annotated[FiniteFloat, Field(ge=-MAX_SWEEP_MAGNITUDE, le=MAX_SWEEP_MAGNITUDE,
                                        description="A value of the swept parameter, at most 2^53 in magnitude")]


class SweepRange(StrictModel):
    start: SweepEnd
    stop: SweepEnd
    step: Annotated[FiniteFloat, Field(gt=0, le=2 * MAX_SWEEP_MAGNITUDE)] | None = Field(
        None, description=f"Linear step (inclusive of stop); (stop - start) / step + 1 is at most {MAX_SWEEP_POINTS} points")
    num: Annotated[int, Field(ge=2, le=MAX_SWEEP_POINTS)] | None = Field(None, description="Number of points")
    scale: Literal["linear", "log"] = Field("linear", description="'log': num points, start and stop positive")
    schema_rules = all_rules(
        exactly_one_of("step", "num"),
        {"if": {"required": ["scale"], "properties": {"scale": {"const": "log"}}},
         "then": all_rules(given("num"), {"properties": {"start": {"exclusiveMinimum": 0},
                                                         "stop": {"exclusiveMinimum": 0}}})})

    @model_validator(mode="after")
    def _one_spacing(self):
        if (self.step is None) == (self.num is None):
            raise ValueError("give exactly one of step and num")
        if self.scale == "log" and (self.start <= 0 or self.stop <= 0 or self.num is None):
            raise ValueError("a log range needs positive start and stop and num")
        if self.step is not None and (self.stop - self.start) / self.step + 1 > MAX_SWEEP_POINTS:
            raise ValueError(f"more than {MAX_SWEEP_POINTS} points")
        return self


class SweepRequest(StrictModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "endpoint": "operator", "parameter": "operator.m", "values": [1, 16, 64, 256, 1024, 4096],
        "request": {"device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": 1, "n": 4096, "k": 4096}}}]})
    endpoint: Literal["operator", "model"]
    request: dict[str, Any] = Field(description="A body of that endpoint; the parameter is overwritten per point")
    parameter: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$",
                           description="Dotted path into the body, e.g. operator.m, batch_size, seq_len")
    values: list[SweepEnd] | None = Field(None, min_length=1, max_length=MAX_SWEEP_POINTS)
    range: SweepRange | None = None
    schema_rules = exactly_one_of("values", "range")

    @model_validator(mode="after")
    def _one_source(self):
        if (self.values is None) == (self.range is None):
            raise ValueError("give exactly one of values and range")
        return self


class SweepRow(BaseModel):
    value: float
    time_s: float
    bound: Literal["memory", "compute", "interconnect"] = Field(
        description="Operator: its bound; model: the bound holding the largest share of the time")
    flops: float
    bytes: float
    arithmetic_intensity: float | None = None
    mfu: float | None
    memory_bound_time_share: float | None = None
    ttft_s: float | None = None
    tpot_s: float | None = None
    tokens_per_s: float | None = None
    fits: bool | None = Field(None, description="Model sweeps: whether the step fits in each device's usable memory")
    expected_time_s: float | None = Field(
        None, description="time_s as the device's kernel calibration for the request's engine expects it (an operator's, "
                          "or a model step's matmul rows and the rest at their bounds), seconds; null where none applies")


class Crossover(BaseModel):
    before: float = Field(description="Last swept value with the first bound")
    after: float = Field(description="First swept value with the new bound")
    from_bound: str
    to_bound: str
    estimate: float = Field(description="Interpolated value where the bound changes")


class CriticalM(BaseModel):
    real: float | None = Field(description="M solving intensity = ridge (null: never compute-bound)")
    smallest_integer: int | None = Field(description="Smallest M at which the matmul is compute-bound")
    ridge_point: float


class SweepResult(BaseModel):
    endpoint: str
    parameter: str
    rows: list[SweepRow]
    crossover: list[Crossover] = Field(description="Each place where the bound changes between consecutive points")
    critical_m: CriticalM | None = Field(None, description="For a matmul operator")
    largest_feasible_value: float | None = Field(
        None, description="Model sweeps: the largest swept value whose step fits in memory (null: none does, or an "
                          "operator sweep)")


class CompareRequest(StrictModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "endpoint": "model", "device_ids": ["nvidia-h100-sxm", "nvidia-a100-80gb-sxm", "amd-mi300x", "nvidia-l40s"],
        "request": {"model_id": "llama-3.1-8b", "phase": "decode", "batch_size": 32, "seq_len": 4096}}]})
    endpoint: Literal["operator", "model", "serving"] = Field(
        description="Which analysis each device gets: POST /v1/analyze/operator, /model or /serving")
    request: dict[str, Any] = Field(description="A body of that endpoint; device_id is set per device")
    device_ids: list[DeviceId] = Field(min_length=1, max_length=64)


class CompareEntry(BaseModel):
    rank: int
    device_id: str
    time_s: float = Field(description="The bound, seconds: the operator's or the step's time, or a serving "
                                      "deployment's TPOT (time_meaning says which)")
    bound: str = Field(description="What limits it: memory, compute or interconnect; for serving, what caps the "
                                   "request rate (decode, prefill or latency)")
    mfu: float | None
    tokens_per_s: float | None = Field(None, description="Model steps: tokens per second at the step; serving: the "
                                                         "deployment's output tokens per second (bounds)")
    expected_time_s: float | None = Field(
        None, description="The same time as a calibration of the device and the request's engine expects it, "
                          "seconds; null where none applies")
    calibration_id: str | None = Field(None, description="The calibration behind expected_time_s (a model step's, "
                                                         "comma-separated where its matmuls use several)")
    relative_time: float = Field(description="The ranked time (expected_time_s when ranked_by is 'expected', else "
                                             "time_s) / the first device's")


class CompareError(BaseModel):
    device_id: str
    error: str
    detail: str


class CompareInfeasible(BaseModel):
    device_id: str
    required_bytes: float = Field(description="Weights, KV cache, activations and workspace per device, bytes")
    usable_bytes: float
    shortfall_bytes: float = Field(description="required - usable, bytes")


class CompareResult(BaseModel):
    endpoint: str
    ranking: list[CompareEntry] = Field(description="Devices where the workload fits in memory, fastest first")
    ranked_by: Literal["expected", "bound"] = Field(
        description="'expected' when every ranked device has an expectation (a calibration for the request's engine), "
                    "else 'bound': bounds alone can rank hardware wrongly where engines reach their roofs unevenly")
    time_meaning: str = Field(description="What time_s and expected_time_s measure for this endpoint")
    errors: list[CompareError] = Field(description="Devices the workload could not be analysed on, and why")
    infeasible: list[CompareInfeasible] = Field(
        default_factory=list, description="Model workloads: devices where it does not fit in memory, with the shortfall")
