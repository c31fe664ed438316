"""Expectations beside a serving deployment's bounds, from measured serving runs of the same device and engine.

A measured TPOT sits a device- and engine-dependent distance above its bound: a per-step cost no roofline sees
(scheduling, kernel launches and tails, sampling) and kernels short of their roofs; and where prefill and decode
share the devices, the steps also wait for the prefills of the requests that replace finished ones. A serving
calibration is the fit TPOT = scale x (bound + prefill share) + overhead, the prefill share being the bound's
(T_p(B) / output, 0 disaggregated), over runs of one device, engine, precision and speculative method, the bound
being this service's own at the runs' deployments; TTFT = scale x bound + overhead alike. The prefill share takes
the decode's scale rather than a fitted one of its own: at one workload shape it barely varies, so a free
coefficient there is not identified (fitted freely it made the other shapes worse, docs/serving.md). A
calibration carries what it was fitted on and how wrong it was on runs held out of the fit; an expectation is never
below the bound."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

import numpy as np

# Runs within about this relative error of the line count as squares, those further out about linearly: the
# spread between twin InferenceX runs of one deployment is 12 % at the 90th percentile (docs/serving.md).
ROBUST_SCALE = 0.1
# A scope with one workload shape is checked by leaving out at most this many runs, spread over them, one at a time.
MAX_LEFT_OUT = 100


def _plain_line(b: np.ndarray, m: np.ndarray) -> tuple[float, float]:
    """The least-squares line on relative error (numpy), or through the origin where its overhead or scale would
    come out negative (a few points of one concurrency): where the robust fit starts."""
    design = np.column_stack([b / m, 1 / m])
    (scale, overhead), *_ = np.linalg.lstsq(design, np.ones_like(m), rcond=None)
    if overhead < 0 or scale <= 0:
        ratio = b / m
        scale, overhead = float(ratio.sum() / (ratio**2).sum()), 0.0
    return float(scale), float(overhead)


# Runs whose bounds span less than this factor (largest over smallest) cannot tell a scale from an overhead (every
# line through their one point fits them alike): the calibration reports its overhead as not identified. The fit
# itself is the same line as for any runs.
MIN_SPREAD = 1.1


def separable(bounds: Sequence[float]) -> bool:
    """Whether runs at these bounds tell a scale from an overhead."""
    return max(bounds) >= MIN_SPREAD * min(bounds)


def fit_scale_and_overhead(bounds: Sequence[float], measured: Sequence[float]) -> tuple[float, float]:
    """(scale, overhead), scale > 0 and overhead >= 0, minimising a soft-L1 loss of the relative error of
    scale x bound + overhead against the measured times (scipy's bounded least squares): a run far off the line (of
    another software version, or a deployment read wrongly) pulls it about linearly rather than quadratically, so a
    few do not drag it. On 1,057 InferenceX runs it took the median of the calibrations' held-out TPOT errors from
    10.9 % (plain least squares) to 9.9 %, and the median of their 90th percentiles from 27.6 % to 29.9 % (docs/serving.md)."""
    from scipy.optimize import least_squares

    b, m = np.asarray(bounds, dtype=float), np.asarray(measured, dtype=float)
    scale, overhead = _plain_line(b, m)
    # Runs at one bound make the plain line's scale arbitrary, and it can come out under the fit's floor (1e-12):
    # least_squares refuses to start outside its bounds.
    fit = least_squares(lambda x: (x[0] * b + x[1]) / m - 1, (max(scale, 1e-12), overhead),
                        bounds=([1e-12, 0.0], [np.inf, np.inf]), loss="soft_l1", f_scale=ROBUST_SCALE, x_scale="jac")
    scale, overhead = fit.x
    return float(scale), float(overhead)


def on_line(scale: float, overhead: float, bound: float, basis: float) -> float:
    """scale x basis + overhead, never below the bound: what a fitted line expects."""
    return max(bound, scale * basis + overhead)


def relative_errors(expected: Sequence[float], measured: Sequence[float]) -> np.ndarray:
    return np.abs(np.asarray(expected, dtype=float) / np.asarray(measured, dtype=float) - 1)


@dataclass(frozen=True)
class ServingCalibration:
    id: str
    device_id: str
    engine: str
    precision: str  # the weights' type it was fitted on (fp8, fp4)
    speculative: str  # the speculative method (mtp) or "none"
    source: str
    tpot_scale: float
    tpot_overhead_s: float
    ttft_scale: float
    ttft_overhead_s: float
    fitted_on: int  # runs
    checked_by: str  # "other workload shapes" (fitted on one, checked on the rest) or "leave-one-out"
    checked_on: int
    tpot_median_error: float
    tpot_p90_error: float
    ttft_median_error: float
    bound_tpot_median_error: float  # the bare bound's, on the same runs
    shapes: tuple[tuple[int, int], ...]  # (input, output) lengths of the runs fitted on
    concurrency: tuple[int, int]  # the smallest and largest
    model: str | None = None  # the model its runs served, where the calibration is kept per model
    origin: str = "shipped"  # or "measured": fitted to runs submitted to the service
    # The overheads its runs could not tell from a scale (their bounds too alike: see separable); the fitted split
    # stands, reported without a value.
    unidentified: tuple[str, ...] = ()
    # The layouts of its runs (engines.layout_signature); empty where they were not recorded (then not weighed).
    layouts: tuple[str, ...] = ()

    def __post_init__(self):
        for name in ("unidentified", "layouts"):  # read back from JSON as lists
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if not (self.tpot_scale > 0 and self.ttft_scale > 0 and self.tpot_overhead_s >= 0 and self.ttft_overhead_s >= 0):
            raise ValueError(f"serving calibration {self.id}: scales must be positive and overheads not negative")

    @property
    def address(self) -> str:
        """The id GET /v1/calibrations/{id} answers to: kernel and serving calibrations share that namespace."""
        return f"serving:{self.id}"

    def tpot_s(self, bound: float, prefill_share_s: float = 0.0) -> float:
        """`prefill_share_s`: the bound's (ServingBound.prefill_share_s), 0 where `bound` already holds it."""
        return on_line(self.tpot_scale, self.tpot_overhead_s, bound, bound + prefill_share_s)

    def ttft_s(self, bound: float) -> float:
        return on_line(self.ttft_scale, self.ttft_overhead_s, bound, bound)

    def covers(self, input_len: int, output_len: int, concurrency: int, layout: str | None = None) -> bool:
        """Whether a workload lies among those fitted (its shape one of theirs, its concurrency in their range, and
        its layout, where given and the runs' were recorded, one of theirs)."""
        return covered(self, input_len, output_len, concurrency, layout)

    @cached_property
    def basis(self) -> str:
        served = f" of {self.model}" if self.model else ""
        return (f"fitted to {self.fitted_on} {self.engine} runs{served} on {self.device_id} ({self.precision}, speculative "
                f"{self.speculative}; {self.source}): TPOT = {self.tpot_scale:.3g} x bound + "
                f"{self.tpot_overhead_s * 1e3:.3g} ms, TTFT = {self.ttft_scale:.3g} x bound + "
                f"{self.ttft_overhead_s * 1e3:.3g} ms; checked by {self.checked_by} on {self.checked_on} runs: TPOT off "
                f"by {self.tpot_median_error:.1%} in the median ({self.tpot_p90_error:.1%} at the 90th percentile; the "
                f"bound by {self.bound_tpot_median_error:.1%}), TTFT by {self.ttft_median_error:.1%}")


@dataclass(frozen=True)
class ServingPoint:
    """One measured run beside its bound."""

    input_len: int
    output_len: int
    concurrency: int
    bound_tpot_s: float
    bound_ttft_s: float
    tpot_s: float
    ttft_s: float
    bound_prefill_share_s: float = 0.0  # the bound's prefill share a token (0 disaggregated)

    @property
    def tpot_basis_s(self) -> float:
        """What the TPOT scale multiplies: the step's bound and the prefills it waits for."""
        return self.bound_tpot_s + self.bound_prefill_share_s


def covered(fitted, input_len: int, output_len: int, concurrency: int, layout: str | None) -> bool:
    """Whether a workload lies among those a line was fitted on (`fitted`'s shapes, concurrency span and layouts):
    its shape one of theirs, its concurrency in their range, and its layout, where given and theirs were recorded,
    one of theirs."""
    return ((input_len, output_len) in fitted.shapes and fitted.concurrency[0] <= concurrency <= fitted.concurrency[1]
            and (layout is None or not fitted.layouts or layout in fitted.layouts))


Line = tuple[float, float]  # (scale, overhead)


def fit_lines(points: Sequence[ServingPoint]) -> tuple[Line, Line]:
    """The TPOT line (over each point's TPOT basis) and the TTFT line (over its TTFT bound) fitted to the points."""
    return (fit_scale_and_overhead([p.tpot_basis_s for p in points], [p.tpot_s for p in points]),
            fit_scale_and_overhead([p.bound_ttft_s for p in points], [p.ttft_s for p in points]))


def on_lines(lines: tuple[Line, Line], points: Sequence[ServingPoint],
             floors: Sequence[tuple[float, float]] | None = None) -> tuple[list[float], list[float]]:
    """Each point's TPOT and TTFT as the lines expect them, never below its floors: (TPOT, TTFT) bounds, the
    points' own bounds where not given (an engine's points hold their composed figures there)."""
    floors = floors if floors is not None else [(p.bound_tpot_s, p.bound_ttft_s) for p in points]
    tpot, ttft = lines
    return ([on_line(*tpot, floor[0], p.tpot_basis_s) for p, floor in zip(points, floors, strict=True)],
            [on_line(*ttft, floor[1], p.bound_ttft_s) for p, floor in zip(points, floors, strict=True)])


def unidentified_overheads(points: Sequence[ServingPoint]) -> tuple[str, ...]:
    """The overheads the points cannot tell from a scale (their bases too alike: see separable)."""
    return tuple(name for name, bounds in (("tpot_overhead", [p.tpot_basis_s for p in points]),
                                           ("ttft_overhead", [p.bound_ttft_s for p in points])) if not separable(bounds))


def _errors(train: Sequence[ServingPoint], test: Sequence[ServingPoint]) -> tuple[np.ndarray, np.ndarray]:
    """TPOT and TTFT errors on `test` of a fit to `train`."""
    tpot, ttft = on_lines(fit_lines(train), test)
    return relative_errors(tpot, [p.tpot_s for p in test]), relative_errors(ttft, [p.ttft_s for p in test])


def _checked(points: Sequence[ServingPoint], fit_shape: tuple[int, int]):
    """(how, the points checked, their TPOT errors, their TTFT errors): a fit to `fit_shape`'s runs checked on the
    other shapes where there are at least three of those and others, else leave-one-out (of at most MAX_LEFT_OUT
    runs, spread over them: each one left out is a refit)."""
    fitted = [p for p in points if (p.input_len, p.output_len) == fit_shape]
    others = [p for p in points if (p.input_len, p.output_len) != fit_shape]
    if len(fitted) >= 3 and others:
        return ("other workload shapes", others, *_errors(fitted, others))
    left_out = sorted({round(i) for i in np.linspace(0, len(points) - 1, min(len(points), MAX_LEFT_OUT))})
    pairs = [_errors([q for j, q in enumerate(points) if j != i], [points[i]]) for i in left_out]
    return ("leave-one-out", [points[i] for i in left_out], np.concatenate([e[0] for e in pairs]),
            np.concatenate([e[1] for e in pairs]))


class Shaped(Protocol):
    """A run's workload shape, whatever else it holds (a ServingPoint, a simulated run)."""

    @property
    def input_len(self) -> int: ...

    @property
    def output_len(self) -> int: ...


def most_common_shape(points: Sequence[Shaped]) -> tuple[int, int]:
    """The (input, output) lengths most runs share (the shortest of those tied): what a fit is checked from."""
    counts = Counter((p.input_len, p.output_len) for p in points)
    return min(counts, key=lambda shape: (-counts[shape], shape))


def fit_serving_calibration(points: Sequence[ServingPoint], *, id: str, device_id: str, engine: str, precision: str,
                            speculative: str, source: str, fit_shape: tuple[int, int] = (1024, 1024),
                            model: str | None = None, origin: str = "shipped",
                            layouts: Sequence[str] = ()) -> ServingCalibration:
    """Fitted on every point; checked on the other workload shapes by a fit to `fit_shape`'s runs alone where there
    are at least three of those and others to check, else leave-one-out (at least three points)."""
    if len(points) < 3:
        raise ValueError("a serving calibration needs at least three runs")
    checked_by, checked, tpot_errors, ttft_errors = _checked(points, fit_shape)
    tpot, ttft = fit_lines(points)
    return ServingCalibration(
        id=id, device_id=device_id, engine=engine, precision=precision, speculative=speculative, source=source,
        tpot_scale=tpot[0], tpot_overhead_s=tpot[1], ttft_scale=ttft[0], ttft_overhead_s=ttft[1],
        fitted_on=len(points), checked_by=checked_by, checked_on=len(checked),
        tpot_median_error=float(np.median(tpot_errors)), tpot_p90_error=float(np.percentile(tpot_errors, 90)),
        ttft_median_error=float(np.median(ttft_errors)),
        bound_tpot_median_error=float(np.median(relative_errors([p.bound_tpot_s for p in checked],
                                                                [p.tpot_s for p in checked]))),
        shapes=tuple(sorted({(p.input_len, p.output_len) for p in points})),
        concurrency=(min(p.concurrency for p in points), max(p.concurrency for p in points)), model=model,
        origin=origin, layouts=tuple(sorted(set(layouts))), unidentified=unidentified_overheads(points))


@dataclass(frozen=True)
class ServingExpectation:
    """The figures of a bound (service.core.planning.deployment.ServingBound) as a calibration expects them."""

    ttft_s: float
    tpot_s: float
    itl_s: float
    e2e_latency_s: float
    requests_per_s: float
    output_tokens_per_s: float
    output_tokens_per_s_per_device: float
    tokens_per_s_per_device: float
    tokens_per_s_per_user: float
    extrapolated: bool  # the workload lies outside the shapes or concurrencies fitted


class FittedLine(Protocol):
    """What expect() reads of a calibration: its two lines, and the workloads it covers."""

    @property
    def tpot_scale(self) -> float: ...
    @property
    def tpot_overhead_s(self) -> float: ...
    @property
    def ttft_scale(self) -> float: ...
    @property
    def ttft_overhead_s(self) -> float: ...

    def covers(self, input_len: int, output_len: int, concurrency: int, layout: str | None = None) -> bool: ...


def expect(calibration: FittedLine, bound, *, input_len: int, output_len: int, concurrency: int,
           basis=None, layout: str | None = None) -> ServingExpectation:
    """TPOT and TTFT from the fit's lines over `basis` (its TPOT with its prefill share, its TTFT: the bound itself
    by default; the deployment its kernels compose for an engine calibration), never below the bound's; the step
    between tokens in the bound's proportion to TPOT; requests/s the bound's slowed as what limits it is (a
    disaggregated prefill pool as TTFT, decode as TPOT with its prefill share, what the line multiplies), and no more
    than Little's law allows the concurrency at the expected time a request is served; the end-to-end time that rate
    gives the concurrency (its wait for a place included, as the bound's: a deployment full at the bound's speed is
    full longer at the expected one); extrapolated where the calibration does not cover the workload (and `layout`,
    where given)."""
    basis = bound if basis is None else basis
    tpot = on_line(calibration.tpot_scale, calibration.tpot_overhead_s, bound.tpot_s,
                   basis.tpot_s + basis.prefill_share_s)
    ttft = on_line(calibration.ttft_scale, calibration.ttft_overhead_s, bound.ttft_s, basis.ttft_s)
    served = ttft + (output_len - 1) * tpot
    # The bound's rate is its limit's: a prefill pool's slows as TTFT does, a decode's (or a shared pool's) as TPOT.
    if bound.limited_by == "prefill":
        slowdown = ttft / bound.ttft_s
    else:
        slowdown = tpot / (bound.tpot_s + bound.prefill_share_s)
    rate = min(bound.requests_per_s / max(1.0, slowdown), concurrency / served)
    e2e = max(bound.e2e_latency_s, served, concurrency / rate)
    return ServingExpectation(
        ttft_s=ttft, tpot_s=tpot, itl_s=bound.itl_s * tpot / bound.tpot_s, e2e_latency_s=e2e, requests_per_s=rate,
        output_tokens_per_s=rate * output_len, output_tokens_per_s_per_device=rate * output_len / bound.devices,
        tokens_per_s_per_device=rate * (input_len + output_len) / bound.devices, tokens_per_s_per_user=1 / tpot,
        extrapolated=not calibration.covers(input_len, output_len, concurrency, layout))
