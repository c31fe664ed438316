"""Measured serving runs in, serving calibrations out: each run of whatever form mapped to the deployment the serving
analysis takes, held against the service's bound there (a run faster than its bound is refused unless the submission
says why), stored beside that bound; the runs of one scope fitted (service/core/expectations/serving_runs.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict
from typing import Any, NamedTuple

from pydantic import ValidationError

from schemas.serving import ServingAnalysisRequest
from schemas.serving_runs import InferenceXServingRuns, NativeServingRuns, VllmBenchServingRuns
from service.core import budget
from service.core.errors import CostModelError
from service.core.expectations.serving_runs import ServingPoint, fit_serving_calibration, most_common_shape
from service.core.simulation.engine_loop import MAX_EVENTS
from service.core.simulation.fit import MeasuredRun as SimulatedRun
from service.core.simulation.fit import calibrate_scope, prefill_prior
from service.persistence.catalog import (
    SCHEDULING_FIELD,
    SCHEDULING_NOT_FITTED_FIELD,
    DeviceCatalog,
    scheduling_calibrations,
)
from service.persistence.repository import SERVING_KEY
from service.persistence.tables import ServingRun
from service.runtime.errors import Unprocessable, invalid_nested
from service.translation.models.analyses import core_dtypes, resolve_model
from service.translation.serving import inferencex
from service.translation.serving.analyses import analyze_serving_request, layout_of_body, speculative_method, unit_run
from service.translation.serving.simulation import SimulationTooLarge

# Where each form keeps the measured medians: what a refusal names.
MEASURED_FIELDS = {"native": ("tpot_s", "ttft_s"), "vllm-bench": ("median_tpot_ms", "median_ttft_ms"),
                   "inferencex": ("metrics.median_tpot", "metrics.median_ttft")}


class MeasuredRun(NamedTuple):
    request: dict[str, Any]  # the POST /v1/analyze/serving body of its deployment
    tpot_s: float
    ttft_s: float


def _model_choice(body) -> dict[str, Any]:
    return {"model_id": body.model_id} if body.model_id is not None else {"model": body.model}


def _native(body: NativeServingRuns) -> list[MeasuredRun]:
    base = {"device_id": body.device_id, "engine": body.engine, **_model_choice(body)}
    return [MeasuredRun({**base, **(run.deployment or body.deployment).model_dump(exclude_unset=True),
                         "input_len": run.input_len, "output_len": run.output_len, "concurrency": run.concurrency},
                        run.tpot_s, run.ttft_s)
            for run in body.runs]


def _vllm_bench(body: VllmBenchServingRuns) -> list[MeasuredRun]:
    base = {"device_id": body.device_id, "engine": body.engine, **_model_choice(body),
            **body.deployment.model_dump(exclude_unset=True)}
    runs = []
    for index, run in enumerate(body.runs):
        concurrency = run.max_concurrency or body.concurrency
        if concurrency is None:
            raise Unprocessable("a run without max_concurrency needs the body's concurrency", [
                {"loc": f"body.runs.{index}.max_concurrency", "msg": "null, and the body gives no concurrency"}])
        runs.append(MeasuredRun({**base, "input_len": max(1, round(run.total_input_tokens / run.completed)),
                                 "output_len": max(1, round(run.total_output_tokens / run.completed)),
                                 "concurrency": concurrency},
                                run.median_tpot_ms / 1e3, run.median_ttft_ms / 1e3))
    return runs


def _inferencex(body: InferenceXServingRuns) -> list[MeasuredRun]:
    overrides: dict[str, Any] = {name: value for name, value in
                                 (("device_id", body.device_id), ("engine", body.engine)) if value is not None}
    if body.model_id is not None or body.model is not None:
        overrides |= {"model_id": None, "model": None} | _model_choice(body)
    runs = []
    for index, row in enumerate(body.runs):
        try:
            request = inferencex.serving_request(row.model_dump())
        except inferencex.UnmappedRun as exc:
            raise Unprocessable(f"body.runs.{index}: cannot map {exc}", [
                {"loc": f"body.runs.{index}", "msg": f"cannot map {exc} to a deployment (docs/serving.md)"}]) from None
        request = {name: value for name, value in (request | overrides).items() if value is not None}
        metrics = row.metrics.model_dump()
        runs.append(MeasuredRun(request, inferencex.measured_tpot(metrics), inferencex.measured_ttft(metrics)))
    return runs


MAPPINGS: dict[str, Callable[[Any], list[MeasuredRun]]] = {"native": _native, "vllm-bench": _vllm_bench, "inferencex": _inferencex}


def _relocated(exc: Unprocessable, index: int) -> Unprocessable:
    """An analysis's 422 (locations under `body`) as the run's (under `body.runs.<index>`)."""
    fields = [{**field, "loc": f"body.runs.{index}" + field["loc"].removeprefix("body")} for field in exc.fields]
    return Unprocessable(f"body.runs.{index}: {exc.detail}", fields)


def run_records(body, catalog: DeviceCatalog) -> list[dict[str, Any]]:
    """Each run as stored, with the bound at its deployment; a run the analysis refuses, or one faster than its bound
    without the body's exceeds_bound_reason, is a 422 naming it, and nothing is stored."""
    records = []
    for index, run in enumerate(MAPPINGS[body.format](body)):
        budget.check()  # each run is a serving analysis (1,000 inline configs were 28 s of CPU, unchecked)
        try:
            request = ServingAnalysisRequest.model_validate({**run.request, "calibration": "none"})
        except ValidationError as exc:
            raise invalid_nested(exc, ["body", "runs", str(index)]) from None
        try:
            # Resolved once: an inline config would otherwise be parsed for the bound and again for the record.
            name, arch = resolve_model(request, catalog)
            bound = analyze_serving_request(request, catalog, (name, arch)).bound
        except Unprocessable as exc:
            raise _relocated(exc, index) from None
        beaten = [(field, measured, limit) for field, measured, limit in
                  zip(MEASURED_FIELDS[body.format], (run.tpot_s, run.ttft_s), (bound.tpot_s, bound.ttft_s), strict=True)
                  if measured < limit]
        if beaten and body.exceeds_bound_reason is None:
            raise Unprocessable(f"body.runs.{index}: faster than its lower bound", [
                {"loc": f"body.runs.{index}.{field}",
                 "msg": f"measured {measured:.4g} s is below the bound {limit:.4g} s at this deployment: a wrong "
                        "deployment or unit, or something the bound does not model (then say so in "
                        "exceeds_bound_reason)"} for field, measured, limit in beaten])
        records.append({
            "device_id": request.device_id, "engine": request.engine, "model": name,
            "precision": core_dtypes(request, arch).headline_weights, "speculative": speculative_method(request),
            "input_len": request.input_len, "output_len": request.output_len, "concurrency": request.concurrency,
            "request": request.model_dump(mode="json", exclude_defaults=True, exclude={"calibration"}),
            "tpot_s": run.tpot_s, "ttft_s": run.ttft_s, "bound_tpot_s": bound.tpot_s, "bound_ttft_s": bound.ttft_s,
            "bound_prefill_share_s": bound.prefill_share_s, "source": body.source,
            "exceeds_bound_reason": body.exceeds_bound_reason if beaten else None})
    return records


def points_of(runs: list[ServingRun]) -> list[ServingPoint]:
    return [ServingPoint(run.input_len, run.output_len, run.concurrency, run.bound_tpot_s, run.bound_ttft_s,
                         run.tpot_s, run.ttft_s, run.bound_prefill_share_s) for run in runs]


def refit_serving(runs: list[ServingRun], catalog: DeviceCatalog) -> dict[str, Any] | str:
    """The calibrations of one scope's runs (newest first), as the calibrations table keeps them: the steady-state
    line's fields, and under SCHEDULING_FIELD the scheduling simulation's fit of the same runs (None, with the reason
    under SCHEDULING_NOT_FITTED_FIELD, where there is none); or why there is none at all (under three runs)."""
    if len(runs) < 3:
        return (f"{len(runs)} run{'s' if len(runs) != 1 else ''} of this scope: a serving calibration needs at least 3 "
                f"(a scale and an overhead for TPOT and TTFT each, and an error checked on runs it did not see)")
    first, points = runs[0], points_of(runs)
    key = tuple(getattr(first, name) for name in SERVING_KEY)
    sources = ", ".join(sorted({run.source for run in runs}))[:300]
    fitted = fit_serving_calibration(
        points, id="measured:" + ":".join(key), device_id=first.device_id, engine=first.engine,
        precision=first.precision, speculative=first.speculative, source=f"{len(runs)} runs submitted ({sources})",
        fit_shape=most_common_shape(points), model=first.model, origin="measured",
        layouts=[layout_of_body(run.request, run.speculative) for run in runs])
    scheduling, why_not = _scheduling_refit(runs, catalog, sources)
    return {**asdict(fitted), SCHEDULING_FIELD: scheduling, SCHEDULING_NOT_FITTED_FIELD: why_not}


# The newest runs of a scope its scheduling fit simulates: each is a simulated benchmark (a few to a hundred
# milliseconds of CPU) run inside the write's transaction.
MAX_SIMULATED_RUNS = 100


def simulated_run(run: ServingRun, catalog: DeviceCatalog) -> SimulatedRun | str:
    """The run simulated at unit timing beside what it measured, or why it cannot be."""
    request = ServingAnalysisRequest.model_validate({**run.request, "calibration": "none"})
    if request.disaggregated is not None:
        return "disaggregated (the simulation does not answer for disaggregated pools)"
    try:
        simulated = unit_run(request, catalog, bounded=True)
    except SimulationTooLarge:
        return f"over the simulation's limit of {MAX_EVENTS:,} events"
    except CostModelError as exc:  # an engine whose scheduler the service does not know, say
        return f"not simulable ({exc})"
    except Unprocessable as exc:  # its model or device changed since it was stored
        return f"no longer analysable ({exc.detail})"
    assert simulated is not None  # on its bound's steps, never on kernel tables
    return SimulatedRun(simulated.features, run.input_len, run.output_len, run.tpot_s, run.ttft_s)


def simulated_runs(runs: list[ServingRun], catalog: DeviceCatalog) -> Iterator[tuple[ServingRun, SimulatedRun | str]]:
    """The scope's newest MAX_SIMULATED_RUNS runs (`runs`: newest first), each beside simulated_run's answer: what
    its scheduling fit reads, and its parity chart draws."""
    for run in runs[:MAX_SIMULATED_RUNS]:
        budget.check()
        yield run, simulated_run(run, catalog)


def _scheduling_refit(runs: list[ServingRun], catalog: DeviceCatalog,
                      sources: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the scheduling calibration of the scope's newest MAX_SIMULATED_RUNS runs, why there is none): each run
    simulated as the deployment it was stored with (its engine's preset scheduler: a stored run names none), then
    fitted as the shipped ones are (service/core/simulation/fit.py), checked on the shapes a fit to the commonest one
    never saw. Where the runs cover one prompt length, the prefill scale is the shipped calibrations' median (a
    prior)."""
    simulated: list[SimulatedRun] = []
    left_out: Counter[str] = Counter()
    for _, found in simulated_runs(runs, catalog):
        if isinstance(found, str):
            left_out[found] += 1
        else:
            simulated.append(found)
    skipped = "; ".join(f"{count} {why}" for why, count in left_out.items())
    if len(simulated) < 3:
        tried = min(len(runs), MAX_SIMULATED_RUNS)
        return None, (f"{len(simulated)} of the scope's {tried} newest runs could be simulated "
                      f"({skipped or 'none left out'}): a scheduling calibration needs at least 3")
    first = runs[0]
    shape = most_common_shape(simulated)
    prior = prefill_prior([c.prefill_scale for c in scheduling_calibrations().values() if "prefill_scale" in c.fitted])
    source = f"{len(simulated)} runs submitted ({sources})" + (f"; left out: {skipped}" if skipped else "")
    calibration = calibrate_scope((first.device_id, first.engine, first.precision, first.speculative), simulated,
                                  source=source, prior=prior, held_out_prior=prior, fit_shape=shape, model=first.model,
                                  origin="measured")
    return asdict(calibration), None
