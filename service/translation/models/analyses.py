"""Model descriptions to architectures, and model analyses to their HTTP answers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import partial
from typing import Any, NamedTuple

from pydantic import TypeAdapter, ValidationError

from schemas.models import (
    GenericArchitecture,
    KvCapacity,
    KvCapacityRequest,
    KvMix,
    ModelAnalysis,
    ModelAnalysisRequest,
    ModelChoice,
    ModelPublic,
    ModelSummary,
    ModelTotals,
    RowOut,
    StepMemoryOut,
    WhatIf,
)
from service.core.dtypes import bytes_per_element, weight_group_size
from service.core.errors import CostModelError
from service.core.memo import ByIdentity, by_identity
from service.core.planning.deployment import largest_fitting
from service.core.roofs import RoofMode
from service.core.transformer import layers
from service.core.transformer.analysis import Evaluator, RowResult, analyze_model
from service.core.transformer.architecture import Architecture, ConfigError, from_generic, with_rope_scaling
from service.core.transformer.capacity import (
    MemoryBudget,
    StepMemory,
    check_positions,
    kv_bytes_per_token,
    kv_capacity,
    memory_budget,
    mix_capacity,
)
from service.core.transformer.families import from_hf_config
from service.core.transformer.params import model_params
from service.core.transformer.quantization import checkpoint_dtypes
from service.core.whatif import amdahl
from service.persistence.catalog import DeviceCatalog
from service.persistence.tables import ModelConfig
from service.runtime.errors import Unprocessable, cost_model_error, invalid_nested
from service.translation.models.step_expectations import step_expected
from service.translation.plain_fields import json_bytes, json_bytes_around, plain_fields

ROWS = TypeAdapter(list[RowOut])
ROW_FIELDS = tuple(RowOut.model_fields)
# An evaluated row holds RowOut's fields first, in RowOut's order, so a row's answer is its leading values.
if RowResult._fields[:len(ROW_FIELDS)] != ROW_FIELDS:
    raise ImportError(f"RowResult must begin with RowOut's fields in order: {ROW_FIELDS}")


def architecture_of(config: dict[str, Any], prefix: str = "model") -> Architecture:
    if isinstance(config, dict) and config.get("format") == "generic":
        try:
            generic = GenericArchitecture.model_validate(config)
        except ValidationError as exc:
            raise invalid_nested(exc, ["body", prefix]) from None
        return from_generic(generic.model_dump())
    return from_hf_config(config, prefix)


def _stored_architecture(row: ModelConfig) -> Architecture:
    return architecture_of(row.config)


def catalog_model(catalog: DeviceCatalog, model_id: str) -> tuple[ModelConfig, Architecture]:
    """A catalog model's row and architecture (parsed once per catalog load)."""
    row = catalog.model(model_id)
    return row, catalog.derived(row, _stored_architecture)


def unprocessable(exc: CostModelError, prefix: str) -> Unprocessable:
    if isinstance(exc, ConfigError):
        return Unprocessable(exc.reason, [{"loc": f"body.{name}", "msg": exc.reason} for name in exc.fields])
    return cost_model_error(exc, prefix)


def resolve_model(choice: ModelChoice, catalog: DeviceCatalog) -> tuple[str, Architecture]:
    name, arch = _model_of(choice, catalog)
    scaling = choice.rope_scaling
    if scaling is None:
        return name, arch
    try:
        return name, with_rope_scaling(arch, scaling.rope_type, scaling.factor, scaling.original_max_position_embeddings)
    except CostModelError as exc:
        raise cost_model_error(exc, "body") from None


def _model_of(choice: ModelChoice, catalog: DeviceCatalog) -> tuple[str, Architecture]:
    if choice.model_id is not None:
        row, arch = catalog_model(catalog, choice.model_id)
        return row.id, arch
    assert choice.model is not None  # the contract takes exactly one of model_id and model
    try:
        arch = architecture_of(choice.model)
    except CostModelError as exc:
        raise unprocessable(exc, "body.model") from None
    return f"inline {arch.family}", arch


def core_dtypes(request, arch: Architecture | None = None) -> layers.ModelDTypes:
    """The request's dtypes; when it names none, the checkpoint's own formats (`arch.quantization`) if it has any."""
    if arch is not None and arch.quantization is not None and "dtypes" not in request.model_fields_set:
        return checkpoint_dtypes(arch.quantization)
    d = request.dtypes
    return layers.ModelDTypes(d.weights, d.activations, d.kv_cache, weight_group_size(d.weights, d.weight_group_size),
                              d.weight_scale_bytes, d.lm_head, d.experts,
                              weight_group_size(d.experts, d.experts_group_size) if d.experts else None,
                              d.weight_scale_bytes)


def positions_notes(arch: Architecture) -> list[str]:
    """How the request extended the model's positions (its rope_scaling), where it did."""
    return [arch.positions_extended] if arch.positions_extended else []


def dtypes_note(request, arch: Architecture) -> str:
    """Where the answer's dtypes came from."""
    d = core_dtypes(request, arch)
    kinds = f"weights {d.weights}" + (f", routed experts {d.experts}" if d.experts else "") + \
        f", activations {d.activations}, kv cache {d.kv_cache}"
    if arch.quantization is not None and "dtypes" not in request.model_fields_set:
        return f"dtypes: {kinds}, the checkpoint's own ({arch.quantization.source}); a request's dtypes override"
    note = f"dtypes: {kinds}" + (" (as requested)" if "dtypes" in request.model_fields_set else
                                 " (the default: the config states no quantisation)")
    if bytes_per_element(d.weights) < bytes_per_element(d.activations):
        note += (f"; weight-only quantisation: the matmuls compute at the {d.activations} peak (a W8A8 or W4A8 "
                 "deployment computes at its activations' peak: give activations, or a scheme such as w8a8-fp8)")
    return note


# Within a batch of analyses or a sweep, one evaluator per (device, roofs, what-ifs) for the requests with
# what-ifs: its looked-up roofs and its evaluated rows serve every item that shares them.
_batch_evaluators: ContextVar[dict | None] = ContextVar("batch_evaluators", default=None)


@contextmanager
def shared_evaluators(evaluators: dict | None = None) -> Iterator[None]:
    """Within the block, analyses share the evaluators in `evaluators` (a new set when none is given)."""
    token = _batch_evaluators.set({} if evaluators is None else evaluators)
    try:
        yield
    finally:
        _batch_evaluators.reset(token)


# One evaluator per catalog device, measured roofs and roof mode serves every request without what-ifs, in this
# process: its roofs are looked up once and an identical row (the same shape on the same device, from any
# request) is evaluated once. Few: a device's measured roofs are replaced on each submission, and each evaluator
# keeps up to 2,048 rows (about a megabyte).
_plain_evaluator = ByIdentity(Evaluator, objects=2, limit=32)


def evaluator_for(request: ModelAnalysisRequest, catalog: DeviceCatalog) -> Evaluator:
    """Places a request's rows on its device's roofs, with the request's what-ifs."""
    device = catalog.get(request.device_id)
    return evaluator_on(device, catalog.measured(device.id), request.roofs, request.sustained_clock_hz,
                        request.collective_latency_s)


def evaluator_on(device, measured, roofs: str, sustained_clock_hz: float | None = None,
                 collective_latency_s: float | None = None) -> Evaluator:
    """Places rows on a device's roofs (measured ones per `roofs`), with what-ifs."""
    if sustained_clock_hz is None and collective_latency_s is None:
        return _plain_evaluator(device, measured, RoofMode(roofs))
    key = (device.id, roofs, sustained_clock_hz, collective_latency_s)
    shared = _batch_evaluators.get()
    if shared is not None and key in shared:
        return shared[key]
    evaluator = Evaluator(device, measured, RoofMode(roofs), sustained_clock_hz, collective_latency_s)
    if shared is not None:
        shared[key] = evaluator
    return evaluator


def run_model_analysis(request: ModelAnalysisRequest, catalog: DeviceCatalog, evaluator: Evaluator | None = None,
                       explain: bool = True, model: tuple[str, Architecture] | None = None):
    """(model name, architecture, step result, prefill result or None) for a validated request; `model`,
    when the caller already resolved the request's model (a sweep's points share one)."""
    name, arch = model or resolve_model(request, catalog)
    try:
        check_positions(arch, *peak_context(request))
    except CostModelError as exc:
        raise unprocessable(exc, "body") from None
    evaluator = evaluator or evaluator_for(request, catalog)
    step = partial(analyze_model, arch, evaluator, batch=request.batch_size, seq_len=request.seq_len,
                   dtypes=core_dtypes(request, arch), tensor_parallel=request.tensor_parallel,
                   attention_implementation=request.attention_implementation)
    try:
        result = step(phase=request.phase, output_len=request.output_len, explain=explain)
        prefill = None
        if request.output_len and request.phase == "decode":
            prefill = step(phase="prefill", explain=False)
    except CostModelError as exc:
        raise unprocessable(exc, "body") from None
    return name, arch, result, prefill


def serving_metrics(request: ModelAnalysisRequest, result, prefill) -> dict:
    time_s = result.totals.time_s
    is_prefill = request.phase == "prefill"
    tokens = request.batch_size * (request.seq_len if is_prefill else 1)
    e2e = None
    if request.output_len:
        e2e = (time_s if is_prefill else prefill.totals.time_s) + (result.e2e_decode_time_s or 0.0)
    return {"ttft_s": time_s if is_prefill else None, "tpot_s": None if is_prefill else time_s,
            "tokens_per_s": tokens / time_s, "e2e_latency_s": e2e}


# A serving engine's share of the memory when a request names none: vLLM's gpu_memory_utilization default.
SERVING_UTILIZATION = 0.9


def usable_memory(device, options, default_utilization: float = 1.0) -> tuple[float, str]:
    """(usable bytes per device, how they were obtained) for a request's MemoryOptions."""
    if options.memory_capacity_bytes:
        return options.memory_capacity_bytes, f"usable memory: {options.memory_capacity_bytes:.6g} bytes (explicit)"
    utilization = options.memory_utilization or default_utilization
    if device.usable_memory_bytes:
        return (device.usable_memory_bytes * utilization,
                f"usable memory: {device.id}'s {device.usable_memory_bytes:.6g} bytes the runtime exposes (of "
                f"{device.memory_capacity_bytes:.6g} as built) x utilisation {utilization:g}")
    return (device.memory_capacity_bytes * utilization,
            f"usable memory: {device.memory_capacity_bytes:.6g} bytes as built x utilisation {utilization:g} ({device.id} "
            "has no published figure for what the runtime exposes, which is usually a little less)")


def cache_len(phase: str, seq_len: int, output_len: int | None) -> int:
    """Tokens a sequence's cache holds at its largest: the prompt and every token fed back (all but the last
    of output_len), or the one token a decode step adds."""
    if output_len:
        return seq_len + output_len - 1
    return seq_len + (1 if phase == "decode" else 0)


def peak_context(request: ModelAnalysisRequest) -> tuple[int, str]:
    """The longest cache a sequence of this request holds, and the field that sets it."""
    return (cache_len(request.phase, request.seq_len, request.output_len),
            "output_len" if request.output_len else "seq_len")


def memory_budget_for(request, arch: Architecture, device) -> tuple[MemoryBudget, str]:
    """The device's budget for a request's model, dtypes, parallelism and MemoryOptions, and its basis."""
    return memory_budget_of(arch, device, core_dtypes(request, arch), request, request.tensor_parallel)


def memory_budget_of(arch: Architecture, device, dtypes: layers.ModelDTypes, options,
                     tensor_parallel: int) -> tuple[MemoryBudget, str]:
    """The device's budget for a model in `dtypes` split over `tensor_parallel`, under a request's MemoryOptions."""
    return _budget(arch, device, dtypes, options.memory_capacity_bytes, options.memory_utilization,
                   options.workspace_bytes, tensor_parallel, options.block_size, options.profile_tokens)


@by_identity(objects=2)
def _budget(arch: Architecture, device, dtypes: layers.ModelDTypes, memory_capacity_bytes: float | None,
            memory_utilization: float | None, workspace_bytes: float, tensor_parallel: int,
            block_size: int, profile_tokens: int) -> tuple[MemoryBudget, str]:
    # Remembered: the steps of a batch or of several requests ask the same few (the weights' bytes walk the model).
    usable, basis = usable_memory(device, MemoryChoice(memory_capacity_bytes, memory_utilization), SERVING_UTILIZATION)
    return memory_budget(arch, dtypes, capacity_bytes=device.memory_capacity_bytes, usable_bytes=usable,
                         workspace_bytes=workspace_bytes, tensor_parallel=tensor_parallel, block_size=block_size,
                         profile_tokens=profile_tokens), basis


class MemoryChoice(NamedTuple):
    """The MemoryOptions usable_memory reads."""

    memory_capacity_bytes: float | None
    memory_utilization: float | None


def step_memory_at(budget: MemoryBudget, request: ModelAnalysisRequest, **changes) -> StepMemory:
    """The request's step (with `changes`, e.g. another batch_size or seq_len) against the budget."""
    batch = changes.get("batch_size", request.batch_size)
    seq_len = changes.get("seq_len", request.seq_len)
    phase = changes.get("phase", request.phase)
    return budget.at(batch=batch, context=cache_len(phase, seq_len, request.output_len),
                     step_tokens=batch * (seq_len if phase == "prefill" else 1))


def step_memory_for(request: ModelAnalysisRequest, arch: Architecture, device) -> tuple[StepMemory, int, str]:
    budget, basis = memory_budget_for(request, arch, device)
    return step_memory_at(budget, request), peak_context(request)[0], basis


def what_would_fit(request: ModelAnalysisRequest, arch: Architecture, device) -> str:
    """For a step that does not fit: the smallest tensor-parallel size within the device's node (8 where it names
    none) at which it does, fp8 weights at the request's own size, or the largest batch that fits."""
    node = device.node_size or 8
    dtypes = core_dtypes(request, arch)
    options = []
    for t in (2**i for i in range(1, 11)):
        if t <= request.tensor_parallel or t > node:
            continue
        if arch.heads % t == 0 and step_memory_at(memory_budget_of(arch, device, dtypes, request, t)[0], request).fits:
            options.append(f"tensor_parallel {t}")
            break
    if bytes_per_element(dtypes.weights) > 1:
        fp8 = dtypes._replace(weights="fp8", weight_group_size=None, experts=None, experts_group_size=None)
        if step_memory_at(memory_budget_of(arch, device, fp8, request, request.tensor_parallel)[0], request).fits:
            options.append(f"fp8 weights at tensor_parallel {request.tensor_parallel}")
    budget = memory_budget_for(request, arch, device)[0]
    batch = largest_fitting(lambda b: step_memory_at(budget, request, batch_size=b).fits, request.batch_size - 1)
    if batch:
        options.append(f"batch_size {batch} as it is")
    return ("would fit: " + " or ".join(options)) if options else (
        f"fits neither at any tensor_parallel up to {node} (the node) nor with fp8 weights, nor at batch_size 1")


class Unset:
    """Not given: the expectation is worked out from the step's own rows."""


UNSET = Unset()


def _row_fields(row) -> dict:
    """A RowOut's fields from an evaluated row."""
    return dict(zip(ROW_FIELDS, row))


def model_analysis_fields(request: ModelAnalysisRequest, catalog: DeviceCatalog, analysed: tuple | None = None,
                          expected: dict | None | Unset = UNSET) -> dict:
    """The ModelAnalysis fields of a validated request, in the model's order (see operator_analyses); `rows`
    holds the evaluated rows themselves, for the caller to write as RowOut fields or as their JSON. `analysed`:
    run_model_analysis's answer, where the caller has it already (a batch's steps costed together); `expected`: the
    step's expectation, where the caller worked it out with others (`analysed` then leaves its rows out)."""
    name, arch, result, prefill = analysed or run_model_analysis(request, catalog)
    if request.calibration == "none":
        expected = None
    elif isinstance(expected, Unset):
        expected = step_expected(result.rows, device_id=request.device_id,
                                 measured=catalog.measured(request.device_id), engine=request.engine)
    memory, context, basis = step_memory_for(request, arch, catalog.get(request.device_id))
    memory_notes = [
        f"memory: weights + batch x KV({context} tokens, in blocks of {request.block_size}) + activations + workspace "
        f"= {memory.required_bytes:.4g} bytes per device against {memory.usable_bytes:.4g} usable: "
        + ("fits" if memory.fits else f"DOES NOT FIT, short by {memory.shortfall_bytes:.4g} bytes (answered as a what-if; "
                                      f"{what_would_fit(request, arch, catalog.get(request.device_id))})"),
        basis,
        "activations: an estimate (residual stream and one layer's widest buffer for the step's tokens, fp32 logits), "
        "not a profile",
        dtypes_note(request, arch),
    ]
    achieved = None
    if request.measured_time_s is not None:
        flops_per_s = result.totals.flops / request.measured_time_s
        bandwidth = result.totals.bytes / request.measured_time_s
        nominal_hbm = catalog.get(request.device_id).memory_level("hbm")
        achieved = {"measured_time_s": request.measured_time_s, "flops_per_s": flops_per_s,
                    "mfu": flops_per_s / result.peak_flops_per_s if result.peak_flops_per_s else None,
                    "roof_fraction": result.totals.time_s / request.measured_time_s,
                    "bandwidth_bytes_per_s": bandwidth,
                    "mbu": bandwidth / nominal_hbm.bandwidth_bytes_per_s if nominal_hbm else None}
    params = model_params(arch)
    what_if = []
    if request.speedups:
        pairs = [(s.target, s.factor) for s in request.speedups]
        try:
            what_if = [amdahl(result.rows, [pair]) for pair in pairs]
            if len(pairs) > 1:
                what_if.append(amdahl(result.rows, pairs, label="all of the above"))
        except CostModelError as exc:
            raise unprocessable(exc, "body") from None
    return {
        "device_id": request.device_id, "model": name, "phase": request.phase, "batch_size": request.batch_size,
        "seq_len": request.seq_len, "tensor_parallel": request.tensor_parallel,
        "params": {"total": params.total, "active": params.active,
                   "active_with_embedding": params.active_with_embedding},
        "fits": memory.fits, "memory": plain_fields(StepMemoryOut, memory, context_len=context),
        "achieved": achieved, "rows": result.rows,
        "totals": plain_fields(ModelTotals, result.totals), "mfu": result.mfu, "expected": expected,
        **serving_metrics(request, result, prefill),
        "compute_roof_source": result.compute_roof_source, "memory_roof_source": result.memory_roof_source,
        "what_if": [plain_fields(WhatIf, w) for w in what_if],
        "assumptions": memory_notes + list(result.assumptions) + (
            [f"e2e: prefill of {request.seq_len} tokens (the first output token), then {request.output_len - 1} "
             f"decode steps over contexts {request.seq_len} to {request.seq_len + request.output_len - 2} cached tokens, "
             "summed in closed form"] if request.output_len else []),
    }


def analyze_model_request(request: ModelAnalysisRequest, catalog: DeviceCatalog) -> ModelAnalysis:
    fields = model_analysis_fields(request, catalog)
    fields["rows"] = [_row_fields(row) for row in fields["rows"]]
    return ModelAnalysis.model_validate(fields)


def model_answer_json(request: ModelAnalysisRequest, catalog: DeviceCatalog, analysed: tuple | None = None,
                      rows_json: bytes | None = None, expected: dict | None | Unset = UNSET) -> bytes:
    """analyze_model_request's answer as its JSON, without building the model; `rows_json` and `expected`: its rows
    already written and its expectation (a batch's steps costed together), where `analysed` leaves its rows out."""
    fields = model_analysis_fields(request, catalog, analysed, expected)
    if rows_json is not None:
        return json_bytes_around(fields, rows=rows_json)
    fields["rows"] = [_row_fields(row) for row in fields["rows"]]
    return json_bytes(fields)


def kv_capacity_request(request: KvCapacityRequest, catalog: DeviceCatalog) -> KvCapacity:
    device = catalog.get(request.device_id)
    name, arch = resolve_model(request, catalog)
    usable, basis = usable_memory(device, request, SERVING_UTILIZATION)
    dtypes = core_dtypes(request, arch)
    try:
        result = kv_capacity(arch, dtypes, context_len=request.context_len, capacity_bytes=usable,
                             workspace_bytes=request.workspace_bytes, tensor_parallel=request.tensor_parallel,
                             block_size=request.block_size, profile_tokens=request.profile_tokens)
        mix = None
        if request.context_mix:
            mix = mix_capacity(arch, dtypes, [(c.context_len, c.share) for c in request.context_mix],
                               result.available_kv_bytes, request.tensor_parallel, request.block_size)
    except CostModelError as exc:
        raise unprocessable(exc, "body") from None
    notes = [
        "capacity: weights + the profiling step's activations + requests x kv(context) + workspace <= usable memory, "
        "per device; the request count is the floor, never rounded up",
        f"activations held back: the estimated peak of a {request.profile_tokens:,}-token profiling step (vLLM reserves "
        "its measured one before sizing the cache); an estimate, not a profile, so the count is an upper bound",
        basis,
        f"kv blocks: each request's cache rounds up to whole blocks of {request.block_size} tokens",
        dtypes_note(request, arch),
        "weights: every parameter (all experts) in the weights' type, the embedding table in the activations' type",
        "kv per token per layer: " + ("the MLA latent (kv_lora_rank + rope dims), replicated on every device"
                                      if arch.latent else "2 x kv_heads x head_dim x bytes (K and V)"),
    ]
    if request.tensor_parallel > 1:
        notes.append(f"tensor parallel {request.tensor_parallel}: weights and K/V heads split across devices "
                     "(K/V heads replicated when there are fewer heads than devices)")
    if any(g.sliding_window for g in arch.groups):
        notes.append("sliding-window layers hold at most their window of tokens")
    if any(g.chunk for g in arch.groups):
        notes.append("chunked-attention layers hold at most one chunk of tokens")
    if arch.recurrent is not None:
        mixer = arch.recurrent
        notes.append(f"recurrent layers ({mixer.rule}) hold a fixed state a request: {mixer.heads} heads x "
                     f"{mixer.key_dim} x {mixer.value_dim} in {mixer.state_dtype or 'the activations type'}, and "
                     f"the convolution's last {mixer.conv_kernel - 1} inputs of {mixer.conv_channels} channels")
    if arch.max_positions is not None:
        notes.append(arch.positions_extended or f"model limit: max_position_embeddings {arch.max_positions:,} tokens")
    return KvCapacity(device_id=device.id, model=name, context_len=request.context_len,
                      tensor_parallel=request.tensor_parallel, capacity_bytes=device.memory_capacity_bytes,
                      mix=KvMix(**vars(mix)) if mix else None, **vars(result), assumptions=notes)


def model_summary(row: ModelConfig, arch: Architecture) -> ModelSummary:
    params = model_params(arch)
    return ModelSummary(id=row.id, name=row.name, family=row.family, params_total=params.total,
                        params_active=params.active, origin=row.origin)


def model_public(row: ModelConfig, arch: Architecture) -> ModelPublic:
    params = model_params(arch)
    bf16 = layers.ModelDTypes()
    return ModelPublic(id=row.id, name=row.name, family=row.family, params_total=params.total,
                       params_active=params.active, origin=row.origin, source=row.source, config=row.config,
                       layers=arch.layer_kinds(),
                       kv_bytes_per_token_bf16=kv_bytes_per_token(arch, bf16),
                       created_at=row.created_at)
