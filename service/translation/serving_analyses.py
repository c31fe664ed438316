"""POST /v1/analyze/serving: the contract mapped into the core's deployment analysis, and its answer out."""

from __future__ import annotations

from typing import NamedTuple

from schemas.models import StepMemoryOut
from schemas.serving import ServingAnalysis, ServingAnalysisRequest, ServingPool
from service.core.expectations import serving_runs
from service.core.errors import CostModelError
from service.core.planning import deployment
from service.core.expectations.serving_runs import ServingCalibration
from service.core.training.collectives import Link, Topology
from service.core.transformer.analysis import first_matmul, step_rows
from service.core.transformer.architecture import Architecture
from service.core.transformer.capacity import check_positions
from service.core.transformer.layers import Step
from service.persistence.catalog import DeviceCatalog
from service.translation.model_analyses import (
    SERVING_UTILIZATION,
    catalog_model,
    core_dtypes,
    dtypes_note,
    evaluator_on,
    resolve_model,
    unprocessable,
    usable_memory,
)
from service.translation.plain_fields import plain_fields
from service.translation.training_analyses import topology_for


class LinkOptions(NamedTuple):
    """What topology_for reads of a request: a serving request names only the roofs and the collective latency."""

    roofs: str
    collective_latency_s: float | None
    inter_node_latency_s: float | None = None
    node_size: int | None = None
    intra_node_bandwidth_bytes_per_s: float | None = None
    inter_node_bandwidth_bytes_per_s: float | None = None


def _pool(pool: ServingPool) -> deployment.Pool:
    return deployment.Pool(pool.workers, pool.tensor_parallel, pool.expert_parallel, pool.attention_data_parallel,
                           pool.max_batch_per_group)


def _kv_link(topology: Topology, devices: int) -> Link | None:
    """The link between the pools: the scale-up one when both fit in one domain, else the scale-out one."""
    if devices <= topology.node_size and topology.intra_node is not None:
        return topology.intra_node
    return topology.inter_node or topology.intra_node


def speculative_of(request, catalog: DeviceCatalog) -> deployment.Speculative | None:
    """A request's speculative decoding (a serving analysis's or a plan's), its draft model resolved."""
    spec = request.speculative
    if spec is None:
        return None
    draft = catalog_model(catalog, spec.draft_model_id)[1] if spec.draft_model_id else None
    return deployment.Speculative(spec.method, spec.draft_tokens, spec.acceptance_length, draft)


def pool_budgets(request, arch, dtypes, device) -> tuple[deployment.BudgetFor, str]:
    """(each pool's memory budget on the device under a request's MemoryOptions, how usable memory was obtained)."""
    usable, basis = usable_memory(device, request, SERVING_UTILIZATION)

    def budget_for(pool: deployment.Pool):
        return deployment.pool_budget(arch, dtypes, pool, capacity_bytes=device.memory_capacity_bytes, usable_bytes=usable,
                                      workspace_bytes=request.workspace_bytes, block_size=request.block_size,
                                      profile_tokens=request.profile_tokens)

    return budget_for, basis


def analyze_serving_request(request: ServingAnalysisRequest, catalog: DeviceCatalog,
                            resolved: tuple[str, Architecture] | None = None) -> ServingAnalysis:
    """`resolved`: the request's (model name, architecture), where the caller has resolved them already."""
    name, arch = resolved or resolve_model(request, catalog)
    device = catalog.get(request.device_id)
    measured = catalog.measured(device.id)
    dtypes = core_dtypes(request, arch)
    decode_pool, prefill_pool = request.pools()
    decode = _pool(decode_pool)
    prefill = _pool(prefill_pool) if prefill_pool is not None else None
    speculative = speculative_of(request, catalog)
    evaluator = evaluator_on(device, measured, request.roofs, request.sustained_clock_hz, request.collective_latency_s)
    topology = topology_for(device, measured, LinkOptions(request.roofs, request.collective_latency_s))
    budget_for, basis = pool_budgets(request, arch, dtypes, device)

    try:
        longest = request.input_len + request.output_len - 1 + (speculative.draft_tokens if speculative else 0)
        check_positions(arch, longest, "output_len")
        deployment.check_pool(arch, decode, "disaggregated.decode." if prefill else "")
        if prefill is not None:
            deployment.check_pool(arch, prefill, "disaggregated.prefill.")
        bound = deployment.analyze_deployment(
            arch, evaluator, topology, dtypes,
            workload=deployment.Workload(request.input_len, request.output_len, request.concurrency),
            decode=decode, prefill=prefill, speculative=speculative, budget_for=budget_for,
            block_size=request.block_size,
            kv_link=_kv_link(topology, decode.devices + prefill.devices) if prefill else None)
    except CostModelError as exc:
        raise unprocessable(exc, "body") from None
    pools = [{**plain_fields_of_pool(state), "memory": plain_fields(StepMemoryOut, state.memory, context_len=state.context_len)}
             for state in bound.pools]
    fits = all(state.memory.fits for state in bound.pools)
    bound_fields = {**vars(bound), "pools": pools, "fits": fits}
    matmul = first_matmul(row for rows, _, _ in step_rows(arch, Step(1, 1, 2, decode.attention_ranks), dtypes)
                          for row in rows)
    flops_per_s, _, compute_source = evaluator.compute_roof(matmul) if matmul else (0.0, None, "nominal")
    notes = [dtypes_note(request, arch), basis, *_layout_notes(request, bound, topology),
             f"compute roof of the matmuls: {compute_source} {matmul.compute_dtype if matmul else ''} tensor, "
             f"{flops_per_s:.4g} FLOP/s; memory roof: {evaluator.hbm.source.value} hbm bandwidth, "
             f"{evaluator.hbm.bytes_per_s:.4g} bytes/s", *SCHEDULING_NOTES]
    if not fits:
        notes.insert(0, "DOES NOT FIT: a pool's devices cannot hold their weights, caches and activations "
                        "(see bound.pools[].memory); the figures are a what-if")
    calibration = _calibration(request, catalog, name, dtypes.weights)
    expected = None
    if calibration is not None:
        expectation = serving_runs.expect(calibration, bound, input_len=request.input_len,
                                                 output_len=request.output_len, concurrency=request.concurrency)
        expected = {**vars(expectation), "calibration": {**{name: getattr(calibration, name) for name in CALIBRATION_FIELDS},
                                                          "id": calibration.address,
                                                          "extrapolated": expectation.extrapolated}}
    notes.append(_expected_note(request, calibration))
    return ServingAnalysis(
        model=name, device_id=device.id, engine=request.engine, bound=bound_fields, expected=expected,
        compute_roof_source=compute_source, memory_roof_source=evaluator.hbm.source.value, assumptions=notes,
    )


SCHEDULING_NOTES = (
    "scheduling: continuous batching at the concurrency, in steady state, spread evenly over the attention groups "
    "(a group's batch: concurrency / groups, rounded down); every time is a lower bound and every rate an upper bound",
    "ttft: one request's prefill alone (no queueing, no batching with other prompts) [+ its KV cache to the decode pool]",
    "tpot: one decode step at the mean context (input + output / 2) of a group's batch; with speculative decoding, "
    "(the verification of draft_tokens + 1 tokens + the draft's steps) / acceptance_length",
    "requests_per_s: the smallest of the pools' work rates (aggregated: each group's decode steps and its batch's "
    "prefills, batched, share the devices) and Little's law (concurrency / e2e latency)",
    "time of a step: the sum of each operator's lower bound (kernels in sequence, each at its own roof); each "
    "collective at the link its devices span (latency + bytes / bandwidth)",
)


def _layout_notes(request: ServingAnalysisRequest, bound, topology: Topology) -> list[str]:
    notes = []
    for state in bound.pools:
        pool = state.pool
        experts = ("experts whole over its devices, a dispatch and a combine all-to-all per MoE layer"
                   if pool.expert_parallel > 1 else "experts split by width over its devices")
        notes.append(f"{state.role} pool: {pool.workers} worker(s) of {pool.tensor_parallel} device(s); "
                     f"{pool.attention_data_parallel} attention group(s) of {pool.attention_ranks} per worker, "
                     f"{state.batch_per_group} request(s) each; {experts}")
    notes.append(f"links: {topology.node_size} device(s) share the scale-up link; a group spanning more, or not "
                 "dividing it, crosses the scale-out link")
    spec = request.speculative
    if spec is not None:
        notes.append(f"speculative: {spec.method}, {spec.draft_tokens} draft token(s), acceptance length "
                     f"{spec.acceptance_length:g} (given); " + ("the draft model's decode steps" if spec.method == "draft"
                                                                  else "each draft step one decoder layer like the model's "
                                                                       "last, with the embedding and the LM head"))
    return notes


CALIBRATION_FIELDS = ("engine", "fitted_on", "checked_by", "checked_on", "tpot_median_error", "tpot_p90_error",
                      "ttft_median_error", "basis")


def _calibration(request: ServingAnalysisRequest, catalog: DeviceCatalog, model: str,
                 precision: str) -> ServingCalibration | None:
    """The calibration of the device, engine, model, weights' type and speculative method (fitted to runs submitted,
    else shipped), if any and asked for."""
    if request.calibration == "none" or request.engine is None:
        return None
    return catalog.serving_calibration(request.device_id, request.engine, model, precision, speculative_method(request))


def speculative_method(request: ServingAnalysisRequest) -> str:
    return request.speculative.method if request.speculative else "none"


def _expected_note(request: ServingAnalysisRequest, calibration: ServingCalibration | None) -> str:
    if request.calibration == "none":
        return "expected: not asked for (calibration 'none')"
    if calibration is not None:
        return f"expected: {calibration.basis}; the bound is unchanged by it"
    if request.engine is None:
        return "expected: null, the request names no engine (calibrations are fitted per engine)"
    return (f"expected: null, no serving calibration exists for {request.device_id} with engine {request.engine} in "
            "these weights and speculative method (POST /v1/serving-runs calibrates it)")


def plain_fields_of_pool(state: deployment.PoolState) -> dict:
    pool = state.pool
    return {"role": state.role, "workers": pool.workers, "tensor_parallel": pool.tensor_parallel,
            "expert_parallel": pool.expert_parallel, "attention_data_parallel": pool.attention_data_parallel,
            "devices": pool.devices, "batch_per_group": state.batch_per_group, "context_len": state.context_len}
