"""Fits the service's GEMM expectations to NVIDIA AIConfigurator's public measured GEMM tables.

Source: the `aiconfigurator-core` wheel on PyPI (Apache-2.0), `aiconfigurator_core/systems/data/<gpu>/gemm/<engine>/
<version>/gemm_perf.parquet` (columns m, n, k, gemm_dtype, latency in ms). The project does not depend on it: a
developer refreshes the shipped fit by hand,

    .venv/bin/pip download aiconfigurator-core --no-deps -d /tmp/aic && unzip -q -o /tmp/aic/*.whl -d /tmp/aic
    .venv/bin/pip install pyarrow
    .venv/bin/python scripts/fit_gemm_calibration.py /tmp/aic/aiconfigurator_core/systems/data

which rewrites service/data/calibrations/gemm.json (TensorRT-LLM's tables, the shipped calibrations) and
tests/data/aiconfigurator_gemm_sample.csv, and prints the same fit's error on every engine's tables.

Per (device, engine, dtype): the calibration of service/core/expectations/kernels.py (the formula at the catalog's nominal
roofs, corrected by the nearest fitted shapes) fitted to a random 10 % of the table, its error reported on the
other 90 %, beside the bare bound's error on the same rows.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from service.core.expectations.kernels import KernelCalibration, fit_kernel_terms
from service.persistence.catalog import nominal_device
from service.translation.aiconfigurator import DEVICES, DTYPES, PACKAGE

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_ROWS = 150  # per (device, dtype), kept in tests/data for the tests
ENGINES = ("trtllm", "vllm", "sglang")
SHIPPED_ENGINE = "trtllm"


def roofs(device_id: str, dtype: str) -> tuple[float, float]:
    device = nominal_device(device_id)
    return device.peak(dtype, "tensor").flops_per_s, device.memory_level("hbm").bandwidth_bytes_per_s


def terms(device_id: str, dtype: str, operand_bytes: int, m, n, k) -> tuple[np.ndarray, np.ndarray]:
    peak, bandwidth = roofs(device_id, dtype)
    return 2 * m * n * k / peak, ((m * k + k * n) * operand_bytes + m * n * 2) / bandwidth


def evaluate(data: Path, system: str, device_id: str, engine: str, rng: np.random.Generator):
    """Each dtype's fit to 10 % of the engine's table and its error on the rest: (dtype, calibration fields, held
    rows, error, bound error) a dtype."""
    paths = sorted((data / system / "gemm" / engine).glob("*/gemm_perf.parquet"))
    if not paths:
        return
    table_path = max(paths, key=lambda path: path.stat().st_mtime)
    table = pq.read_table(table_path, columns=["m", "n", "k", "gemm_dtype", "latency"]).to_pydict()
    kinds = np.array(table["gemm_dtype"])
    for theirs, (dtype, operand_bytes) in DTYPES.items():
        rows = kinds == theirs
        if not rows.any():
            continue
        m, n, k = (np.array(table[x], dtype=float)[rows] for x in "mnk")
        measured = np.array(table["latency"], dtype=float)[rows] * 1e-3
        compute, memory = terms(device_id, dtype, operand_bytes, m, n, k)
        order = rng.permutation(len(measured))
        on, held = order[: len(order) // 10], order[len(order) // 10:]
        sizes = np.column_stack([m, n, k])
        fit = fit_kernel_terms(compute[on], memory[on], measured[on], sizes[on])
        peak, bandwidth = roofs(device_id, dtype)
        fields = {
            "device_id": device_id, "dtype": dtype, "engine": engine,
            "source": f"{PACKAGE}: systems/data/{system}/gemm/{engine}/{table_path.parent.name}/gemm_perf.parquet",
            "peak_flops_per_s": peak, "hbm_bytes_per_s": bandwidth, "t0_s": fit.t0_s,
            "compute_efficiency": fit.compute_efficiency, "memory_efficiency": fit.memory_efficiency,
            "fitted_on": int(len(on)), "checked_on": int(len(held)), "median_error": 0.0, "p90_error": 0.0,
            "bound_median_error": 0.0, "checked_by": "the other 90 % of the table",
            "shapes": [[int(sizes[on, axis].min()), int(sizes[on, axis].max())] for axis in range(3)],
            "anchors": fit.anchors}
        calibration = KernelCalibration(**fields)
        predicted = np.maximum(np.maximum(compute[held], memory[held]), calibration.expected_times_s(
            2 * m[held] * n[held] * k[held], memory[held] * bandwidth, m[held], n[held], k[held]))
        error = np.abs(predicted / measured[held] - 1)
        bound_error = np.abs(np.maximum(compute[held], memory[held]) / measured[held] - 1)
        fields.update(median_error=float(np.median(error)), p90_error=float(np.quantile(error, 0.9)),
                      bound_median_error=float(np.median(bound_error)))
        yield dtype, fields, (m[held], n[held], k[held], measured[held]), error, bound_error


def main(data: Path) -> None:
    calibrations, sample = [], []
    rng = np.random.default_rng(2026)
    print("device engine dtype: fitted, checked; median and p90 error (the bound's median)")
    for system, device_id in DEVICES.items():
        for engine in ENGINES:
            for dtype, fields, (m, n, k, measured), error, bound_error in evaluate(data, system, device_id, engine, rng):
                print(f"{device_id} {engine} {dtype}: {fields['fitted_on']}, {fields['checked_on']}; "
                      f"{np.median(error):.3f} and {np.quantile(error, 0.9):.3f} ({np.median(bound_error):.3f})")
                if engine != SHIPPED_ENGINE:
                    continue
                calibrations.append(fields)
                for i in rng.choice(len(measured), size=min(SAMPLE_ROWS, len(measured)), replace=False):
                    sample.append([device_id, dtype, int(m[i]), int(n[i]), int(k[i]), f"{measured[i]:.6g}"])
    out = ROOT / "service" / "data" / "calibrations" / "gemm.json"
    out.write_text(json.dumps({"model": "t = (t0 + max(T_compute / compute_efficiency, T_memory / memory_efficiency)) "
                                        "x exp(the nearest anchors' mean residual), T at the catalog's nominal roofs",
                               "calibrations": calibrations}, separators=(",", ":")) + "\n")
    with (ROOT / "tests" / "data" / "aiconfigurator_gemm_sample.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["device_id", "dtype", "m", "n", "k", "latency_s"])
        writer.writerows(sample)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
