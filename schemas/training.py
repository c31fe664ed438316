"""Training: one step on the roofline (POST /v1/analyze/training) and the time to train (POST /v1/plan/training)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from schemas.analysis import RoofOptions
from schemas.common import DeviceId, NonNegativeFinite, PositiveFinite, StrictModel
from schemas.models import Count, Length, ModelChoice, ParamCounts, RowOut, UsableMemory
from service.core.training.fp8 import RECIPES
from service.core.training.peft import ALL_LINEAR, DEFAULT_TARGETS, MAX_TARGETS, METHODS, QUANTISED_BASE_BYTES
from service.core.training.schedules import SCHEDULES

Degree = Annotated[int, Field(ge=1, le=65_536)]
# Floating-point types a training step can keep parameters, gradients and states in (no integer training).
TrainingDType = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "fp8_e4m3", "fp8_e5m2"]
Fp8Recipe = Literal["none", "delayed", "current", "blockwise", "mxfp8"]
if set(get_args(Fp8Recipe)) != set(RECIPES):
    raise ImportError(f"recipes named in Fp8Recipe and RECIPES differ: {set(get_args(Fp8Recipe)) ^ set(RECIPES)}")
# Spelled out for the OpenAPI document; the core's list is the one the step reads.
ScheduleName = Literal["1f1b", "interleaved", "zero_bubble"]
if set(get_args(ScheduleName)) != set(SCHEDULES):
    raise ImportError(f"schedules named in ScheduleName and SCHEDULES differ: {set(get_args(ScheduleName)) ^ set(SCHEDULES)}")


class TrainingDTypes(StrictModel):
    parameters: TrainingDType = Field("bf16", description="Type the model's parameters are kept and computed in")
    gradients: TrainingDType = Field("bf16", description="Type of the gradients (fp32 for an fp32 main-grad buffer)")
    optimizer_states: TrainingDType = Field("fp32", description="Type of the optimizer's states and master weights")
    activations: TrainingDType = Field("bf16", description="Type of the activations kept for the backward")
    master_weights: bool | None = Field(
        None, description="Keep an fp32 (optimizer_states-typed) master copy of the parameters; default: when the "
                          "parameters are narrower than the optimizer states (mixed precision)")
    fp8_recipe: Fp8Recipe = Field(
        "none", description="FP8 training as Transformer Engine runs it: the layers' matmuls at the fp8 peak on fp8 "
                            "inputs and weights, each input and output gradient cast first (read in 16 bits, written "
                            "as row- and column-wise fp8 copies with the recipe's scales: 'delayed' per-tensor from "
                            "the amax history, 'current' per-tensor with an amax pass first, 'blockwise' 1 x 128 "
                            "fp32 scales, 'mxfp8' an e8m0 scale per 32), the weights cast once a step; attention, "
                            "norms, the LM head, master weights and the optimizer stay as dtypes say. Needs 16-bit "
                            "activations")


PeftMethod = Literal["lora", "qlora"]
if set(get_args(PeftMethod)) != set(METHODS):
    raise ImportError(f"methods named in PeftMethod and METHODS differ: {set(get_args(PeftMethod)) ^ set(METHODS)}")
QuantisedBase = Literal["nf4", "fp8"]
if set(get_args(QuantisedBase)) != set(QUANTISED_BASE_BYTES):
    raise ImportError("stored types named in QuantisedBase and QUANTISED_BASE_BYTES differ")
ModuleName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]


class PeftOptions(StrictModel):
    """Adapters fine-tuned beside a frozen base, as Hugging Face PEFT runs them (docs/training.md)."""

    method: PeftMethod = Field(
        "lora", description="'lora': rank-r adapters beside the named linear modules, the base frozen in "
                            "dtypes.parameters; 'qlora': the same over a base stored in base_dtype and dequantised "
                            "to dtypes.parameters before each matmul (forward, and again for the backward's dX)")
    rank: Annotated[int, Field(ge=1, le=4096)] = Field(16, description="r: A is [r, in], B is [out, r]")
    alpha: Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)] = Field(
        32, description="lora_alpha: the adapters' output is scaled by alpha / r (no cost of its own)")
    target_modules: list[ModuleName] = Field(
        list(DEFAULT_TARGETS), min_length=1, max_length=MAX_TARGETS,
        description=f"Hugging Face module names to adapt, as PEFT's target_modules (q_proj, k_proj, v_proj, o_proj, "
                    f"gate_proj, up_proj, down_proj, in_proj, out_proj, q_a_proj, q_b_proj, kv_a_proj_with_mqa, "
                    f"kv_b_proj, ...), or ['{ALL_LINEAR}']: every linear module of the layers (shared experts "
                    "included; routed experts, routers and the LM head are not adapted). A name the model does not "
                    "have is refused")
    base_dtype: QuantisedBase | None = Field(
        None, description="qlora only: the frozen base's storage, 'nf4' (default: 4-bit NormalFloat with double "
                          "quantisation, 4.127 bits a weight) or 'fp8'; embedding, LM head and norms stay 16-bit")


class TrainingStepOptions(RoofOptions, UsableMemory):
    """How one step runs: everything but the device, the model and the data-parallel degree."""

    seq_len: Length = Field(description="Tokens per sequence")
    micro_batch_size: Count = Field(1, description="Sequences per micro-batch per data-parallel replica")
    gradient_accumulation_steps: Annotated[int, Field(ge=1, le=65_536)] | None = Field(
        None, description="Micro-batches per step per replica (the pipeline's m); default 1, or what "
                          "global_batch_tokens implies")
    global_batch_tokens: Annotated[int, Field(ge=1, le=2**40)] | None = Field(
        None, description="Tokens per optimizer step over all replicas: must equal micro_batch_size x seq_len x "
                          "gradient_accumulation_steps x data_parallel; gradient_accumulation_steps is derived from it "
                          "when not given")
    tensor_parallel: Degree = Field(1, description="Megatron tensor parallelism: heads, MLP and vocabulary split")
    pipeline_parallel: Degree = Field(1, description="Pipeline stages (layers split evenly, the fullest stage "
                                                     "holding ceil(layers / stages))")
    first_stage_layers: Annotated[int, Field(ge=1, le=100_000)] | None = Field(
        None, description="Layers on the first pipeline stage (beside the embedding), as Megatron's "
                          "--decoder-first-pipeline-num-layers; the other stages share the rest evenly. Default: every "
                          "stage ceil(layers / stages)")
    last_stage_layers: Annotated[int, Field(ge=1, le=100_000)] | None = Field(
        None, description="Layers on the last pipeline stage (beside the LM head and loss), as Megatron's "
                          "--decoder-last-pipeline-num-layers")
    pipeline_schedule: ScheduleName = Field(
        "1f1b", description="'1f1b': (m + p - 1) micro-batch slots; 'interleaved': Megatron's virtual pipeline, "
                            "m + (p - 1)/v slots, v times the sends, the first stage holding p + (p - 1)/v "
                            "micro-batches; 'zero_bubble': Qi et al. 2024's ZB-H1, the weight gradients filling the "
                            "drain, bubble (p - 1)(T_F + T_B - T_W), 1F1B's memory")
    virtual_pipeline_stages: Annotated[int, Field(ge=1, le=1024)] = Field(
        1, description="Model chunks per pipeline stage (v): at least 2 with the interleaved schedule, 1 otherwise; "
                       "v x pipeline_parallel may not exceed the layers")
    context_parallel: Degree = Field(
        1, description="Context parallelism (c): each sequence split over c ranks in 2c load-balanced causal chunks, "
                       "K and V passed round a ring beside the attention they feed; seq_len must divide by 2c; "
                       "devices = data x tensor x pipeline x context")
    expert_parallel: Degree = Field(
        1, description="Expert parallelism (e): a MoE layer's routed experts split over e of the data- and "
                       "context-parallel ranks (e divides them and the experts); a dispatch and a combine all-to-all "
                       "per MoE layer forward and backward; expert gradients reduced over the ranks holding the same "
                       "experts. With tensor parallelism it needs sequence_parallel, as Megatron does")
    sequence_parallel: bool = Field(
        False, description="Megatron's sequence parallelism over the tensor-parallel group: norms and residuals on "
                           "1/t of the tokens, each block's all-reduce an all-gather before it and a reduce-scatter "
                           "after it (the same bytes, twice the latencies), the stream's kept copies split by t")
    zero_stage: Annotated[int, Field(ge=0, le=3)] = Field(
        0, description="ZeRO / FSDP sharding over data parallelism: 1 optimizer states, 2 and gradients, "
                       "3 and parameters (FSDP full sharding)")
    reshard_after_forward: bool = Field(
        True, description="With zero_stage 3: free each layer's gathered parameters after its forward and gather them "
                          "again for its backward (FSDP's default: two all-gathers a micro-batch, one layer held at a "
                          "time); false keeps them from the forward to the backward, as Llama 3 trained (one "
                          "all-gather a micro-batch, the stage's whole parameters held)")
    recompute: Literal["none", "selective", "full"] = Field(
        "none", description="Activation recomputation: 'selective' recomputes attention scores and softmax (it frees "
                            "memory only with naive attention: flash attention never stores them); 'full' keeps each "
                            "layer's input and runs its forward again in the backward")
    optimizer: Literal["adamw", "adam", "sgd_momentum", "sgd"] = "adamw"
    dtypes: TrainingDTypes = Field(default_factory=TrainingDTypes)
    attention_implementation: Literal["flash", "naive"] = "flash"
    peft: PeftOptions | None = Field(
        None, description="Fine-tune adapters (LoRA, QLoRA) beside a frozen base instead of training every weight: "
                          "no weight gradients for the frozen matmuls, gradients, optimizer states and their sync "
                          "for the adapters only. Not with expert parallelism")
    overlap_data_parallel: bool = Field(
        False, description="Overlap the data-parallel gradient sync with the backward (only what outlasts the "
                           "backward is exposed); default: the sync follows the backward")
    node_size: Annotated[int, Field(ge=1, le=100_000)] | None = Field(
        None, description="Devices per node, instead of the device's node_size")
    intra_node_bandwidth_bytes_per_s: PositiveFinite | None = Field(
        None, description="Intra-node link per device and direction, bytes/s, instead of the device's (or measured)")
    inter_node_bandwidth_bytes_per_s: PositiveFinite | None = Field(
        None, description="Inter-node link per device and direction, bytes/s, instead of the device's (or measured)")
    collective_latency_s: NonNegativeFinite | None = Field(
        None, le=1, description="Fixed cost of one intra-node collective or send, seconds; default the device's (2e-6)")
    inter_node_latency_s: NonNegativeFinite | None = Field(
        None, le=1, description="Fixed cost of one collective or send that crosses nodes, seconds; default 1e-5")


TRAINING_EXAMPLE: dict[str, Any] = {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "seq_len": 8192, "micro_batch_size": 1,
                    "gradient_accumulation_steps": 4, "data_parallel": 16, "tensor_parallel": 4, "zero_stage": 1}


class TrainingRequest(ModelChoice, TrainingStepOptions):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [TRAINING_EXAMPLE]})
    device_id: DeviceId
    data_parallel: Annotated[int, Field(ge=1, le=2**20)] = Field(1, description="Data-parallel replicas")


class TrainingRowOut(RowOut):
    phase: Literal["forward", "backward_activation", "backward_weight", "recompute", "optimizer"] = Field(
        description="forward; backward_activation (dX, and every non-matmul backward); backward_weight (dW); "
                    "recompute (the forward again, for the backward); optimizer (the update, once per step)")


class CollectiveOut(BaseModel):
    name: str
    kind: Literal["all_reduce", "reduce_scatter", "all_gather", "send_recv", "all_to_all"]
    group: Literal["data", "tensor", "pipeline", "context", "expert"] = Field(
        description="The parallelism whose group runs it (data: the data- and context-parallel ranks that share "
                    "weights)")
    group_size: int = Field(description="Devices in the group")
    tier: Literal["intra_node", "inter_node"] = Field(description="The link it crosses: inside a node or between nodes")
    bandwidth_bytes_per_s: float = Field(description="Link bandwidth per device and direction, bytes/s")
    bandwidth_source: Literal["nominal", "measured", "request"]
    latency_s: float = Field(description="Fixed cost of one, seconds")
    buffer_bytes: float = Field(description="The tensor it moves, per device, bytes")
    bytes_per_device: float = Field(description="Bytes each device sends per collective: a ring all-reduce "
                                                "2(n-1)/n x buffer, a reduce-scatter or all-gather (n-1)/n x buffer")
    count: int = Field(description="Per step, per device")
    time_s: float = Field(description="One: latency + bytes_per_device / bandwidth, seconds")
    total_time_s: float = Field(description="time_s x count, seconds")
    on_critical_path: bool = Field(description="Whether the step waits on it in full (tensor and pipeline always; "
                                               "data parallel unless overlapped; the context-parallel ring and the "
                                               "sequence-parallel re-gathers never: they run beside compute, and "
                                               "only what outlasts it is in the step)")


class ShardingOut(BaseModel):
    """What ZeRO / FSDP shards, over how many ranks, and when the parameters are gathered back."""

    parameters_sharded_over: int = Field(description="Ranks the parameters are sharded over (1: every replica holds "
                                                     "them whole)")
    gradients_sharded_over: int = Field(description="Ranks the gradients are sharded over (1: reduced whole)")
    optimizer_states_sharded_over: int = Field(description="Ranks the optimizer states and master weights are "
                                                           "sharded over")
    expert_states_sharded_over: int | None = Field(
        description="With expert parallelism: ranks a routed expert's states are sharded over (those holding it)")
    parameter_gathers: Literal["none", "before each forward and backward", "before each forward, kept through the "
                                                                          "backward"] = Field(
        description="When ZeRO 3 gathers a layer's parameters back")
    gradient_accumulation_dtype: TrainingDType = Field(
        description="What micro-batches' gradients accumulate in: dtypes.gradients (fp32 for Megatron's main-grad "
                    "buffer)")


class TrainingMemoryOut(BaseModel):
    """Per device, on the fullest pipeline stage."""

    stage: int = Field(description="The fullest pipeline stage, 0 the first (the one these figures are of)")
    stage_layers: int = Field(description="Layers on that stage")

    parameters_per_device: float = Field(description="Parameters held (before ZeRO-3 sharding), count")
    parameters_bytes: float
    gradients_bytes: float
    optimizer_bytes: float = Field(description="Optimizer states and master weights, bytes")
    activations_bytes: float = Field(description="Saved for the backward at the chosen recomputation, over the "
                                                 "micro-batches in flight, plus the head's logits, bytes")
    activations_per_layer_bytes: float = Field(description="One layer, one micro-batch, bytes")
    in_flight_micro_batches: float = Field(
        description="Micro-batches whose activations the first stage holds at its fullest, in its layers' worth: "
                    "min(m, p) for 1F1B and zero bubble, min(m, p + (p - 1)/v) interleaved")
    workspace_bytes: float
    required_bytes: float
    usable_bytes: float
    fits: bool
    headroom_bytes: float = Field(description="usable - required when it fits, else 0, bytes")
    shortfall_bytes: float = Field(description="required - usable when it does not fit, else 0, bytes")


class RecomputeOptionOut(BaseModel):
    policy: Literal["none", "selective", "full"]
    activations_bytes: float = Field(description="Activation memory per device at this policy, bytes")
    frees_bytes: float = Field(description="Against no recomputation, bytes per device")
    recompute_flops: float = Field(description="FLOPs recomputed per device per step (F_re)")
    recompute_time_s: float = Field(description="F_re / P: those FLOPs at their compute roofs, seconds")
    saved_traffic_bytes: float = Field(description="Q_saved: HBM traffic of the activations it does not keep "
                                                   "(written in the forward, read in the backward), bytes per step")
    reload_time_s: float = Field(description="Q_saved / B at the HBM roof, seconds")
    pays: bool = Field(description="Q_saved / B > F_re / P: recomputing is faster than storing and reloading")
    fits: bool = Field(description="Whether the step fits in memory at this policy")


class RecomputeAdvice(BaseModel):
    options: list[RecomputeOptionOut]
    fits_without_recompute: bool
    only_way_to_fit: bool = Field(description="The step fits only with recomputation")
    cheapest_fitting: Literal["none", "selective", "full"] | None = Field(
        description="The policy with the least recomputation that fits; null when none fits")
    advice: str


class TrainingTime(BaseModel):
    micro_batch_s: float = Field(description="One micro-batch's forward, recompute and backward on the slowest "
                                             "stage, its tensor-parallel collectives and pipeline sends included, seconds")
    pipeline_s: float = Field(description="m x micro_batch_s plus the schedule's bubble, seconds")
    bubble_fraction: float = Field(description="bubble_s / pipeline_s: (p - 1) / (m + p - 1) for 1F1B, "
                                               "((p - 1)/v) / (m + (p - 1)/v) interleaved")
    bubble_s: float
    optimizer_s: float
    data_parallel_s: float = Field(description="All data-parallel collectives of the step, seconds")
    data_parallel_exposed_s: float = Field(description="The part the step waits on, seconds")


class PeftOut(BaseModel):
    method: PeftMethod = Field(description="lora, or qlora (the base stored quantised)")
    rank: int = Field(description="r, the adapters' inner width")
    alpha: float = Field(description="lora_alpha, the scale's numerator")
    scale: float = Field(description="alpha / rank")
    adapted_modules: list[str] = Field(description="The modules of the model that hold adapters")
    stored_base: str = Field(description="The frozen linear weights' storage type")
    base_bytes_per_parameter: float = Field(description="Bytes a frozen linear weight is stored in")


class TrainingCheckOut(BaseModel):
    run: str = Field(description="The published measurement")
    device_id: str
    submitter: str = Field(description="Who ran it, on what system")
    measured_step_s: float = Field(description="The step as measured, seconds")
    expected_step_s: float = Field(description="The step the service expects of the same run, seconds")
    error: float = Field(description="expected / measured - 1")


class TrainingExpected(BaseModel):
    """The step as the device's measured kernels run it: each row at the efficiencies its kernel tables reach."""

    basis: Literal["kernels"] = Field(description="kernels: the step composed from the device's measured kernel "
                                                  "tables (or a stand-in's, see stand_in_for); no training run of "
                                                  "this device, model or layout is used")
    step_time_s: float = Field(description="Expected step, seconds (the bound's schedule, each row at its kernels' "
                                           "efficiencies; collectives at their bound)")
    micro_batch_s: float = Field(description="One micro-batch on the slowest stage, seconds")
    tokens_per_s: float = Field(description="Over all devices")
    mfu: float | None = Field(description="model FLOPs / (expected step x devices x nominal peak)")
    tables: list[str] = Field(description="The kernel calibrations the rows were composed from")
    stand_in_for: str | None = Field(description="The device whose tables these are, where the request's device has "
                                                 "none of its own; null where they are its own")
    composition: str = Field(description="Which fit each kind of row took, and the fits' own errors")
    checked: list[TrainingCheckOut] = Field(
        description="Every published training step this basis was checked against, with its error (on devices and "
                    "runs the kernel fits never saw); this device's, where it is among them, first")


class TrainingAnalysis(BaseModel):
    device_id: str
    model: str
    params: ParamCounts
    devices: int = Field(description="data_parallel x tensor_parallel x pipeline_parallel x context_parallel")
    data_parallel: int
    tensor_parallel: int
    pipeline_parallel: int
    context_parallel: int
    expert_parallel: int
    pipeline_schedule: ScheduleName
    virtual_pipeline_stages: int
    stage_layers: list[int] = Field(description="Layers each pipeline stage holds, first to last (the fullest "
                                                "stage's count for every stage when split evenly)")
    sequence_parallel: bool
    zero_stage: int
    reshard_after_forward: bool
    sharding: ShardingOut = Field(description="What ZeRO shards over how many ranks, and when parameters are gathered")
    recompute: str
    seq_len: int
    micro_batch_size: int
    gradient_accumulation_steps: int
    tokens_per_step: int = Field(description="micro_batch_size x seq_len x gradient_accumulation_steps x data_parallel")
    rows: list[TrainingRowOut] = Field(description="One micro-batch on one device (layers: how many the model holds; "
                                                   "a stage runs its share), and the optimizer's update")
    communication: list[CollectiveOut]
    model_flops_per_step: float = Field(description="Forward + backward over every replica (what MFU counts), FLOP")
    hardware_flops_per_step: float = Field(description="model FLOPs + the recomputed forward (what HFU counts), FLOP")
    model_flops_per_token: float
    step_time_s: float
    time: TrainingTime
    tokens_per_s: float = Field(description="Over all devices")
    mfu: float | None = Field(description="model FLOPs / (step time x devices x nominal peak of the matmuls' dtype); "
                                          "null when the device has no nominal peak for it")
    hfu: float | None = Field(description="hardware FLOPs / the same; exceeds mfu by the recomputed forward alone")
    peak_flops_per_s: float | None = Field(description="The nominal peak MFU and HFU divide by, per device, FLOP/s")
    fits: bool
    memory: TrainingMemoryOut
    expected: TrainingExpected | None = Field(
        None, description="What the step is expected to take, from the device's measured kernel tables; null where "
                          "the device has none (nor a stand-in): the bound is then all there is")
    trainable_parameters: float = Field(description="Parameters the step trains: the model's, or its adapters' "
                                                    "with peft")
    peft: PeftOut | None = Field(None, description="The adapters, with peft")
    recompute_advice: RecomputeAdvice
    compute_roof_source: str
    memory_roof_source: str
    assumptions: list[str]


class TrainingPlanRequest(ModelChoice, TrainingStepOptions):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"device_id": "nvidia-a100-80gb-sxm", "model_id": "llama-2-7b", "num_devices": 1000, "total_tokens": 2e12,
         "seq_len": 4096, "mfu": 0.4, "price_per_device_hour": 2.0}]})
    device_id: DeviceId
    num_devices: Annotated[int, Field(ge=1, le=2**20)] = Field(description="Devices training together")
    total_tokens: Annotated[float, Field(ge=1, le=1e16)] = Field(description="Tokens to train on")
    mfu: Annotated[float, Field(ge=1e-4, le=1)] | None = Field(
        None, description="An MFU to plan at beside the roofline's own (e.g. 0.4, a well-tuned large run)")
    price_per_device_hour: Annotated[float, Field(ge=0, le=1e9)] | None = Field(
        None, description="Price of one device for an hour, in any currency: the answer adds cost")
    deadline_days: Annotated[float, Field(ge=1e-3, le=36_500)] | None = Field(
        None, description="A deadline, days (from 0.001: 86.4 s): the answer adds the devices each MFU needs to meet it")
    search: bool = Field(
        False, description="Search the layout instead of taking it: every tensor (within a node), context, pipeline "
                           "(each schedule), expert and data parallelism that divides num_devices and the global "
                           "batch, sequence parallelism with tensor parallelism, recomputation only where it is needed "
                           "to fit; the fastest that fits becomes the plan's step. Needs global_batch_tokens (held "
                           "fixed across layouts); the layout fields may not be given with it")
    top_n: Annotated[int, Field(ge=1, le=20)] = Field(5, description="With search: how many fitting layouts to list")


# What a plan asks beyond its step: dropped from the body when the plan's step is asked for.
PLAN_ONLY = set(TrainingPlanRequest.model_fields) - set(TrainingRequest.model_fields)


class TrainingEstimate(BaseModel):
    basis: Literal["roofline", "kernels", "stated"] = Field(
        description="'roofline': the MFU of the roofline's step on num_devices (a bound); 'kernels': of the step "
                    "expected from the device's kernel tables (step.expected); 'stated': the request's mfu")
    mfu: float
    days: float = Field(description="total FLOPs / (num_devices x peak x mfu), in days of 86,400 s")
    device_hours: float
    cost: float | None = Field(description="device_hours x price_per_device_hour")
    devices_for_deadline: int | None = Field(description="With deadline_days: devices needed at this MFU (rounded up)")


class TrainingLayoutOut(BaseModel):
    data_parallel: int
    tensor_parallel: int
    sequence_parallel: bool
    pipeline_parallel: int
    pipeline_schedule: ScheduleName
    virtual_pipeline_stages: int
    context_parallel: int
    expert_parallel: int
    recompute: Literal["none", "full"] = Field(description="'full' only where the layout fits no other way")
    gradient_accumulation_steps: int = Field(description="Micro-batches per replica that keep the global batch")
    step_time_s: float = Field(description="The roofline step, seconds (a lower bound)")
    tokens_per_s: float
    mfu: float | None
    bubble_fraction: float = Field(description="The pipeline bubble's share of the pipeline's time")
    required_bytes: float = Field(description="Memory per device the layout needs, bytes")
    usable_bytes: float
    fits: bool


class TrainingSearchOut(BaseModel):
    searched: int = Field(description="Layouts placed on the roofline")
    refused: int = Field(description="Layouts the model cannot take (heads, experts or lengths that do not divide)")
    layouts: list[TrainingLayoutOut] = Field(description="The fastest layouts that fit, fastest first (top_n)")
    faster_unfitting: TrainingLayoutOut | None = Field(
        description="The fastest layout searched, when it does not fit: memory is what keeps the plan from it")
    binding: str = Field(description="What limits the chosen layout: memory, or the roofline itself")


class TrainingPlan(BaseModel):
    device_id: str
    model: str
    num_devices: int
    total_tokens: float
    seq_len: int
    model_flops_per_token: float = Field(description="Forward + backward FLOPs per token at seq_len (6N plus the "
                                                     "attention term, and the elementwise work)")
    total_flops: float
    peak_flops_per_s: float = Field(description="Nominal peak per device the MFU applies to, FLOP/s")
    estimates: list[TrainingEstimate]
    step: TrainingAnalysis = Field(description="The roofline step the 'roofline' estimate comes from: num_devices / "
                                               "(tensor_parallel x pipeline_parallel x context_parallel) replicas; "
                                               "with search, the fastest layout that fits")
    search: TrainingSearchOut | None = Field(None, description="With search: the layouts ranked, and what binds")
    assumptions: list[str]
