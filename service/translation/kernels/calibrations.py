"""Kernel timings in, calibrations out: each submitted timing costed on its device, the matmul timings of one
engine and compute dtype fitted (service/core/expectations/kernels.py), and every calibration, shipped or fitted, described
with its parameters, what it was fitted on and how wrong it was."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from schemas.calibrations import KernelTimingsCreate
from service.core.dtypes import peak_dtype
from service.core.errors import CostModelError
from service.core.expectations.engines import EngineCalibration
from service.core.expectations.kernels import MIN_POINTS, KernelCalibration, fit_kernel_terms
from service.core.expectations.serving_runs import MIN_SPREAD, ServingCalibration
from service.core.hardware import DeviceSpec
from service.core.operators import operator_cost
from service.core.simulation.carried_over import CarriedSchedulingCalibration
from service.core.simulation.fit import SchedulingCalibration
from service.persistence.catalog import (
    DeviceCatalog,
    attention_calibrations,
    carried_scheduling_calibrations,
    engine_calibrations,
    gemm_calibrations,
    moe_calibrations,
    scheduling_calibrations,
    serving_calibrations,
)
from service.persistence.repository import Refit
from service.persistence.tables import KernelTiming
from service.runtime.errors import CalibrationNotFound, Unprocessable, cost_model_error
from service.translation.operators.analyses import operator_fields

KERNEL_MODEL = "t = t0 + max(T_compute / compute_efficiency, T_memory / memory_efficiency), T at the nominal roofs"
SERVING_MODEL = ("TPOT = tpot_scale x (bound + prefill share) + tpot_overhead; TTFT = ttft_scale x bound + ttft_overhead "
                 "(never below the bound)")


def timing_records(body: KernelTimingsCreate, device: DeviceSpec) -> list[dict]:
    """Each timing as stored: its operator's model FLOPs and HBM bytes on the device (a timing the cost models
    refuse is a 422 naming it, and nothing is stored)."""
    records = []
    for index, timing in enumerate(body.timings):
        operator = timing.operator
        try:
            cost = operator_cost(operator.kind, **operator_fields(operator, device))
        except CostModelError as exc:
            raise cost_model_error(exc, f"body.timings.{index}.operator") from None
        records.append({"engine": timing.engine or body.engine, "source": timing.source or body.source,
                        "kind": operator.kind, "dtype": peak_dtype(cost.compute_dtype),
                        "operator": operator.model_dump(exclude_defaults=True), "flops": float(cost.flops),
                        "hbm_bytes": float(cost.bytes_total), "time_s": timing.time_s})
    return records


def _matmul_terms(device: DeviceSpec, dtype: str, timings: Iterable[KernelTiming]):
    """The matmul timings' (rows, compute terms, memory terms, measured times) at the device's nominal roofs."""
    rows = [t for t in timings if t.kind == "matmul"]
    peak = device.peak(dtype, "tensor")
    hbm = device.memory_level("hbm")
    if peak is None or hbm is None:
        return rows, None, None, None
    flops = np.array([t.flops for t in rows], dtype=float)
    moved = np.array([t.hbm_bytes for t in rows], dtype=float)
    return (rows, flops / peak.flops_per_s, moved / hbm.bandwidth_bytes_per_s,
            np.array([t.time_s for t in rows], dtype=float))


def refit_for(device: DeviceSpec) -> Refit:
    """The fit of a (device, engine, dtype)'s timings, as the calibrations table keeps it, or why there is none:
    under MIN_POINTS matmul timings of as many distinct shapes, or no nominal roof for the dtype."""
    def refit(timings: list[KernelTiming]) -> dict | str:
        if not timings:
            return "no timings are left"
        dtype = timings[0].dtype
        rows, compute, memory, measured = _matmul_terms(device, dtype, timings)
        if compute is None or memory is None or measured is None:
            return (f"the device has no nominal {dtype} tensor peak and HBM bandwidth to fit against (PUT "
                    f"/v1/devices/{device.id} with them)")
        distinct = len({(t.operator["m"], t.operator["n"], t.operator["k"]) for t in rows})
        if len(rows) < MIN_POINTS or distinct < MIN_POINTS:
            return (f"{len(rows)} plain matmul timings of {distinct} distinct (m, n, k) (of {len(timings)} timings): a "
                    f"calibration needs at least {MIN_POINTS} distinct shapes, for its three parameters and an error "
                    f"checked on timings it did not see (only plain matmuls are fitted)")
        sizes = np.array([[t.operator["m"], t.operator["n"], t.operator["k"]] for t in rows])
        fit = fit_kernel_terms(compute, memory, measured, sizes)
        first = rows[0]
        return {"device_id": device.id, "dtype": first.dtype, "engine": first.engine,
                "source": f"{len(rows)} timings submitted for the device ({', '.join(sorted({t.source for t in rows}))[:300]})",
                "peak_flops_per_s": float(device.peak(first.dtype, "tensor").flops_per_s),  # type: ignore[union-attr]
                "hbm_bytes_per_s": float(device.memory_level("hbm").bandwidth_bytes_per_s),  # type: ignore[union-attr]
                "t0_s": fit.t0_s, "compute_efficiency": fit.compute_efficiency,
                "memory_efficiency": fit.memory_efficiency, "fitted_on": len(rows), "checked_on": len(rows),
                "roof_compute_efficiency": fit.roof_compute_efficiency,
                "roof_memory_efficiency": fit.roof_memory_efficiency,
                "median_error": fit.median_error, "p90_error": fit.p90_error,
                "bound_median_error": fit.bound_median_error, "origin": "measured", "checked_by": fit.checked_by,
                "shapes": [[int(sizes[:, axis].min()), int(sizes[:, axis].max())] for axis in range(3)],
                "anchors": fit.anchors, "unidentified": list(fit.unidentified)}
    return refit


def _parameter(name: str, value: float, unit: str, meaning: str, unidentified: tuple[str, ...], why: str) -> dict:
    """A fitted parameter; one its measurements could not tell has no value, and says why (`why`)."""
    if name not in unidentified:
        return {"name": name, "value": value, "unit": unit, "meaning": meaning}
    return {"name": name, "value": None, "unit": unit, "meaning": meaning, "identified": False,
            "note": f"not identified: {why}"}


def _efficiency(calibration: KernelCalibration, name: str, meaning: str) -> dict:
    side = name.split("_")[0]
    return _parameter(name, getattr(calibration, name), "1", meaning, calibration.unidentified,
                      f"no timing fitted was {side}-bound, so the fit holds it at 1 (the roof) and the errors reported "
                      f"say nothing of {side}-bound matmuls, whose expectations say extrapolated; submit {side}-bound "
                      f"shapes to fit it")


def kernel_public(calibration: KernelCalibration) -> dict:
    return {
        "id": calibration.id, "kind": "kernel", "origin": calibration.origin, "device_id": calibration.device_id,
        "engine": calibration.engine, "scope": (f"plain matmuls computing in {calibration.dtype}"
                                                if calibration.operator == "matmul" else
                                                f"one MoE layer's routed experts on one device (fused MoE), "
                                                f"{_stored(calibration)}: a serving step's grouped matmuls"),
        "model": KERNEL_MODEL,
        "parameters": [
            {"name": "t0", "value": calibration.t0_s, "unit": "s", "meaning": "a kernel's fixed cost (launch, tail)"},
            _efficiency(calibration, "compute_efficiency",
                        f"the share of the nominal {calibration.dtype} tensor peak a compute-bound matmul reaches"),
            _efficiency(calibration, "memory_efficiency",
                        "the share of the nominal HBM bandwidth a memory-bound matmul reaches")],
        "fitted_on": calibration.fitted_on, "checked_on": calibration.checked_on, "checked_by": calibration.checked_by,
        "median_error": calibration.median_error, "p90_error": calibration.p90_error,
        "bound_median_error": calibration.bound_median_error, "source": calibration.source,
        "shapes": [list(span) for span in calibration.shapes] if calibration.shapes else None}


def _stored(calibration: KernelCalibration) -> str:
    if calibration.weights is None:
        return f"{calibration.dtype} weights"
    return f"{calibration.weights} weights multiplied in {calibration.dtype} (weight-only kernels)"


def _overhead(calibration: ServingCalibration | EngineCalibration, name: str, value: float, meaning: str) -> dict:
    return _parameter(name, value, "s", meaning, calibration.unidentified,
                      f"the runs' bounds lie within a factor {MIN_SPREAD} of each other, so a scale and an overhead "
                      f"fit them alike and the split the fit reports is arbitrary: its expectations at those bounds "
                      f"stand, at others they are the fit carried where it saw nothing; submit runs at other lengths "
                      f"or concurrencies to fit it")


def serving_public(calibration: ServingCalibration) -> dict:
    served = f"{calibration.model} " if calibration.model else ""
    return {
        "id": calibration.address, "kind": "serving", "origin": calibration.origin,
        "device_id": calibration.device_id, "engine": calibration.engine,
        "scope": f"deployments of {served}weights in {calibration.precision}, speculative decoding "
                 f"{calibration.speculative}",
        "model": SERVING_MODEL,
        **_line_fields(calibration, "bound", "bound TPOT and prefill share (the bound's prefill_share_s, 0 disaggregated)",
                       "the scheduler's cost per decode step beside the bound"),
        "bound_median_error": calibration.bound_tpot_median_error}


def _line_fields(calibration: ServingCalibration | EngineCalibration, basis: str, tpot_basis: str,
                 step_cost: str) -> dict:
    """The public fields of a TPOT and a TTFT line fitted against `basis` (the bound, or the composed deployment)."""
    return {
        "parameters": [
            {"name": "tpot_scale", "value": calibration.tpot_scale, "unit": "1",
             "meaning": f"measured TPOT per {tpot_basis}"},
            _overhead(calibration, "tpot_overhead", calibration.tpot_overhead_s, step_cost),
            {"name": "ttft_scale", "value": calibration.ttft_scale, "unit": "1",
             "meaning": f"measured TTFT per {basis} TTFT"},
            _overhead(calibration, "ttft_overhead", calibration.ttft_overhead_s,
                      f"queueing and scheduling before the first token beside the {basis}")],
        "fitted_on": calibration.fitted_on, "checked_on": calibration.checked_on, "checked_by": calibration.checked_by,
        "median_error": calibration.tpot_median_error, "p90_error": calibration.tpot_p90_error,
        "source": calibration.source, "shapes": None,
        "workloads": [list(shape) for shape in calibration.shapes], "concurrency": list(calibration.concurrency),
        "layouts": list(calibration.layouts)}


def engine_public(calibration: EngineCalibration) -> dict:
    held = "; ".join(f"{device}: TPOT {tpot:.1%}, TTFT {ttft:.1%} over {runs} runs"
                     for device, tpot, ttft, runs in calibration.per_device)
    return {
        "id": calibration.address, "kind": "engine", "origin": "shipped", "device_id": calibration.device_id,
        "engine": calibration.engine,
        "scope": f"deployments in {calibration.precision}, speculative decoding {calibration.speculative}, on a device "
                 f"with kernel tables and no serving calibration of its own (basis 'kernels'); layouts fitted: "
                 f"{', '.join(calibration.layouts)}" + (f"; each device left out of the fit: {held}" if held else "")
                 + (f"; fitted to {', '.join(calibration.models)} ({calibration.layers} layers): another model reads "
                    f"its overheads scaled by its layers, extrapolated" if calibration.models else ""),
        "model": ENGINE_MODEL,
        **_line_fields(calibration, "composed deployment's",
                       "composed TPOT and prefill share (the deployment as its kernel tables run it)",
                       "the engine's cost per decode step beside its kernels"),
        "bound_median_error": None}


ENGINE_MODEL = ("TPOT = tpot_scale x (composed TPOT + composed prefill share) + tpot_overhead; TTFT = ttft_scale x "
                "composed TTFT + ttft_overhead; composed: the deployment with each row at its device's kernel fits' "
                "efficiencies; never below the bound")


SCHEDULING_MODEL = ("each simulated step = decode_scale x its decode + prefill_scale x its prefill + step_overhead; "
                    "each request's TTFT + request_overhead; steps at the bound (a device's own runs) or as the "
                    "device's kernel tables compose them (carried over); never below the bound")


def scheduling_public(calibration: SchedulingCalibration | CarriedSchedulingCalibration) -> dict:
    """A scheduling simulation's calibration: a device's own (fitted on its 1,024 / 1,024 runs alone and checked on
    its other shapes) or an engine's carried to kernel tables (checked on each device left out)."""
    steps = "its composed" if isinstance(calibration, CarriedSchedulingCalibration) else "its bound"
    parameters = [
        {"name": "decode_scale", "value": calibration.decode_scale, "unit": "1",
         "meaning": f"a simulated step's decode time per {steps} decode"},
        {"name": "prefill_scale", "value": calibration.prefill_scale, "unit": "1",
         "meaning": f"a simulated step's prefill time per {steps} prefill"
                    + ("" if "prefill_scale" in calibration.fitted else " (a prior: " + "; ".join(calibration.prior)
                                                                         + ")")},
        {"name": "step_overhead", "value": calibration.step_overhead_s, "unit": "s",
         "meaning": "the engine's cost per step (scheduling, launches, sampling)"},
        {"name": "request_overhead", "value": calibration.request_overhead_s, "unit": "s",
         "meaning": "a request's cost before its first token beyond its steps (tokenising, the HTTP path)"}]
    if isinstance(calibration, CarriedSchedulingCalibration):
        device_id = ", ".join(calibration.devices)  # as an engine calibration names the devices it was fitted over
        scope = (f"basis 'kernels' deployments of {calibration.engine} in {calibration.precision}, speculative "
                 f"decoding {calibration.speculative}, on any device with kernel tables; fitted on "
                 f"{', '.join(calibration.devices)}")
        checked_by = "each device left out of the fit in turn, its runs predicted from the others'"
        origin = "shipped"
    else:
        device_id = calibration.device_id
        runs = "the shipped runs" if calibration.model is None else f"the runs of {calibration.model} submitted"
        scope = (f"deployments of weights in {calibration.precision} on {calibration.device_id} with "
                 f"{calibration.engine}, speculative decoding {calibration.speculative} (basis 'runs', {runs})")
        shape = calibration.fit_shape
        checked_by = f"fitted to its {shape[0]:,} / {shape[1]:,} runs alone, checked on its runs of other shapes"
        origin = calibration.origin
    return {
        "id": calibration.address, "kind": "scheduling", "origin": origin,
        "device_id": device_id, "engine": calibration.engine, "scope": scope,
        "model": SCHEDULING_MODEL, "parameters": parameters, "fitted_on": calibration.fitted_on,
        "checked_on": calibration.checked_on, "checked_by": checked_by,
        "median_error": calibration.tpot_median_error, "p90_error": calibration.tpot_p90_error,
        "bound_median_error": None, "source": calibration.source, "shapes": None}


def all_calibrations(catalog: DeviceCatalog) -> list[dict]:
    """Shipped kernel (GEMM, then fused MoE), measured kernel, shipped serving, measured serving, engine and
    scheduling (a device's own shipped, those fitted to submitted runs, then those carried to kernel tables)
    calibrations, in that order."""
    return ([kernel_public(c) for c in gemm_calibrations().values()]
            + [kernel_public(c) for c in moe_calibrations().values()]
            + [kernel_public(c) for c in attention_calibrations().values()]
            + [kernel_public(c) for c in sorted(catalog.kernel_calibrations(), key=lambda c: c.id)]
            + [serving_public(c) for c in serving_calibrations().values()]
            + [serving_public(c) for c in catalog.measured_serving_calibrations()]
            + [engine_public(c) for c in engine_calibrations().values()]
            + [scheduling_public(c) for c in _scheduling_calibrations(catalog)])


def calibration_detail(calibration_id: str, catalog: DeviceCatalog, timings_of, runs_of) -> dict:
    """One calibration; a measured one with each of its measurements against the fit. `timings_of(device_id,
    engine, dtype)` reads a kernel one's timings, `runs_of(key)` a serving one's runs."""
    found = next((entry for entry in all_calibrations(catalog) if entry["id"] == calibration_id), None)
    if found is None:
        raise CalibrationNotFound(calibration_id)
    if found["origin"] != "measured" or found["kind"] == "scheduling":
        return {**found, "residuals": None, "run_residuals": None}
    if found["kind"] == "serving":
        serving = next(c for c in catalog.measured_serving_calibrations() if c.address == calibration_id)
        key = (serving.device_id, serving.engine, serving.model, serving.precision, serving.speculative)
        return {**found, "residuals": None, "run_residuals": [_run_residual(serving, run) for run in runs_of(key)]}
    calibration = next(c for c in catalog.kernel_calibrations() if c.id == calibration_id)
    rows, compute, memory, measured = _matmul_terms(catalog.get(calibration.device_id), calibration.dtype,
                                                    timings_of(calibration.device_id, calibration.engine,
                                                               calibration.dtype))
    residuals = []
    for index, row in enumerate(rows):
        bound = max(compute[index], memory[index])
        sizes = (row.operator["m"], row.operator["n"], row.operator["k"])
        expected = max(bound, calibration.expected_time_s(row.flops, row.hbm_bytes, sizes))
        residuals.append({"timing_id": row.id, "m": row.operator.get("m"), "n": row.operator.get("n"),
                          "k": row.operator.get("k"), "measured_time_s": row.time_s, "expected_time_s": float(expected),
                          "bound_time_s": float(bound), "error": float(expected / row.time_s - 1)})
    return {**found, "residuals": residuals, "run_residuals": None}


def _run_residual(calibration: ServingCalibration, run) -> dict:
    expected_tpot = calibration.tpot_s(run.bound_tpot_s, run.bound_prefill_share_s)
    expected_ttft = calibration.ttft_s(run.bound_ttft_s)
    return {"run_id": run.id, "input_len": run.input_len, "output_len": run.output_len,
            "concurrency": run.concurrency, "measured_tpot_s": run.tpot_s, "expected_tpot_s": expected_tpot,
            "bound_tpot_s": run.bound_tpot_s, "tpot_error": expected_tpot / run.tpot_s - 1,
            "measured_ttft_s": run.ttft_s, "expected_ttft_s": expected_ttft, "bound_ttft_s": run.bound_ttft_s,
            "ttft_error": expected_ttft / run.ttft_s - 1}


def parity_points(calibration_id: str, catalog: DeviceCatalog, timings_of, runs_of) -> tuple[str, str, list]:
    """(title, the quantity, points) of a calibration's parity chart: a measured kernel or serving one's stored
    measurements; a shipped serving, engine or scheduling one's runs against today's bounds, as its fit read them
    (service/translation/serving/parity.py); a shipped kernel one's timings are not shipped: a 422."""
    from service.rendering.calibration_charts import ParityPoint
    from service.translation.serving import parity

    detail = calibration_detail(calibration_id, catalog, timings_of, runs_of)
    title = f"{calibration_id}: predicted against measured"
    if detail["residuals"] is not None:
        return title, "kernel time", [ParityPoint(r["measured_time_s"], r["expected_time_s"], r["bound_time_s"])
                                      for r in detail["residuals"]]
    if detail["run_residuals"] is not None:
        return title, "TPOT", [ParityPoint(r["measured_tpot_s"], r["expected_tpot_s"], r["bound_tpot_s"])
                               for r in detail["run_residuals"]]
    if detail["kind"] == "serving":
        serving = next(c for c in serving_calibrations().values() if c.address == calibration_id)
        return title, "TPOT", parity.serving_points(serving, catalog)
    if detail["kind"] == "engine":
        engine = next(c for c in engine_calibrations().values() if c.address == calibration_id)
        return title, "TPOT", parity.engine_points(engine, catalog)
    if detail["kind"] == "scheduling":
        scheduling = next(c for c in _scheduling_calibrations(catalog) if c.address == calibration_id)
        if isinstance(scheduling, SchedulingCalibration) and scheduling.origin == "measured":
            key = (scheduling.device_id, scheduling.engine, scheduling.model, scheduling.precision, scheduling.speculative)
            return title, "TPOT", parity.submitted_points(scheduling, runs_of(key), catalog)
        return title, "TPOT", parity.scheduling_points(scheduling, catalog)
    reason = ("a shipped kernel calibration's timings are not shipped with the service: its errors on them are in "
              "GET /v1/calibrations/{id}; submit timings to chart a fit of your own")
    raise Unprocessable(reason, [{"loc": "path.calibration_id", "msg": reason}])


def _scheduling_calibrations(catalog: DeviceCatalog) -> list[SchedulingCalibration | CarriedSchedulingCalibration]:
    return [*scheduling_calibrations().values(), *catalog.measured_scheduling_calibrations(),
            *carried_scheduling_calibrations().values()]
