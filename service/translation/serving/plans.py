"""POST /v1/plan/serving: the contract mapped into the core once (the model, each device with its roofs, the
dtypes, each size's memory budget), the core's replica models and search composed, the answer mapped out once.

Per candidate device and layout this costs one prefill analysis and one exact sweep of the decode step over every
concurrency (a few analyses, MoE models included: plan_work counts them), so a search over one device's layouts and
512 concurrencies costs tens of analyses, not thousands.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import NamedTuple

from schemas.models import StepMemoryOut
from schemas.plans import MAX_PLAN_CONCURRENCY, ServingConfig, ServingPlan, ServingPlanRequest
from service.core import budget
from service.core.errors import CostModelError
from service.core.expectations.engines import deployment_line, layout_signature
from service.core.expectations.fused_moe import moe_family
from service.core.expectations.kernel_steps import KernelTables, weight_only_experts
from service.core.expectations.serving_runs import ServingCalibration
from service.core.planning import deployment, serving
from service.core.planning.replica import replica_model, worker_replica_model
from service.core.training.collectives import in_network_reduction_note
from service.core.transformer.architecture import Architecture
from service.core.transformer.capacity import check_positions
from service.core.transformer.layers import ModelDTypes
from service.persistence.catalog import DeviceCatalog, engine_calibrations
from service.runtime.errors import Unprocessable
from service.translation.kernels.tables import kernel_evaluator, kernel_tables
from service.translation.models.analyses import (
    core_dtypes,
    evaluator_on,
    memory_budget_of,
    positions_notes,
    resolve_model,
    unprocessable,
)
from service.translation.serving.analyses import LinkOptions, pool_budgets, speculative_method, speculative_of
from service.translation.serving.plan_tails import launch_for, with_tails
from service.translation.training.analyses import topology_for


def tensor_parallel_sizes(arch: Architecture, total_devices: int) -> list[int]:
    """Sizes that split the attention heads evenly and the KV heads evenly, or replicate them over a whole number
    of devices each (a size above the KV heads, as vLLM and SGLang run it)."""
    return [t for t in range(1, total_devices + 1)
            if arch.heads % t == 0 and all(kv % t == 0 or t % kv == 0 for kv in arch.kv_head_counts())]


def _replica(request: ServingPlanRequest, arch: Architecture, device, evaluator, dtypes, workload: serving.Workload,
             t: int) -> serving.ReplicaModel:
    memory, _ = memory_budget_of(arch, device, dtypes, request, t)
    return replica_model(arch, evaluator, memory, dtypes, workload, tensor_parallel=t,
                         max_concurrency=MAX_PLAN_CONCURRENCY, block_size=request.block_size,
                         link_bytes_per_s=device.interconnect_bandwidth_bytes_per_s)


def _worker_replica(request: ServingPlanRequest, arch: Architecture, device, evaluator, dtypes,
                    workload: serving.Workload, pool: deployment.Pool,
                    speculative: deployment.Speculative | None) -> serving.ReplicaModel:
    """A replica laid out as a serving worker (`pool`: tensor parallelism alone, a MoE model's experts over all its
    devices, with or without an attention group a device); with speculative decoding where the request asks for it."""
    deployment.check_pool(arch, pool)
    topology = topology_for(device, evaluator.measured, LinkOptions(request.roofs, None))
    budget = pool_budgets(request, arch, dtypes, device)[0](pool)
    worker = deployment.WorkerStep(arch, evaluator, topology, pool, dtypes)
    return worker_replica_model(worker, budget, workload, max_concurrency=MAX_PLAN_CONCURRENCY,
                                block_size=request.block_size, link=topology.inter_node or topology.intra_node,
                                speculative=speculative)


def _device_replicas(request: ServingPlanRequest, arch: Architecture, device, evaluators, dtypes,
                     workload: serving.Workload, speculative: deployment.Speculative | None,
                     skipped: list[str]) -> list[serving.ReplicaModel]:
    """The replicas of every layout searched on one device, each on the bound's steps (`evaluators[0]`) and, where
    `evaluators[1]` composes them from kernel tables, on those too; a layout refused or holding no request is
    appended to `skipped` with the reason."""
    evaluator, composer = evaluators
    replicas = []
    for pool in layouts(arch, request.total_devices):
        budget.check()
        shape = (f"{device.id} tensor_parallel {pool.tensor_parallel}"
                 + (f", expert_parallel {pool.expert_parallel}" if pool.expert_parallel > 1 else "")
                 + (f", attention_data_parallel {pool.attention_data_parallel}" if pool.attention_data_parallel > 1
                    else ""))
        build = partial(_replica_of, request, arch, device, dtypes=dtypes, workload=workload, pool=pool,
                        speculative=speculative)
        try:
            replica = build(evaluator)
            if composer is not None and replica.max_concurrency:
                replica = replace(replica, composed=build(composer))
        except CostModelError as exc:
            skipped.append(f"{shape}: {exc.reason}")
            continue
        if replica.max_concurrency == 0:
            skipped.append(f"{shape}: not even one request's cache fits beside the weights")
            continue
        replicas.append(replica)
    return replicas


def _replica_of(request: ServingPlanRequest, arch: Architecture, device, evaluator, *, dtypes, workload: serving.Workload,
                pool: deployment.Pool, speculative: deployment.Speculative | None) -> serving.ReplicaModel:
    """A replica of `pool`'s one worker on `evaluator`'s steps: the bound's, or the kernel tables' composed."""
    if pool.expert_parallel > 1 or speculative is not None:
        return _worker_replica(request, arch, device, evaluator, dtypes, workload, pool, speculative)
    return _replica(request, arch, device, evaluator, dtypes, workload, pool.tensor_parallel)


def layouts(arch: Architecture, total_devices: int) -> list[deployment.Pool]:
    """The workers searched: every size that splits the heads for tensor parallelism alone; for a MoE model, the
    same sizes with the experts whole over the worker's devices and its heads split over them (TensorRT-LLM's
    expert parallelism), and every power of two from 2 up to the budget (at most 256) laid out as SGLang's wide
    expert parallelism (an attention group a device, holding every head)."""
    sizes = tensor_parallel_sizes(arch, total_devices)
    plain = [deployment.Pool(1, t) for t in sizes]
    if arch.moe is None:
        return plain
    return (plain + [deployment.Pool(1, t, t, 1) for t in sizes if t > 1]
            + [deployment.Pool(1, 2**i, 2**i, 2**i) for i in range(1, 9) if 2**i <= total_devices])


def plan_work(request: ServingPlanRequest, arch: Architecture) -> int:
    """The step analyses the search will run at most, worked out before it runs (a batch charges a plan for them).
    Per candidate device and layout: one prefill and an exact sweep of the decode step over every concurrency
    (Pool.decode_curve_steps: two steps, more where experts split over a worker round their shares). Speculative
    decoding sweeps a verification and a draft step; unless calibration is "none", the kernel tables' composition may
    run it all again beside the bound. At most 16 devices x the layouts: a few thousand."""
    devices = len(dict.fromkeys(request.device_ids))
    sweeps = 2 if request.speculative is not None else 1
    per_device = sum(1 + sweeps * pool.decode_curve_steps() for pool in layouts(arch, request.total_devices))
    return devices * per_device * (1 if request.calibration == "none" else 2)


def plan_serving(request: ServingPlanRequest, catalog: DeviceCatalog) -> ServingPlan:
    name, arch = resolve_model(request, catalog)
    try:
        check_positions(arch, request.input_len + request.output_len - 1, "output_len")
    except CostModelError as exc:
        raise unprocessable(exc, "body") from None
    slo = serving.Slo(**request.slo.model_dump(include=set(serving.SLO_FIELDS)))
    workload = serving.Workload(request.input_len, request.output_len, request.target_requests_per_s,
                                request.concurrency)
    configs, fitting, searched, best_rate, best_within_slos = [], [], 0, 0.0, 0.0
    skipped: list[str] = []
    devices_for_target: int | None = None
    dtypes = core_dtypes(request, arch)
    speculative = speculative_of(request, catalog)
    expectations, basis_note = _expectations(request, catalog, name, arch, dtypes)
    link_notes: list[str] = []
    for device_id in dict.fromkeys(request.device_ids):
        device = catalog.get(device_id)  # an unknown id is the client's 404, not a skipped candidate
        evaluator = evaluator_on(device, catalog.measured(device.id), request.roofs, request.sustained_clock_hz)
        intra_node = topology_for(device, evaluator.measured, LinkOptions(request.roofs, None)).intra_node
        if intra_node is not None and intra_node.reduces_in_network:
            link_notes.append(in_network_reduction_note(device_id))
        planned = expectations.get(device_id)
        composer = kernel_evaluator(device, planned.tables) if planned and planned.tables else None
        replicas = _device_replicas(request, arch, device, (evaluator, composer), dtypes, workload, speculative,
                                    skipped)
        price = (request.price_per_device_hour or {}).get(device_id)
        result = serving.search(device_id, replicas, workload=workload, slo=slo, total_devices=request.total_devices,
                                modes=request.modes, max_concurrency=MAX_PLAN_CONCURRENCY, price_per_device_hour=price,
                                expectation=planned.expectation if planned else None)
        configs += result.configs
        fitting += result.fitting
        searched += result.searched
        best_rate = max(best_rate, result.best_rate)
        best_within_slos = max(best_within_slos, result.best_rate_within_slos)
        if result.devices_for_target is not None:
            devices_for_target = min(result.devices_for_target, devices_for_target or result.devices_for_target)
    if not configs:
        _refuse(fitting, slo, request, best_rate, (best_within_slos, devices_for_target),
                "expected" if expectations else "bound")
    configs.sort(key=serving.rank_key)  # each device's best of each shape (serving.search)
    kept, tail_notes = with_tails(configs, request, catalog, name, dtypes.headline_weights)
    return ServingPlan(model=name, slo_basis="expected" if expectations else "bound",
                       configs=[_out(c, percentiles, launch_for(request, c, catalog)) for c, percentiles in kept],
                       pareto=[_out(c) for c in _thinned(serving.pareto(fitting), MAX_FRONTIER)], searched=searched,
                       skipped=skipped,
                       assumptions=[*_assumptions(request, arch), *positions_notes(arch), *link_notes, *tail_notes,
                                    basis_note])


class Planned(NamedTuple):
    """A candidate device's expectation, and the kernel tables its replicas are also composed from (None: its
    expectation reads the bound's steps, a serving calibration of its own)."""

    expectation: serving.Expectation
    tables: KernelTables | None


def _layout_covered(covers, speculative: str):
    """An engine calibration's covers(), as the search asks it: (concurrency, mode, expert parallel, groups); each
    layout's signature made once (the search asks about every concurrency of it)."""
    signatures: dict[tuple[str, bool, bool], str] = {}

    def covered(concurrency: int, mode: str, expert_parallel: int, groups: int) -> bool:
        key = (mode, expert_parallel > 1, groups > 1)
        signature = signatures.get(key)
        if signature is None:
            signature = signatures[key] = layout_signature(expert_parallel=key[1], attention_data_parallel=key[2],
                                                           disaggregated=mode == "disaggregated",
                                                           speculative=speculative)
        return covers(concurrency, signature)
    return covered


def _never_covered(concurrency: int, mode: str, expert_parallel: int, groups: int) -> bool:
    return False


def _runs_expectation(runs: ServingCalibration, request: ServingPlanRequest) -> serving.Expectation:
    """A device's own serving calibration, as the search asks it: of the bound's figures (the basis is the bound)."""
    def ttft(bound: float, _basis: float) -> float:
        return runs.ttft_s(bound)

    def tpot(bound: float, _basis: float) -> float:
        return runs.tpot_s(bound)

    method = speculative_method(request)
    return serving.Expectation(runs.address, ttft, tpot,
                               _layout_covered(partial(runs.covers, request.input_len, request.output_len), method))


def _expectations(request: ServingPlanRequest, catalog: DeviceCatalog, model: str, arch: Architecture,
                  dtypes: ModelDTypes) -> tuple[dict[str, Planned], str]:
    """Each candidate device's expectation, where every one has one (an expectation on some devices and bounds on
    others would compare unlike figures): from its own serving runs where asked ('auto') and fitted, else from its
    kernel tables and the engine's costs carried over; and what the plan says of it."""
    if request.calibration == "none":
        return {}, "slo basis: bounds (calibration 'none')"
    if request.engine is None:
        return {}, "slo basis: bounds (no engine named: serving calibrations are fitted per engine)"
    method, precision, experts = speculative_method(request), dtypes.headline_weights, weight_only_experts(dtypes)
    engine = deployment_line(engine_calibrations(), request.engine, precision, method, model, arch.layers)
    planned, missing, bases = {}, [], []
    for device_id in dict.fromkeys(request.device_ids):
        runs = (catalog.serving_calibration(device_id, request.engine, model, precision, method)
                if request.calibration == "auto" else None)
        if runs is not None:
            planned[device_id] = Planned(_runs_expectation(runs, request), None)
            bases.append(f"{device_id}: {runs.basis}")
            continue
        device = catalog.get(device_id)
        tables = (kernel_tables(device, catalog.measured(device.id), request.engine, experts, moe_family(arch))
                  if engine is not None else None)
        if engine is None or tables is None:
            missing.append(device_id)
            continue
        # A line carried from another weights' type or model extrapolates at every concurrency and layout.
        covered = (_never_covered if engine.carried else
                   _layout_covered(partial(engine.fitted.covers, request.input_len, request.output_len), method))
        line = engine.line
        planned[device_id] = Planned(serving.Expectation(line.address, line.ttft_s, line.tpot_s, covered,
                                                         "kernels"), tables)
        bases.append(f"{device_id}: the replica as {tables.describe()}, then {engine.fitted.basis}{engine.note}")
    if missing:
        return {}, (f"slo basis: bounds (no serving calibration for {', '.join(missing)} with engine {request.engine}, "
                    f"these weights and speculative method {method}, and no kernel tables and engine calibration to "
                    "expect from; POST /v1/serving-runs or /v1/devices/{id}/kernel-timings gives one)")
    return planned, (f"slo basis: expected TTFT and TPOT (the request rate slowed as TPOT is), engine "
                     f"{request.engine}: {'; '.join(bases)}; the bounds stand beside them")


MAX_FRONTIER = 32


def _thinned(frontier: list, most: int) -> list:
    """At most `most` points of a frontier, evenly spaced along it with both ends kept (its first `most` would
    keep only the high-throughput end and hide the interactive one)."""
    if len(frontier) <= most:
        return frontier
    step = (len(frontier) - 1) / (most - 1)
    return [frontier[round(i * step)] for i in range(most)]


def _out(config: serving.Config, percentiles: dict | None = None, launch: dict | None = None) -> ServingConfig:
    fields = vars(config)
    expected = vars(config.expected) | {"percentiles": percentiles} if config.expected else None
    return ServingConfig(**{**fields, "memory": StepMemoryOut(**config.memory()), "expected": expected,
                            "launch": launch})


def _refuse(fitting: list[serving.Config], slo: serving.Slo, request: ServingPlanRequest, best_rate: float,
            within_slos: tuple[float, int | None], basis: str) -> None:
    target = request.target_requests_per_s
    # Short of the target: where no shape reaches it, or where those that do miss an SLO while others meeting it
    # fall short (then what to change is the devices, not the SLO).
    if target is not None and best_rate > 0 and (not fitting or within_slos[0] > 0):
        # The devices a planner can act on: the fewest whole replicas of a shape that meets the SLOs and reaches the
        # target. The best shape of all may miss the SLOs (a hint of 14 devices that was then refused, three times,
        # up to 20), and devices come in replicas (13 where the shape takes 2 at a time).
        rate, devices = within_slos
        if rate > 0:
            reason = (f"{request.total_devices} devices reach at most {rate:.4g} requests/s ({basis}, "
                      + ("meeting the SLOs" if slo.limits() else "no SLO given") + f"), short of the target "
                      f"{target:.4g}: " + (f"{devices:,} devices of the best shape that does reach it (total_devices)"
                                           if devices else "no number of devices within reason reaches it"))
        else:
            reason = (f"{request.total_devices} devices reach at most {best_rate:.4g} requests/s ({basis}), short of "
                      f"the target {target:.4g}, and no shape that could scale to it meets the SLOs: relax them")
        raise Unprocessable(reason, [{"loc": "body.target_requests_per_s", "msg": reason}])
    found = serving.unmet(fitting, slo)
    if found is None:
        reason = ("no configuration fits in memory: the weights and one request's cache exceed every candidate's "
                  "usable memory at every tensor-parallel size within total_devices")
        raise Unprocessable(reason, [{"loc": "body.total_devices", "msg": reason}])
    name, best, config = found
    reason = (f"no configuration meets slo.{name} <= {getattr(slo, name):g} s: the best any fitting configuration "
              f"reaches ({basis}) is {best:.4g} s ({config.mode}, {config.device_id}, tensor_parallel {config.tensor_parallel}, "
              f"concurrency {config.concurrency_per_replica})")
    raise Unprocessable(reason, [{"loc": f"body.slo.{name}", "msg": reason}])


def _assumptions(request: ServingPlanRequest, arch: Architecture) -> list[str]:
    return [
        "search: every tensor-parallel size dividing the heads and KV heads, up to total_devices; replicas = "
        "total_devices // size (or the fewest reaching target_requests_per_s); concurrency 1..512 per replica, as "
        "far as the KV budget admits",
        "step times: the roofline lower bounds of /v1/analyze/model (prefill of one request; decode at the mean "
        f"context {request.input_len + request.output_len // 2} tokens)",
        "aggregated (continuous batching): cycle = output_len x decode(c) + c x prefill; TPOT = cycle / output_len; "
        "TTFT = prefill (no queueing); requests/s = c / cycle per replica",
        "disaggregated: prefill and decode replicas split so their rates match best; TPOT = decode(c); TTFT = prefill "
        "+ the request's KV cache over the interconnect",
        "memory: weights + c x KV(input_len + output_len - 1, in blocks) + activations + workspace per device",
        "ranking: tokens/s per device among configurations that fit and meet every SLO",
    ] + ([
        "a MoE model is also searched with its experts whole over replicas of 2, 4, 8, ... devices and one attention "
        "group a device (expert_parallel, attention_data_parallel), concurrencies in multiples of the groups",
    ] if arch.moe is not None else []) + ([
        f"speculative: {request.speculative.method}, {request.speculative.draft_tokens} draft token(s) at acceptance "
        f"length {request.speculative.acceptance_length:g} (given): decode(c) = (the verification + the draft's "
        "steps) / the acceptance length, a token's time"] if request.speculative else [])
