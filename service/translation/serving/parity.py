"""The runs a serving-side calibration was fitted to, each beside what the calibration expects of it and the bound:
the points of its parity chart (GET /v1/calibrations/{id}/parity.svg). A shipped calibration's are the InferenceX runs
shipped with the service (the newest of each configuration, as every shipped fit reads them), against today's bounds;
a measured scheduling one's the runs submitted to its scope, as its fit simulated them. Each point costs what its
fit cost it: an analysis, and for a scheduling calibration a simulated benchmark."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from schemas.serving import ServingAnalysisRequest
from service.core import budget
from service.core.expectations.engines import EngineCalibration
from service.core.expectations.serving_runs import ServingCalibration
from service.core.simulation.carried_over import CarriedSchedulingCalibration
from service.core.simulation.engine_loop import Features
from service.core.simulation.fit import SchedulingCalibration
from service.persistence.catalog import DeviceCatalog, shipped_runs
from service.rendering.calibration_charts import ParityPoint
from service.translation.serving import inferencex
from service.translation.serving.analyses import analyze_serving_request, bound_and_composed, unit_run_and_bound


def _shipped_rows(keep: Callable[[dict[str, Any]], bool]) -> Iterator[dict[str, Any]]:
    for row in inferencex.newest_runs(shipped_runs()):
        if keep(row):
            budget.check()
            yield row


def _point(measured: float, features: Features, calibration, bound: float) -> ParityPoint:
    """A simulated run's median TPOT at the calibration's timing, as an answer gives it (never below the bound)."""
    expected = float(np.median(features.tpot(calibration.timing)))
    return ParityPoint(measured, max(bound, expected), bound)


def serving_points(calibration: ServingCalibration, catalog: DeviceCatalog) -> list[ParityPoint]:
    """A shipped serving calibration's runs, each against today's bound and the line over it."""
    points = []
    scope = (calibration.device_id, calibration.engine, calibration.precision, calibration.speculative)
    for row in _shipped_rows(lambda r: inferencex.scope(r) == scope):
        request = ServingAnalysisRequest.model_validate(inferencex.serving_request(row) | {"calibration": "none"})
        bound = analyze_serving_request(request, catalog).bound
        points.append(ParityPoint(row["metrics"]["median_tpot"],
                                  calibration.tpot_s(bound.tpot_s, bound.prefill_share_s), bound.tpot_s))
    return points


def engine_points(calibration: EngineCalibration, catalog: DeviceCatalog) -> list[ParityPoint]:
    """An engine calibration's runs on every device with kernel tables, each against the line over its deployment as
    those tables compose it."""
    points = []
    scope = (calibration.engine, calibration.precision, calibration.speculative)
    for row in _shipped_rows(lambda r: (r["framework"], r["precision"], r["spec_method"]) == scope):
        bound, composed = bound_and_composed(ServingAnalysisRequest.model_validate(inferencex.serving_request(row)),
                                             catalog)
        if composed is not None:
            points.append(ParityPoint(row["metrics"]["median_tpot"], calibration.tpot_s(
                bound.tpot_s, composed.tpot_s, composed.prefill_share_s), bound.tpot_s))
    return points


def scheduling_points(calibration: SchedulingCalibration | CarriedSchedulingCalibration,
                      catalog: DeviceCatalog) -> list[ParityPoint]:
    """A shipped scheduling calibration's runs simulated as its fit simulated them: a device's own one's every run of
    its scope at the bound's steps, a carried one's aggregated runs on their kernel tables' steps."""
    if isinstance(calibration, CarriedSchedulingCalibration):
        engine_scope = (calibration.engine, calibration.precision, calibration.speculative)

        def keep(row):
            return not row["disagg"] and (row["framework"], row["precision"], row["spec_method"]) == engine_scope
    else:
        scope = (calibration.device_id, calibration.engine, calibration.precision, calibration.speculative)

        def keep(row):
            return inferencex.scope(row) == scope
    carried = isinstance(calibration, CarriedSchedulingCalibration)
    points = []
    for row in _shipped_rows(keep):
        request = ServingAnalysisRequest.model_validate(inferencex.simulated_request(row))
        found = unit_run_and_bound(request, catalog, on_kernels=carried)
        if found is not None:
            run, bound = found
            points.append(_point(row["metrics"]["median_tpot"], run.features, calibration, bound.tpot_s))
    return points


def submitted_points(calibration: SchedulingCalibration, runs: list, catalog: DeviceCatalog) -> list[ParityPoint]:
    """A measured scheduling calibration's runs (the scope's stored ones, newest first), simulated as its fit
    simulated them; those its fit left out stay out."""
    from service.translation.serving.runs import simulated_runs

    return [_point(run.tpot_s, found.features, calibration, run.bound_tpot_s)
            for run, found in simulated_runs(runs, catalog) if not isinstance(found, str)]
