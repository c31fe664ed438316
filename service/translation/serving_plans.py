"""POST /v1/plan/serving: the deployment search of service.core.planning.serving, fed by the step model.

Per candidate device and tensor-parallel size this costs one prefill analysis and one exact affine sweep of
the decode step over every concurrency (two analyses), so a search over one device's sizes and 512
concurrencies costs a handful of analyses, not thousands.
"""

from __future__ import annotations

from schemas.models import ModelAnalysisRequest, StepMemoryOut
from schemas.plans import MAX_PLAN_CONCURRENCY, ServingConfig, ServingPlan, ServingPlanRequest
from service.core.errors import CostModelError
from service.core.planning import serving
from service.core.transformer.analysis import analyze_model, batch_time_curve
from service.core.transformer.architecture import Architecture
from service.core.transformer.capacity import check_positions, kv_bytes_per_request
from service.persistence.catalog import DeviceCatalog
from service.runtime.errors import Unprocessable
from service.translation.model_analyses import (
    core_dtypes,
    evaluator_for,
    memory_budget_for,
    resolve_model,
    step_memory_at,
    unprocessable,
)


def tensor_parallel_sizes(arch: Architecture, total_devices: int) -> list[int]:
    """Sizes that split both the attention heads and the KV heads evenly."""
    return [t for t in range(1, total_devices + 1) if arch.heads % t == 0 and arch.kv_heads % t == 0]


def _step_request(request: ServingPlanRequest, device_id: str, t: int, **step) -> ModelAnalysisRequest:
    fields = request.model_dump(include={"model_id", "model", "roofs", "sustained_clock_hz", "memory_utilization",
                                         "memory_capacity_bytes", "workspace_bytes", "block_size", "dtypes"})
    return ModelAnalysisRequest.model_validate({**fields, "device_id": device_id, "tensor_parallel": t, **step})


def _replica(request: ServingPlanRequest, catalog: DeviceCatalog, arch: Architecture, device_id: str,
             t: int) -> serving.ReplicaModel:
    device = catalog.get(device_id)
    mean_context = request.input_len + request.output_len // 2
    # The caches at their largest: input_len prompt tokens plus all but the last output token.
    peak = _step_request(request, device_id, t, phase="prefill", seq_len=request.input_len,
                         output_len=request.output_len)
    evaluator = evaluator_for(peak, catalog)
    dtypes = core_dtypes(peak)
    options = dict(dtypes=dtypes, tensor_parallel=t, attention_implementation="flash", explain=False)
    prefill = analyze_model(arch, evaluator, phase="prefill", batch=1, seq_len=request.input_len, **options)

    budget, _ = memory_budget_for(peak, arch, device)
    context = request.input_len + request.output_len - 1

    def memory(c: int):
        return step_memory_at(budget, peak, batch_size=c, phase="decode")

    # The largest concurrency whose caches fit (memory grows with it): bisect.
    low, high = 0, MAX_PLAN_CONCURRENCY
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if memory(middle).fits else (low, middle - 1)
    max_concurrency = low

    def memory_at(c: int) -> dict:
        return {**vars(memory(c)), "context_len": context}

    decode = {}
    if max_concurrency:
        values = list(range(1, max_concurrency + 1))
        curve = batch_time_curve(arch, evaluator, values=values, phase="decode", seq_len=mean_context, dtypes=dtypes,
                                 tensor_parallel=t)
        if curve is not None:
            decode = dict(zip(values, curve))

    def decode_s(c: int) -> float:
        if c not in decode:  # no closed form (MoE routing): the step itself
            decode[c] = analyze_model(arch, evaluator, phase="decode", batch=c, seq_len=mean_context,
                                      **options).totals.time_s
        return decode[c]

    link = device.interconnect_bandwidth_bytes_per_s
    kv_request = kv_bytes_per_request(arch, dtypes, request.input_len, t, request.block_size)
    return serving.ReplicaModel(
        tensor_parallel=t, prefill_s=prefill.totals.time_s, decode_s=decode_s, max_concurrency=max_concurrency,
        memory_at=memory_at,
        kv_transfer_s=kv_request / link if link else None)


def plan_serving(request: ServingPlanRequest, catalog: DeviceCatalog) -> ServingPlan:
    name, arch = resolve_model(request, catalog)
    try:
        check_positions(arch, request.input_len + request.output_len - 1, "output_len")
    except CostModelError as exc:
        raise unprocessable(exc, "body") from None
    slo = serving.Slo(**request.slo.model_dump())
    workload = serving.Workload(request.input_len, request.output_len, request.target_requests_per_s,
                                request.concurrency)
    configs, fitting, skipped, searched = [], [], [], 0
    for device_id in dict.fromkeys(request.device_ids):
        catalog.get(device_id)  # an unknown id is the client's 404, not a skipped candidate
        replicas = []
        for t in tensor_parallel_sizes(arch, request.total_devices):
            try:
                replica = _replica(request, catalog, arch, device_id, t)
            except CostModelError as exc:
                skipped.append(f"{device_id} tensor_parallel {t}: {exc.reason}")
                continue
            if replica.max_concurrency == 0:
                skipped.append(f"{device_id} tensor_parallel {t}: not even one request's cache fits beside the weights")
                continue
            replicas.append(replica)
        price = (request.price_per_device_hour or {}).get(device_id)
        result = serving.search(device_id, replicas, workload=workload, slo=slo, total_devices=request.total_devices,
                                modes=request.modes, max_concurrency=MAX_PLAN_CONCURRENCY, price_per_device_hour=price)
        configs += result.configs
        fitting += result.fitting
        searched += result.searched
    if not configs:
        _refuse(fitting, slo, request)
    configs.sort(key=lambda c: (-c.tokens_per_s_per_device, c.devices_used, -c.tokens_per_s_per_user))
    # Neighbouring concurrencies of one shape differ by a fraction of a percent: the best of each shape.
    best = list({(c.mode, c.device_id, c.tensor_parallel): c for c in reversed(configs)}.values())[::-1]
    best.sort(key=lambda c: (-c.tokens_per_s_per_device, c.devices_used, -c.tokens_per_s_per_user))
    return ServingPlan(model=name, configs=[_out(c) for c in best[:request.top_n]],
                       pareto=[_out(c) for c in _thinned(serving.pareto(fitting), MAX_FRONTIER)], searched=searched,
                       skipped=skipped,
                       assumptions=_assumptions(request))


MAX_FRONTIER = 32


def _thinned(frontier: list, most: int) -> list:
    """At most `most` points of a frontier, evenly spaced along it with both ends kept (its first `most` would
    keep only the high-throughput end and hide the interactive one)."""
    if len(frontier) <= most:
        return frontier
    step = (len(frontier) - 1) / (most - 1)
    return [frontier[round(i * step)] for i in range(most)]


def _out(config: serving.Config) -> ServingConfig:
    fields = vars(config)
    return ServingConfig(**{**fields, "memory": StepMemoryOut(**config.memory())})


def _refuse(fitting: list[serving.Config], slo: serving.Slo, request: ServingPlanRequest) -> None:
    found = serving.unmet(fitting, slo)
    if found is None:
        reason = ("no configuration fits in memory: the weights and one request's cache exceed every candidate's "
                  "usable memory at every tensor-parallel size within total_devices")
        raise Unprocessable(reason, [{"loc": "body.total_devices", "msg": reason}])
    name, best, config = found
    reason = (f"no configuration meets slo.{name} <= {getattr(slo, name):g} s: the best any fitting configuration "
              f"reaches is {best:.4g} s ({config.mode}, {config.device_id}, tensor_parallel {config.tensor_parallel}, "
              f"concurrency {config.concurrency_per_replica})")
    raise Unprocessable(reason, [{"loc": f"body.slo.{name}", "msg": reason}])


def _assumptions(request: ServingPlanRequest) -> list[str]:
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
    ]
