"""A scheduling calibration: the numbers that turn the step model's times into an engine's, fitted to measured
benchmark runs through the simulation.

Each run is simulated once at unit timing; in a closed loop every request's TTFT and decode time are then linear in
the numbers (engine_loop.Features), so the fit moves them without simulating again: the median TPOT and the median
TTFT of each run against the measured ones, by the same soft-L1 loss on relative error as the steady-state line
(expectations/serving_runs.py). What the runs identify is fitted, the rest is a stated prior:
- decode_scale and step_overhead_s from the TPOTs (their bounds must differ: several concurrencies);
- request_overhead_s from the TTFTs;
- prefill_scale only where the runs cover two prompt lengths or more; else a prior carried from the scopes whose runs
  did: the median of the prefill scales that, beside a fit to their 1,024 / 1,024 runs alone, best predict their
  longer prompts (prefill kernels sit further from their compute roof than decode ones from the memory roof, so the
  decode scale is no guide); the calibration says which.
Scales are at least 1 and overheads at least 0, so no simulated step is faster than its bound."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from service.core.expectations.serving_runs import ROBUST_SCALE
from service.core.simulation.engine_loop import Features, Timing


@dataclass(frozen=True)
class MeasuredRun:
    """A simulated run at unit timing beside what the benchmark measured (medians and 99th percentiles, seconds)."""

    features: Features
    input_len: int
    output_len: int
    tpot_s: float
    ttft_s: float
    p99_tpot_s: float | None = None
    p99_ttft_s: float | None = None


@dataclass(frozen=True)
class SchedulingFit:
    timing: Timing
    fitted: tuple[str, ...]  # the numbers the runs identified
    prior: tuple[str, ...]  # the numbers set by the stated prior


def _robust(residuals, start, lower, scale):
    from scipy.optimize import least_squares

    return least_squares(residuals, start, bounds=(lower, np.inf), loss="soft_l1", f_scale=ROBUST_SCALE,
                         x_scale=scale).x


def _at_median(values: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """The features (rows of `columns`) of the request(s) whose value is the median (the two middle ones averaged
    for an even count, as np.median takes them)."""
    order = np.argsort(values, kind="stable")
    middle = len(order) // 2
    picked = order[[middle]] if len(order) % 2 else order[[middle - 1, middle]]
    return columns[picked].mean(axis=0)


def _tpot_columns(run: MeasuredRun) -> np.ndarray:
    """Per request: (decode model time, prefill model time, steps) of its decode, a token."""
    f = run.features
    per_token = np.maximum(f.output_len - 1, 1)
    return np.column_stack([f.decode_decode_s, f.decode_prefill_s, f.decode_steps]) / per_token[:, None]


def _ttft_columns(run: MeasuredRun) -> np.ndarray:
    """Per request: (decode model time, prefill model time, steps, fixed seconds) before its first token."""
    f = run.features
    return np.column_stack([f.ttft_decode_s, f.ttft_prefill_s, f.ttft_steps, f.ttft_fixed_s])


def _decode_numbers(rows: np.ndarray, measured: np.ndarray, prefill: float, start: Timing,
                    lowest: float) -> tuple[float, float]:
    """(decode scale, step overhead) for the median requests' TPOT features `rows` at this prefill scale."""
    def residuals(x: np.ndarray) -> np.ndarray:
        return (rows @ np.array([x[0], prefill, x[1]])) / measured - 1

    decode, step = _robust(residuals, [max(lowest, start.decode_scale), start.step_overhead_s], [lowest, 0.0],
                           [1.0, 1e-3])
    return float(decode), float(step)


def _first_token_numbers(rows: np.ndarray, measured: np.ndarray, decode: float, step: float, prefill: float | None,
                         start: Timing, lowest: float = 1.0) -> tuple[float, float]:
    """(request overhead, prefill scale) for the median requests' TTFT features `rows`; `prefill` None: fitted, else
    held at that value."""
    def residuals(x: np.ndarray) -> np.ndarray:
        scales = np.array([decode, x[1] if prefill is None else prefill, step, 1.0])
        return (rows @ scales + x[0]) / measured - 1

    request, fitted = _robust(residuals, [start.request_overhead_s, max(lowest, start.prefill_scale)], [0.0, lowest],
                              [1e-2, 1.0])
    return float(request), float(fitted if prefill is None else prefill)


def fit_scheduling(runs: Sequence[MeasuredRun], prefill_prior: float, lowest_scale: float = 1.0) -> SchedulingFit:
    """The decode scale and the step overhead from the runs' median TPOTs, then the request overhead (and the
    prefill scale, where two prompt lengths were run; else `prefill_prior`) from their median TTFTs, each
    minimising the soft-L1 loss of the relative errors. Each run's median is linear in the numbers but for which
    request is the median: the fit is solved on the median requests' features and repeated until they stay.
    `lowest_scale`: the least a scale may be (1 on bounds: no step faster than its bound)."""
    if len(runs) < 3:
        raise ValueError("a scheduling calibration needs at least three runs")
    free_prefill = len({run.input_len for run in runs}) >= 2
    measured_tpot = np.array([run.tpot_s for run in runs])
    measured_ttft = np.array([run.ttft_s for run in runs])
    tpot_columns = [_tpot_columns(run) for run in runs]
    ttft_columns = [_ttft_columns(run) for run in runs]
    timing = Timing(2.0, prefill_prior, 1e-3, 1e-2)
    for _ in range(MAX_ROUNDS):
        weights = np.array([timing.decode_scale, timing.prefill_scale, timing.step_overhead_s])
        tpot_rows = np.array([_at_median(c @ weights, c) for c in tpot_columns])
        decode, step = _decode_numbers(tpot_rows, measured_tpot, timing.prefill_scale, timing, lowest_scale)
        weights = np.array([decode, timing.prefill_scale, step, 1.0])
        ttft_rows = np.array([_at_median(c @ weights, c) for c in ttft_columns])
        request, prefill = _first_token_numbers(ttft_rows, measured_ttft, decode, step,
                                                None if free_prefill else prefill_prior, timing, lowest_scale)
        settled = Timing(decode, prefill, step, request)
        if np.allclose(list(vars(settled).values()), list(vars(timing).values()), rtol=1e-9, atol=1e-12):
            break
        timing = settled
    fitted = ("decode_scale", "step_overhead_s", "request_overhead_s") + (("prefill_scale",) if free_prefill else ())
    return SchedulingFit(settled, fitted, () if free_prefill else (f"prefill_scale = {prefill_prior:.3g} (prior)",))


# Rounds of (median requests, fit) at most: the median requests stop changing within two or three.
MAX_ROUNDS = 6


@dataclass(frozen=True)
class FittedTiming:
    """What every scheduling calibration holds: its engine, weights' type and speculative method, the four numbers
    (Timing) and which of them the runs fitted."""

    id: str
    engine: str
    precision: str
    speculative: str
    source: str
    decode_scale: float
    prefill_scale: float
    step_overhead_s: float
    request_overhead_s: float
    fitted: tuple[str, ...]
    prior: tuple[str, ...]
    fitted_on: int

    def __post_init__(self):
        for name in ("fitted", "prior"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    @property
    def timing(self) -> Timing:
        return Timing(self.decode_scale, self.prefill_scale, self.step_overhead_s, self.request_overhead_s)

    def timing_sentence(self, decode: str, prefill: str) -> str:
        """What the four numbers do to a step (`decode`, `prefill`: what they scale, e.g. "its decode bound") and a
        request, and which the runs fitted."""
        return (f"each step {self.decode_scale:.3g} x {decode} + {self.prefill_scale:.3g} x {prefill} + "
                f"{self.step_overhead_s * 1e3:.3g} ms, each request {self.request_overhead_s * 1e3:.3g} ms more to its "
                f"first token; fitted: {', '.join(self.fitted)}" + (f"; prior: {', '.join(self.prior)}" if self.prior else ""))


FIT_SHAPE = (1024, 1024)


@dataclass(frozen=True)
class SchedulingCalibration(FittedTiming):
    """A scheduling fit of one device, engine, weights' type and speculative method (and model, where fitted to runs
    submitted to the service), with how wrong it was on the workload shapes a fit to the runs of `fit_shape` alone
    never saw (its prefill prior then leaving this device out)."""

    device_id: str
    checked_on: int  # runs of other shapes (0: not checked, too few runs of either)
    tpot_median_error: float | None
    tpot_p90_error: float | None
    ttft_median_error: float | None
    ttft_p90_error: float | None
    ttft_p99_median_error: float | None  # of each run's 99th percentile TTFT, median over the runs
    fit_shape: tuple[int, int] = FIT_SHAPE  # (input, output) lengths of the runs the checked fit saw
    model: str | None = None  # the model its runs served, where kept per model (submitted runs)
    origin: str = "shipped"  # or "measured": fitted to runs submitted to the service

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "fit_shape", tuple(self.fit_shape))  # read back from JSON as a list

    @property
    def address(self) -> str:
        return f"scheduling:{self.id}"

    @property
    def basis(self) -> str:
        shape = f"{self.fit_shape[0]:,} / {self.fit_shape[1]:,}"
        checked = ("not checked on other shapes (too few runs)" if not self.checked_on else
                   f"fitted to its {shape} runs alone and checked on {self.checked_on} runs of other shapes: TPOT "
                   f"off by {self.tpot_median_error:.1%} in the median ({self.tpot_p90_error:.1%} p90), TTFT by "
                   f"{self.ttft_median_error:.1%} ({self.ttft_p90_error:.1%} p90)"
                   + (f", p99 TTFT by {self.ttft_p99_median_error:.1%}" if self.ttft_p99_median_error is not None
                      else ""))
        model = f" of {self.model}" if self.model else ""
        return (f"a scheduling simulation of {self.fitted_on} {self.engine} runs{model} on {self.device_id} "
                f"({self.precision}, speculative {self.speculative}; {self.source}): "
                f"{self.timing_sentence('its decode bound', 'its prefill bound')}; {checked}")


def run_errors(timing: Timing, runs: Sequence[MeasuredRun]) -> tuple[list[float], list[float], list[float]]:
    """Each run's relative error at `timing` of its median TPOT, its median TTFT and (where measured) its 99th
    percentile TTFT."""
    tpot = [abs(float(np.median(run.features.tpot(timing))) / run.tpot_s - 1) for run in runs]
    ttft = [abs(float(np.median(run.features.ttft(timing))) / run.ttft_s - 1) for run in runs]
    tail = [abs(float(np.percentile(run.features.ttft(timing), 99)) / run.p99_ttft_s - 1) for run in runs
            if run.p99_ttft_s]
    return tpot, ttft, tail


def _errors(fit: SchedulingFit, runs: Sequence[MeasuredRun]) -> dict[str, float | None]:
    tpot, ttft, tail = run_errors(fit.timing, runs)
    return {"tpot_median_error": float(np.median(tpot)), "tpot_p90_error": float(np.percentile(tpot, 90)),
            "ttft_median_error": float(np.median(ttft)), "ttft_p90_error": float(np.percentile(ttft, 90)),
            "ttft_p99_median_error": float(np.median(tail)) if tail else None}


def prefill_prior(carried: Sequence[float], default: float = 1.0) -> float:
    """The median of the prefill scales carried from elsewhere (default where there are none)."""
    return float(np.median(carried)) if len(carried) else default


Scope = tuple[str, str, str, str]  # device, engine, precision, speculative method


def _prefill_scale_for(runs: Sequence[MeasuredRun], timing: Timing) -> float:
    """The prefill scale that, with the rest of `timing`, best fits the runs' median TTFTs (soft-L1)."""
    measured = np.array([run.ttft_s for run in runs])
    columns = [_ttft_columns(run) for run in runs]
    scale = timing.prefill_scale
    for _ in range(MAX_ROUNDS):
        weights = np.array([timing.decode_scale, scale, timing.step_overhead_s, 1.0])
        rows = np.array([_at_median(c @ weights, c) for c in columns])
        _, found = _first_token_numbers(rows, measured, timing.decode_scale, timing.step_overhead_s, None,
                                        Timing(timing.decode_scale, scale, timing.step_overhead_s,
                                               timing.request_overhead_s))
        if abs(found - scale) <= 1e-9 * scale:
            break
        scale = found
    return scale


def carried_prefill_scales(groups: Mapping[Scope, Sequence[MeasuredRun]]) -> dict[Scope, float]:
    """Per scope with three runs or more at FIT_SHAPE and three at a longer prompt (without speculative decoding,
    whose bound assumes every draft accepted and so skews its scales): the prefill scale that, beside a fit to its
    FIT_SHAPE runs alone, best predicts its longer prompts' TTFTs. It is what a fit to one prompt length needs
    from elsewhere, so it is measured the way it is used."""
    carried = {}
    for scope, runs in groups.items():
        base = [run for run in runs if (run.input_len, run.output_len) == FIT_SHAPE]
        longer = [run for run in runs if run.input_len > FIT_SHAPE[0]]
        if scope[3] == "none" and len(base) >= 3 and len(longer) >= 3:
            timing = fit_scheduling(base, 1.0).timing
            carried[scope] = _prefill_scale_for(longer, timing)
    return carried


def calibrate(groups: Mapping[Scope, Sequence[MeasuredRun]], source: str) -> list[SchedulingCalibration]:
    """A scheduling calibration per scope of three runs or more: fitted to every run (the prefill prior carried from
    the other scopes), checked as the class docstring says (the prior then from the other devices' scopes)."""
    carried = carried_prefill_scales(groups)
    return [calibrate_scope(scope, runs, source=source,
                            prior=prefill_prior([v for s, v in carried.items() if s != scope]),
                            held_out_prior=prefill_prior([v for s, v in carried.items() if s[0] != scope[0]]))
            for scope, runs in sorted(groups.items()) if len(runs) >= 3]


def calibrate_scope(scope: Scope, runs: Sequence[MeasuredRun], *, source: str, prior: float, held_out_prior: float,
                    fit_shape: tuple[int, int] = FIT_SHAPE, model: str | None = None,
                    origin: str = "shipped") -> SchedulingCalibration:
    """One scope's calibration (three runs or more): fitted to every run with the prefill prior `prior` where its
    runs cover one prompt length; checked, where three runs or more are of `fit_shape` and others exist, by a fit to
    those alone (with `held_out_prior`) on the others. A calibration kept per model (`model`) has it in its id."""
    fit = fit_scheduling(runs, prior)
    fitted_shape = [run for run in runs if (run.input_len, run.output_len) == fit_shape]
    others = [run for run in runs if (run.input_len, run.output_len) != fit_shape]
    errors: dict[str, float | None] = dict.fromkeys(("tpot_median_error", "tpot_p90_error", "ttft_median_error",
                                                      "ttft_p90_error", "ttft_p99_median_error"))
    if len(fitted_shape) >= 3 and others:
        errors = _errors(fit_scheduling(fitted_shape, held_out_prior), others)
    timing = fit.timing
    device, engine, precision, method = scope
    scope_id = ":".join(scope) if model is None else ":".join((origin, device, engine, model, precision, method))
    return SchedulingCalibration(
        id=scope_id, device_id=device, engine=engine, precision=precision, speculative=method,
        source=source, decode_scale=float(timing.decode_scale), prefill_scale=float(timing.prefill_scale),
        step_overhead_s=float(timing.step_overhead_s), request_overhead_s=float(timing.request_overhead_s),
        fitted=fit.fitted, prior=fit.prior, fitted_on=len(runs),
        checked_on=len(others) if errors["tpot_median_error"] is not None else 0, **errors,
        fit_shape=fit_shape, model=model, origin=origin)
