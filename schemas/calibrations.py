"""Measured kernel timings a device's users submit, and the calibrations fitted to measurements."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.common import EngineName, StrictModel
from schemas.operators import Operator

MAX_TIMINGS = 10_000
Source = Annotated[str, Field(min_length=1, max_length=1000)]


class KernelTiming(StrictModel):
    operator: Operator = Field(description="The kernel, as POST /v1/analyze/operator takes it")
    time_s: Annotated[float, Field(ge=1e-9, le=1e4)] = Field(description="Its measured time, one run, seconds")
    engine: EngineName | None = Field(None, description="This row's engine, where it differs from the body's")
    source: Source | None = Field(None, description="This row's source, where it differs from the body's")


class KernelTimingsCreate(StrictModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "engine": "trtllm", "source": "our nightly GEMM sweep, TensorRT-LLM 1.3",
        "timings": [{"operator": {"kind": "matmul", "m": 4096, "n": 4096, "k": 4096, "dtype": "bf16"},
                     "time_s": 1.86e-4},
                    {"operator": {"kind": "matmul", "m": 16, "n": 4096, "k": 4096, "dtype": "bf16"},
                     "time_s": 1.3e-5}]}]})
    engine: EngineName = Field(description="The engine or kernel library that ran them: calibrations are per engine")
    source: Source = Field(description="Where the timings come from (tool, version, run)")
    timings: list[KernelTiming] = Field(min_length=1, max_length=MAX_TIMINGS,
                                        description="At most 10,000 a request, stored all or none")


class KernelTimingPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: int
    device_id: str
    engine: str = Field(description="The engine or kernel library that ran it")
    source: str
    kind: str = Field(description="The operator's kind")
    dtype: str = Field(description="The compute dtype whose roof the operator is bound by")
    operator: dict = Field(description="The operator as submitted")
    flops: float = Field(description="Its model FLOPs")
    hbm_bytes: float = Field(description="Its modelled HBM traffic, bytes")
    time_s: float = Field(description="Its measured time, seconds")
    submitted_by: str = Field(description="Label of the token that submitted it (never the token)")
    created_at: datetime


class CalibrationParameter(BaseModel):
    name: str
    value: float | None = Field(description="The fitted value; null only where `identified` is false")
    unit: str = Field(description="'s', '1' (a fraction) or the unit named")
    meaning: str = Field(description="What the parameter stands for")
    identified: bool = Field(True, description="False where the measurements cannot tell it (a compute efficiency "
                                               "fitted to memory-bound matmuls only): the fit holds it at its roof")
    note: str | None = Field(None, description="Why it is not identified, and what would identify it")


class NotFitted(BaseModel):
    scope: str = Field(description="The measurements' scope: device, engine and dtype, or a serving run's device, "
                                   "engine, model, weights' type and speculative method")
    measurements: int = Field(description="How many of the scope's measurements are stored")
    reason: str = Field(description="Why no calibration was fitted (or why the one there was dropped)")


class CalibrationPublic(BaseModel):
    id: str = Field(description="kernel:<origin>:<device>:<engine>:<dtype>, serving:<device>:<engine>:<precision>:"
                                "<speculative> (shipped), serving:measured:<device>:<engine>:<model>:<precision>:"
                                "<speculative>, engine:<engine>:<precision>:<speculative>, "
                                "scheduling:<device>:<engine>:<precision>:<speculative> (shipped), "
                                "scheduling:measured:<device>:<engine>:<model>:<precision>:<speculative> or "
                                "scheduling:kernels:<engine>:<precision>:<speculative>")
    kind: Literal["kernel", "serving", "engine", "scheduling"] = Field(
        description="What it expects: one matmul's time, a deployment's TPOT and TTFT from its own device's runs "
                    "(serving), or from its kernel tables and an engine's costs carried over (engine), or the "
                    "timing of the scheduling simulation behind an answer's percentiles (scheduling)")
    origin: Literal["shipped", "measured"] = Field(
        description="'shipped': fitted to public measurements and shipped with the service; 'measured': fitted to the "
                    "timings or runs submitted for the device, refitted whenever they change")
    device_id: str = Field(description="The device it was fitted to; for one carried over several devices (engine, "
                                       "scheduling:kernels), their ids joined by ', '")
    engine: str = Field(description="The engine whose measurements it was fitted to")
    scope: str = Field(description="What requests it applies to")
    model: str = Field(description="The fitted formula")
    parameters: list[CalibrationParameter] = Field(description="The fitted values, each with its unit and meaning")
    fitted_on: int = Field(description="Measurements fitted")
    checked_on: int = Field(description="Measurements its error was checked on")
    checked_by: str = Field(description="How: held out of the fit, cross-validated, or the other workload shapes")
    median_error: float | None = Field(description="|expected / measured - 1| on those (TPOT for serving, engine "
                                                   "and scheduling ones), median; null where it could not be checked "
                                                   "(a scheduling calibration with too few runs of other shapes)")
    p90_error: float | None = Field(description="The same, 90th percentile")
    bound_median_error: float | None = Field(description="The bare bound's median error on the same, where known")
    source: str
    shapes: list[list[int]] | None = Field(
        None, description="Kernels: [least, most] of m, n and k over the timings fitted; null where not kept")
    workloads: list[list[int]] | None = Field(
        None, description="Serving: the [input, output] lengths of the runs fitted; null for a kernel calibration")
    concurrency: list[int] | None = Field(
        None, description="Serving: [least, most] requests in flight over the runs fitted; null for a kernel one")
    layouts: list[str] | None = Field(
        None, description="Serving and engine: the layouts of the runs fitted (expert-parallel, attention-dp, "
                          "disaggregated, speculative-<method>, joined by '+', or 'plain'); empty where not recorded; "
                          "null for a kernel one")


class CalibrationResidual(BaseModel):
    timing_id: int = Field(description="The kernel timing (GET /v1/devices/{id}/kernel-timings)")
    m: int | None = Field(description="A matmul's m (null for other operators)")
    n: int | None
    k: int | None
    measured_time_s: float = Field(description="The timing's measured time, seconds")
    expected_time_s: float = Field(description="The calibration's, fitted to all the timings (this one included), "
                                               "seconds")
    bound_time_s: float = Field(description="The roofline bound at the nominal roofs the fit uses, seconds")
    error: float = Field(description="expected / measured - 1")


class ServingResidual(BaseModel):
    run_id: int = Field(description="The serving run (GET /v1/serving-runs)")
    input_len: int = Field(description="Prompt tokens per request")
    output_len: int = Field(description="Generated tokens per request")
    concurrency: int = Field(description="Requests in flight")
    measured_tpot_s: float = Field(description="The run's median TPOT, seconds")
    expected_tpot_s: float = Field(description="The calibration's, fitted to all the runs (this one included), seconds")
    bound_tpot_s: float = Field(description="The service's bound at the run's deployment, seconds")
    tpot_error: float = Field(description="expected / measured - 1")
    measured_ttft_s: float = Field(description="The run's median TTFT, seconds")
    expected_ttft_s: float = Field(description="The calibration's, seconds")
    bound_ttft_s: float = Field(description="The service's bound, seconds")
    ttft_error: float = Field(description="expected / measured - 1")


class CalibrationDetail(CalibrationPublic):
    residuals: list[CalibrationResidual] | None = Field(
        None, description="A measured kernel calibration's timings, each against the fit (at most 10,000, newest "
                          "first); null for a shipped one (its measurements are not stored) and a serving one")
    run_residuals: list[ServingResidual] | None = Field(
        None, description="A measured serving calibration's runs, each against the fit (at most 1,000, newest first); "
                          "null otherwise")


class KernelTimingsCreated(BaseModel):
    created: list[int] = Field(description="The new timings' ids")
    calibrations: list[CalibrationPublic] = Field(
        description="The calibrations refitted for the engines and dtypes the timings touched (a matmul calibration "
                    "needs at least 6 matmul timings of 6 distinct shapes, of one engine and compute dtype)")
    not_fitted: list[NotFitted] = Field(
        default_factory=list, description="Each engine and dtype the timings touched that has no calibration, and why")
