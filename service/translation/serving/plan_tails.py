"""A serving plan's best configurations as the scheduling simulation expects them: each, in the plan's rank order,
analysed as a serving deployment (POST /v1/analyze/serving's answer, its simulation included) where a scheduling
calibration applies; its expected figures become the simulation's (medians, its rates), its percentiles come along,
and the SLOs (medians and the percentiles a planner states, `slo.ttft_p90_s`, ...) are judged again on them.

The search ranks on the steady-state figures (thousands of shapes and concurrencies); the simulation, a few
milliseconds each, is run on at most MAX_SIMULATED of the best, in order, until top_n pass. The configurations kept
are ranked again on what they are then expected to do."""

from __future__ import annotations

from dataclasses import replace

from schemas.plans import ServingPlanRequest
from schemas.serving import ServingAnalysisRequest
from service.core.planning import serving
from service.core.simulation.engines import engine_family
from service.persistence.catalog import DeviceCatalog, carried_scheduling_calibrations
from service.runtime.errors import Unprocessable
from service.translation.serving.analyses import expected_alone, serving_setup, speculative_of
from service.translation.serving.simulation import launch_of

# slo field: (the percentiles' quantity, which percentile)
PERCENTILE_SLOS = {"ttft_p90_s": ("ttft_s", "p90"), "ttft_p99_s": ("ttft_s", "p99"), "tpot_p90_s": ("tpot_s", "p90"),
                   "tpot_p99_s": ("tpot_s", "p99"), "e2e_p90_s": ("e2e_s", "p90"), "e2e_p99_s": ("e2e_s", "p99")}
MAX_SIMULATED = 12
# What a plan and a serving analysis both take (the model, roofs, memory, dtypes, speculative decoding, engine,
# calibration), as the plan's request gave it; the layout and the workload are the configuration's.
SHARED_FIELDS = (set(ServingPlanRequest.model_fields) & set(ServingAnalysisRequest.model_fields)) - {
    "input_len", "output_len", "concurrency"}


def percentile_limits(request: ServingPlanRequest) -> dict[str, float]:
    return {name: value for name in PERCENTILE_SLOS if (value := getattr(request.slo, name)) is not None}


def _deployment(request: ServingPlanRequest, config: serving.Config) -> ServingAnalysisRequest:
    return ServingAnalysisRequest.model_validate({
        **request.model_dump(include=SHARED_FIELDS, exclude_unset=True),
        "device_id": config.device_id, "input_len": request.input_len, "output_len": request.output_len,
        "concurrency": config.concurrency_per_replica * config.replicas, "workers": config.replicas,
        "tensor_parallel": config.tensor_parallel, "expert_parallel": config.expert_parallel,
        "attention_data_parallel": config.attention_data_parallel})


def simulable(request: ServingPlanRequest, config: serving.Config, model: str, precision: str,
              catalog: DeviceCatalog) -> bool:
    """Whether the configuration's analysis will simulate it: aggregated, expected from its device's own runs (of
    `model` in these weights, `precision` as the plan resolved them, with this speculative method) where a scheduling
    calibration was fitted to them, or from its kernel tables where the engine's scheduling calibration is carried
    over to them."""
    method = request.speculative.method if request.speculative else "none"
    engine = request.engine or ""
    if config.mode != "aggregated" or config.expected is None:
        return False
    if config.expected.basis == "kernels":
        return (engine, precision, method) in carried_scheduling_calibrations()
    runs = catalog.serving_calibration(config.device_id, engine, model, precision, method)
    return runs is not None and catalog.scheduling_calibration(runs) is not None


def simulated(request: ServingPlanRequest, config: serving.Config,
              catalog: DeviceCatalog) -> tuple[serving.Config, dict] | None:
    """(the configuration with its expectation the simulation's, its percentiles), where its analysis has them; never
    below the configuration's bound. The plan's TPOT bound charges each request's prefill as a request prefilled
    alone (a steady-state share, planning/serving.py), where the simulated engine may prefill several in one step, so
    a simulated median can fall under it: the plan then answers its bound, for the median and for the percentiles
    under it, and no more requests a second than the bound (a serving analysis floors at its decode step alone)."""
    expected = expected_alone(_deployment(request, config), catalog)
    if expected is None or expected.get("percentiles") is None or config.expected is None:
        return None
    floors = {"ttft_s": config.ttft_s, "tpot_s": config.tpot_s, "e2e_s": config.e2e_latency_s}
    percentiles = {quantity: {which: max(value, floors[quantity]) for which, value in values.items()}
                   for quantity, values in expected["percentiles"].items()}
    rate = min(expected["requests_per_s"], config.requests_per_s)
    kept = rate / expected["requests_per_s"]
    tpot = percentiles["tpot_s"]["p50"]
    figures = replace(config.expected, ttft_s=percentiles["ttft_s"]["p50"], tpot_s=tpot,
                      e2e_latency_s=max(expected["e2e_latency_s"], config.e2e_latency_s), requests_per_s=rate,
                      tokens_per_s=expected["output_tokens_per_s"] * kept,
                      tokens_per_s_per_device=expected["output_tokens_per_s_per_device"] * kept,
                      tokens_per_s_per_user=1 / tpot)
    return replace(config, expected=figures), percentiles


def _missed(config: serving.Config, percentiles: dict, limits: dict[str, float],
            slo: serving.Slo) -> list[tuple[str, float]]:
    """The SLOs the simulated configuration misses: its medians against the plan's, its percentiles against theirs."""
    expected = config.expected
    medians = [(name, getattr(expected, name)) for name, limit in slo.limits().items() if getattr(expected, name) > limit]
    return medians + [(name, percentiles[quantity][which]) for name, (quantity, which) in PERCENTILE_SLOS.items()
                      if name in limits and percentiles[quantity][which] > limits[name]]


def with_tails(ranked: list[serving.Config], request: ServingPlanRequest, catalog: DeviceCatalog, model: str,
               precision: str) -> tuple[list[tuple[serving.Config, dict | None]], list[str]]:
    """The top_n configurations, each with its percentiles where simulated, those missing a percentile SLO left out
    (a 422 naming the SLO where none is left); and what the plan says of it."""
    limits = percentile_limits(request)
    if limits and (request.engine is None or request.calibration != "auto"):
        name = next(iter(limits))
        reason = (f"slo.{name} is judged by the scheduling simulation of each configuration, which needs an engine "
                  "and calibration 'auto' (its calibrations are fitted to a device's own runs with that engine)")
        raise Unprocessable(reason, [{"loc": f"body.slo.{name}", "msg": reason}])
    slo = serving.Slo(**request.slo.model_dump(include=set(serving.SLO_FIELDS)))
    kept: list[tuple[serving.Config, dict | None]] = []
    runs, unjudged, missed = 0, 0, []
    for config in ranked:
        if len(kept) == request.top_n or (limits and runs == MAX_SIMULATED):
            break
        found = None
        if runs < MAX_SIMULATED and simulable(request, config, model, precision, catalog):
            found = simulated(request, config, catalog)
            runs += 1
        if found is None:
            if limits:
                unjudged += 1
                continue
            kept.append((config, None))
            continue
        config, tails = found
        failed = _missed(config, tails, limits, slo)
        if failed:
            missed.append((config, *failed[0]))
            continue
        kept.append((config, tails))
    kept.sort(key=lambda item: serving.rank_key(item[0]))
    if not kept:
        _refuse({**slo.limits(), **limits}, missed, unjudged)
    if not runs and not limits:
        return kept, []
    note = (f"tails: {runs} of the best configurations simulated as serving deployments (POST "
            "/v1/analyze/serving's scheduling simulation, where a scheduling calibration applies): their expected "
            "figures and percentiles are the simulation's, their SLOs judged again on them, and they are ranked on them")
    if missed:
        note += f"; {len(missed)} simulated configuration(s) missed an SLO and were left out"
    if limits:
        note += (f"; percentile SLOs {', '.join(f'{k} <= {v:g} s' for k, v in limits.items())}: {unjudged} "
                 "configuration(s) could not be judged on them (disaggregated, or no scheduling calibration for the "
                 "device and engine) and were left out")
    return kept, [note]


def _refuse(limits: dict[str, float], missed: list, unjudged: int) -> None:
    if missed:
        config, name, value = min(missed, key=lambda item: item[2] / limits[item[1]])
        reason = (f"no configuration simulated meets slo.{name} <= {limits[name]:g} s: the closest reaches {value:.4g} s "
                  f"({config.device_id}, tensor_parallel {config.tensor_parallel}, concurrency "
                  f"{config.concurrency_per_replica} a replica); {unjudged} could not be judged")
    else:
        name = next(iter(limits))
        reason = (f"slo.{name}: no configuration could be judged on its percentiles (they need an aggregated "
                  "deployment on a device and engine with a scheduling calibration)")
    raise Unprocessable(reason, [{"loc": f"body.slo.{name}", "msg": reason}])


def launch_for(request: ServingPlanRequest, config: serving.Config, catalog: DeviceCatalog) -> dict | None:
    """The commands that start an aggregated configuration on the plan's engine and benchmark it at its
    concurrency (POST /v1/analyze/serving's `launch`); None without an engine the service knows, or disaggregated."""
    if request.engine is None or engine_family(request.engine) is None or config.mode != "aggregated":
        return None
    deployment = _deployment(request, config)
    setup = serving_setup(deployment, catalog)
    started = launch_of(deployment, setup, speculative_of(deployment, catalog))
    return vars(started) if started is not None else None
