"""One training step on the roofline, per device: its rows, collectives, memory, time, MFU and HFU, and
what recomputation would trade.

A step runs gradient_accumulation_steps (m) micro-batches through pipeline_parallel (p) stages on one of
the schedules in `schedules.py`, then the data-parallel gradient sync and the optimizer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from service.core.dtypes import bytes_per_element
from service.core.errors import CostModelError
from service.core.training.collectives import Collective, Link, Topology, ring_all_reduce_bytes, ring_shard_bytes
from service.core.training.experts import check_expert_parallel, expert_parallel_rows
from service.core.training.fp8 import QUANTIZE, check_recipe, fp8_backward, fp8_rows, is_fp8, weight_cast
from service.core.training.peft import (
    Peft,
    adapted_bases,
    adapter_params,
    check_targets,
    is_dequantize,
    is_frozen_matmul,
    peft_layer_rows,
    quantised_params,
    saved_bytes,
)
from service.core.training.rows import (
    BACKWARD_ACTIVATION,
    BACKWARD_WEIGHT,
    FORWARD,
    OPTIMIZER,
    OPTIMIZER_STATES_PER_PARAMETER,
    RECOMPUTE,
    PhasedRow,
    attention_scores_row,
    backward_rows,
    context_parallel_rows,
    forward_layer_rows,
    forward_model_rows,
    kv_ring_buffer_bytes,
    optimizer_cost,
    saved_activation_bytes,
)
from service.core.training.schedules import PhaseTimes, Schedule
from service.core.training.stages import StagePlan, plan_stages
from service.core.transformer.analysis import Evaluator, RowResult, group_label
from service.core.transformer.architecture import Architecture, LayerGroup
from service.core.transformer.layers import ModelDTypes, Row, Step, attention_params_of, cost_of
from service.core.transformer.params import layer_params, model_params, norm_params

FIRST_STAGE, LAST_STAGE = "first stage", "last stage"
RECOMPUTE_POLICIES = ("none", "selective", "full")


@dataclass(frozen=True)
class Parallelism:
    data: int = 1
    tensor: int = 1
    pipeline: int = 1
    zero_stage: int = 0  # 1: optimizer states sharded over data parallelism; 2: and gradients; 3: and parameters
    sequence_parallel: bool = False  # Megatron's: norms, residuals and the stream's saved copies split over tensor
    context: int = 1  # context parallelism: each sequence split over this many ranks
    expert: int = 1  # expert parallelism: a MoE layer's routed experts split over this many of the replicas
    # ZeRO 3 only: free a layer's gathered parameters after its forward and gather them again for its backward
    # (FSDP's default); False keeps them from the forward to the backward (Llama 3's choice), one gather fewer.
    reshard_after_forward: bool = True

    @property
    def stream_shards(self) -> int:
        """Into how many slices the residual stream's activations are cut on a device."""
        return self.tensor if self.sequence_parallel else 1

    @property
    def devices(self) -> int:
        return self.data * self.tensor * self.pipeline * self.context

    @property
    def replicas(self) -> int:
        """Ranks holding the same weights: data- and context-parallel ones, over which gradients are reduced."""
        return self.data * self.context

    def shards(self, stage: int, experts: bool = False) -> int:
        """Into how many pieces ZeRO cuts what it starts sharding at `stage` (1 optimizer states, 2 gradients,
        3 parameters): the ranks holding the same weights from that stage on (Megatron's distributed optimizer
        shards over the data- and context-parallel ranks; a routed expert's over those of them that hold it),
        else 1."""
        return (self.replicas // self.expert if experts else self.replicas) if self.zero_stage >= stage else 1


@dataclass(frozen=True)
class TrainingDTypes:
    parameters: str = "bf16"
    gradients: str = "bf16"
    optimizer_states: str = "fp32"
    activations: str = "bf16"
    master_weights: bool | None = None  # default: kept when the parameters are narrower than the states
    fp8_recipe: str = "none"  # the layers' matmuls in fp8 with this scaling (fp8.py), or not

    @property
    def keeps_master(self) -> bool:
        if self.master_weights is not None:
            return self.master_weights
        return bytes_per_element(self.parameters) < bytes_per_element(self.optimizer_states)

    def model_dtypes(self) -> ModelDTypes:
        return ModelDTypes(weights=self.parameters, activations=self.activations, kv_cache=self.activations)

    def optimizer_bytes_per_parameter(self, optimizer: str) -> float:
        states = OPTIMIZER_STATES_PER_PARAMETER[optimizer] + (1 if self.keeps_master else 0)
        return states * bytes_per_element(self.optimizer_states)


@dataclass(frozen=True)
class TrainingSetup:
    micro_batch_size: int
    seq_len: int
    gradient_accumulation_steps: int = 1
    parallelism: Parallelism = field(default_factory=Parallelism)
    dtypes: TrainingDTypes = field(default_factory=TrainingDTypes)
    optimizer: str = "adamw"
    recompute: str = "none"
    attention_implementation: str = "flash"
    schedule: Schedule = field(default_factory=Schedule)
    first_stage_layers: int | None = None  # uneven pipeline stages (stages.py); None: an even split
    last_stage_layers: int | None = None
    overlap_data_parallel: bool = False
    usable_bytes: float = math.inf
    workspace_bytes: float = 0.0
    peft: Peft | None = None  # fine-tune adapters beside a frozen base (peft.py), or train every weight

    @property
    def tokens_per_step(self) -> int:
        return self.micro_batch_size * self.seq_len * self.gradient_accumulation_steps * self.parallelism.data


class PlacedRow(NamedTuple):
    phase: str
    result: RowResult


@dataclass(frozen=True)
class TrainingMemory:
    """Per device, on the step's fullest pipeline stage."""

    stage: int  # which (0: the first)
    stage_layers: int

    parameters_per_device: float
    parameters_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    activations_per_layer_bytes: float  # one micro-batch, one layer, at the chosen recomputation
    in_flight_micro_batches: float  # the stage's layers' worth: interleaving holds fractions of a stage
    workspace_bytes: float
    usable_bytes: float

    @property
    def required_bytes(self) -> float:
        return (self.parameters_bytes + self.gradients_bytes + self.optimizer_bytes + self.activations_bytes
                + self.workspace_bytes)

    @property
    def fits(self) -> bool:
        return self.required_bytes <= self.usable_bytes

    @property
    def headroom_bytes(self) -> float:
        return max(0.0, self.usable_bytes - self.required_bytes)

    @property
    def shortfall_bytes(self) -> float:
        return max(0.0, self.required_bytes - self.usable_bytes)


@dataclass(frozen=True)
class RecomputeOption:
    policy: str
    activations_bytes: float  # per device at this policy
    frees_bytes: float  # against no recomputation
    recompute_flops: float  # per device per step
    recompute_time_s: float  # F_re / P: the recomputed FLOPs at their compute roofs
    saved_traffic_bytes: float  # Q_saved: the freed activations' HBM write in the forward and read in the backward
    reload_time_s: float  # Q_saved / B
    fits: bool

    @property
    def pays(self) -> bool:
        """Recomputing beats storing when reloading would take longer: Q_saved / B > F_re / P."""
        return self.frees_bytes > 0 and self.reload_time_s > self.recompute_time_s


@dataclass(frozen=True)
class TrainingStep:
    rows: tuple[PlacedRow, ...]
    communication: tuple[Collective, ...]
    memory: TrainingMemory
    recompute_options: tuple[RecomputeOption, ...]
    model_flops_per_step: float
    hardware_flops_per_step: float
    tokens_per_step: int
    micro_batch_time_s: float  # one micro-batch through the slowest stage, its pipeline sends included
    pipeline_time_s: float
    bubble_fraction: float
    optimizer_time_s: float
    data_parallel_time_s: float
    data_parallel_exposed_s: float
    step_time_s: float
    peak_flops_per_s: float | None
    compute_roof_source: str  # of the matmuls: "nominal" or "measured"
    devices: int
    stage_layers: tuple[int, ...]  # per pipeline stage
    trainable_parameters: float  # the model's, all of them unless adapters are fine-tuned beside a frozen base

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_time_s

    def _utilisation(self, flops: float) -> float | None:
        if not self.peak_flops_per_s:
            return None
        return flops / (self.step_time_s * self.devices * self.peak_flops_per_s)

    @property
    def mfu(self) -> float | None:
        return self._utilisation(self.model_flops_per_step)

    @property
    def hfu(self) -> float | None:
        return self._utilisation(self.hardware_flops_per_step)


# The parallelism whose group runs each kind of collective row, and how a step summarises it.
_LAYER_COLLECTIVES = {"allreduce": ("tensor", "all_reduce", "all-reduces", ring_all_reduce_bytes),
                      "allgather": ("tensor", "all_gather", "all-gathers", ring_shard_bytes),
                      "reducescatter": ("tensor", "reduce_scatter", "reduce-scatters", ring_shard_bytes),
                      "alltoall": ("expert", "all_to_all", "all-to-alls (MoE dispatch and combine)", None)}


def _place(evaluator: Evaluator, row: Row, group: str, layers: int, links: dict[str, Link]) -> RowResult:
    """A row at its roofs; a collective at the link tier of the group that runs it (not the device's one link)."""
    if not row.is_comm:
        return evaluator.evaluate(row, group, layers)
    link = links.get(_LAYER_COLLECTIVES[row.kind][0])
    if link is None:
        raise ValueError(f"collective {row.name} without a link to place it on")
    return evaluator.collective(row, group, layers, link)


def _flops(rows: list[Row], layers: int = 1) -> float:
    return sum(cost_of(row).flops * row.count * layers for row in rows if not row.is_comm)


def _recomputed(policy: str, forward: list[Row], activations: str) -> list[Row]:
    if policy == "full":
        return forward
    if policy == "selective":
        return [attention_scores_row(row, activations) for row in forward
                if row.kind == "attention" and attention_params_of(row).get("implementation") == "naive"]
    return []


@dataclass(frozen=True)
class _Layers:
    """The layer groups of one micro-batch on one tensor-parallel shard, each with its forward rows."""

    groups: tuple[tuple[str, int, list[Row]], ...]  # (label, layers in the model, forward rows of one layer)
    plan: StagePlan
    stream_shards: int  # sequence parallelism's slices of the residual stream
    frozen_base: bool = False  # adapters fine-tuned beside frozen weights: what the backward keeps changes

    @property
    def share(self) -> float:
        """The fullest stage's share of the layers, what the step's per-layer work is counted at."""
        return self.plan.fullest_share

    def saved_per_layer(self, activations: str, policy: str, checkpoint_bytes: float,
                        stage: int | None = None) -> tuple[float, float]:
        """(saved bytes of a stage's layers for one micro-batch, of its largest single layer); the fullest
        stage's unless `stage` says which."""
        share = self.share if stage is None else self.plan.share(stage)
        total = largest = 0.0
        for _, count, rows in self.groups:
            adapted = adapted_bases(rows) if self.frozen_base else frozenset()
            layer = sum(self._kept(r, adapted, activations, policy) * r.count for r in rows)
            largest = max(largest, layer)
            total += count * share * (checkpoint_bytes if policy == "full" else layer)
        return total, largest

    def _kept(self, row: Row, adapted: frozenset[str], activations: str, policy: str) -> float:
        kept = saved_activation_bytes(row, activations, policy == "none", self.stream_shards)
        return saved_bytes(row, kept, adapted) if self.frozen_base else kept

    def stage_parameters(self, stage: int, count: Callable[[list[Row]], int]) -> float:
        """Parameters one device of a stage holds of those `count` finds in a layer's rows (its adapters, its frozen
        linear weights)."""
        return sum(layers * self.plan.share(stage) * count(rows) for _, layers, rows in self.groups)


def _check(arch: Architecture, evaluator: Evaluator, setup: TrainingSetup) -> None:
    """What the step cannot be built from, named by its field."""
    par, dtypes = setup.parallelism, setup.dtypes
    if setup.recompute not in RECOMPUTE_POLICIES:
        raise CostModelError("recompute", f"one of {', '.join(RECOMPUTE_POLICIES)}")
    if par.pipeline > arch.layers:
        raise CostModelError("pipeline_parallel", f"{par.pipeline} stages for {arch.layers} layers")
    setup.schedule.check(par.pipeline, arch.layers)
    if not par.reshard_after_forward and par.zero_stage != 3:
        raise CostModelError("reshard_after_forward", "only ZeRO 3 reshards parameters: keeping them after the "
                                                      "forward needs zero_stage 3")
    uneven = [kv for kv in sorted(arch.kv_head_counts()) if kv % par.tensor]
    # DeepSeek-V4's one K=V head is whole on every device, as the latent attention's cache is. Serving engines
    # replicate K/V heads over a larger group; Megatron-LM divides its query groups evenly.
    if arch.latent is None and arch.compressed is None and uneven:
        raise CostModelError("tensor_parallel", f"num_key_value_heads ({uneven[0]}) is not divisible by "
                                                f"tensor_parallel ({par.tensor}): Megatron-LM splits the query "
                                                "groups evenly over tensor parallelism")
    if arch.compressed is not None and par.context > 1:
        raise CostModelError("context_parallel", "context parallelism is not modelled for DeepSeek-V4's compressed "
                                                 "attention (its ring would pass windows and compressed entries)")
    check_expert_parallel(arch, par.expert, par.replicas, par.tensor, par.sequence_parallel)
    check_recipe(dtypes.fp8_recipe, dtypes.activations)
    if setup.peft is not None:
        _check_peft(setup)
    if dtypes.fp8_recipe != "none" and evaluator.device.peak("fp8", "tensor") is None:
        raise CostModelError("dtypes.fp8_recipe", f"device {evaluator.device.id} publishes no fp8 tensor peak to run "
                                                  "fp8 matmuls at")


def _check_peft(setup: TrainingSetup) -> None:
    assert setup.peft is not None
    setup.peft.check()
    if setup.parallelism.expert > 1:
        raise CostModelError("expert_parallel", "fine-tuning adapters with expert parallelism is not modelled (the "
                                                "frozen experts' sharding and gathers); use expert_parallel 1")
    if setup.dtypes.fp8_recipe != "none" and setup.peft.quantised_base:
        raise CostModelError("dtypes.fp8_recipe", "QLoRA dequantises its stored base to dtypes.parameters for each "
                                                  "matmul; an fp8 recipe needs a LoRA base kept in 16 bits")


def analyze_training(arch: Architecture, evaluator: Evaluator, topology: Topology, setup: TrainingSetup) -> TrainingStep:
    par, dtypes = setup.parallelism, setup.dtypes
    _check(arch, evaluator, setup)
    local_len = _context_slice(setup)
    model_dtypes = dtypes.model_dtypes()
    step = Step(setup.micro_batch_size, local_len, local_len, par.tensor, setup.attention_implementation,
                par.sequence_parallel)
    links = {"tensor": topology.link_for(par.tensor, "tensor-parallel")} if par.tensor > 1 else {}
    if par.expert > 1:
        # Expert-parallel ranks are data- (or context-) parallel ones: e of them span t x c x e ranks.
        links["expert"] = topology.link_for(par.tensor * par.context * par.expert, "expert-parallel")
    micro_batches, stages = setup.gradient_accumulation_steps, par.pipeline
    gradient_ratio = bytes_per_element(dtypes.gradients) / bytes_per_element(dtypes.parameters)
    accumulate = micro_batches > 1

    first, last = forward_model_rows(arch, step, model_dtypes)
    layers = _Layers(tuple((group_label(g), g.count, _layer_rows(arch, g, step, setup)) for g in arch.groups),
                     plan_stages(arch.layers, stages, setup.first_stage_layers, setup.last_stage_layers),
                     par.stream_shards, setup.peft is not None)
    if setup.peft is not None:
        check_targets(setup.peft, [rows for _, _, rows in layers.groups])
    placed: list[PlacedRow] = []

    def place_all(rows: list[Row], phase: str, group: str, count: int) -> None:
        placed.extend(PlacedRow(phase, _place(evaluator, r, group, count, links)) for r in rows)

    def place_backward(rows: list[Row], group: str, count: int) -> None:
        for row in rows:
            for phased in _backward(row, setup, gradient_ratio, accumulate):
                placed.append(PlacedRow(phased.phase, _place(evaluator, phased.row, group, count, links)))

    place_all(first, FORWARD, FIRST_STAGE, 1)
    for label, count, rows in layers.groups:
        place_all(rows, FORWARD, label, count)
        place_all(_recomputed(setup.recompute, rows, dtypes.activations), RECOMPUTE, label, count)
    place_all(last, FORWARD, LAST_STAGE, 1)
    place_backward(last, LAST_STAGE, 1)
    for label, count, rows in reversed(layers.groups):
        place_backward(rows, label, count)
    if setup.peft is None:  # a frozen embedding, first in the model, has no gradient to compute
        place_backward(first, FIRST_STAGE, 1)

    hidden_bytes = setup.micro_batch_size * local_len * arch.hidden * bytes_per_element(dtypes.activations)
    communication: list[Collective] = []
    communication += _layer_collectives(placed, layers.share, setup, hidden_bytes, links)
    ring = _context_ring(placed, layers, setup, topology)
    # Each stage boundary passes the stream as the device holds it: a sequence-parallel rank sends its own 1/t slice
    # (Megatron-core's get_tensor_shapes), not the whole.
    pipeline = _pipeline(placed, layers.plan, setup, topology, hidden_bytes / par.stream_shards, ring)
    communication += pipeline.sends + ([ring.collective] if ring else [])
    micro_batch_time, pipeline_time, bubble_time = pipeline.micro_batch_s, pipeline.total_s, pipeline.bubble_s

    memory, params_device = _memory(arch, setup, layers, last, hidden_bytes)
    shard = params_device.trained(par, 1)
    optimizer = Row("optimizer_update", "optimizer", 1, optimizer_cost(
        shard, setup.optimizer, dtypes.parameters, dtypes.gradients, dtypes.optimizer_states, dtypes.keeps_master))
    optimizer_result = evaluator.evaluate(optimizer, "optimizer", 1)
    placed.append(PlacedRow(OPTIMIZER, optimizer_result))
    optimizer_time = optimizer_result.total_time_s
    if dtypes.fp8_recipe != "none" and setup.peft is None:  # a frozen base is cast to fp8 once, before training
        cast = evaluator.evaluate(weight_cast(_held_parameters(params_device, par), dtypes.fp8_recipe), "optimizer", 1)
        placed.append(PlacedRow(OPTIMIZER, cast))
        optimizer_time += cast.total_time_s

    communication += _data_parallel(topology, setup, params_device)
    dp_time = sum(c.total_time_s for c in communication if c.group == "data")
    exposed = max(0.0, dp_time - pipeline.backward_s) if setup.overlap_data_parallel else dp_time
    step_time = pipeline_time + optimizer_time + exposed

    unsplit = _unsplit(arch, setup, model_dtypes)
    forward_flops, recompute_flops = unsplit.forward, unsplit.recompute
    if not math.isfinite(step_time + memory.required_bytes + forward_flops * micro_batches * par.data):
        raise CostModelError("seq_len", "the step's counts exceed the floating-point range")
    sequences = micro_batches * par.data
    _, peak, compute_source = evaluator.compute_roof(
        next(cost_of(r) for _, _, rows in layers.groups for r in rows if r.kind == "matmul"))
    options = _recompute_options(evaluator, setup, layers, last, memory, hidden_bytes)
    return TrainingStep(
        rows=tuple(placed), communication=tuple(communication), memory=memory, recompute_options=options,
        model_flops_per_step=(forward_flops + unsplit.backward) * sequences,
        hardware_flops_per_step=(forward_flops + unsplit.backward + recompute_flops) * sequences,
        tokens_per_step=setup.tokens_per_step, micro_batch_time_s=micro_batch_time, pipeline_time_s=pipeline_time,
        bubble_fraction=bubble_time / pipeline_time, optimizer_time_s=optimizer_time,
        data_parallel_time_s=dp_time, data_parallel_exposed_s=exposed, step_time_s=step_time, peak_flops_per_s=peak,
        compute_roof_source=compute_source, devices=par.devices, stage_layers=layers.plan.layers,
        trainable_parameters=unsplit.trainable)


class _PipelineTimes(NamedTuple):
    sends: list[Collective]
    micro_batch_s: float  # one micro-batch's forward and backward on the slowest stage, its sends included
    total_s: float
    bubble_s: float
    backward_s: float  # the step's backward passes on the slowest stage, which a data-parallel sync can hide behind


def _layer_rows(arch: Architecture, group: LayerGroup, step: Step, setup: TrainingSetup) -> list[Row]:
    """One layer's forward on one device: the model's rows at the step's tokens, then context and expert
    parallelism's and the fp8 recipe's changes to them."""
    par, dtypes = setup.parallelism, setup.dtypes
    rows = context_parallel_rows(forward_layer_rows(arch, group, step, dtypes.model_dtypes()), setup.seq_len,
                                 par.context)
    rows = expert_parallel_rows(rows, arch, par.expert, step.stream_tokens, dtypes.activations)
    rows = fp8_rows(rows, dtypes.fp8_recipe, bytes_per_element(dtypes.parameters))
    if setup.peft is None:
        return rows
    return peft_layer_rows(rows, setup.peft, arch, group, step.tokens, par.tensor, dtypes.model_dtypes())


def _backward(row: Row, setup: TrainingSetup, gradient_ratio: float, accumulate: bool) -> list[PhasedRow]:
    """A forward row's backward: an fp8 matmul's in fp8 after its output gradient's cast; a cast's nothing (the
    gradient passes straight through); any other row's as rows.py counts it."""
    if row.name.endswith(QUANTIZE):
        return []
    if is_dequantize(row):  # QLoRA dequantises the frozen weight again for dX = dY W^T
        return [PhasedRow(BACKWARD_ACTIVATION, row._replace(name=f"{row.name}.backward"))]
    frozen = setup.peft is not None and is_frozen_matmul(row)
    if is_fp8(row):
        cast, dgrad, wgrad = fp8_backward(row, setup.dtypes.fp8_recipe, bytes_per_element(setup.dtypes.gradients),
                                          accumulate)
        return [PhasedRow(BACKWARD_ACTIVATION, cast), PhasedRow(BACKWARD_ACTIVATION, dgrad)] + (
            [] if frozen else [PhasedRow(BACKWARD_WEIGHT, wgrad)])
    return backward_rows(row, gradient_ratio, accumulate, frozen=frozen)


def _context_slice(setup: TrainingSetup) -> int:
    """The tokens of a sequence on one context-parallel rank: seq_len / c, in 2c load-balancing chunks."""
    context = setup.parallelism.context
    if context == 1:
        return setup.seq_len
    if setup.seq_len % (2 * context):
        raise CostModelError("context_parallel", f"seq_len {setup.seq_len} does not split into 2 x {context} equal "
                                                 "chunks (Megatron's load-balanced causal split)")
    if setup.attention_implementation != "flash":
        raise CostModelError("context_parallel", "context parallelism runs ring attention on flash kernels; "
                                                 "use attention_implementation 'flash'")
    return setup.seq_len // context


class _Ring(NamedTuple):
    collective: Collective
    forward_exposed_s: float  # per micro-batch on the fullest stage: ring time the forward attention cannot hide
    backward_exposed_s: float


def _context_ring(placed: list[PlacedRow], layers: _Layers, setup: TrainingSetup, topology: Topology) -> _Ring | None:
    """Context parallelism's ring: at each of c - 1 steps a rank passes on the K and V it holds (forward, and a
    recomputed forward) or K, V and their gradients (backward, twice the bytes). Ring attention overlaps each step
    with the attention block it feeds: only what outlasts a layer's attention is exposed."""
    par = setup.parallelism
    if par.context == 1:
        return None
    link = topology.link_for(par.tensor * par.context, "context-parallel")
    attention = {(p.phase, p.result.group): p.result.time_s for p in placed if p.result.kind == "attention"
                 and p.result.name in ("attention", "attention.backward")}
    passes = 2 if setup.recompute == "full" else 1
    buffer = forward_exposed = backward_exposed = 0.0
    stage_layers = 0.0
    for label, count, rows in layers.groups:
        kv = kv_ring_buffer_bytes(rows, setup.dtypes.activations)
        step_time = (par.context - 1) * (link.latency_s + kv / link.bandwidth_bytes_per_s)
        on_stage = count * layers.share
        forward_exposed += on_stage * passes * max(0.0, step_time - attention.get((FORWARD, label), 0.0))
        backward_exposed += on_stage * max(0.0, 2 * step_time - attention.get((BACKWARD_ACTIVATION, label), 0.0))
        buffer, stage_layers = max(buffer, kv), stage_layers + on_stage
    sends = round(stage_layers * (passes + 2) * (par.context - 1) * setup.gradient_accumulation_steps)
    collective = Collective("context-parallel KV ring (K, V forward; K, V and their gradients backward), beside "
                            "the attention it feeds", "send_recv", "context", par.context, buffer, buffer, sends, link,
                            False)
    return _Ring(collective, forward_exposed, backward_exposed)


def _pipeline(placed: list[PlacedRow], plan: StagePlan, setup: TrainingSetup, topology: Topology,
              hidden_bytes: float, ring: _Ring | None) -> _PipelineTimes:
    """The micro-batches through the stages on the setup's schedule. Each micro-batch crosses each of a stage's
    boundaries once forward and once backward, once per model chunk the stage holds."""
    par, micro_batches, stages = setup.parallelism, setup.gradient_accumulation_steps, setup.parallelism.pipeline
    sends, send_each = [], 0.0
    if stages > 1:
        pp_link = topology.link_for(par.devices, "pipeline-parallel")
        chunks = setup.schedule.virtual_stages
        sends.append(Collective("pipeline sends (activations forward, their gradients backward"
                                + (f", {chunks} model chunks a stage)" if chunks > 1 else ")"), "send_recv", "pipeline",
                                stages, hidden_bytes, hidden_bytes, 2 * chunks * micro_batches, pp_link, True))
        send_each = chunks * sends[0].time_s

    def phase_time(*phases: str) -> float:
        return _stage_time([p for p in placed if p.phase in phases], plan)

    forward_ring, backward_ring = (ring.forward_exposed_s, ring.backward_exposed_s) if ring else (0.0, 0.0)
    micro_batch = _stage_time(placed, plan) + 2 * send_each + forward_ring + backward_ring
    times = PhaseTimes(forward_s=phase_time(FORWARD) + send_each + forward_ring,
                       backward_input_s=phase_time(BACKWARD_ACTIVATION, RECOMPUTE) + send_each + backward_ring,
                       backward_weight_s=phase_time(BACKWARD_WEIGHT), micro_batch_s=micro_batch)
    total, bubble = setup.schedule.pipeline_time(micro_batches, stages, times)
    return _PipelineTimes(sends, micro_batch, total, bubble,
                          micro_batches * phase_time(BACKWARD_ACTIVATION, BACKWARD_WEIGHT))


def _stage_time(rows: list[PlacedRow], plan: StagePlan) -> float:
    """One micro-batch's time on the slowest stage: the first stage's layers and the embedding, a middle
    stage's layers, or the last stage's layers and the head (all on one device without pipelining)."""
    by_group = {FIRST_STAGE: 0.0, LAST_STAGE: 0.0, "layers": 0.0}
    for p in rows:
        by_group[p.result.group if p.result.group in by_group else "layers"] += p.result.total_time_s
    layers, last = by_group["layers"], plan.stages - 1
    if plan.stages == 1:
        return layers + by_group[FIRST_STAGE] + by_group[LAST_STAGE]
    return max(layers * plan.share(s) + (by_group[FIRST_STAGE] if s == 0 else 0.0)
               + (by_group[LAST_STAGE] if s == last else 0.0) for s in plan.kinds())


def _layer_collectives(placed: list[PlacedRow], share: float, setup: TrainingSetup, hidden_bytes: float,
                       links: dict[str, Link]) -> list[Collective]:
    """The step's in-layer collectives by kind, per device: the fullest stage's share of each layer's."""
    par, micro_batches = setup.parallelism, setup.gradient_accumulation_steps
    passes = "(forward, backward" + (", recompute)" if setup.recompute == "full" else ")")

    def per_step(rows: list[RowResult]) -> int:
        per_micro_batch = sum(r.instances * (1 if r.group in (FIRST_STAGE, LAST_STAGE) else share) for r in rows)
        return round(per_micro_batch * micro_batches)

    found = []
    for row_kind, (group, kind, plural, bytes_of) in _LAYER_COLLECTIVES.items():
        rows = [p.result for p in placed if p.result.kind == row_kind]
        if not rows:
            continue
        if bytes_of is None:  # an all-to-all: its bytes are the row's, its buffer what a rank routes
            sent = rows[0].bytes
            found.append(Collective(f"expert-parallel {plural} {passes}", kind, group, par.expert,
                                    sent * par.expert / (par.expert - 1), sent, per_step(rows), links[group], True))
        else:
            found.append(Collective(f"tensor-parallel {plural} {passes}", kind, group, par.tensor, hidden_bytes,
                                    bytes_of(par.tensor, hidden_bytes), per_step(rows), links[group], True))
    if par.sequence_parallel and par.tensor > 1:
        # The backward gathers each block's kept input slice again for its weight gradient; Megatron runs that
        # gather beside the activation-gradient matmul, so the step does not wait on it.
        gathered = [p.result for p in placed if p.phase == FORWARD and p.result.kind == "allgather"]
        if gathered:
            found.append(Collective("tensor-parallel re-gathers of the kept input slices (backward, beside dgrad)",
                                    "all_gather", "tensor", par.tensor, hidden_bytes,
                                    ring_shard_bytes(par.tensor, hidden_bytes), per_step(gathered), links["tensor"],
                                    False))
    return found


class _Unsplit(NamedTuple):
    """One micro-batch on the unsplit model (tensor parallelism replicates norms and residuals, which MFU must not
    count)."""

    forward: float  # FLOPs
    recompute: float
    backward: float
    trainable: float  # parameters


def _unsplit(arch: Architecture, setup: TrainingSetup, model_dtypes: ModelDTypes) -> _Unsplit:
    """Every weight trained: the backward is twice the forward (docs/training.md). Adapters beside a frozen base:
    the backward counted row by row (dX only for the frozen matmuls, no embedding gradient)."""
    whole = Step(setup.micro_batch_size, setup.seq_len, setup.seq_len, 1, setup.attention_implementation)
    whole_first, whole_last = forward_model_rows(arch, whole, model_dtypes)
    whole_layers = [(g.count, forward_layer_rows(arch, g, whole, model_dtypes), g) for g in arch.groups]
    if setup.peft is not None:
        whole_layers = [(n, peft_layer_rows(rows, setup.peft, arch, g, whole.tokens, 1, model_dtypes), g)
                        for n, rows, g in whole_layers]
    forward_flops = _flops(whole_first) + _flops(whole_last) + sum(_flops(rows, n) for n, rows, _ in whole_layers)
    activations = setup.dtypes.activations
    recompute_flops = sum(_flops(_recomputed(setup.recompute, rows, activations), n) for n, rows, _ in whole_layers)
    if setup.peft is None:
        return _Unsplit(forward_flops, recompute_flops, 2 * forward_flops, model_params(arch).total - arch.vision_params)

    def backward(rows: list[Row]) -> float:
        return _flops([phased.row for row in rows for phased in _backward(row, setup, 1.0, False)])

    backward_flops = backward(whole_last) + sum(n * backward(rows) for n, rows, _ in whole_layers)
    return _Unsplit(forward_flops, recompute_flops, backward_flops,
                    sum(n * adapter_params(rows) for n, rows, _ in whole_layers))


class _StageParams(NamedTuple):
    """Parameters on one device of the fullest stage: those every replica holds, and its routed experts'."""

    dense: float
    experts: float
    largest_layer: float  # one layer's, what ZeRO 3 gathers at a time
    adapters: float | None = None  # fine-tuned beside the frozen rest (not in dense); None: every weight trains
    linear: float = 0.0  # of dense and experts, the layers' linear weights: what QLoRA stores quantised

    @property
    def total(self) -> float:
        return self.dense + self.experts

    def sharded(self, par: Parallelism, stage: int) -> float:
        """What remains on the device once ZeRO shards what it shards from `stage` on."""
        return self.dense / par.shards(stage) + self.experts / par.shards(stage, experts=True)

    def trained(self, par: Parallelism, stage: int) -> float:
        """The trained parameters (the adapters where fine-tuning, else all) left on the device once ZeRO shards
        what it shards from `stage` on: their gradients from stage 2, their optimizer states from stage 1."""
        return self.sharded(par, stage) if self.adapters is None else self.adapters / par.shards(stage)

    @property
    def trainable(self) -> float:
        return self.total if self.adapters is None else self.adapters


def _layer_parameters(arch: Architecture, par: Parallelism) -> list[tuple[int, float, float]]:
    """(layers, parameters one device holds of one of them, of them its routed experts') per layer group: matrices
    split by tensor parallelism (norm weights replicated), routed experts by expert parallelism too (kept with the
    rest without it)."""
    split = []
    for group in arch.groups:
        p = layer_params(arch, group)
        routed = p.routed if par.expert > 1 else 0
        split.append((group.count, (p.attention + p.mlp_total - routed) / par.tensor + p.norms,
                      routed / (par.tensor * par.expert)))
    return split


def _stage_parameters(arch: Architecture, par: Parallelism, per_layer: list[tuple[int, float, float]],
                      plan: StagePlan, stage: int) -> _StageParams:
    """Parameters on one device of a pipeline stage: its share of the layers, the vocabulary-parallel embedding on
    the first stage, the head and final norm on the last (a tied head is a copy of the embedding there when the
    stages differ)."""
    share = plan.share(stage)
    dense = experts = largest = 0.0
    for count, layer_dense, layer_experts in per_layer:
        dense += count * share * layer_dense
        experts += count * share * layer_experts
        largest = max(largest, layer_dense + layer_experts)
    embedding = arch.vocab * arch.hidden / par.tensor
    head = norm_params(arch) + (embedding if (not arch.tied_embeddings or plan.stages > 1) else 0.0)
    ends = (embedding if stage == 0 else 0.0) + (head if stage == plan.stages - 1 else 0.0)
    return _StageParams(dense + ends, experts, largest)


def _held_parameters(params: _StageParams, par: Parallelism) -> float:
    """Parameters resident on a device at the step's peak: ZeRO 3 keeps a shard and gathers one layer at a time
    (its next layer's prefetch not counted), or, keeping them after the forward, the stage's whole set for the
    micro-batch beside the shard."""
    held = params.sharded(par, 3)
    if par.zero_stage == 3 and par.replicas > 1:
        held += params.largest_layer if par.reshard_after_forward else params.total
    return held


def _frozen_bytes(params: _StageParams, setup: TrainingSetup) -> float:
    """The stage's base weights on a device (before ZeRO), QLoRA's linear ones in their stored type."""
    s_p = bytes_per_element(setup.dtypes.parameters)
    stored = setup.peft.base_bytes_per_parameter(setup.dtypes.parameters) if setup.peft else s_p
    return params.total * s_p + params.linear * (stored - s_p)


def _held_parameter_bytes(params: _StageParams, setup: TrainingSetup) -> float:
    """Parameter bytes resident at the step's peak; adapters whole on every device (ZeRO 3 gathers them for use,
    a few hundred MB at most)."""
    held = _held_parameters(params, setup.parallelism)
    if setup.peft is None:
        return held * bytes_per_element(setup.dtypes.parameters)
    return (held / params.total * _frozen_bytes(params, setup)
            + params.trainable * bytes_per_element(setup.dtypes.parameters))


def _memory(arch: Architecture, setup: TrainingSetup, layers: _Layers, last: list[Row],
            checkpoint_bytes: float) -> tuple[TrainingMemory, _StageParams]:
    """The memory of the fullest stage (the first holds the most micro-batches, the last the head's logits),
    and the parameters of the stage with the most, whose gradient sync and update take longest."""
    par, dtypes, plan = setup.parallelism, setup.dtypes, layers.plan
    candidates, per_layer_params = [], _layer_parameters(arch, par)
    for stage in plan.kinds():
        params = _stage_parameters(arch, par, per_layer_params, plan, stage)
        if setup.peft is not None:
            params = params._replace(adapters=layers.stage_parameters(stage, adapter_params),
                                     linear=layers.stage_parameters(stage, quantised_params))
        activations, per_layer = _activations(setup, layers, last, setup.recompute, checkpoint_bytes, stage)
        candidates.append((params, TrainingMemory(
            stage=stage, stage_layers=plan.layers[stage], parameters_per_device=params.total + (params.adapters or 0.0),
            parameters_bytes=_held_parameter_bytes(params, setup),
            gradients_bytes=params.trained(par, 2) * bytes_per_element(dtypes.gradients),
            optimizer_bytes=params.trained(par, 1) * dtypes.optimizer_bytes_per_parameter(setup.optimizer),
            activations_bytes=activations, activations_per_layer_bytes=per_layer,
            in_flight_micro_batches=_in_flight(setup, stage), workspace_bytes=setup.workspace_bytes,
            usable_bytes=setup.usable_bytes)))
    memory = max((m for _, m in candidates), key=lambda m: m.required_bytes)
    return memory, max((p for p, _ in candidates), key=lambda p: p.total)


def _in_flight(setup: TrainingSetup, stage: int = 0) -> float:
    """Micro-batches a stage holds: its schedule's count for a pipeline of the stages from it to the last."""
    return setup.schedule.in_flight(setup.gradient_accumulation_steps, setup.parallelism.pipeline - stage)


def _activations(setup: TrainingSetup, layers: _Layers, last: list[Row], policy: str,
                 checkpoint_bytes: float, stage: int) -> tuple[float, float]:
    """(activation bytes per device, saved bytes of one layer for one micro-batch) on a stage at a recompute
    policy: the in-flight micro-batches' saved tensors of its layers (with full recomputation, each layer's input
    only, and one layer's full set while its backward runs), plus, on the last stage, the head's (its logits)."""
    act = setup.dtypes.activations
    stage_layers, largest = layers.saved_per_layer(act, policy, checkpoint_bytes, stage)
    head = (sum(saved_activation_bytes(r, act, keep_scores=True) * r.count for r in last)
            if stage == layers.plan.stages - 1 else 0.0)
    transient = largest if policy == "full" else 0.0
    return (_in_flight(setup, stage) * stage_layers + transient + head,
            checkpoint_bytes if policy == "full" else largest)


def _recompute_options(evaluator: Evaluator, setup: TrainingSetup, layers: _Layers, last: list[Row],
                       memory: TrainingMemory, checkpoint_bytes: float) -> tuple[RecomputeOption, ...]:
    """Each policy against keeping everything: the activation memory it leaves, what it frees, the FLOPs it
    recomputes (F_re) at their compute roofs, and the HBM traffic of what it does not keep (Q_saved)."""
    act, micro_batches = setup.dtypes.activations, setup.gradient_accumulation_steps
    stage = memory.stage
    without, _ = _activations(setup, layers, last, "none", checkpoint_bytes, stage)
    kept_without, _ = layers.saved_per_layer(act, "none", checkpoint_bytes)
    options = []
    for policy in RECOMPUTE_POLICIES:
        at_policy, _ = _activations(setup, layers, last, policy, checkpoint_bytes, stage)
        # Per micro-batch, the stage's saved tensors this policy does not keep: written once in the forward and
        # read once in the backward when kept.
        kept, _ = layers.saved_per_layer(act, policy, checkpoint_bytes)
        traffic = 2 * (kept_without - kept) * micro_batches
        flops = recompute_time = 0.0
        for _, count, rows in layers.groups:
            for row in _recomputed(policy, rows, act):
                if row.is_comm:
                    continue
                instances = row.count * count * layers.share * micro_batches
                flops += cost_of(row).flops * instances
                recompute_time += evaluator.times(cost_of(row))[0] * instances
        fits = memory.required_bytes - memory.activations_bytes + at_policy <= memory.usable_bytes
        options.append(RecomputeOption(policy, at_policy, max(0.0, without - at_policy), flops, recompute_time,
                                       traffic, traffic / evaluator.hbm.bytes_per_s, fits))
    return tuple(options)


def _data_parallel(topology: Topology, setup: TrainingSetup, params_device: _StageParams) -> list[Collective]:
    """The gradient sync of the weights every replica holds and, under expert parallelism, that of the routed
    experts over the fewer ranks holding each. Fine-tuning syncs the adapters' gradients only; ZeRO 3 still
    gathers the frozen base it shards."""
    par, dtypes = setup.parallelism, setup.dtypes
    s_p, s_g = bytes_per_element(dtypes.parameters), bytes_per_element(dtypes.gradients)
    if setup.peft is not None:
        adapters = params_device.trainable * s_p
        gathered = adapters + (_frozen_bytes(params_device, setup) if par.zero_stage == 3 else 0.0)
        return _gradient_sync(topology, setup, params_device.trainable * s_g, gathered, par.replicas, "adapter ",
                              "adapter and frozen-base " if par.zero_stage == 3 else "adapter ")
    if par.expert == 1:
        return _gradient_sync(topology, setup, params_device.total * s_g, params_device.total * s_p, par.replicas, "")
    return (_gradient_sync(topology, setup, params_device.dense * s_g, params_device.dense * s_p, par.replicas,
                           "non-expert ")
            + _gradient_sync(topology, setup, params_device.experts * s_g, params_device.experts * s_p,
                             par.replicas // par.expert, "expert "))


def _gradient_sync(topology: Topology, setup: TrainingSetup, grads: float, params: float, n: int,
                   which: str, gathered_which: str | None = None) -> list[Collective]:
    """Gradient sync over the data- and context-parallel ranks (grads: the device's gradient bytes; params: the
    parameter bytes ZeRO gathers): an all-reduce once per step (ZeRO 0; ZeRO 1 reduce-scatters the gradients and
    all-gathers the updated parameters, the same bytes); ZeRO 2 and 3 keep only a shard of the gradients, so each
    micro-batch's are reduce-scattered; ZeRO 3 also all-gathers the parameters before each micro-batch's forward
    and again before its backward."""
    par = setup.parallelism
    if n == 1:
        return []
    # The ranks holding the same weights span every tensor-, context- and data-parallel rank of a stage.
    link = topology.link_for(par.tensor * par.replicas, "data-parallel")
    m, waited_on = setup.gradient_accumulation_steps, not setup.overlap_data_parallel
    if par.zero_stage == 0:
        return [Collective(f"{which}gradient all-reduce", "all_reduce", "data", n, grads,
                           ring_all_reduce_bytes(n, grads), 1, link, waited_on)]
    scatters = 1 if par.zero_stage == 1 else m
    if par.zero_stage == 3:
        gathered = (("parameter all-gathers (before each forward and backward)", 2 * m) if par.reshard_after_forward
                    else ("parameter all-gathers (before each forward, kept through the backward)", m))
    else:
        gathered = ("updated-parameter all-gather", 1)
    gather_name = (which if gathered_which is None else gathered_which) + gathered[0]
    return [Collective(f"{which}gradient reduce-scatter", "reduce_scatter", "data", n, grads,
                       ring_shard_bytes(n, grads), scatters, link, waited_on),
            Collective(gather_name, "all_gather", "data", n, params, ring_shard_bytes(n, params), gathered[1], link,
                       waited_on)]
