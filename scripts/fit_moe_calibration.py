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

import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from packaging.version import Version

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.kernel_table_fits import fit_line, fit_table, system_of, write_fits
from service.core.expectations.fused_moe import FusedMoeShape, fused_moe_work
from service.persistence.catalog import MOE_CALIBRATIONS_PATH
from service.translation.kernels.aiconfigurator import (
    DEVICES,
    LATER_DEVICES,
    LATER_MOE_DTYPES,
    MOE_DTYPES,
    MOE_ENGINES,
    PACKAGE,
)

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
    _, dtypes = (MOE_DTYPES | LATER_MOE_DTYPES)[theirs]
    shapes = list(timings)
    weight_only = dtypes.weights != dtypes.activations
    return fit_table(
        device_id=device_id, engine=engine, dtype=dtypes.activations, operator="fused_moe",
        peak_dtype=dtypes.activations, weights=dtypes.weights if weight_only else None,
        source=f"{PACKAGE}: systems/data/{system_of(device_id)}/moe/{engine}/{version}/moe_perf.parquet, its "
               f"balanced {theirs} timings, the fastest kernel of each of {len(shapes):,} shapes",
        shapes=shapes, work=np.array([fused_moe_work(shape, dtypes) for shape in shapes]),
        measured=np.array([timings[s] for s in shapes]),
        sizes=np.array([(max(1, s.tokens), s.intermediate // s.tensor_parallel, s.hidden) for s in shapes], dtype=float),
        rng=rng, sample=sample, sample_rows=SAMPLE_ROWS)


def main(data: Path) -> None:
    rng = np.random.default_rng(2026)
    calibrations, sample = [], []
    print("device engine dtype: fitted, checked; median and p90 error (the bound's median); the kernels' roofs")
    # The later devices after the others, then the later dtypes (LATER_DEVICES, LATER_MOE_DTYPES).
    for dtypes in (MOE_DTYPES, LATER_MOE_DTYPES):
        for system, device_id in (DEVICES | LATER_DEVICES).items():
            for engine in sorted(set(MOE_ENGINES.values())):
                for theirs, (key, _) in dtypes.items():
                    found = newest_timings(data / system / "moe" / engine, theirs)
                    if found is None:
                        continue
                    fields = fit_one(device_id, engine, theirs, *found, rng, sample)
                    calibrations.append(fields)
                    print(fit_line(f"{device_id} {engine} {key}", fields))
    write_fits(MOE_CALIBRATIONS_PATH, "t = t0 + max(T_compute / compute_efficiency, T_memory / memory_efficiency) of "
               "one fused MoE layer on one device, T at the catalog's nominal roofs (service/core/expectations/"
               "fused_moe.py)", calibrations, ROOT / "tests" / "data" / "aiconfigurator_moe_sample.csv",
               FusedMoeShape._fields, sample)

if __name__ == "__main__":
    main(Path(sys.argv[1]))
