"""Fits the service's fused-MoE expectations to NVIDIA AIConfigurator's public measured MoE tables.

Source: the `aiconfigurator-core` wheel on PyPI (Apache-2.0), `aiconfigurator_core/systems/data/<gpu>/moe/<engine>/
<version>/moe_perf.parquet`: one layer's routed experts timed on one device (columns moe_dtype, num_tokens,
hidden_size, inter_size, topk, num_experts, moe_tp_size, moe_ep_size, distribution, kernel_source, latency in ms),
for TensorRT-LLM, SGLang and vLLM. The project does not depend on it: a developer refreshes the shipped fit by hand,

    .venv/bin/pip download aiconfigurator-core==0.12.0 --no-deps -d /tmp/aic && unzip -q -o /tmp/aic/*.whl -d /tmp/aic
    .venv/bin/pip install pyarrow
    .venv/bin/python scripts/fit_moe_calibration.py /tmp/aic/aiconfigurator_core/systems/data

which rewrites service/data/calibrations/moe.json and tests/data/aiconfigurator_moe_sample.csv (a few timings of each
table, that the tests hold the shipped fits to), and prints each fit's error.

Per (device, engine, dtype): the newest version of the engine's table that times the dtype, its "balanced" timings
(each expert given its share of the tokens: the uniform routing the service counts), the fastest kernel of each
shape (the engine picks it); timings faster than the service's bound left out (the benchmark repeats a layer on the
same weights: at a few tokens they stay in L2). The calibration of service/core/expectations/kernels.py, with the
terms of service/core/expectations/fused_moe.py (the service's own grouped-matmul rows), fitted to a random 10 % of
the timings and checked on the other 90 %; the kernels' own roofs (kernel_roofs), which a composed step reads, from
them all. No shape correction is shipped: a composed step reads the roofs alone.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from packaging.version import Version

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.core.expectations.fused_moe import FusedMoeShape, fused_moe_work
from service.core.expectations.kernels import KernelCalibration, fit_kernel_terms, kernel_roofs
from service.persistence.catalog import MOE_CALIBRATIONS_PATH, nominal_device
from service.translation.kernels.aiconfigurator import DEVICES, MOE_DTYPES, MOE_ENGINES, PACKAGE

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_ROWS = 20  # per (device, engine, dtype), kept in tests/data for the tests
COLUMNS = ["moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size",
           "distribution", "latency"]


def newest_timings(folder: Path, theirs: str) -> tuple[str, dict[FusedMoeShape, float]] | None:
    """(the table's version, the fastest balanced time of each shape in seconds) of the newest version timing the
    dtype; None where none does."""
    for path in sorted(folder.glob("*/moe_perf.parquet"), key=lambda p: Version(p.parent.name), reverse=True):
        table = pq.read_table(path, columns=COLUMNS).to_pydict()
        fastest: dict[FusedMoeShape, float] = {}
        for dtype, tokens, hidden, inter, top_k, experts, tp, ep, distribution, latency in zip(
                *(table[c] for c in COLUMNS), strict=True):
            if dtype != theirs or distribution != "balanced":
                continue
            shape = FusedMoeShape(int(tokens), int(hidden), int(inter), int(top_k), int(experts), int(tp), int(ep))
            fastest[shape] = min(fastest.get(shape, np.inf), latency * 1e-3)
        if fastest:
            return path.parent.name, fastest
    return None


def fit_one(device_id: str, engine: str, theirs: str, version: str, timings: dict[FusedMoeShape, float],
            rng: np.random.Generator, sample: list) -> dict:
    dtype, dtypes = MOE_DTYPES[theirs]
    device = nominal_device(device_id)
    peak, bandwidth = device.peak(dtype, "tensor").flops_per_s, device.memory_level("hbm").bandwidth_bytes_per_s
    shapes = list(timings)
    work = np.array([fused_moe_work(shape, dtypes) for shape in shapes])
    compute, memory, measured = work[:, 0] / peak, work[:, 1] / bandwidth, np.array([timings[s] for s in shapes])
    kept = np.maximum(compute, memory) <= measured
    compute, memory, measured = compute[kept], memory[kept], measured[kept]
    sizes = np.array([(max(1, s.tokens), s.intermediate // s.tensor_parallel, s.hidden)
                      for s, keep in zip(shapes, kept, strict=True) if keep], dtype=float)
    order = rng.permutation(len(measured))
    on, held = order[: len(order) // 10], order[len(order) // 10:]
    fit = fit_kernel_terms(compute[on], memory[on], measured[on], sizes[on])
    roof_compute, roof_memory = kernel_roofs(compute, memory, measured)
    fields = {
        "device_id": device_id, "dtype": dtype, "engine": engine,
        "source": f"{PACKAGE}: systems/data/{system_of(device_id)}/moe/{engine}/{version}/moe_perf.parquet, its "
                  f"balanced {theirs} timings, the fastest kernel of each of {len(kept):,} shapes, "
                  f"{int((~kept).sum()):,} timed faster than the bound left out",
        "peak_flops_per_s": peak, "hbm_bytes_per_s": bandwidth, "t0_s": fit.t0_s,
        "compute_efficiency": fit.compute_efficiency, "memory_efficiency": fit.memory_efficiency,
        "fitted_on": int(len(on)), "checked_on": int(len(held)), "median_error": 0.0, "p90_error": 0.0,
        "bound_median_error": 0.0, "checked_by": "the other 90 % of the table, by the formula alone",
        "unidentified": list(fit.unidentified),
        "roof_compute_efficiency": roof_compute, "roof_memory_efficiency": roof_memory, "operator": "fused_moe"}
    calibration = KernelCalibration(**fields)
    bound = np.maximum(compute[held], memory[held])
    predicted = np.maximum(bound, calibration.expected_times_s(compute[held] * peak, memory[held] * bandwidth))
    error = np.abs(predicted / measured[held] - 1)
    fields.update(median_error=float(np.median(error)), p90_error=float(np.quantile(error, 0.9)),
                  bound_median_error=float(np.median(np.abs(bound / measured[held] - 1))))
    kept_shapes = [s for s, keep in zip(shapes, kept, strict=True) if keep]
    for i in rng.choice(len(kept_shapes), size=min(SAMPLE_ROWS, len(kept_shapes)), replace=False):
        sample.append([device_id, engine, dtype, *kept_shapes[i], f"{measured[i]:.6g}"])
    return fields


def system_of(device_id: str) -> str:
    return next(system for system, device in DEVICES.items() if device == device_id)


def main(data: Path) -> None:
    rng = np.random.default_rng(2026)
    calibrations, sample = [], []
    print("device engine dtype: fitted, checked; median and p90 error (the bound's median); the kernels' roofs")
    for system, device_id in DEVICES.items():
        for engine in sorted(set(MOE_ENGINES.values())):
            for theirs in MOE_DTYPES:
                found = newest_timings(data / system / "moe" / engine, theirs)
                if found is None:
                    continue
                fields = fit_one(device_id, engine, theirs, *found, rng, sample)
                calibrations.append(fields)
                print(f"{device_id} {engine} {fields['dtype']}: {fields['fitted_on']}, {fields['checked_on']}; "
                      f"{fields['median_error']:.3f} and {fields['p90_error']:.3f} ({fields['bound_median_error']:.3f}); "
                      f"compute {fields['roof_compute_efficiency']}, memory {fields['roof_memory_efficiency']}")
    MOE_CALIBRATIONS_PATH.write_text(json.dumps({
        "model": "t = t0 + max(T_compute / compute_efficiency, T_memory / memory_efficiency) of one fused MoE layer on "
                 "one device, T at the catalog's nominal roofs (service/core/expectations/fused_moe.py)",
        "calibrations": calibrations}, indent=1) + "\n")
    with (ROOT / "tests" / "data" / "aiconfigurator_moe_sample.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["device_id", "engine", "dtype", *FusedMoeShape._fields, "latency_s"])
        writer.writerows(sample)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
