"""A serving request as the scheduling simulation runs it: its engine's scheduler (the preset, then the request's
overrides), its traffic, and the step model read from its deployment's rows on any step evaluator (the bound's, or
the device's kernel tables)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from service.core.operators.attention import ATTENTION
from service.core.operators.sparse_index import SPARSE_INDEX
from service.core.planning import deployment
from service.core.planning.launch import Launch, LaunchRequest, PoolLayout, launch
from service.core.simulation.carried_over import CarriedSchedulingCalibration
from service.core.simulation.engine_loop import MAX_EVENTS, Disaggregation, Run, Simulation, estimated_events, simulate
from service.core.simulation.engines import Scheduler, engine_family, engine_preset, overridden
from service.core.simulation.fit import SchedulingCalibration
from service.core.simulation.step_model import StepModel, build_step_model
from service.core.simulation.workload import ClosedLoop, Lengths, OpenLoop, Traffic, benchmark_client
from service.core.transformer.analysis import Evaluator
from service.persistence.catalog import model_catalog


def scheduler_of(request, device) -> Scheduler:
    """The request's engine's preset on its device, with the request's `scheduler` overrides (where given); the
    decode pool's `max_batch_per_group`, where given and `scheduler.max_running` is not, is the engine's cap."""
    preset = engine_preset(request.engine, device.memory_capacity_bytes)
    given = getattr(request, "scheduler", None)
    fields = given.model_dump(exclude_none=True) if given is not None else {}
    if "graph_batch_sizes" in fields:
        fields["graph_batch_sizes"] = tuple(fields["graph_batch_sizes"])
    cap = request.pools()[0].max_batch_per_group
    if cap is not None and "max_running" not in fields:
        fields["max_running"] = cap
    return overridden(preset, **fields)


def traffic_of(request) -> Traffic:
    """InferenceX's client at the request's lengths and concurrency, or what the request's `workload` says: a range
    ratio, length histograms, the timed prompts, an open loop at a rate."""
    workload = getattr(request, "workload", None)
    if workload is None:
        return benchmark_client(request.input_len, request.output_len, request.concurrency)
    prompts = workload.prompts_per_concurrency * request.concurrency
    arrivals = (ClosedLoop(request.concurrency, prompts) if workload.request_rate is None
                else OpenLoop(workload.request_rate, prompts, workload.burstiness))
    return Traffic(_lengths(request.input_len, workload.range_ratio, workload.input_histogram),
                   _lengths(request.output_len, workload.range_ratio, workload.output_histogram), arrivals)


def _lengths(longest: int, range_ratio: float, histogram) -> Lengths:
    """Uniform over the range, or the histogram (the request's validation holds its lengths to `longest`)."""
    if histogram is None:
        return Lengths(longest, range_ratio)
    return Lengths(longest, histogram=tuple((int(n), float(w)) for n, w in histogram))


# The rows whose work grows with a request's tokens times its own tokens (attention, and DeepSeek's sparse indexer
# scoring every key): a request's own, not shared by the prompts prefilled beside it.
WITHIN_REQUEST_KINDS = frozenset({ATTENTION.name, SPARSE_INDEX.name})


def _step_model(worker: deployment.WorkerStep, prefill_worker: deployment.WorkerStep,
                speculative: deployment.Speculative | None, draft_worker: deployment.WorkerStep | None, *,
                largest_batch: int, reference_context: int, largest_prefill: int) -> StepModel:
    def decode_curve(batches, context):
        verify, draft = deployment.decode_curves(worker, batches, context, speculative, draft_worker)
        return [v + d for v, d in zip(verify, draft, strict=True)]

    def prefill(new: int, cached: int) -> tuple[float, float]:
        rows = prefill_worker.evaluate(batch=1, q_len=new, kv_len=cached + new)
        return (sum(r.total_time_s for r in rows),
                sum(r.total_time_s for r in rows if r.kind in WITHIN_REQUEST_KINDS))

    return build_step_model(decode_curve=decode_curve, prefill=prefill, largest_batch=largest_batch,
                            reference_context=reference_context, largest_prefill=largest_prefill)


def _busiest(pool: deployment.Pool) -> deployment.Pool:
    return replace(pool, busiest_experts=True) if pool.expert_parallel > 1 else pool


def busiest_experts_note(setup) -> str:
    """What an answer's assumptions add where simulation_of read the steps at their busiest device (_busiest), else
    nothing."""
    pools = [pool for pool in (setup.decode, setup.prefill) if pool is not None]
    if all(_busiest(pool) is pool for pool in pools):
        return ""
    return ("; its expert-parallel steps read as the busiest device's experts, the largest share of a step's experts "
            "hit under uniform routing (the bound reads the mean device's)")


def simulation_of(request, setup, bound: deployment.ServingBound, evaluator: Evaluator, scheduler: Scheduler,
                  traffic: Traffic, speculative: deployment.Speculative | None) -> Simulation:
    """`setup`: the request resolved (serving_analyses.ServingSetup); `bound`: its deployment's bound (its running
    batch caps the simulated one: the KV cache and the engine's cap); `evaluator`: whose step times;
    `speculative`: the request's, its draft model resolved."""
    decode, prefill = setup.decode, setup.prefill
    # A step waits for its busiest device: the simulation expects an expert-parallel step as that device runs it.
    worker = deployment.WorkerStep(setup.arch, evaluator, setup.topology, _busiest(decode), setup.dtypes)
    draft_worker = deployment.draft_worker_for(speculative, worker)
    prefill_worker = worker if prefill is None else deployment.WorkerStep(setup.arch, evaluator, setup.topology,
                                                                         _busiest(prefill), setup.dtypes)
    # The bound's running batch is the group's share of the concurrency, at most the request's cap, unless the KV
    # cache holds fewer: only then does it cap the simulated batch (the engine's cap is the scheduler's).
    state = bound.pools[-1]
    share = max(1, request.concurrency // decode.groups)
    stated = decode.max_batch_per_group or share
    running_cap = state.batch_per_group if state.batch_per_group < min(share, stated) else scheduler.max_running
    largest = max(1, min(running_cap, scheduler.max_running, -(-request.concurrency // decode.groups)))
    reference = request.input_len + request.output_len // 2
    steps = _step_model(worker, prefill_worker, speculative, draft_worker, largest_batch=scheduler.padded(largest),
                        reference_context=reference, largest_prefill=max(traffic.input.longest,
                                                                         min(scheduler.step_tokens, 65536)))
    disaggregation = None
    if prefill is not None:
        servers_share = prefill.groups / decode.groups
        servers = max(1, int(servers_share))
        disaggregation = Disaggregation(steps, servers, servers_share / servers, bound.kv_transfer_s,
                                        float(request.input_len))
    acceptance = speculative.acceptance_length if speculative else 1.0
    return Simulation(traffic, scheduler, steps, running_cap, decode.groups, acceptance, disaggregation)


class SimulationTooLarge(Exception):
    """The simulation would take more events than it may (engine_loop.MAX_EVENTS)."""


def _percentiles(values: np.ndarray, floor: float) -> dict[str, float]:
    p50, p90, p99 = (max(floor, float(v)) for v in np.percentile(values, (50, 90, 99)))
    return {"p50": p50, "p90": p90, "p99": p99}


def _limited_by(run: Run) -> str:
    if run.steps_full:
        return "running cap"
    return "prefill" if run.busy_prefill_s > run.busy_decode_s else "decode"


def simulated_expectation(request, setup, bound: deployment.ServingBound,
                          calibration: SchedulingCalibration | CarriedSchedulingCalibration,
                          speculative: deployment.Speculative | None, evaluator: Evaluator) -> tuple[dict, dict, dict]:
    """(the expected figures, their percentiles, the simulation's account) of the request's benchmark simulated with
    its engine's scheduler, `evaluator`'s steps (the bound's for a device's own calibration, its kernel tables' for
    a carried one) and the calibration's timing: medians for TTFT and TPOT, the mean for the end-to-end time, the
    rates of the simulated run; none below the bound's times nor above its rates. SimulationTooLarge where it would
    take more events than it may; `speculative`: the request's, its draft model resolved."""
    scheduler = scheduler_of(request, setup.device)
    simulation = simulation_of(request, setup, bound, evaluator, scheduler, traffic_of(request), speculative)
    events = estimated_events(simulation)
    if events > MAX_EVENTS:
        raise SimulationTooLarge(events)
    run = simulate(simulation, calibration.timing)
    percentiles = {"ttft_s": _percentiles(run.ttft_s, bound.ttft_s), "tpot_s": _percentiles(run.tpot_s, bound.tpot_s),
                   "e2e_s": _percentiles(run.e2e_s, bound.ttft_s + (request.output_len - 1) * bound.tpot_s)}
    ttft, tpot = percentiles["ttft_s"]["p50"], percentiles["tpot_s"]["p50"]
    rate = min(bound.requests_per_s, len(run.ttft_s) / run.duration_s * run.groups)
    output = float(run.output_len.mean())
    figures = {
        # A chunk streams every stream_interval tokens, and a step (a verification, with speculative decoding) emits
        # its tokens together: the client sees one every max(interval, tokens a step) tokens' time.
        "ttft_s": ttft, "tpot_s": tpot, "itl_s": max(scheduler.stream_interval, simulation.acceptance) * tpot,
        "e2e_latency_s": max(bound.e2e_latency_s, float(run.e2e_s.mean())), "requests_per_s": rate,
        "output_tokens_per_s": rate * output, "output_tokens_per_s_per_device": rate * output / bound.devices,
        "tokens_per_s_per_device": rate * (output + float(run.input_len.mean())) / bound.devices,
        "tokens_per_s_per_user": 1 / tpot}
    account = {"scheduler": {name: getattr(scheduler, name) for name in SCHEDULER_FIELDS},
               "calibration": (f"{calibration.address}: decode x{calibration.decode_scale:.3g}, prefill "
                               f"x{calibration.prefill_scale:.3g}, {calibration.step_overhead_s * 1e3:.3g} ms a step, "
                               f"{calibration.request_overhead_s * 1e3:.3g} ms a request"),
               "basis": calibration.basis, "requests": len(run.ttft_s), "events": run.events,
               "limited_by": _limited_by(run), "stream_interval": scheduler.stream_interval}
    return figures, percentiles, account


SCHEDULER_FIELDS = ("engine", "batching", "step_tokens", "max_running", "recv_interval", "graph_batch_sizes",
                    "stream_interval", "chunked", "balance_wait_steps", "source")


def launch_of(request, setup, speculative: deployment.Speculative | None) -> Launch | None:
    """The commands that start the request's deployment on its engine and benchmark it (planning/launch.py); None
    where the engine is not one the service knows."""
    if request.engine is None or engine_family(request.engine) is None:
        return None
    decode, prefill = request.pools()
    traffic = traffic_of(request)
    k = speculative.draft_tokens if speculative else 0
    return launch(LaunchRequest(
        engine=request.engine, model=_checkpoint(request), decode=_layout(decode),
        prefill=_layout(prefill) if prefill is not None else None, scheduler=scheduler_of(request, setup.device),
        kv_cache_fp8=setup.dtypes.kv_cache.startswith("fp8"),
        speculative=(speculative.method, k) if speculative else None,
        context_len=request.input_len + request.output_len + k, input_len=request.input_len,
        output_len=request.output_len, concurrency=request.concurrency, range_ratio=traffic.input.range_ratio,
        prompts=traffic.prompts))


def _layout(pool) -> PoolLayout:
    return PoolLayout(pool.workers, pool.tensor_parallel, pool.expert_parallel, pool.attention_data_parallel)


def _checkpoint(request) -> str:
    """The Hugging Face repository of a catalog model (its config's file name, owner__name), else a placeholder."""
    if request.model_id is None:
        return "YOUR/CHECKPOINT"
    for entry in model_catalog():
        if entry["id"] == request.model_id:
            return entry["file"].removesuffix(".json").replace("__", "/", 1)
    return request.model_id
