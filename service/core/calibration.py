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

    def __post_init__(self):
        if not (self.t0_s >= 0 and 0 < self.compute_efficiency <= 1 and 0 < self.memory_efficiency <= 1):
            raise ValueError(f"calibration of {self.device_id} {self.dtype} would expect less than the bound")

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
                f"out it was off by {self.median_error:.1%} in the median ({self.p90_error:.1%} at the 90th "
                f"percentile), the bound by {self.bound_median_error:.1%}")

