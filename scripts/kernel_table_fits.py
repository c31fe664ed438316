"""What the kernel-table fitting scripts share (fit_moe_calibration.py, fit_attention_calibration.py): one
(device, engine, dtype) table of timings, its work counted by the service, fitted and checked as
service/core/expectations/kernels.py fits a GEMM table.

Timings faster than the service's bound are left out (the benchmarks repeat a kernel on the same operands: small ones
stay in L2); the calibration is fitted to a random 10 % of the rest and checked on the other 90 %, by the formula
alone; the kernels' own roofs (kernel_roofs), which a composed step reads, from them all.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from service.core.expectations.kernels import KernelCalibration, fit_kernel_terms, kernel_roofs
from service.persistence.catalog import nominal_device
from service.translation.kernels.aiconfigurator import DEVICES, LATER_DEVICES


def fit_table(*, device_id: str, engine: str, dtype: str, operator: str, source: str, peak_dtype: str,
              shapes: Sequence[tuple], work: np.ndarray, measured: np.ndarray, sizes: np.ndarray,
              rng: np.random.Generator, sample: list, sample_rows: int, weights: str | None = None) -> dict:
    """A KernelCalibration's fields for the timings `measured` of `shapes` (seconds), whose FLOPs and HBM bytes are
    `work`'s two columns; `sizes`: the three sizes of each shape the fit's shape terms read; `weights`: the stored
    type of weight-only kernels' weights. Appends `sample_rows` of the kept timings to `sample` as [device, engine,
    its key, *shape, seconds]."""
    peak, bandwidth = nominal_roofs(device_id, peak_dtype)
    compute, memory = work[:, 0] / peak, work[:, 1] / bandwidth
    kept = np.maximum(compute, memory) <= measured
    compute, memory, measured, sizes = compute[kept], memory[kept], measured[kept], sizes[kept]
    order = rng.permutation(len(measured))
    on, held = order[: len(order) // 10], order[len(order) // 10:]
    fit = fit_kernel_terms(compute[on], memory[on], measured[on], sizes[on])
    roof_compute, roof_memory = kernel_roofs(compute, memory, measured)
    fields = {
        "device_id": device_id, "dtype": dtype, "engine": engine,
        "source": f"{source}, {int((~kept).sum()):,} timed faster than the bound left out",
        "peak_flops_per_s": peak, "hbm_bytes_per_s": bandwidth, "t0_s": fit.t0_s,
        "compute_efficiency": fit.compute_efficiency, "memory_efficiency": fit.memory_efficiency,
        "fitted_on": int(len(on)), "checked_on": int(len(held)), "median_error": 0.0, "p90_error": 0.0,
        "bound_median_error": 0.0, "checked_by": "the other 90 % of the table, by the formula alone",
        "unidentified": list(fit.unidentified),
        "roof_compute_efficiency": roof_compute, "roof_memory_efficiency": roof_memory, "operator": operator,
        **({"weights": weights} if weights is not None else {})}
    calibration = KernelCalibration(**fields)
    bound = np.maximum(compute[held], memory[held])
    predicted = np.maximum(bound, calibration.expected_times_s(compute[held] * peak, memory[held] * bandwidth))
    error = np.abs(predicted / measured[held] - 1)
    fields.update(median_error=float(np.median(error)), p90_error=float(np.quantile(error, 0.9)),
                  bound_median_error=float(np.median(np.abs(bound / measured[held] - 1))))
    kept_shapes = [s for s, keep in zip(shapes, kept, strict=True) if keep]
    for i in rng.choice(len(kept_shapes), size=min(sample_rows, len(kept_shapes)), replace=False):
        sample.append([device_id, engine, calibration.key, *kept_shapes[i], f"{measured[i]:.6g}"])
    return fields


def nominal_roofs(device_id: str, dtype: str) -> tuple[float, float]:
    """(the dtype's tensor peak, HBM bandwidth) of a catalog device as shipped: the roofs the tables are fitted at."""
    device = nominal_device(device_id)
    return device.peak(dtype, "tensor").flops_per_s, device.memory_level("hbm").bandwidth_bytes_per_s


def system_of(device_id: str) -> str:
    return next(system for system, device in (DEVICES | LATER_DEVICES).items() if device == device_id)


def fit_line(label: str, fields: dict) -> str:
    """What a fitting script prints of one fit: fitted, checked; median and p90 error (the bound's); the roofs."""
    return (f"{label}: {fields['fitted_on']}, {fields['checked_on']}; {fields['median_error']:.3f} and "
            f"{fields['p90_error']:.3f} ({fields['bound_median_error']:.3f}); compute "
            f"{fields['roof_compute_efficiency']}, memory {fields['roof_memory_efficiency']}")


def write_fits(path: Path, model: str, calibrations: list[dict], sample_path: Path, shape_fields: Sequence[str],
               sample: list) -> None:
    """The shipped fits (`model`: what their formula times) and the sample of timings the tests hold them to."""
    path.write_text(json.dumps({"model": model, "calibrations": calibrations}, indent=1) + "\n")
    with sample_path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["device_id", "engine", "dtype", *shape_fields, "latency_s"])
        writer.writerows(sample)
