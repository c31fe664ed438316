"""Transformer models: the catalog, model analysis and KV-cache capacity."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from schemas.analysis import RoofOptions
from schemas.common import (
    DeviceId,
    DTypeName,
    EngineName,
    NonNegativeFinite,
    PositiveFinite,
    StrictModel,
    exactly_one_of,
    not_both,
)

Count = Annotated[int, Field(ge=1, le=2**24)]
Length = Annotated[int, Field(ge=1, le=2**24, description="Tokens")]
ModelIdField = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[a-z0-9][a-z0-9._-]*$",
                                    examples=["llama-3.1-8b"])]


class GenericLayers(StrictModel):
    """`count` layers alike: their token mixer and their MLP."""

    count: Annotated[int, Field(ge=1, le=65_536)] = Field(1, description="Layers of this kind")
    attention: Literal["full", "sliding", "chunked", "latent", "recurrent", "none"] = Field(
        "full", description="'full': every earlier key; 'sliding': the last `window` keys (the cache holds `window` "
                            "tokens); 'chunked': the keys of the query's own chunk of `chunk` tokens (Llama 4's local "
                            "layers); 'latent': multi-head latent attention as the model's `latent` describes it "
                            "(then every attention layer is latent); 'recurrent': the model's `recurrent` mixer, a "
                            "scan over a fixed state per request (Gated DeltaNet, Mamba-2); 'none': no mixer (an "
                            "MLP-only block)")
    window: Count | None = Field(None, description="With 'sliding': the window, tokens")
    chunk: Count | None = Field(None, description="With 'chunked': the chunk, tokens")
    mlp: Literal["dense", "moe", "none"] = Field(
        "dense", description="'dense': the `intermediate`-wide MLP; 'moe': the routed experts (and shared ones); "
                             "'none': no MLP (a block of its mixer alone)")
    rope: bool = Field(True, description="Rotary positions on this layer's queries and keys (false: NoPE)")

    @model_validator(mode="after")
    def _its_size(self):
        if (self.attention == "sliding") != (self.window is not None):
            raise ValueError("window is given with, and only with, attention 'sliding'")
        if (self.attention == "chunked") != (self.chunk is not None):
            raise ValueError("chunk is given with, and only with, attention 'chunked'")
        if self.attention == "none" and self.mlp == "none":
            raise ValueError("a layer needs a mixer or an MLP: attention and mlp cannot both be 'none'")
        return self


class GenericLatent(StrictModel):
    """Multi-head latent attention (DeepSeek-V2/V3's): K and V from a cached compressed latent."""

    q_lora_rank: Count | None = Field(None, description="Rank of the queries' compression; none: a plain q_proj")
    kv_lora_rank: Count = Field(description="Width of the cached latent")
    qk_nope_head_dim: Count = Field(description="Per head, the query/key dimensions without positions")
    qk_rope_head_dim: Count = Field(description="Per head, the rotated query/key dimensions (one shared key head)")
    v_head_dim: Count = Field(description="Per head, the value dimensions")


class GenericRecurrent(StrictModel):
    """The mixer of the layers of attention 'recurrent': queries and keys (`key_heads` x `key_dim`), values and an
    output gate (`heads` x `value_dim`) and per-head gates projected from the stream, a short causal convolution, a
    scan through a key_dim x value_dim state per head, a gated norm and the output projection."""

    rule: Literal["gated_delta", "ssd"] = Field(description="'gated_delta': Gated DeltaNet (Qwen3-Next's linear "
                                                            "attention); 'ssd': Mamba-2")
    heads: Count = Field(description="Value heads, each with its own state (Mamba-2: its heads)")
    key_heads: Count = Field(description="Query/key heads, each shared by heads / key_heads value heads (Mamba-2: "
                                         "its groups); must divide heads")
    key_dim: Count = Field(description="Width of a query/key head (Mamba-2: the state size)")
    value_dim: Count = Field(description="Width of a value head (Mamba-2: the head dimension)")
    conv_kernel: Annotated[int, Field(ge=1, le=64)] = Field(4, description="Taps of the short convolution")
    chunk: Annotated[int, Field(ge=1, le=4096)] = Field(64, description="Tokens a chunk of the prompt's scan")
    conv_bias: bool = Field(False, description="The convolution has a bias per channel")
    state_dtype: DTypeName | None = Field(None, description="Type of the scan state; default: the activations'")

    @model_validator(mode="after")
    def _heads(self):
        if self.heads % self.key_heads:
            raise ValueError("recurrent.key_heads must divide recurrent.heads")
        return self


class GenericArchitecture(StrictModel):
    """Any decoder-only transformer the family readers do not cover."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "format": "generic", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128,
        "intermediate": 14336, "vocab": 128256, "gated_mlp": True}]})
    format: Literal["generic"]
    layers: Count
    hidden: Count
    heads: Count
    kv_heads: Count | None = None
    head_dim: Count | None = None
    intermediate: Annotated[int, Field(ge=0, le=2**24)] = 0
    vocab: Count
    gated_mlp: bool = True
    activation: Literal["silu", "gelu", "relu"] = "silu"
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    tied_embeddings: bool = False
    qkv_bias: bool = False
    sliding_window: Count | None = None
    experts: Annotated[int, Field(ge=0, le=4096)] = 0
    top_k: Annotated[int, Field(ge=1, le=4096)] = 1
    expert_intermediate: Annotated[int, Field(ge=1, le=2**24)] = 1
    shared_experts: Annotated[int, Field(ge=0, le=64)] = 0
    latent: GenericLatent | None = Field(None, description="With layers of attention 'latent': their dimensions")
    recurrent: GenericRecurrent | None = Field(None, description="With layers of attention 'recurrent': their mixer")
    layer_types: list[GenericLayers] | None = Field(
        None, max_length=1024, description="The layers kind by kind, their counts adding up to `layers` (in any "
                                           "order: only how many of each kind is costed); instead of "
                                           "`sliding_window`. Default: every layer full attention (or "
                                           "`sliding_window`), MoE when `experts` is given")

    @model_validator(mode="after")
    def _consistent(self):
        if self.kv_heads and self.heads % self.kv_heads:
            raise ValueError("kv_heads must divide heads")
        if not self.head_dim and self.hidden % self.heads:
            raise ValueError("head_dim is required when heads does not divide hidden")
        if self.experts and self.top_k > self.experts:
            raise ValueError("top_k cannot exceed experts")
        if not self.experts and not self.intermediate:
            raise ValueError("intermediate is required for a dense model")
        if self.layer_types is not None:
            if sum(kind.count for kind in self.layer_types) != self.layers:
                raise ValueError(f"layer_types count {sum(kind.count for kind in self.layer_types)} layers, not the "
                                 f"model's {self.layers}")
            if self.sliding_window is not None:
                raise ValueError("give sliding_window or layer_types, not both")
            mlps = {kind.mlp for kind in self.layer_types}
            mixers = {kind.attention for kind in self.layer_types}
            if ("recurrent" in mixers) != (self.recurrent is not None):
                raise ValueError("recurrent is given with, and only with, layers of attention 'recurrent'")
            if ("latent" in mixers) != (self.latent is not None):
                raise ValueError("latent is given with, and only with, layers of attention 'latent'")
            if "latent" in mixers and mixers & {"full", "sliding", "chunked"}:
                raise ValueError("a model's attention layers are all latent or none is")
            if "moe" in mlps and not self.experts:
                raise ValueError("a layer of mlp 'moe' needs experts")
            if "dense" in mlps and not self.intermediate:
                raise ValueError("a layer of mlp 'dense' needs intermediate")
        elif self.latent is not None or self.recurrent is not None:
            raise ValueError("latent and recurrent describe layers: give layer_types with them")
        return self


# Deployment schemes by their common names: the weights', activations' and scales' formats each stands for.
SCHEMES: dict[str, dict[str, Any]] = {
    "bf16": {"weights": "bf16", "activations": "bf16"},
    "w8a16-fp8": {"weights": "fp8", "activations": "bf16"},
    "w8a8-fp8": {"weights": "fp8", "activations": "fp8"},
    "w8a8-int8": {"weights": "int8", "activations": "int8"},
    "w4a16": {"weights": "int4", "activations": "bf16", "weight_group_size": 128},
    "w4a8-fp8": {"weights": "int4", "activations": "fp8", "weight_group_size": 128},
    "mxfp4": {"weights": "fp4", "activations": "bf16", "weight_group_size": 32, "weight_scale_bytes": 1.0},
    "nvfp4": {"weights": "fp4", "activations": "fp4", "weight_group_size": 16, "weight_scale_bytes": 1.0},
}
SchemeName = Literal["bf16", "w8a16-fp8", "w8a8-fp8", "w8a8-int8", "w4a16", "w4a8-fp8", "mxfp4", "nvfp4"]
# The Literal spells the names out for the OpenAPI document: a scheme added to one and not the other fails at import.
if set(get_args(SchemeName)) != set(SCHEMES):
    raise ImportError(f"schemes named in SchemeName and SCHEMES differ: {set(get_args(SchemeName)) ^ set(SCHEMES)}")


class ModelDTypes(StrictModel):
    scheme: SchemeName | None = Field(
        None, description="A deployment scheme by its common name, setting the fields it names unless they are given: "
                          "w8a16-fp8 (fp8 weights, bf16 compute), w8a8-fp8 (fp8 weights and activations: the fp8 "
                          "peak), w8a8-int8, w4a16 (int4, groups of 128), w4a8-fp8, mxfp4 (fp4 weights, a 1-byte scale "
                          "per 32), nvfp4 (fp4 weights and activations, a 1-byte scale per 16), bf16")
    weights: DTypeName = Field("bf16", description="Stored type of the weights (int4, int8, fp8 for quantised models). "
                                                   "Alone it is weight-only quantisation: the matmuls compute at the "
                                                   "activations' peak (bf16); W8A8 needs activations too, or a scheme")
    activations: DTypeName = "bf16"
    kv_cache: DTypeName = "bf16"
    weight_group_size: Annotated[int, Field(ge=1, le=2**20)] | None = Field(
        None, description="Group-quantised weights: elements per scale (e.g. 128); bytes = bits/8 + scale/group")
    weight_scale_bytes: Annotated[float, Field(gt=0, le=8)] = Field(2.0, description="Bytes per scale, bytes (fp16: 2)")
    lm_head: DTypeName | None = Field(
        None, description="Type of the LM head's weights. Default: the activations' type when the weights are "
                          "quantised to one byte or less (int8, fp8, int4, fp4: W4A16/W8A8 checkpoints keep lm_head in "
                          "16 bits) or the head is tied to the embedding table; else the weights' type")
    experts: DTypeName | None = Field(
        None, description="Stored type of the routed experts' weights where it differs from `weights` (gpt-oss: "
                          "fp4 experts beside bf16 attention); their scales are weight_scale_bytes each")
    experts_group_size: Annotated[int, Field(ge=1, le=2**20)] | None = Field(
        None, description="The experts' elements per scale (mxfp4: 32)")

    @model_validator(mode="before")
    @classmethod
    def _scheme(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("scheme"), str) and data["scheme"] in SCHEMES:
            return {**SCHEMES[data["scheme"]], **data}
        return data


# How a request's dtypes are read: given, they are used as they are; absent, a catalog or inline model whose
# config carries a quantization_config runs in the checkpoint's own formats (and the answer says so).
DTYPES_DOC = ("Types of weights, activations and KV cache. Omitted: the checkpoint's own formats where its config "
              "has a quantization_config (fp8 block-scaled, mxfp4 experts, NVFP4, compressed-tensors, AWQ/GPTQ), "
              "else bf16 throughout; `assumptions` says which")


class RopeScaling(StrictModel):
    """A RoPE scaling the run applies beyond the model's config (vLLM's --rope-scaling, SGLang's
    --json-model-override-args): it extends the positions the model accepts; the step's cost is unchanged."""

    rope_type: Literal["linear", "dynamic", "yarn", "llama3", "longrope"] = Field(
        "yarn", description="The scaling method (it changes the rotation's frequencies, not its cost)")
    factor: Annotated[float, Field(gt=1, le=64)] = Field(
        description="How many times the positions are extended: max_position_embeddings becomes "
                    "original_max_position_embeddings (else the config's) x factor")
    original_max_position_embeddings: Annotated[int, Field(ge=1, le=2**40)] | None = Field(
        None, description="The positions the model was trained on (default: the config's max_position_embeddings)")


class ModelChoice(StrictModel):
    schema_rules = exactly_one_of("model_id", "model")
    model_id: ModelIdField | None = Field(None, description="A catalog model (GET /v1/models)")
    model: dict[str, Any] | None = Field(
        None, description="An inline Hugging Face config.json, or a generic description with \"format\": \"generic\"")
    rope_scaling: RopeScaling | None = Field(
        None, description="Extend the model's positions as the run does (e.g. Llama 2 70B fine-tuned at 8,192 "
                          "tokens with linear scaling x2): without it a context beyond max_position_embeddings is "
                          "refused")

    @model_validator(mode="after")
    def _one_model(self):
        if (self.model_id is None) == (self.model is None):
            raise ValueError("give exactly one of model_id and model")
        return self


class Speedup(StrictModel):
    target: str = Field(min_length=1, max_length=64,
                        description="A row kind (matmul, attention, elementwise, allreduce, ...) or a row name")
    factor: Annotated[float, Field(gt=0, le=1e6)] = Field(description="How many times faster those rows become")


class UsableMemory(StrictModel):
    """How much of a device's memory a serving engine or a training step may use."""

    schema_rules = not_both("memory_utilization", "memory_capacity_bytes")

    memory_utilization: Annotated[float, Field(gt=0, le=1)] | None = Field(
        None, description="Fraction of the usable memory the engine (or training step) may take, as vLLM's "
                          "gpu_memory_utilization (default: 0.9 for serving, vLLM's own default; 1.0 for a training "
                          "step); applies to the device's usable_memory_bytes (what the runtime exposes), or to the "
                          "as-built capacity where the device has no such figure")
    memory_capacity_bytes: PositiveFinite | None = Field(None, description="Explicit usable bytes per device, "
                                                                           "instead of the device's figure")
    workspace_bytes: NonNegativeFinite = Field(0, description="Reserve per device beyond the tensors the analysis "
                                                              "counts (CUDA graphs, allocator slack, communication "
                                                              "buffers), bytes")

    @model_validator(mode="after")
    def _one_capacity(self):
        if self.memory_utilization is not None and self.memory_capacity_bytes is not None:
            raise ValueError("give memory_utilization or memory_capacity_bytes, not both")
        return self


class MemoryOptions(UsableMemory):
    """How much of a device's memory an engine may use, and how it pages the KV cache."""

    block_size: Annotated[int, Field(ge=1, le=1024)] = Field(
        16, description="Tokens per KV-cache block: each request's cache rounds up to whole blocks (vLLM's default "
                        "16; 1 = a contiguous cache)")
    profile_tokens: Annotated[int, Field(ge=0, le=2**20)] = Field(
        8192, description="Tokens of the step whose activation peak the engine reserves before it sizes the KV cache "
                          "(vLLM profiles a step of max_num_batched_tokens: 8,192 on 70+ GiB GPUs for its API "
                          "server); the estimate of that peak is held beside the cache; 0: reserve none")


class ModelAnalysisRequest(ModelChoice, RoofOptions, MemoryOptions):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "phase": "decode", "batch_size": 32, "seq_len": 4096}]})
    device_id: DeviceId
    phase: Literal["prefill", "decode"]
    batch_size: Count = 1
    seq_len: Length = Field(description="Prompt length (prefill) or tokens already in the KV cache (decode)")
    dtypes: ModelDTypes = Field(default_factory=ModelDTypes, description=DTYPES_DOC)
    attention_implementation: Literal["flash", "naive"] = "flash"
    tensor_parallel: Annotated[int, Field(ge=1, le=1024)] = 1
    collective_latency_s: NonNegativeFinite | None = Field(
        None, le=1, description="Fixed cost of each tensor-parallel all-reduce beside its bytes / bandwidth, seconds; "
                                "default: the device's collective_latency_s (2e-6 when unset)")
    output_len: Length | None = Field(None, description="Tokens to generate: the answer adds the end-to-end latency")
    measured_time_s: Annotated[float, Field(ge=1e-9, le=1e6)] | None = Field(
        None, description="A measured time of this step (e.g. the TPOT or TTFT a serving benchmark reported), seconds: "
                          "the answer adds the achieved MFU and the fraction of the roofline time reached")
    speedups: list[Speedup] = Field(default_factory=list, max_length=32,
                                    description="What-if (Amdahl): speed a class of rows up by a factor")
    engine: EngineName | None = Field(
        None, description="The kernels' engine (e.g. trtllm): the matmul rows are expected as its calibration on the "
                          "device expects them (default: the shipped one)")
    calibration: Literal["auto", "none"] = Field(
        "auto", description="auto: answer `expected` where a kernel calibration covers the step's matmuls")


class RowOut(BaseModel):
    name: str
    kind: str
    group: str = Field(description="'model' for the embedding and head, else which layers the row belongs to")
    layers: int = Field(description="Layers holding this row")
    count: int = Field(description="Instances per layer")
    flops: float = Field(description="FLOPs of one instance")
    bytes: float = Field(description="Bytes of one instance (HBM traffic, or interconnect bytes per device)")
    arithmetic_intensity: float | None
    bound: Literal["memory", "compute", "interconnect"]
    time_s: float = Field(description="Lower-bound time of one instance, seconds")
    total_time_s: float = Field(description="time_s x count x layers, seconds")
    weight_bytes: float
    kv_bytes_read: float
    kv_bytes_written: float


class ModelTotals(BaseModel):
    flops: float
    bytes: float = Field(description="HBM traffic, bytes")
    weight_bytes_read: float
    kv_bytes_read: float
    kv_bytes_written: float
    interconnect_bytes: float = Field(description="Per device, bytes")
    time_s: float = Field(description="Sum of the rows' total_time_s, seconds")
    memory_bound_time_share: float
    compute_bound_time_share: float
    interconnect_time_share: float


class ParamCounts(BaseModel):
    total: int = Field(description="The whole checkpoint, a vision tower included")
    active: int = Field(description="Used by one text token (top-k routed experts plus shared ones and the LM head), "
                                    "without the input embedding table, as OpenAI's gpt-oss card counts them")
    active_with_embedding: int = Field(description="The same with the input embedding table, as Mistral's, Qwen's "
                                                   "and DeepSeek's cards count active parameters")


class WhatIf(BaseModel):
    target: str
    factor: float
    time_share: float = Field(description="Share of the step's time in the rows targeted")
    time_s: float = Field(description="Step time after the speed-up, seconds")
    speedup: float = Field(description="Time before / time after")
    ceiling: float | None = Field(description="Speed-up if those rows took no time at all (null: they are all of it)")


class StepMemoryOut(BaseModel):
    """Per device. required = weights + kv_cache + activations + workspace; fits when it is at most usable."""

    capacity_bytes: float = Field(description="Device memory as built, bytes")
    usable_bytes: float = Field(description="What the runtime exposes (or the explicit capacity) x memory_utilization, bytes per device")
    weights_bytes: float = Field(description="Every parameter (all experts) in its type, split by tensor parallelism, bytes per device")
    kv_cache_bytes: float = Field(description="The batch's K/V at this step's largest context, in whole blocks, bytes per device")
    activation_bytes: float = Field(description="Estimated live activations, bytes per device: the residual stream and one layer's "
                                                "widest buffer for the step's tokens, plus fp32 logits")
    workspace_bytes: float = Field(description="The request's runtime reserve, bytes per device")
    required_bytes: float
    fits: bool
    headroom_bytes: float = Field(description="usable - required when it fits, else 0, bytes")
    shortfall_bytes: float = Field(description="required - usable when it does not fit, else 0, bytes")
    block_size: int
    context_len: int = Field(description="Tokens each sequence's cache holds at its largest in this request")


class ModelAchieved(BaseModel):
    measured_time_s: float
    flops_per_s: float = Field(description="Model FLOPs / measured time, FLOP/s")
    mfu: float | None = Field(description="Achieved FLOP/s over the nominal peak of the matmuls' dtype")
    roof_fraction: float = Field(description="Roofline (lower-bound) time / measured time")
    bandwidth_bytes_per_s: float = Field(description="The step's HBM bytes / measured time, bytes/s")
    mbu: float | None = Field(description="Achieved HBM bandwidth over the device's nominal HBM bandwidth (model "
                                          "bandwidth utilisation: how decode, bound by memory, is judged)")


class ModelExpected(BaseModel):
    time_s: float = Field(description="Expected step time, seconds: the calibrated matmul rows as expected, the others "
                                      "at their bounds, none below its bound")
    calibrated_share: float = Field(description="The share of the bound's step time in rows a calibration covers: the "
                                                "rest is counted at its bound, so the expectation is short by what "
                                                "those rows lose")
    engine: str = Field(description="The engine of the calibrations used")
    calibrations: list[str] = Field(description="Their ids (GET /v1/calibrations/{id})")
    basis: str = Field(description="How it was worked out")


class ModelAnalysis(BaseModel):
    device_id: str
    model: str
    phase: Literal["prefill", "decode"]
    batch_size: int
    seq_len: int
    tensor_parallel: int
    params: ParamCounts
    fits: bool = Field(description="Whether the step fits in each device's usable memory (see `memory`); an "
                                   "infeasible step is still answered, as a what-if")
    memory: StepMemoryOut
    achieved: ModelAchieved | None = Field(None, description="With measured_time_s")
    rows: list[RowOut]
    totals: ModelTotals
    mfu: float | None
    expected: ModelExpected | None = Field(
        None, description="The step as measured kernels calibrate it, beside the bound (totals.time_s), never in its "
                          "place; null where no kernel calibration covers its matmuls or with calibration 'none'")
    ttft_s: float | None = Field(description="Prefill: time to the first token, seconds")
    tpot_s: float | None = Field(description="Decode: time per output token (one step), seconds")
    tokens_per_s: float = Field(description="Tokens processed (prefill) or generated (decode) per second over the batch")
    e2e_latency_s: float | None = Field(description="With output_len: prefill plus the decode steps, seconds")
    compute_roof_source: str
    memory_roof_source: str
    what_if: list[WhatIf] = Field(default_factory=list, description="One entry per speed-up, then all of them together")
    assumptions: list[str]


class KvContextShare(StrictModel):
    context_len: Length
    share: Annotated[float, Field(gt=0, le=1)] = Field(description="Fraction of requests with this context")


class KvCapacityRequest(ModelChoice, MemoryOptions):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-70b", "context_len": 8192, "tensor_parallel": 4,
         "memory_utilization": 0.9}]})
    device_id: DeviceId
    context_len: Length
    dtypes: ModelDTypes = Field(default_factory=ModelDTypes, description=DTYPES_DOC)
    tensor_parallel: Annotated[int, Field(ge=1, le=1024)] = 1
    context_mix: list[KvContextShare] | None = Field(
        None, min_length=1, max_length=64,
        description="Mixed traffic: context lengths with the share of requests at each (shares sum to 1); the answer "
                    "adds the concurrency at the mix's mean cache and at its 95th-percentile length")

    @model_validator(mode="after")
    def _shares_sum_to_one(self):
        if self.context_mix is not None and abs(sum(c.share for c in self.context_mix) - 1) > 1e-6:
            raise ValueError("context_mix: the shares must sum to 1")
        return self


class KvMix(BaseModel):
    mean_kv_bytes_per_request: float = Field(description="Share-weighted KV cache of one request, per device, bytes")
    max_concurrent_requests: int = Field(description="floor(available / mean per request)")
    p95_context_len: int = Field(description="The smallest listed length at or above 95 % of requests")
    max_concurrent_requests_at_p95: int = Field(description="Concurrency if every request were p95_context_len long")


class KvCapacity(BaseModel):
    device_id: str
    model: str
    context_len: int
    tensor_parallel: int
    usable_bytes: float = Field(description="Per device, bytes")
    weights_bytes: float = Field(description="Per device, bytes")
    workspace_bytes: float
    activation_reserve_bytes: float = Field(
        description="The estimated activation peak of the engine's profiling step (profile_tokens), held back before "
                    "the KV cache, per device, bytes")
    kv_bytes_per_token: float = Field(description="What each further token adds per device: the layers that keep "
                                                  "every token (not sliding-window or chunked ones), bytes")
    kv_bytes_capped_per_request: float = Field(
        description="What a request's sliding-window and chunked layers hold per device once its context passes their "
                    "span (at most the window or chunk each, in blocks), whatever its length after, bytes")
    kv_bytes_per_request: float = Field(description="Per device at context_len (sliding windows capped), the "
                                                    "recurrent layers' state included, bytes")
    state_bytes_per_request: float = Field(
        description="The recurrent layers' fixed state a request holds per device (each head's scan state and the "
                    "convolution's last inputs), whatever its length; 0 for a model without them, bytes")
    available_kv_bytes: float
    max_concurrent_requests: int = Field(description="floor(available / per request), never rounded up")
    max_context_len: int | None = Field(description="Longest context one request can hold: the smaller of what "
                                                    "memory holds and the model's max_position_embeddings; null if "
                                                    "neither bounds it")
    max_context_len_bound_by: Literal["memory", "model"] | None = Field(
        description="Which limit gives max_context_len")
    capacity_bytes: float = Field(description="Device memory as built, per device, bytes")
    block_size: int = Field(description="Tokens per KV-cache block the request counts were rounded to")
    mix: KvMix | None = Field(None, description="With context_mix: concurrency at the mix")
    fits: bool
    shortfall_bytes: float = Field(description="How much the weights and workspace exceed the usable memory, bytes")
    assumptions: list[str]


class ModelCreate(StrictModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"id": "my-llama", "name": "Our fine-tune", "config": {"model_type": "llama", "hidden_size": 2048,
         "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4,
         "vocab_size": 32000, "hidden_act": "silu", "tie_word_embeddings": False}}]})
    id: ModelIdField
    name: str | None = Field(None, max_length=200)
    source: str | None = Field(None, max_length=1000)
    config: dict[str, Any] = Field(description="The model's Hugging Face config.json or generic description; its "
                                               "numbers must be finite (it is stored and served back as JSON)")

    @field_validator("config")
    @classmethod
    def _finite(cls, config: dict[str, Any]) -> dict[str, Any]:
        where = non_finite_number(config, "config")
        if where:
            raise ValueError(f"{where} is not a finite number (Infinity and NaN are not JSON)")
        return config


def non_finite_number(value: Any, path: str) -> str | None:
    """Where in a JSON value a number is infinite or NaN, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = non_finite_number(item, f"{path}.{key}")
        if found:
            return found
    return None


class ModelSummary(BaseModel):
    id: str
    name: str
    family: str
    params_total: int
    params_active: int
    origin: Literal["catalog", "user"]


class ModelPublic(ModelSummary):
    source: str | None
    config: dict[str, Any]
    layers: str = Field(description="The distinct layer kinds, e.g. '21 x dense (window 4096), 21 x dense'")
    kv_bytes_per_token_bf16: float = Field(description="K and V of one token over the layers that keep every token "
                                                       "(not windowed, chunked or recurrent ones) in bf16, bytes")
    created_at: datetime
