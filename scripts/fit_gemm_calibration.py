"""Fits the service's GEMM expectations to the public measured GEMM tables: NVIDIA AIConfigurator's and ROCm aiter's.

Source: the `aiconfigurator-core` wheel on PyPI (Apache-2.0), `aiconfigurator_core/systems/data/<gpu>/gemm/<engine>/
<version>/gemm_perf.parquet` (columns m, n, k, gemm_dtype, latency in ms). The project does not depend on it: a
developer refreshes the shipped fit by hand,

    .venv/bin/pip download aiconfigurator-core --no-deps -d /tmp/aic && unzip -q -o /tmp/aic/*.whl -d /tmp/aic
    .venv/bin/pip install pyarrow
    git clone https://github.com/ROCm/aiter /tmp/aiter && git -C /tmp/aiter checkout <AITER_COMMIT below>
    .venv/bin/python scripts/fit_gemm_calibration.py /tmp/aic/aiconfigurator_core/systems/data /tmp/aiter/aiter/configs

which rewrites service/data/calibrations/gemm.json (TensorRT-LLM's tables for NVIDIA, aiter's for AMD: the
shipped calibrations; service/translation/kernels/aiter.py says how aiter's are read) and
tests/data/aiconfigurator_gemm_sample.csv, and prints the same fit's error on every engine's tables.

The least-squares fits' last digits follow the machine's BLAS (about 1e-10 apart between two machines): when a
refresh only adds a device (LATER_DEVICES), keep the shipped entries as they are and append the new device's, as
the A100's were added (its random splits come after every other table's, so the rest fit to the same rows).

Per (device, engine, dtype): the calibration of service/core/expectations/kernels.py (the formula at the catalog's nominal
roofs, corrected by the nearest fitted shapes) fitted to a random 10 % of the table, its error reported on the
other 90 %, beside the bare bound's error on the same rows; the kernels' own roofs (kernel_roofs) from the whole
table.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from service.core.expectations.kernels import KernelCalibration, fit_kernel_terms, kernel_roofs
from service.persistence.catalog import nominal_device
from service.translation.kernels import aiter
from service.translation.kernels.aiconfigurator import DEVICES, DTYPES, LATER_DEVICES, PACKAGE

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from scripts.tabulate_gemm_lattices import tabulate

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_ROWS = 150  # per (device, dtype), kept in tests/data for the tests
ENGINES = ("trtllm", "vllm", "sglang")
SHIPPED_ENGINES = ("trtllm", "aiter")  # one table a (device, dtype): NVIDIA's TensorRT-LLM, ROCm's aiter
# The aiter commit the shipped fit read (its configs change as kernels are retuned).
AITER_COMMIT = "e4048607a535ace3a2b51ded31b1c8c2d45c0879"


def roofs(device_id: str, dtype: str) -> tuple[float, float]:
    device = nominal_device(device_id)
    return device.peak(dtype, "tensor").flops_per_s, device.memory_level("hbm").bandwidth_bytes_per_s


def fit_table(device_id: str, dtype: str, engine: str, source: str, sizes: np.ndarray, measured: np.ndarray,
              hbm_bytes: np.ndarray, rng: np.random.Generator):
    """A dtype's fit to a random 10 % of one table and its error on the rest: (calibration fields, held rows,
    error, bound error)."""
    peak, bandwidth = roofs(device_id, dtype)
    m, n, k = sizes.T
    compute, memory = 2 * m * n * k / peak, hbm_bytes / bandwidth
    order = rng.permutation(len(measured))
    on, held = order[: len(order) // 10], order[len(order) // 10:]
    fit = fit_kernel_terms(compute[on], memory[on], measured[on], sizes[on])
    fields = {
        "device_id": device_id, "dtype": dtype, "engine": engine, "source": source,
        "peak_flops_per_s": peak, "hbm_bytes_per_s": bandwidth, "t0_s": fit.t0_s,
        "compute_efficiency": fit.compute_efficiency, "memory_efficiency": fit.memory_efficiency,
        "fitted_on": int(len(on)), "checked_on": int(len(held)), "median_error": 0.0, "p90_error": 0.0,
        "bound_median_error": 0.0, "checked_by": "the other 90 % of the table",
        "shapes": [[int(sizes[on, axis].min()), int(sizes[on, axis].max())] for axis in range(3)],
        "anchors": fit.anchors, "unidentified": list(fit.unidentified),
        # The kernels' roofs from the whole table: medians of its largest clearly-bound shapes, steadier over all.
        **dict(zip(("roof_compute_efficiency", "roof_memory_efficiency"), kernel_roofs(compute, memory, measured),
                   strict=True))}
    calibration = KernelCalibration(**fields)
    bound = np.maximum(compute[held], memory[held])
    predicted = np.maximum(bound, calibration.expected_times_s(2 * m[held] * n[held] * k[held], hbm_bytes[held],
                                                               m[held], n[held], k[held]))
    error = np.abs(predicted / measured[held] - 1)
    bound_error = np.abs(bound / measured[held] - 1)
    fields.update(median_error=float(np.median(error)), p90_error=float(np.quantile(error, 0.9)),
                  bound_median_error=float(np.median(bound_error)))
    return fields, (sizes[held], measured[held]), error, bound_error


def aiconfigurator_tables(data: Path, system: str, device_id: str, engine: str):
    """(dtype, source, sizes, measured, HBM bytes) of each dtype of one engine's GEMM table of one system."""
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
        sizes = np.column_stack([np.array(table[x], dtype=float)[rows] for x in "mnk"])
        m, n, k = sizes.T
        yield (dtype, f"{PACKAGE}: systems/data/{system}/gemm/{engine}/{table_path.parent.name}/gemm_perf.parquet",
               sizes, np.array(table["latency"], dtype=float)[rows] * 1e-3, (m * k + k * n) * operand_bytes + m * n * 2)


def aiter_tables(configs: Path):
    """(device id, dtype, source, sizes, measured, HBM bytes) of each catalog GPU and dtype in aiter's tuned GEMM
    tables; GEMMs timed faster than HBM allows (Infinity-Cache resident) left out, and counted in the source."""
    paths = sorted(p for p in configs.rglob("*.csv") if aiter.scheme_of(str(p)))
    found = aiter.fastest((str(path), path.read_text()) for path in paths)
    for (device_id, dtype), shapes in sorted(found.items()):
        scheme = next(s for s in aiter.SCHEMES.values() if s[0] == dtype)
        sizes = np.array(list(shapes), dtype=float)
        measured = np.array(list(shapes.values()))
        hbm = aiter.gemm_bytes(*sizes.T, *scheme[1:])
        _, bandwidth = roofs(device_id, dtype)
        kept = measured >= hbm / bandwidth
        files = sum(1 for p in paths if aiter.scheme_of(str(p))[0] == dtype)
        source = (f"{aiter.REPOSITORY} {AITER_COMMIT[:12]}: the {files} tuned {dtype} GEMM tables of aiter/configs and "
                  f"aiter/configs/model_configs, the fastest time of each of {len(kept)} shapes, "
                  f"{int((~kept).sum())} timed faster than HBM allows left out")
        yield device_id, dtype, source, sizes[kept], measured[kept], hbm[kept]


def main(data: Path, configs: Path | None) -> None:
    calibrations, sample = [], []
    rng = np.random.default_rng(2026)
    print("device engine dtype: fitted, checked; median and p90 error (the bound's median)")

    def keep(device_id, engine, dtype, fitted):
        fields, (sizes, measured), error, bound_error = fitted
        print(f"{device_id} {engine} {dtype}: {fields['fitted_on']}, {fields['checked_on']}; "
              f"{np.median(error):.3f} and {np.quantile(error, 0.9):.3f} ({np.median(bound_error):.3f})")
        if engine not in SHIPPED_ENGINES:
            return
        calibrations.append(fields)
        for i in rng.choice(len(measured), size=min(SAMPLE_ROWS, len(measured)), replace=False):
            sample.append([device_id, dtype, *(int(x) for x in sizes[i]), f"{measured[i]:.6g}"])

    def fit_systems(devices: dict[str, str]) -> None:
        for system, device_id in devices.items():
            for engine in ENGINES:
                for dtype, source, sizes, measured, hbm in aiconfigurator_tables(data, system, device_id, engine):
                    keep(device_id, engine, dtype, fit_table(device_id, dtype, engine, source, sizes, measured, hbm,
                                                             rng))

    fit_systems(DEVICES)
    if configs is not None:
        for device_id, dtype, source, sizes, measured, hbm in aiter_tables(configs):
            keep(device_id, "aiter", dtype, fit_table(device_id, dtype, "aiter", source, sizes, measured, hbm, rng))
    fit_systems(LATER_DEVICES)
    out = ROOT / "service" / "data" / "calibrations" / "gemm.json"
    out.write_text(json.dumps({"model": "t = (t0 + max(T_compute / compute_efficiency, T_memory / memory_efficiency)) "
                                        "x exp(the nearest anchors' mean residual), T at the catalog's nominal roofs",
                               "calibrations": calibrations}, separators=(",", ":")) + "\n")
    with (ROOT / "tests" / "data" / "aiconfigurator_gemm_sample.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["device_id", "dtype", "m", "n", "k", "latency_s"])
        writer.writerows(sample)
    tabulate()  # the lattices the service reads beside the fits


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None)
