"""POST /v1/analyze/serving: the contract mapped into the core's deployment analysis, and its answer out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import NamedTuple

from schemas.models import StepMemoryOut
from schemas.serving import ServingAnalysis, ServingAnalysisRequest, ServingPool
from service.core.errors import CostModelError
from service.core.expectations import serving_runs
from service.core.expectations.engines import EngineCalibration, deployment_line, layout_signature
from service.core.expectations.fused_moe import moe_family
from service.core.expectations.kernel_steps import KernelTables, weight_only_experts
from service.core.expectations.serving_runs import ServingCalibration
from service.core.hardware import DeviceSpec
from service.core.planning import deployment
from service.core.simulation.carried_over import CarriedSchedulingCalibration
from service.core.simulation.engine_loop import MAX_EVENTS, Run, estimated_events, simulate
from service.core.simulation.fit import SchedulingCalibration
from service.core.training.collectives import Link, Topology, in_network_reduction_note
from service.core.transformer.analysis import Evaluator, first_matmul, step_rows
from service.core.transformer.architecture import Architecture
from service.core.transformer.capacity import check_positions
from service.core.transformer.layers import ModelDTypes, Step
from service.persistence.catalog import (
    DeviceCatalog,
    carried_scheduling_calibrations,
    engine_calibrations,
)
from service.translation.kernels.tables import kernel_evaluator, kernel_tables
from service.translation.models.analyses import (
    SERVING_UTILIZATION,
    catalog_model,
    core_dtypes,
    dtypes_note,
    evaluator_on,
    positions_notes,
    resolve_model,
    unprocessable,
    usable_memory,
)
from service.translation.plain_fields import plain_fields
from service.translation.serving.simulation import (
    SimulationTooLarge,
    busiest_experts_note,
    launch_of,
    scheduler_of,
    simulated_expectation,
    simulation_of,
    traffic_of,
)
from service.translation.training.analyses import topology_for


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


class ServingSetup(NamedTuple):
    """A request resolved: its model, device and layout, and its deployment analysed on any step evaluator."""

    name: str
    arch: Architecture
    device: DeviceSpec
    dtypes: ModelDTypes
    decode: deployment.Pool
    prefill: deployment.Pool | None  # None: aggregated
    evaluator: Evaluator  # the bound's
    topology: Topology
    memory_basis: str
    deployment_on: Callable[[Evaluator], deployment.ServingBound]


def serving_setup(request: ServingAnalysisRequest, catalog: DeviceCatalog,
                  resolved: tuple[str, Architecture] | None = None) -> ServingSetup:
    """The request checked (a 422 naming the field otherwise) and resolved."""
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

    def deployment_on(step_evaluator: Evaluator) -> deployment.ServingBound:
        try:
            return deployment.analyze_deployment(
                arch, step_evaluator, topology, dtypes,
                workload=deployment.Workload(request.input_len, request.output_len, request.concurrency),
                decode=decode, prefill=prefill, speculative=speculative, budget_for=budget_for,
                block_size=request.block_size,
                kv_link=_kv_link(topology, decode.devices + prefill.devices) if prefill else None)
        except CostModelError as exc:
            raise unprocessable(exc, "body") from None

    try:
        longest = request.input_len + request.output_len - 1 + (speculative.draft_tokens if speculative else 0)
        check_positions(arch, longest, "output_len")
        deployment.check_pool(arch, decode, "disaggregated.decode." if prefill else "")
        if prefill is not None:
            deployment.check_pool(arch, prefill, "disaggregated.prefill.")
    except CostModelError as exc:
        raise unprocessable(exc, "body") from None
    return ServingSetup(name, arch, device, dtypes, decode, prefill, evaluator, topology, basis, deployment_on)


def composed_on(setup: ServingSetup, tables: KernelTables) -> deployment.ServingBound:
    """The deployment with every row as the device's kernel tables expect it (at its nominal roofs)."""
    return setup.deployment_on(kernel_evaluator(setup.device, tables))


def deployment_tables(setup: ServingSetup, catalog: DeviceCatalog, engine: str | None) -> KernelTables | None:
    """The kernel tables the deployment's rows read on its device under `engine` (its weight-only experts' fused-MoE
    table where the engine has one, at its model's MoE shape's roofs where the tables time it)."""
    return kernel_tables(setup.device, catalog.measured(setup.device.id), engine, weight_only_experts(setup.dtypes),
                         moe_family(setup.arch))


def bound_and_composed(request: ServingAnalysisRequest, catalog: DeviceCatalog) -> tuple[
        deployment.ServingBound, deployment.ServingBound | None]:
    """The request's bound and its deployment composed from its device's kernel tables (None where the device has
    none): what an engine calibration is fitted against (scripts/fit_engine_calibration.py)."""
    setup = serving_setup(request, catalog)
    tables = deployment_tables(setup, catalog, request.engine)
    return setup.deployment_on(setup.evaluator), composed_on(setup, tables) if tables is not None else None


def analyze_serving_request(request: ServingAnalysisRequest, catalog: DeviceCatalog,
                            resolved: tuple[str, Architecture] | None = None) -> ServingAnalysis:
    """`resolved`: the request's (model name, architecture), where the caller has resolved them already."""
    setup = serving_setup(request, catalog, resolved)
    name, arch, device, dtypes, decode, _, evaluator, topology, basis, _ = setup
    bound = setup.deployment_on(evaluator)
    pools = [{**plain_fields_of_pool(state), "memory": plain_fields(StepMemoryOut, state.memory, context_len=state.context_len)}
             for state in bound.pools]
    fits = all(state.memory.fits for state in bound.pools)
    bound_fields = {**vars(bound), "pools": pools, "fits": fits}
    matmul = first_matmul(row for rows, _, _ in step_rows(arch, Step(1, 1, 2, decode.attention_ranks), dtypes)
                          for row in rows)
    flops_per_s, _, compute_source = evaluator.compute_roof(matmul) if matmul else (0.0, None, "nominal")
    notes = [dtypes_note(request, arch), *positions_notes(arch), basis, *_layout_notes(request, bound, topology),
             f"compute roof of the matmuls: {compute_source} {matmul.compute_dtype if matmul else ''} tensor, "
             f"{flops_per_s:.4g} FLOP/s; memory roof: {evaluator.hbm.source.value} hbm bandwidth, "
             f"{evaluator.hbm.bytes_per_s:.4g} bytes/s", *SCHEDULING_NOTES]
    if not fits:
        notes.insert(0, "DOES NOT FIT: a pool's devices cannot hold their weights, caches and activations "
                        "(see bound.pools[].memory); the figures are a what-if")
    expected, note = expected_of(request, catalog, setup, bound)
    notes.append(note)
    started = launch_of(request, setup, speculative_of(request, catalog))
    return ServingAnalysis(
        model=name, device_id=device.id, engine=request.engine, bound=bound_fields, expected=expected,
        launch=vars(started) if started is not None else None,
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


def expected_alone(request: ServingAnalysisRequest, catalog: DeviceCatalog) -> dict | None:
    """The analysis's `expected` (the same figures, as a dict) without the rest of the answer: what a plan reads of
    each configuration it simulates."""
    setup = serving_setup(request, catalog)
    return expected_of(request, catalog, setup, setup.deployment_on(setup.evaluator))[0]


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
    if topology.intra_node is not None and topology.intra_node.reduces_in_network:
        notes.append(in_network_reduction_note(request.device_id))
    spec = request.speculative
    if spec is not None:
        notes.append(f"speculative: {spec.method}, {spec.draft_tokens} draft token(s), acceptance length "
                     f"{spec.acceptance_length:g} (given); " + ("the draft model's decode steps" if spec.method == "draft"
                                                                  else "each draft step one decoder layer like the model's "
                                                                       "last, with the embedding and the LM head"))
    return notes


CALIBRATION_FIELDS = ("engine", "fitted_on", "checked_by", "checked_on", "tpot_median_error", "tpot_p90_error",
                      "ttft_median_error", "basis")


def layout_of(request: ServingAnalysisRequest) -> str:
    """The request's layout as calibrations record the layouts they were fitted on."""
    decode, prefill = request.pools()
    return layout_signature(expert_parallel=decode.expert_parallel > 1,
                            attention_data_parallel=decode.attention_data_parallel > 1,
                            disaggregated=prefill is not None, speculative=speculative_method(request))


def layout_of_body(body: dict, speculative: str) -> str:
    """The same of a request body as stored or built (its defaults left out), without validating it again."""
    pool = body.get("disaggregated", {}).get("decode", body)
    return layout_signature(expert_parallel=pool.get("expert_parallel", 1) > 1,
                            attention_data_parallel=pool.get("attention_data_parallel", 1) > 1,
                            disaggregated="disaggregated" in body, speculative=speculative)


def speculative_method(request) -> str:
    return request.speculative.method if request.speculative else "none"


def calibration_fields(calibration: ServingCalibration | EngineCalibration, extrapolated: bool) -> dict:
    return {**{name: getattr(calibration, name) for name in CALIBRATION_FIELDS}, "id": calibration.address,
            "extrapolated": extrapolated}


COMPOSED_FIELDS = ("ttft_s", "tpot_s", "prefill_share_s", "decode_step_s", "prefill_s")


def expected_of(request: ServingAnalysisRequest, catalog: DeviceCatalog, setup: ServingSetup,
                bound: deployment.ServingBound) -> tuple[dict | None, str]:
    """(the answer's `expected`, the assumption saying where it came from or why there is none): from the
    device's own serving runs where asked ('auto') and fitted, else from its kernel tables composed into the
    deployment and the engine's costs carried over from the devices it was measured on."""
    if request.calibration == "none":
        return None, "expected: not asked for (calibration 'none')"
    if request.engine is None:
        return None, "expected: null, the request names no engine (calibrations are fitted per engine)"
    expect = partial(serving_runs.expect, input_len=request.input_len, output_len=request.output_len,
                     concurrency=request.concurrency, layout=layout_of(request))
    method, precision, device = speculative_method(request), setup.dtypes.headline_weights, setup.device
    if request.calibration == "auto":
        runs = catalog.serving_calibration(device.id, request.engine, setup.name, precision, method)
        if runs is not None:
            expectation = expect(runs, bound)
            answer = {**vars(expectation), "basis": "runs", "kernels": None,
                      "calibration": calibration_fields(runs, expectation.extrapolated)}
            note = f"expected (basis: runs): {runs.basis}; the bound is unchanged by it"
            scheduling = catalog.scheduling_calibration(runs)
            if scheduling is None and runs.origin == "measured":
                return answer, (f"{note}; percentiles: null, the submitted runs have no scheduling calibration: "
                                f"{catalog.scheduling_not_fitted(runs)}")
            return with_simulation(request, catalog, setup, bound, scheduling, answer, note)
    engine = deployment_line(engine_calibrations(), request.engine, precision, method, setup.name, setup.arch.layers)
    tables = deployment_tables(setup, catalog, request.engine)
    if engine is None or tables is None:
        missing = ([] if tables else [f"{device.id} has no kernel tables (POST /v1/devices/{device.id}/kernel-timings "
                                      "gives it some)"])
        if engine is None:
            missing.append(f"no engine calibration exists for {request.engine} in {precision}, speculative {method}")
        runs_note = ("" if request.calibration == "kernels" else
                     f"no serving calibration exists for {device.id} with engine {request.engine} in these weights "
                     "and speculative method (POST /v1/serving-runs calibrates it), and ")
        return None, f"expected: null, {runs_note}{' and '.join(missing)}"
    composed = composed_on(setup, tables)
    expectation = expect(engine.line, bound, basis=composed)
    if engine.carried:  # no run in these weights or of this model: extrapolated, whatever the workload
        expectation = replace(expectation, extrapolated=True)
    kernels = {"tables": tables.ids, "stand_in_for": tables.stand_in_for, "basis": tables.describe(),
               **{name: getattr(composed, name) for name in COMPOSED_FIELDS}}
    answer = {**vars(expectation), "basis": "kernels", "kernels": kernels,
              "calibration": calibration_fields(engine.fitted, expectation.extrapolated)}
    note = (f"expected (basis: kernels): the deployment as {tables.describe()}; then {engine.fitted.basis}"
            f"{engine.note}; the bound is unchanged by it")
    # kernel_evaluator is memoised: the evaluator composed_on used, whose steps the simulation then times.
    carried = carried_scheduling_calibrations().get((request.engine, precision, method))
    return with_simulation(request, catalog, setup, bound, carried.for_layers(setup.arch.layers) if carried else None,
                           answer, note, kernel_evaluator(device, tables))


def with_simulation(request: ServingAnalysisRequest, catalog: DeviceCatalog, setup: ServingSetup,
                    bound: deployment.ServingBound, scheduling: SchedulingCalibration | CarriedSchedulingCalibration | None,
                    answer: dict, note: str, composer: Evaluator | None = None) -> tuple[dict, str]:
    """The steady-state expectation `answer` with the scheduling simulation's figures and percentiles in its place
    where a scheduling calibration applies (and its note saying why not where none does); `composer`: the kernel
    tables' evaluator whose steps a carried calibration times (None: the bound's, which a device's own times)."""
    if scheduling is None:
        if composer is not None:
            return answer, (f"{note}; percentiles: null, no scheduling calibration is carried over for this engine, "
                            "weights' type and speculative method (where its runs on two devices or more were "
                            "simulated on their kernel tables, the devices left out were predicted worse than by the "
                            "steady-state line, or no such runs exist)")
        return answer, (f"{note}; percentiles: null, no scheduling calibration exists for this device, engine, model, "
                        "weights' type and speculative method (the shipped ones simulate InferenceX's DeepSeek-R1 "
                        "runs)")
    if request.disaggregated is not None:
        return answer, (f"{note}; percentiles: null, the scheduling simulation of disaggregated pools missed "
                        "InferenceX's disaggregated runs by more than the steady-state line does (docs/serving.md), so "
                        "it does not answer for them")
    try:
        figures, percentiles, account = simulated_expectation(request, setup, bound, scheduling,
                                                              speculative_of(request, catalog),
                                                              composer or setup.evaluator)
    except SimulationTooLarge as big:
        reason = (f"the scheduling simulation would take about {big.args[0]:,} events, over its limit of "
                  f"{MAX_EVENTS:,}")
        if request.scheduler is not None or request.workload is not None:
            raise unprocessable(CostModelError("concurrency", f"{reason}: fewer requests in flight or "
                                               "workload.prompts_per_concurrency, or longer prefill chunks"),
                                "body") from None
        return answer, f"{note}; percentiles: null, {reason} (the steady-state line answers)"
    except CostModelError as exc:
        raise unprocessable(exc, "body") from None
    return ({**answer, **figures, "percentiles": percentiles, "simulation": account},
            f"{note}; then its TTFT, TPOT and rates from the scheduling simulation (expected.simulation): "
            f"{scheduling.basis}{busiest_experts_note(setup)}")


def unit_run(request: ServingAnalysisRequest, catalog: DeviceCatalog, *, on_kernels: bool = False,
             bounded: bool = False) -> Run | None:
    """The request's benchmark simulated at unit timing (every step its bound, or with `on_kernels` as its device's
    kernel tables compose it: None where the device has none): what a scheduling fit reads. `bounded`: a
    SimulationTooLarge where it would take more events than an analysis may (the size came from a client)."""
    found = unit_run_and_bound(request, catalog, on_kernels=on_kernels, bounded=bounded)
    return found[0] if found is not None else None


def unit_run_and_bound(request: ServingAnalysisRequest, catalog: DeviceCatalog, *, on_kernels: bool = False,
                       bounded: bool = False) -> tuple[Run, deployment.ServingBound] | None:
    """unit_run's run, and the bound of the request's deployment (the floor of every figure it expects)."""
    setup = serving_setup(request, catalog)
    bound = setup.deployment_on(setup.evaluator)
    evaluator = setup.evaluator
    if on_kernels:
        tables = deployment_tables(setup, catalog, request.engine)
        if tables is None:
            return None
        evaluator = kernel_evaluator(setup.device, tables)
    simulation = simulation_of(request, setup, bound, evaluator, scheduler_of(request, setup.device),
                               traffic_of(request), speculative_of(request, catalog))
    if bounded and (events := estimated_events(simulation)) > MAX_EVENTS:
        raise SimulationTooLarge(events)
    return simulate(simulation), bound


def plain_fields_of_pool(state: deployment.PoolState) -> dict:
    pool = state.pool
    return {"role": state.role, "workers": pool.workers, "tensor_parallel": pool.tensor_parallel,
            "expert_parallel": pool.expert_parallel, "attention_data_parallel": pool.attention_data_parallel,
            "devices": pool.devices, "batch_per_group": state.batch_per_group, "context_len": state.context_len}
