"""Expectations beside bounds: what a kernel is expected to take on a device, from a fit to measured kernels.

A bound ranks hardware by its datasheet; measured GEMMs sit a device- and dtype-dependent factor above it (a fixed
launch-and-tail cost, large GEMMs at a fraction of the peak, small ones at a fraction of the bandwidth). A
calibration is that fit, t = t0 + max(T_compute / e_c, T_memory / e_m), with T_compute and T_memory the roofline's
own terms at the device's nominal roofs; it carries what it was fitted on and how wrong it was on the measurements
held out of the fit. An expectation is never below the bound (t0 >= 0, efficiencies <= 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

import numpy as np


@dataclass(frozen=True)
class KernelCalibration:
    device_id: str
    dtype: str  # the compute dtype it was fitted on
    engine: str
    source: str
    peak_flops_per_s: float  # the roofs it was fitted at (the catalog's nominal ones then)
    hbm_bytes_per_s: float
    t0_s: float
    compute_efficiency: float
    memory_efficiency: float
    fitted_on: int  # measurements
    checked_on: int  # measurements held out of the fit
    median_error: float  # |expected / measured - 1| on those, median
    p90_error: float
    bound_median_error: float  # the bare bound's, on the same
    # "shipped" (fitted to public measurements, in service/data/calibrations) or "measured" (to timings submitted to
    # the device, POST /v1/devices/{id}/kernel-timings); how its error was checked.
    origin: str = "shipped"
    checked_by: str = "the other half of the measurements"
    # (least, most) of m, n and k over the timings fitted; None where they were not kept (the shipped fits).
    shapes: tuple[tuple[int, int], ...] | None = None

    @property
    def id(self) -> str:
        return f"kernel:{self.origin}:{self.device_id}:{self.engine}:{self.dtype}"

    def __post_init__(self):
        if self.shapes is not None:  # read back from JSON as lists
            object.__setattr__(self, "shapes", tuple(tuple(span) for span in self.shapes))
        if not (self.t0_s >= 0 and 0 < self.compute_efficiency <= 1 and 0 < self.memory_efficiency <= 1):
            raise ValueError(f"calibration of {self.device_id} {self.dtype} would expect less than the bound")

    def extrapolated(self, m: int, n: int, k: int) -> bool:
        """Whether a matmul lies outside the m, n and k the fitted timings covered (False where not recorded)."""
        return self.shapes is not None and any(
            not low <= size <= high for size, (low, high) in zip((m, n, k), self.shapes, strict=True))

    def expected_time_s(self, flops: float, hbm_bytes: float) -> float:
        return self.t0_s + max(flops / (self.peak_flops_per_s * self.compute_efficiency),
                               hbm_bytes / (self.hbm_bytes_per_s * self.memory_efficiency))

    def expected_times_s(self, flops: np.ndarray, hbm_bytes: np.ndarray) -> np.ndarray:
        """The same, element by element."""
        return self.t0_s + np.maximum(flops / (self.peak_flops_per_s * self.compute_efficiency),
                                      hbm_bytes / (self.hbm_bytes_per_s * self.memory_efficiency))

    @cached_property
    def basis(self) -> str:
        """Written once: every matmul answer on the device and dtype carries it."""
        return (f"fitted to {self.fitted_on:,} {self.engine} GEMM timings on {self.device_id} in {self.dtype} "
                f"({self.source}): t = {self.t0_s * 1e6:.3g} us + max(T_compute / {self.compute_efficiency:.3g}, "
                f"T_memory / {self.memory_efficiency:.3g}) at the nominal roofs; on {self.checked_on:,} timings held "
                f"out ({self.checked_by}) it was off by {self.median_error:.1%} in the median ({self.p90_error:.1%} at the 90th "
                f"percentile), the bound by {self.bound_median_error:.1%}")



# The fewest timings a calibration is fitted to: three parameters, and a held-out error to report.
MIN_POINTS = 6
FOLDS = 5


class KernelFit(NamedTuple):
    t0_s: float
    compute_efficiency: float
    memory_efficiency: float
    median_error: float  # |expected / measured - 1| of each timing predicted by a fit that did not see it
    p90_error: float
    bound_median_error: float
    checked_by: str


def _least_squares(compute_s: np.ndarray, memory_s: np.ndarray, measured_s: np.ndarray) -> tuple[float, float, float]:
    """(t0, e_c, e_m) minimising the squared log error of t0 + max(T_c / e_c, T_m / e_m) against the measured
    times (scipy's bounded least squares), with t0 >= 0 and both efficiencies in (0, 1]: never below the bound."""
    from scipy.optimize import least_squares

    def residuals(x: np.ndarray) -> np.ndarray:
        t0, inverse_c, inverse_m = x
        return np.log((t0 + np.maximum(compute_s * inverse_c, memory_s * inverse_m)) / measured_s)

    start = np.array([float(np.min(measured_s)) / 4, 1.5, 1.5])
    fit = least_squares(residuals, start, bounds=([0.0, 1.0, 1.0], [np.inf, 1e4, 1e4]), x_scale="jac")
    t0, inverse_c, inverse_m = fit.x
    return float(t0), float(1 / inverse_c), float(1 / inverse_m)


def fit_kernel_terms(compute_s: np.ndarray, memory_s: np.ndarray, measured_s: np.ndarray, *,
                     seed: int = 2026) -> KernelFit:
    """The calibration of a set of timings, each with its bound's compute and memory terms: fitted to all of them,
    its error reported on timings held out of the fit: each of 5 folds predicted by a fit to the other four (or
    each timing by a fit to the others, under 25 timings)."""
    n = len(measured_s)
    if n < MIN_POINTS:
        raise ValueError(f"a calibration needs at least {MIN_POINTS} timings, not {n}")
    t0, e_c, e_m = _least_squares(compute_s, memory_s, measured_s)
    order = np.random.default_rng(seed).permutation(n)
    folds = [order[i::FOLDS] for i in range(FOLDS)] if n >= 25 else [np.array([i]) for i in range(n)]
    predicted = np.empty(n)
    for held in folds:
        kept = np.setdiff1d(order, held)
        h0, hc, hm = _least_squares(compute_s[kept], memory_s[kept], measured_s[kept])
        predicted[held] = h0 + np.maximum(compute_s[held] / hc, memory_s[held] / hm)
    error = np.abs(predicted / measured_s - 1)
    bound_error = np.abs(np.maximum(compute_s, memory_s) / measured_s - 1)
    return KernelFit(t0, e_c, e_m, float(np.median(error)), float(np.quantile(error, 0.9)),
                     float(np.median(bound_error)),
                     f"{FOLDS}-fold cross-validation" if n >= 25 else "leave-one-out")
