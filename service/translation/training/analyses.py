"""Training requests to the core's training step, and back to their HTTP answers."""

from __future__ import annotations

from typing import NamedTuple, Protocol

from pydantic import TypeAdapter

from schemas.models import ParamCounts
from schemas.training import (
    CollectiveOut,
    PeftOptions,
    PeftOut,
    RecomputeAdvice,
    RecomputeOptionOut,
    ShardingOut,
    TrainingAnalysis,
    TrainingCheckOut,
    TrainingExpected,
    TrainingMemoryOut,
    TrainingRequest,
    TrainingRowOut,
    TrainingTime,
)
from service.core.errors import CostModelError
from service.core.expectations.training_checks import TRAINING_CHECKS
from service.core.hardware import DeviceSpec
from service.core.roofs import MeasuredRoofs, RoofMode, select_collective_latency
from service.core.training import step as training
from service.core.training.collectives import Link, Topology, in_network_reduction_note
from service.core.training.peft import Peft, adapted_module_names
from service.core.training.schedules import Schedule
from service.core.transformer.analysis import Evaluator
from service.core.transformer.architecture import Architecture
from service.core.transformer.capacity import check_positions
from service.core.transformer.params import model_params
from service.persistence.catalog import DeviceCatalog
from service.runtime.errors import Unprocessable
from service.translation.kernels.tables import kernel_evaluator, kernel_tables
from service.translation.models.analyses import positions_notes, resolve_model, unprocessable, usable_memory

ROWS = TypeAdapter(list[TrainingRowOut])


def _link(device: DeviceSpec, measured: MeasuredRoofs, tier: str, mode: RoofMode, override: float | None,
          latency: float) -> Link | None:
    """The request's figure, else the measured median (roofs 'effective' or 'measured'), else the device's."""
    if override is not None:
        return Link(tier, override, latency, "request")
    found = measured.links.get(tier)
    if found is not None and mode != RoofMode.nominal:
        return Link(tier, found.median, latency, "measured")
    return None if mode == RoofMode.measured else Link.nominal(device, tier, latency)


class LinkChoices(Protocol):
    """What a request says of its links (a training request, or a serving one through its own adapter)."""

    @property
    def roofs(self) -> str: ...
    @property
    def collective_latency_s(self) -> float | None: ...
    @property
    def inter_node_latency_s(self) -> float | None: ...
    @property
    def node_size(self) -> int | None: ...
    @property
    def intra_node_bandwidth_bytes_per_s(self) -> float | None: ...
    @property
    def inter_node_bandwidth_bytes_per_s(self) -> float | None: ...


def topology_for(device: DeviceSpec, measured: MeasuredRoofs, options: LinkChoices) -> Topology:
    mode = RoofMode(options.roofs)
    intra_latency = (select_collective_latency(device, measured, "intra_node", mode)[0]
                     if options.collective_latency_s is None else options.collective_latency_s)
    inter_latency = (select_collective_latency(device, measured, "inter_node", mode)[0]
                     if options.inter_node_latency_s is None else options.inter_node_latency_s)
    # A device without a published node is a node of one: every collective crosses nodes unless the request
    # says how many share a link.
    return Topology(options.node_size or device.node_size or 1,
                    _link(device, measured, "intra_node", mode, options.intra_node_bandwidth_bytes_per_s, intra_latency),
                    _link(device, measured, "inter_node", mode, options.inter_node_bandwidth_bytes_per_s, inter_latency))


def _accumulation_steps(request: TrainingRequest) -> int:
    if request.global_batch_tokens is None:
        return request.gradient_accumulation_steps or 1
    per_pass = request.micro_batch_size * request.seq_len * request.data_parallel
    steps, remainder = divmod(request.global_batch_tokens, per_pass)
    reason = None
    if remainder or not steps:
        reason = (f"{request.global_batch_tokens:,} is not a whole multiple of micro_batch_size x seq_len x "
                  f"data_parallel = {per_pass:,} tokens")
    elif request.gradient_accumulation_steps not in (None, steps):
        reason = (f"implies {steps} gradient accumulation steps, not the {request.gradient_accumulation_steps} given")
    if reason:
        raise Unprocessable(reason, [{"loc": "body.global_batch_tokens", "msg": reason}])
    return steps


def setup_for(request: TrainingRequest, device: DeviceSpec) -> tuple[training.TrainingSetup, str]:
    usable, basis = usable_memory(device, request)
    d = request.dtypes
    return training.TrainingSetup(
        micro_batch_size=request.micro_batch_size, seq_len=request.seq_len,
        gradient_accumulation_steps=_accumulation_steps(request),
        parallelism=training.Parallelism(request.data_parallel, request.tensor_parallel, request.pipeline_parallel,
                                         request.zero_stage, request.sequence_parallel, request.context_parallel,
                                         request.expert_parallel, request.reshard_after_forward),
        dtypes=training.TrainingDTypes(d.parameters, d.gradients, d.optimizer_states, d.activations, d.master_weights,
                                       d.fp8_recipe),
        optimizer=request.optimizer, recompute=request.recompute,
        attention_implementation=request.attention_implementation,
        schedule=Schedule(request.pipeline_schedule, request.virtual_pipeline_stages),
        first_stage_layers=request.first_stage_layers, last_stage_layers=request.last_stage_layers,
        overlap_data_parallel=request.overlap_data_parallel, usable_bytes=usable,
        workspace_bytes=request.workspace_bytes, peft=_peft(request.peft)), basis


def _peft(options: PeftOptions | None) -> Peft | None:
    if options is None:
        return None
    return Peft(options.method, options.rank, options.alpha, tuple(options.target_modules), options.base_dtype)


def _peft_out(setup: training.TrainingSetup, result: training.TrainingStep) -> PeftOut | None:
    peft = setup.peft
    if peft is None:
        return None
    modules = adapted_module_names((p.result.name for p in result.rows), peft.target_modules)
    return PeftOut(method=peft.method, rank=peft.rank, alpha=peft.alpha, scale=peft.scale, adapted_modules=modules,
                   stored_base=peft.stored_base or setup.dtypes.parameters,
                   base_bytes_per_parameter=peft.base_bytes_per_parameter(setup.dtypes.parameters))


class TrainingInputs(NamedTuple):
    """What a training request resolves to before any step is placed."""

    name: str
    arch: Architecture
    setup: training.TrainingSetup
    basis: str  # how the usable memory was obtained
    evaluator: Evaluator
    topology: Topology


def training_inputs(request: TrainingRequest, catalog: DeviceCatalog) -> TrainingInputs:
    """The model, the device's roofs and links, and the setup a training request asks for (its length checked
    against the model's positions)."""
    name, arch = resolve_model(request, catalog)
    device = catalog.get(request.device_id)
    measured = catalog.measured(device.id)
    setup, basis = setup_for(request, device)
    try:
        check_positions(arch, request.seq_len, "seq_len")
    except CostModelError as exc:
        raise unprocessable(exc, "body") from None
    return TrainingInputs(name, arch, setup, basis, Evaluator(device, measured, RoofMode(request.roofs),
                                                              request.sustained_clock_hz),
                          topology_for(device, measured, request))


def _advice(result: training.TrainingStep, chosen: str) -> RecomputeAdvice:
    options = {o.policy: o for o in result.recompute_options}
    fitting = [o.policy for o in result.recompute_options if o.fits]
    cheapest = fitting[0] if fitting else None
    without = options["none"].fits
    full = options["full"]
    trade = (f"full recomputation frees {full.frees_bytes / 1e9:.3g} GB per device for {full.recompute_time_s:.3g} s of "
             f"recomputed forward per step, against {full.reload_time_s:.3g} s of HBM traffic it saves: "
             + ("it pays (Q_saved / B > F_re / P)" if full.pays else "it does not pay in time (F_re / P >= Q_saved / B)"))
    if cheapest is None:
        advice = ("does not fit at any recomputation: shard further (a higher zero_stage; tensor, pipeline or, for "
                  "long sequences, context parallelism; sequence parallelism) or use a smaller micro-batch")
    elif not without:
        advice = f"fits only with recompute '{cheapest}'; {trade}"
    else:
        advice = "fits without recomputation" + (f" (recompute '{chosen}' was asked for)" if chosen != "none" else "") \
                 + f"; {trade}"
    return RecomputeAdvice(
        options=[RecomputeOptionOut(**vars(o), pays=o.pays) for o in result.recompute_options],
        fits_without_recompute=without, only_way_to_fit=cheapest is not None and not without,
        cheapest_fitting=cheapest, advice=advice)


def _assumptions(request: TrainingRequest, setup: training.TrainingSetup, result: training.TrainingStep,
                 evaluator: Evaluator, basis: str) -> list[str]:
    par, memory = setup.parallelism, result.memory
    return [
        f"memory per device: parameters + gradients + optimizer states + activations + workspace = "
        f"{memory.required_bytes:.4g} bytes against {memory.usable_bytes:.4g} usable: "
        + ("fits" if memory.fits else "DOES NOT FIT (answered as a what-if)"),
        basis,
        "counting: docs/training.md; forward = prefill rows without a KV-cache write, LM head over every token, "
        "cross-entropy over the logits; a matmul's backward = dgrad + wgrad, each its forward's FLOPs; attention's "
        "backward = twice its forward; model FLOPs = forward + backward (3 x forward); hardware FLOPs add the "
        "recomputed forward",
        *_peft_words(setup),
        f"schedule: {_schedule_words(setup.schedule)} over {par.pipeline} stage(s) and "
        f"{setup.gradient_accumulation_steps} micro-batch(es), bubble {result.bubble_fraction:.3g}; layers split "
        "evenly, embedding on the first stage, head and loss on the last",
        f"parallelism: {par.data} data x {par.tensor} tensor x {par.pipeline} pipeline x {par.context} context = "
        f"{par.devices} devices, ranks tensor-fastest, then context, data, pipeline; ZeRO stage {par.zero_stage} "
        f"over the {par.replicas} data- and context-parallel ranks; "
        + (f"context parallel: {setup.seq_len // par.context} tokens of each sequence a rank (2 load-balanced causal "
           "chunks), attention FLOPs the whole sequence's / c, K and V passed round the ring beside the attention "
           "they feed (only what outlasts it counted); " if par.context > 1 else "")
        + (f"expert parallel: each MoE layer's routed experts over {par.expert} of the data-parallel ranks, a "
           "dispatch and a combine all-to-all per MoE layer forward and backward (balanced routing: (e - 1)/e of "
           "each token's top-k copies leave the rank), expert gradients reduced and sharded over the "
           f"{par.replicas // par.expert} ranks holding the same experts; " if par.expert > 1 else "")
        + ("sequence parallel: norms and residuals on 1/t of the tokens, all-gather before and reduce-scatter after "
           "each tensor-parallel block, the backward's re-gather of kept input slices overlapped with dgrad; the "
           "LM head's input gather not counted" if par.sequence_parallel else "no sequence parallelism"),
        _precision_words(setup.dtypes),
        f"optimizer: {setup.optimizer}, states in {setup.dtypes.optimizer_states}"
        + (" with master weights" if setup.dtypes.keeps_master else "") + "; gradient clipping and loss scaling not counted",
        "collectives: ring algorithms at the link of the tier the group crosses (intra-node when the group's ranks "
        "fit in one node), each with a fixed latency; hierarchical (tree) algorithms not modelled",
        *([in_network_reduction_note(evaluator.device.id)] if evaluator.device.in_network_reduction else []),
        "data-parallel sync " + ("overlapped with the backward: only what outlasts it is exposed"
                                 if setup.overlap_data_parallel else "after the backward, not overlapped"),
        f"memory roof: {evaluator.hbm.source} hbm, {evaluator.hbm.bytes_per_s:.4g} bytes/s; compute roofs per row's "
        "dtype and unit; mfu and hfu against the nominal peak of the matmuls' dtype",
    ]


def _peft_words(setup: training.TrainingSetup) -> list[str]:
    peft = setup.peft
    if peft is None:
        return []
    base = (f"the frozen base's linear weights stored in {peft.stored_base} "
            f"({peft.base_bytes_per_parameter(setup.dtypes.parameters):.4g} bytes each) and dequantised to "
            f"{setup.dtypes.parameters} before each matmul, forward and again for dX (a row each); embedding, LM head "
            "and norms in 16 bits" if peft.quantised_base else f"the frozen base in {setup.dtypes.parameters}")
    return [f"fine-tuning ({peft.method}, rank {peft.rank}, scale alpha/r = {peft.scale:.4g}): {base}; each adapter "
            "A [r, in] and B [out, r] beside its module (q, k and v's A read their shared input once), its scaled "
            "output added to the module's; frozen matmuls compute dX only, no dW; the embedding has no backward "
            "(the first layer's dX, which nothing needs, is still counted); model FLOPs = forward + the backward "
            "counted row by row; gradients, optimizer states, their data-parallel sync and the update for the "
            "adapters only; a frozen matmul keeps nothing for its backward unless its adapter reads its input; "
            "adapter dropout and the adapters' [tokens, r] tensor-parallel reductions not counted"]


def _sharding(setup: training.TrainingSetup) -> ShardingOut:
    par = setup.parallelism
    if par.zero_stage < 3 or par.replicas == 1:
        gathers = "none"
    else:
        gathers = ("before each forward and backward" if par.reshard_after_forward
                   else "before each forward, kept through the backward")
    return ShardingOut(parameters_sharded_over=par.shards(3), gradients_sharded_over=par.shards(2),
                       optimizer_states_sharded_over=par.shards(1),
                       expert_states_sharded_over=par.shards(1, experts=True) if par.expert > 1 else None,
                       parameter_gathers=gathers, gradient_accumulation_dtype=setup.dtypes.gradients)


def _precision_words(dtypes: training.TrainingDTypes) -> str:
    if dtypes.fp8_recipe == "none":
        return (f"precision: matmuls in {dtypes.parameters} x {dtypes.activations} as the dtypes say (no fp8 recipe: "
                "fp8 dtypes alone are not an fp8 training recipe's casts)")
    return (f"precision: fp8 recipe '{dtypes.fp8_recipe}': the layers' matmuls at the fp8 peak on fp8 copies of "
            "their inputs, output gradients and weights, each cast from 16 bits into row- and column-wise copies "
            "with the recipe's scales (the casts are rows of their own; the weights' once a step); attention, norms, "
            "the LM head, the master weights, gradients and the optimizer as dtypes say; MFU against the fp8 peak; "
            "whether the device scales MXFP8 in hardware is not checked")


def _schedule_words(schedule: Schedule) -> str:
    if schedule.name == "interleaved":
        return (f"interleaved, {schedule.virtual_stages} model chunks a stage: m + (p - 1)/v micro-batch slots, "
                "v x the sends")
    if schedule.name == "zero_bubble":
        return "zero bubble (ZB-H1): m slots and a bubble of (p - 1)(T_F + T_B - T_W)"
    return "1F1B: (m + p - 1) micro-batch slots"


def _analyzed(inputs: TrainingInputs, evaluator: Evaluator) -> training.TrainingStep:
    """The request's step with its rows placed by `evaluator` (the roofs' for the bound, the kernel tables' for the
    expectation), a refusal answered as a 422 naming the field."""
    try:
        return training.analyze_training(inputs.arch, evaluator, inputs.topology, inputs.setup)
    except CostModelError as exc:
        raise unprocessable(exc, "body") from None


def _expected(inputs: TrainingInputs) -> TrainingExpected | None:
    """The step at the device's kernel tables (the bound's own topology: collectives stay at their bound)."""
    evaluator = inputs.evaluator
    tables = kernel_tables(evaluator.device, evaluator.measured)
    if tables is None:
        return None
    step = _analyzed(inputs, kernel_evaluator(evaluator.device, tables))
    device_id = evaluator.device.id
    checks = sorted(TRAINING_CHECKS, key=lambda c: c.device_id != device_id)
    return TrainingExpected(
        basis="kernels", step_time_s=step.step_time_s, micro_batch_s=step.micro_batch_time_s,
        tokens_per_s=step.tokens_per_s, mfu=step.mfu, tables=tables.ids, stand_in_for=tables.stand_in_for,
        composition=tables.describe(),
        checked=[TrainingCheckOut(**c._asdict(), error=c.error) for c in checks])


def analyze_training_request(request: TrainingRequest, catalog: DeviceCatalog) -> TrainingAnalysis:
    inputs = training_inputs(request, catalog)
    result = _analyzed(inputs, inputs.evaluator)
    name, arch, setup, evaluator, basis = inputs.name, inputs.arch, inputs.setup, inputs.evaluator, inputs.basis
    expected = _expected(inputs)
    memory = result.memory
    params = model_params(arch)
    return TrainingAnalysis(
        device_id=request.device_id, model=name, params=ParamCounts(total=params.total, active=params.active,
                                                      active_with_embedding=params.active_with_embedding),
        devices=result.devices, data_parallel=setup.parallelism.data, tensor_parallel=setup.parallelism.tensor,
        pipeline_parallel=setup.parallelism.pipeline, context_parallel=setup.parallelism.context,
        expert_parallel=setup.parallelism.expert,
        pipeline_schedule=setup.schedule.name,
        virtual_pipeline_stages=setup.schedule.virtual_stages, stage_layers=list(result.stage_layers),
        sequence_parallel=setup.parallelism.sequence_parallel,
        zero_stage=setup.parallelism.zero_stage, reshard_after_forward=setup.parallelism.reshard_after_forward,
        sharding=_sharding(setup),
        recompute=setup.recompute, seq_len=setup.seq_len, micro_batch_size=setup.micro_batch_size,
        gradient_accumulation_steps=setup.gradient_accumulation_steps, tokens_per_step=result.tokens_per_step,
        rows=ROWS.validate_python([{**p.result._asdict(), "phase": p.phase} for p in result.rows]),
        communication=[CollectiveOut(
            name=c.name, kind=c.kind, group=c.group, group_size=c.group_size, tier=c.link.tier,
            bandwidth_bytes_per_s=c.link.bandwidth_bytes_per_s, bandwidth_source=c.link.source,
            latency_s=c.link.latency_s, buffer_bytes=c.buffer_bytes, bytes_per_device=c.bytes_per_device,
            count=c.count, time_s=c.time_s, total_time_s=c.total_time_s, on_critical_path=c.on_critical_path)
            for c in result.communication],
        model_flops_per_step=result.model_flops_per_step, hardware_flops_per_step=result.hardware_flops_per_step,
        model_flops_per_token=result.model_flops_per_step / result.tokens_per_step,
        step_time_s=result.step_time_s,
        time=TrainingTime(micro_batch_s=result.micro_batch_time_s, pipeline_s=result.pipeline_time_s,
                          bubble_fraction=result.bubble_fraction,
                          bubble_s=result.pipeline_time_s * result.bubble_fraction,
                          optimizer_s=result.optimizer_time_s, data_parallel_s=result.data_parallel_time_s,
                          data_parallel_exposed_s=result.data_parallel_exposed_s),
        tokens_per_s=result.tokens_per_s, mfu=result.mfu, hfu=result.hfu, peak_flops_per_s=result.peak_flops_per_s,
        fits=memory.fits,
        memory=TrainingMemoryOut(**vars(memory), required_bytes=memory.required_bytes, fits=memory.fits,
                                 headroom_bytes=memory.headroom_bytes, shortfall_bytes=memory.shortfall_bytes),
        expected=expected, trainable_parameters=result.trainable_parameters, peft=_peft_out(setup, result),
        recompute_advice=_advice(result, setup.recompute),
        compute_roof_source=result.compute_roof_source,
        memory_roof_source=evaluator.hbm.source.value,
        assumptions=[*_assumptions(request, setup, result, evaluator, basis), *positions_notes(arch)],
    )
