"""Model descriptions to architectures, and model analyses to their HTTP answers."""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter, ValidationError

from schemas.models import (
    GenericArchitecture, KvCapacity, KvCapacityRequest, ModelAnalysis, ModelAnalysisRequest, ModelChoice, ModelPublic,
    ModelTotals, ParamCounts, RowOut, WhatIf,
)
from service.persistence.catalog import DeviceCatalog
from service.core.errors import CostModelError
from service.core.roofs import RoofMode
from service.core.transformer import layers
from service.core.transformer.analysis import Evaluator, analyze_model
from service.core.transformer.architecture import Architecture, ConfigError, from_generic, from_hf_config
from service.core.transformer.capacity import kv_bytes_per_token_per_layer, kv_capacity
from service.core.transformer.params import model_params
from service.core.whatif import amdahl
from service.runtime.errors import Unprocessable, cost_model_error, invalid_nested
from service.persistence.tables import ModelConfig

ROWS = TypeAdapter(list[RowOut])


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
    if choice.model_id is not None:
        row, arch = catalog_model(catalog, choice.model_id)
        return row.id, arch
    try:
        arch = architecture_of(choice.model)
    except CostModelError as exc:
        raise unprocessable(exc, "body.model") from None
    return f"inline {arch.family}", arch


def core_dtypes(request) -> layers.ModelDTypes:
    d = request.dtypes
    group = d.weight_group_size
    if group is None and d.weights in ("int4", "fp4"):
        group = 128  # sub-byte weights are group-quantised; 128 is the common group size
    return layers.ModelDTypes(d.weights, d.activations, d.kv_cache, group, d.weight_scale_bytes)


def evaluator_for(request: ModelAnalysisRequest, catalog: DeviceCatalog) -> Evaluator:
    """Places a request's rows on its device's roofs, with the request's what-ifs."""
    device = catalog.get(request.device_id)
    return Evaluator(device, catalog.measured(device.id), RoofMode(request.roofs), request.sustained_clock_hz,
                     request.collective_latency_s)


def run_model_analysis(request: ModelAnalysisRequest, catalog: DeviceCatalog, evaluator: Evaluator | None = None,
                       explain: bool = True, model: tuple[str, Architecture] | None = None):
    """(model name, architecture, step result, prefill result or None) for a validated request; `model`,
    when the caller already resolved the request's model (a sweep's points share one)."""
    name, arch = model or resolve_model(request, catalog)
    evaluator = evaluator or evaluator_for(request, catalog)
    options = dict(batch=request.batch_size, seq_len=request.seq_len, dtypes=core_dtypes(request),
                   tensor_parallel=request.tensor_parallel, attention_implementation=request.attention_implementation)
    try:
        result = analyze_model(arch, evaluator, phase=request.phase, output_len=request.output_len, explain=explain,
                               **options)
        prefill = None
        if request.output_len and request.phase == "decode":
            prefill = analyze_model(arch, evaluator, phase="prefill", explain=False, **options)
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


def analyze_model_request(request: ModelAnalysisRequest, catalog: DeviceCatalog) -> ModelAnalysis:
    name, arch, result, prefill = run_model_analysis(request, catalog)
    totals = result.totals
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
    return ModelAnalysis(
        what_if=[WhatIf(**vars(w)) for w in what_if],
        device_id=request.device_id, model=name, phase=request.phase, batch_size=request.batch_size, seq_len=request.seq_len,
        tensor_parallel=request.tensor_parallel, params=ParamCounts(total=params.total, active=params.active),
        # From dicts by pydantic-core: faster than model_construct per row (the rows' extra fields are ignored).
        rows=ROWS.validate_python([r._asdict() for r in result.rows]),
        totals=ModelTotals(**vars(totals)),
        mfu=result.mfu,
        **serving_metrics(request, result, prefill),
        compute_roof_source=result.compute_roof_source, memory_roof_source=result.memory_roof_source,
        assumptions=list(result.assumptions) + (
            [f"e2e: prefill of {request.seq_len} tokens (the first output token), then {request.output_len - 1} "
             f"decode steps over contexts {request.seq_len} to {request.seq_len + request.output_len - 2} cached tokens, "
             "summed in closed form"] if request.output_len else []),
    )


def kv_capacity_request(request: KvCapacityRequest, catalog: DeviceCatalog) -> KvCapacity:
    device = catalog.get(request.device_id)
    name, arch = resolve_model(request, catalog)
    capacity = request.memory_capacity_bytes or device.memory_capacity_bytes
    utilization = 1.0 if request.memory_capacity_bytes else (request.memory_utilization or 1.0)
    try:
        result = kv_capacity(arch, core_dtypes(request), context_len=request.context_len, capacity_bytes=capacity,
                             memory_utilization=utilization, workspace_bytes=request.workspace_bytes,
                             tensor_parallel=request.tensor_parallel)
    except CostModelError as exc:
        raise unprocessable(exc, "body") from None
    notes = [
        "capacity: weights + requests x kv(context) + workspace <= usable memory, per device; the request count "
        "is the floor, never rounded up",
        f"usable memory: {capacity:.6g} bytes x utilisation {utilization:g}"
        + (" (explicit memory_capacity_bytes)" if request.memory_capacity_bytes else f" ({device.id} as built)"),
        "weights: every parameter (all experts) in the weights' type, the embedding table in the activations' type",
        "kv per token per layer: " + ("the MLA latent (kv_lora_rank + rope dims), replicated on every device"
                                      if arch.latent else "2 x kv_heads x head_dim x bytes (K and V)"),
    ]
    if request.tensor_parallel > 1:
        notes.append(f"tensor parallel {request.tensor_parallel}: weights and K/V heads split across devices "
                     "(K/V heads replicated when there are fewer heads than devices)")
    if any(g.sliding_window for g in arch.groups):
        notes.append("sliding-window layers hold at most their window of tokens")
    return KvCapacity(device_id=device.id, model=name, context_len=request.context_len,
                      tensor_parallel=request.tensor_parallel, **vars(result), assumptions=notes)


def model_public(row: ModelConfig, arch: Architecture) -> ModelPublic:
    params = model_params(arch)
    bf16 = layers.ModelDTypes()
    return ModelPublic(id=row.id, name=row.name, family=row.family, params_total=params.total,
                       params_active=params.active, origin=row.origin, source=row.source, config=row.config,
                       layers=arch.layer_kinds(), kv_bytes_per_token_bf16=kv_bytes_per_token_per_layer(arch, bf16) * arch.layers,
                       created_at=row.created_at)
