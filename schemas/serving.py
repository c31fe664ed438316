"""One serving deployment under one workload (POST /v1/analyze/serving): what a serving benchmark would measure."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from schemas.analysis import RoofOptions
from schemas.common import DeviceId, EngineName, NonNegativeFinite, StrictModel, all_rules, given
from schemas.models import DTYPES_DOC, Length, MemoryOptions, ModelChoice, ModelDTypes, ModelIdField, StepMemoryOut

Parallel = Annotated[int, Field(ge=1, le=1024)]
MAX_SERVING_CONCURRENCY = 65_536
# The timed requests a unit of concurrency a simulated workload may ask for (each costs the simulation its events).
MAX_PROMPTS_PER_CONCURRENCY = 20
POOL_FIELDS = ("workers", "tensor_parallel", "expert_parallel", "attention_data_parallel", "max_batch_per_group")

SERVING_EXAMPLE: dict[str, Any] = {
    "model_id": "deepseek-v3", "device_id": "nvidia-b200", "input_len": 1024, "output_len": 1024, "concurrency": 64,
    "dtypes": {"scheme": "w8a8-fp8", "kv_cache": "fp8"}, "tensor_parallel": 8, "expert_parallel": 8,
    "attention_data_parallel": 8, "speculative": {"method": "mtp", "draft_tokens": 3, "acceptance_length": 2.5},
}


class ServingPool(StrictModel):
    workers: Parallel = Field(1, description="Copies of the worker (engine instances) in the pool")
    tensor_parallel: Parallel = Field(1, description="Devices of one worker")
    expert_parallel: Parallel = Field(
        1, description="1: each routed expert split by width over the worker's devices; or the worker's "
                       "tensor_parallel: the experts split whole over its devices, tokens sent to them and back by "
                       "all-to-all (SGLang's and vLLM's expert parallelism)")
    attention_data_parallel: Parallel = Field(
        1, description="Attention groups per worker, dividing tensor_parallel (SGLang's --dp-size with "
                       "--enable-dp-attention): each group of tensor_parallel / attention_data_parallel devices holds "
                       "its own requests and their KV cache")
    max_batch_per_group: Annotated[int, Field(ge=1, le=MAX_SERVING_CONCURRENCY)] | None = Field(
        None, description="The engine's cap on the requests an attention group decodes at once (SGLang: "
                          "--max-running-requests / --dp-size; vLLM: --max-num-seqs); more wait for a place. "
                          "Default: no cap but the KV cache's")


class Disaggregated(StrictModel):
    prefill: ServingPool = Field(description="The pool that runs prompts")
    decode: ServingPool = Field(description="The pool that generates; the concurrency is spread over its groups")


class SpeculativeDecoding(StrictModel):
    schema_rules = {"if": {"properties": {"method": {"const": "draft"}}, "required": ["method"]},
                    "then": given("draft_model_id")}

    method: Literal["mtp", "eagle", "draft"] = Field(
        description="mtp (DeepSeek's multi-token prediction) and eagle: one decoder layer drafts; draft: a model of "
                    "its own (draft_model_id)")
    draft_tokens: Annotated[int, Field(ge=1, le=16)] = Field(description="Tokens drafted per verification, k")
    acceptance_length: Annotated[float, Field(ge=1, le=17)] = Field(
        description="Mean tokens emitted per verification step, between 1 and draft_tokens + 1: a property of the "
                    "model, the draft and the data, measured (an engine logs it), not of the hardware")
    draft_model_id: ModelIdField | None = Field(None, description="With method 'draft': the draft model (GET /v1/models)")

    @model_validator(mode="before")
    @classmethod
    def _acceptance_named(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("acceptance_length") is None:
            raise ValueError("acceptance_length is required: the mean tokens a verification step emits is a property of "
                             "the model, its draft and the prompts, not of the hardware, so the service cannot derive it; "
                             "give the figure your engine logs (SGLang: 'accept len', vLLM: 'Mean acceptance length')")
        return data

    @model_validator(mode="after")
    def _consistent(self):
        if self.acceptance_length > self.draft_tokens + 1:
            raise ValueError(f"acceptance_length ({self.acceptance_length:g}) exceeds draft_tokens + 1 "
                             f"({self.draft_tokens + 1}): a verification emits at most its drafts and one token more")
        if self.method == "draft" and self.draft_model_id is None:
            raise ValueError("method 'draft' needs draft_model_id")
        return self


class ServingLayout(StrictModel):
    """How a deployment is laid out and what it runs in: its pools, their parallelism, the dtypes and speculative
    decoding (what a measured serving run's file does not record and its submission gives)."""

    schema_rules = all_rules(*(
        {"if": given("disaggregated"), "then": {"not": {"required": [name]}}} for name in POOL_FIELDS))

    dtypes: ModelDTypes = Field(default_factory=ModelDTypes, description=DTYPES_DOC)
    workers: Parallel = Field(1, description="Aggregated: copies of the worker, each prefilling and decoding")
    tensor_parallel: Parallel = Field(1, description="Aggregated: devices of one worker")
    expert_parallel: Parallel = Field(1, description="Aggregated: 1 or tensor_parallel (see ServingPool)")
    attention_data_parallel: Parallel = Field(1, description="Aggregated: attention groups per worker (see ServingPool)")
    max_batch_per_group: Annotated[int, Field(ge=1, le=MAX_SERVING_CONCURRENCY)] | None = Field(
        None, description="Aggregated: the engine's cap on the requests a group decodes at once (see ServingPool)")
    disaggregated: Disaggregated | None = Field(
        None, description="Separate prefill and decode pools (then workers and the parallel sizes above are not given)")
    speculative: SpeculativeDecoding | None = Field(None, description="Speculative decoding: a draft proposes "
                                                                        "tokens the model verifies in one step")

    @model_validator(mode="after")
    def _one_layout(self):
        given_here = [name for name in POOL_FIELDS if name in self.model_fields_set]
        if self.disaggregated is not None and given_here:
            raise ValueError(f"with disaggregated pools, give {', '.join(given_here)} per pool, not at the top level")
        return self

    def pools(self) -> tuple[ServingPool, ServingPool | None]:
        """(the decode pool, the prefill pool or None when aggregated)."""
        if self.disaggregated is not None:
            return self.disaggregated.decode, self.disaggregated.prefill
        return ServingPool(**{name: getattr(self, name) for name in POOL_FIELDS}), None


class SchedulerOptions(StrictModel):
    """The engine's scheduler as the simulation behind `expected` runs it: each field given replaces the engine's
    preset (its defaults, read from its own code: the answer's expected.simulation.scheduler names the source)."""

    batching: Literal["prefill_first", "mixed"] | None = Field(
        None, description="prefill_first: a step prefills new requests or decodes the running ones (SGLang); mixed: "
                          "one step decodes every running request and prefills what the token budget leaves (vLLM, "
                          "TensorRT-LLM)")
    step_tokens: Annotated[int, Field(ge=1, le=1_048_576)] | None = Field(
        None, description="Tokens one step may prefill (SGLang --chunked-prefill-size, vLLM --max-num-batched-tokens, "
                          "TensorRT-LLM max_num_tokens)")
    max_running: Annotated[int, Field(ge=1, le=MAX_SERVING_CONCURRENCY)] | None = Field(
        None, description="Requests an attention group decodes at once (SGLang --max-running-requests, vLLM "
                          "--max-num-seqs, TensorRT-LLM max_batch_size); default: max_batch_per_group, else the engine's")
    recv_interval: Annotated[int, Field(ge=1, le=1000)] | None = Field(
        None, description="Forward passes between two looks for new requests (SGLang --scheduler-recv-interval, or "
                          "--num-continuous-decode-steps)")
    graph_batch_sizes: Annotated[list[Annotated[int, Field(ge=1, le=MAX_SERVING_CONCURRENCY)]],
                                 Field(max_length=512)] | None = Field(
        None, description="Decode batches captured as CUDA graphs: a batch runs padded to the next one ([]: none)")
    stream_interval: Annotated[int, Field(ge=1, le=1000)] | None = Field(
        None, description="Tokens a streamed chunk carries (--stream-interval): the client's inter-token latency is "
                          "that many steps")
    chunked: bool | None = Field(None, description="Whether a prompt longer than step_tokens is prefilled over "
                                                   "several steps (TensorRT-LLM's enable_chunked_prefill)")
    balance_wait_steps: Annotated[int, Field(ge=0, le=10_000)] | None = Field(
        None, description="TensorRT-LLM attention_dp_config (enable_balance, timeout_iters): with attention data "
                          "parallelism a new request waits for one on every rank, at most this many steps")


LengthBins = Annotated[list[tuple[Annotated[int, Field(ge=1)], Annotated[float, Field(ge=0, le=1e9)]]],
                      Field(min_length=1, max_length=64)]


class WorkloadOptions(StrictModel):
    """The benchmark client the simulation runs: by default a closed loop at the concurrency (`--max-concurrency`,
    `--request-rate inf`, `--ignore-eos`), its warm-ups finished before its timed requests start together; with
    `request_rate`, an open loop."""

    range_ratio: Annotated[float, Field(gt=0, le=1)] = Field(
        1.0, description="Lengths drawn uniformly from [range_ratio x length, length] (`--random-range-ratio`; "
                         "InferenceX runs 0.8); 1: every prompt input_len and every output output_len")
    prompts_per_concurrency: Annotated[int, Field(ge=1, le=MAX_PROMPTS_PER_CONCURRENCY)] = Field(
        10, description="Timed requests per request in flight (InferenceX: --num-prompts 10 x concurrency)")
    input_histogram: LengthBins | None = Field(
        None, description="Prompt lengths as [[tokens, weight], ...] (up to 64 bins, weights not all 0, none longer "
                          "than input_len, which stays the longest the bound and the memory are sized for), in place "
                          "of range_ratio")
    output_histogram: LengthBins | None = Field(
        None, description="Output lengths as [[tokens, weight], ...], weights not all 0, none longer than output_len")
    request_rate: Annotated[float, Field(gt=0, le=1e6)] | None = Field(
        None, description="An open loop instead: requests arrive at this rate a second over the deployment, whatever "
                          "is in flight (prompts_per_concurrency x concurrency of them; `concurrency` still sizes "
                          "the bound)")
    burstiness: Annotated[float, Field(gt=0, le=100)] = Field(
        1.0, description="With request_rate: the gamma shape of the gaps between arrivals (vLLM's --burstiness): 1 "
                         "Poisson, below 1 burstier")

    @model_validator(mode="after")
    def _bins_have_weight(self):
        for name in ("input_histogram", "output_histogram"):
            bins = getattr(self, name)
            if bins is not None and sum(weight for _, weight in bins) <= 0:
                raise ValueError(f"{name}: the weights must not all be 0")
        return self


class ServingAnalysisRequest(ModelChoice, RoofOptions, MemoryOptions, ServingLayout):
    model_config = ConfigDict(json_schema_extra={"examples": [SERVING_EXAMPLE]})

    device_id: DeviceId
    input_len: Length = Field(description="Prompt tokens per request")
    output_len: Length = Field(description="Generated tokens per request")
    concurrency: Annotated[int, Field(ge=1, le=MAX_SERVING_CONCURRENCY)] = Field(
        description="Requests the client keeps in flight over the whole deployment")
    engine: EngineName | None = Field(
        None, description="A free label of the serving engine (sglang, vllm, trt, ...): what a calibration is fitted for")
    calibration: Literal["auto", "kernels", "none"] = Field(
        "auto", description="auto: answer `expected` from this device's own serving runs where a calibration of the "
                            "device and engine exists, else from its kernel tables and the engine's costs carried "
                            "over from the devices it was measured on (basis 'kernels'); kernels: the latter even "
                            "where runs exist (devices compared like with like); none: no `expected`")
    collective_latency_s: NonNegativeFinite | None = Field(
        None, description="What-if: the fixed cost of one collective inside a node, seconds (default: measured or the device's)")
    scheduler: SchedulerOptions | None = Field(
        None, description="The engine's scheduler, field by field over its preset, for the simulation behind `expected`")
    workload: WorkloadOptions | None = Field(
        None, description="The benchmark client the simulation runs (lengths' range, timed requests)")

    @model_validator(mode="after")
    def _histograms_within_lengths(self):
        workload = self.workload
        for name, longest in (("input", self.input_len), ("output", self.output_len)):
            bins = getattr(workload, f"{name}_histogram", None) if workload is not None else None
            if bins and max(length for length, _ in bins) > longest:
                raise ValueError(f"workload.{name}_histogram: a length exceeds {name}_len ({longest:,}), the longest "
                                 "the bound and the memory are sized for")
        return self


class ServingFigures(BaseModel):
    ttft_s: float = Field(description="Time to first token once a request is admitted, seconds (a wait for a place "
                                      "is waiting_s, in the bound)")
    tpot_s: float = Field(description="Time per output token after the first, seconds")
    itl_s: float = Field(description="Time between two decode (or verification) steps, seconds")
    e2e_latency_s: float = Field(description="The mean request's whole time, a wait for a place included: the larger "
                                             "of ttft_s + (output_len - 1) x tpot_s and concurrency / requests_per_s "
                                             "(Little's law), seconds")
    requests_per_s: float = Field(description="Requests completed per second by the whole deployment")
    output_tokens_per_s: float = Field(description="Generated tokens per second, the whole deployment")
    output_tokens_per_s_per_device: float = Field(description="output_tokens_per_s / devices")
    tokens_per_s_per_device: float = Field(description="(input + output) tokens per second / devices")
    tokens_per_s_per_user: float = Field(description="1 / tpot_s")


class ServingPoolOut(BaseModel):
    role: Literal["aggregated", "prefill", "decode"] = Field(
        description="aggregated: prefill and decode share the pool; else the pool's part")
    workers: int = Field(description="Copies of the worker in the pool")
    tensor_parallel: int = Field(description="Devices of one worker")
    expert_parallel: int = Field(description="Devices the routed experts are split over, whole (1: split by width)")
    attention_data_parallel: int = Field(description="Attention groups per worker")
    devices: int = Field(description="workers x tensor_parallel")
    batch_per_group: int = Field(description="Requests an attention group decodes at once: its share of the "
                                             "concurrency, capped by max_batch_per_group and by its KV cache (1 in a "
                                             "prefill pool, whose memory is one request's prefill)")
    context_len: int = Field(description="The longest cache a sequence holds in this pool, tokens")
    memory: StepMemoryOut = Field(description="Per device, at batch_per_group and context_len")


class ServingBound(ServingFigures):
    devices: int = Field(description="Devices of every pool")
    running_requests: int = Field(description="Requests decoded at once over the deployment (the groups' batches); "
                                              "the rest of the concurrency waits for a place")
    waiting_s: float = Field(description="The mean request's time beyond its own prefill and decode steps, seconds: "
                                         "waiting for a place in a running batch, or for other requests' prefills on "
                                         "the devices it shares (e2e_latency_s less ttft_s + (output_len - 1) x tpot_s)")
    prefill_s: float = Field(description="One request's prefill alone, seconds")
    decode_step_s: float = Field(description="One decode step (or verification of draft_tokens + 1 tokens), seconds")
    prefill_share_s: float = Field(
        description="Aggregated: the prefills of a group's batch (the requests that replace finished ones, on the same "
                    "devices) spread over its output tokens, seconds a token: what decode steps wait for on top of "
                    "tpot_s in steady state, the batch's prefill bound / output_len (0 when disaggregated). Not in "
                    "tpot_s, which stays the bound of one step; expected TPOT is calibrated on tpot_s + this")
    draft_s: float = Field(description="The draft's steps per verification, seconds (0 without speculative decoding)")
    kv_transfer_s: float = Field(description="One request's KV cache from the prefill to the decode pool, seconds")
    kv_transfer_bytes: float = Field(description="One request's KV cache, bytes (0 when aggregated)")
    limited_by: Literal["decode", "prefill", "latency"] = Field(
        description="What caps requests_per_s: the decode (or shared) pool's work, the prefill pool's, or Little's "
                    "law (concurrency / e2e latency)")
    fits: bool = Field(description="Every pool's devices hold their weights, caches and activations")
    pools: list[ServingPoolOut] = Field(description="Each pool's layout, batch and memory per device (prefill first)")


class ServingCalibrationOut(BaseModel):
    id: str = Field(description="serving:device:engine:precision:speculative (shipped), "
                                "serving:measured:device:engine:model:precision:speculative (fitted to runs submitted), "
                                "or engine:engine:precision:speculative (an engine's costs over every device with runs, "
                                "basis 'kernels'); GET /v1/calibrations/{id} answers it")
    engine: str = Field(description="The engine whose runs it was fitted to")
    fitted_on: int = Field(description="Measured runs fitted")
    checked_by: str = Field(description="'other workload shapes' (fitted on one, checked on the rest) or 'leave-one-out'")
    checked_on: int = Field(description="Runs the errors were measured on")
    tpot_median_error: float = Field(description="|expected / measured - 1| of TPOT on the runs checked, median")
    tpot_p90_error: float = Field(description="The same, 90th percentile")
    ttft_median_error: float = Field(description="|expected / measured - 1| of TTFT, median (measured TTFTs include "
                                                 "queueing, which no bound holds)")
    extrapolated: bool = Field(description="The request's workload shape, concurrency or layout (expert parallelism, "
                                           "attention data parallelism, disaggregation, speculative decoding) lies "
                                           "outside those of the runs fitted (a layout is weighed where the runs' "
                                           "were recorded), or the weights' type is one no run of the engine was "
                                           "measured in (a bf16 deployment reads the fp8 line)")
    basis: str = Field(description="What it was fitted on, the fit, and how wrong it was")


class KernelCompositionOut(BaseModel):
    tables: list[str] = Field(description="The kernel calibrations the deployment's rows were composed from")
    stand_in_for: str | None = Field(description="The device whose tables these are, where the request's device has "
                                                 "none of its own (the nearest measured part of its vendor, at the "
                                                 "request's device's roofs); null where they are its own")
    basis: str = Field(description="Which fit each kind of row took")
    ttft_s: float = Field(description="TTFT of the deployment as its kernels compose it, before the engine's costs, "
                                      "seconds")
    tpot_s: float = Field(description="TPOT the same way, seconds")
    prefill_share_s: float = Field(description="The prefill share the same way (bound.prefill_share_s's meaning), "
                                               "seconds a token")
    decode_step_s: float = Field(description="One decode (or verification) step the same way, seconds")
    prefill_s: float = Field(description="One request's prefill the same way, seconds")


class Percentiles(BaseModel):
    p50: float = Field(description="Median, seconds")
    p90: float = Field(description="90th percentile, seconds")
    p99: float = Field(description="99th percentile, seconds")


class ServingPercentiles(BaseModel):
    ttft_s: Percentiles = Field(description="Time to first token over the simulated benchmark's requests, seconds")
    tpot_s: Percentiles = Field(description="Time per output token after the first of each request, seconds")
    e2e_s: Percentiles = Field(description="A request's whole time, seconds")


class SimulationOut(BaseModel):
    scheduler: dict[str, Any] = Field(description="The scheduler simulated: each field and the source of its defaults")
    calibration: str = Field(description="The scheduling calibration's id and its four numbers")
    basis: str = Field(description="What it was fitted on and how wrong it was on shapes its check never saw")
    requests: int = Field(description="Requests simulated (one attention group's share of the benchmark)")
    events: int = Field(description="Events the simulation took")
    limited_by: Literal["decode", "prefill", "running cap"] = Field(
        description="What held throughput: the decode steps, the prefills between them, or requests waiting for a "
                    "place in a full running batch")
    stream_interval: int = Field(description="Tokens a streamed chunk carries: itl_s is that many steps")


class ServingExpected(ServingFigures):
    basis: Literal["runs", "kernels"] = Field(
        description="runs: a fit to measured serving runs of this device and engine; kernels: the deployment composed "
                    "from this device's measured kernel tables (or a stand-in's, see kernels.stand_in_for) and the "
                    "engine's costs fitted over the other devices it was measured on")
    calibration: ServingCalibrationOut = Field(description="The calibration the expectation comes from: its error is "
                                                           "measured on runs it did not see (for basis 'kernels', on "
                                                           "devices left out of its fit)")
    kernels: KernelCompositionOut | None = Field(description="basis 'kernels': the composed deployment and its tables")
    percentiles: ServingPercentiles | None = Field(
        None, description="Median, p90 and p99 of TTFT, TPOT and end-to-end time from the scheduling simulation "
                          "(ttft_s and tpot_s are then its medians); null where no scheduling calibration applies")
    simulation: SimulationOut | None = Field(None, description="The simulation behind percentiles, where there is one")


class LaunchOut(BaseModel):
    command: str = Field(description="The command line(s) that start the deployment, one server a line (empty where "
                                     "the engine's form of this layout is not written: notes say why)")
    files: dict[str, str] = Field(description="Files the command reads, by name (TensorRT-LLM's config.yml)")
    benchmark: str = Field(description="InferenceX's benchmark client at this workload (its "
                                       "utils/bench_serving/benchmark_serving.py)")
    notes: list[str] = Field(description="What the commands leave to you, and where the scheduler's values come from")


class ServingAnalysis(BaseModel):
    model: str = Field(description="The catalog model, or 'inline <family>'")
    device_id: str = Field(description="The device every pool runs on")
    engine: str | None = Field(description="The request's engine label")
    bound: ServingBound = Field(description="Bounds: every time a lower bound, every rate an upper bound")
    expected: ServingExpected | None = Field(
        description="What the deployment is expected to measure: from a serving calibration of this device and engine "
                    "(basis 'runs') or from its kernel tables and the engine's carried-over costs (basis 'kernels'); "
                    "null where neither applies (`assumptions` says why)")
    launch: LaunchOut | None = Field(
        None, description="With an engine the service knows (SGLang, vLLM, TensorRT-LLM): the commands that start this "
                          "deployment and benchmark it, every flag as the engine's parser spells it")
    compute_roof_source: str = Field(description="'nominal' or 'measured': the matmuls' compute roof")
    memory_roof_source: str = Field(description="'nominal' or 'measured': the HBM bandwidth")
    assumptions: list[str] = Field(description="The layout, scheduling model, roofs and dtypes behind the figures")
