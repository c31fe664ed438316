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
them all. No shape correction is shipped: a composed step reads the roofs alone. And the roofs of each model's shape
the engine's tables time (`families`: its hidden and expert width, experts and top-k, fused_moe.family_of), each from
the newest version timing that shape (TensorRT-LLM's 1.3.0rc23 B200 table times no gpt-oss shape in w4a8, rc20's
does): a composed step of that model reads them (kernel_steps, tables.py). They are medians, the same on every
machine, so

    .venv/bin/python scripts/fit_moe_calibration.py --families /tmp/aic/aiconfigurator_core/systems/data

recomputes them alone in the shipped file, every other field kept byte for byte (the least squares' last digits
differ between machines).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from packaging.version import Version

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.kernel_table_fits import fit_line, fit_table, nominal_roofs, system_of, write_fits
from service.core.expectations.fused_moe import FusedMoeShape, family_of, fused_moe_work
from service.core.expectations.kernels import KernelCalibration, kernel_roofs
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


def versions(folder: Path, theirs: str) -> Iterator[tuple[str, dict[FusedMoeShape, float]]]:
    """(the table's version, the fastest balanced time of each shape in seconds) of each version timing the dtype,
    the newest first."""
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
            yield path.parent.name, fastest


def newest_timings(folder: Path, theirs: str) -> tuple[str, dict[FusedMoeShape, float]] | None:
    """The newest version timing the dtype; None where none does."""
    return next(versions(folder, theirs), None)


def family_roofs(folder: Path, theirs: str, device_id: str) -> list[list]:
    """[family, compute roof, memory roof] of each model shape (fused_moe.family_of) the engine's tables time in the
    dtype: kernel_roofs over the balanced timings of the newest version that times it, none faster than the bound;
    the families with neither roof left out."""
    families: dict[str, dict[FusedMoeShape, float]] = {}
    for _, timings in versions(folder, theirs):
        found: dict[str, dict[FusedMoeShape, float]] = {}
        for shape, seconds in timings.items():
            found.setdefault(family_of(shape.hidden, shape.intermediate, shape.experts, shape.top_k), {})[shape] = seconds
        families |= {family: shapes for family, shapes in found.items() if family not in families}
    _, dtypes = (MOE_DTYPES | LATER_MOE_DTYPES)[theirs]
    peak, bandwidth = nominal_roofs(device_id, dtypes.activations)
    roofs = []
    for family, timings in sorted(families.items()):
        work = np.array([fused_moe_work(shape, dtypes) for shape in timings])
        measured = np.array(list(timings.values()))
        compute, memory = work[:, 0] / peak, work[:, 1] / bandwidth
        kept = np.maximum(compute, memory) <= measured
        compute_roof, memory_roof = kernel_roofs(compute[kept], memory[kept], measured[kept])
        if compute_roof is not None or memory_roof is not None:
            roofs.append([family, compute_roof, memory_roof])
    return roofs


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
                    fields["families"] = family_roofs(data / system / "moe" / engine, theirs, device_id)
                    calibrations.append(fields)
                    print(fit_line(f"{device_id} {engine} {key}", fields))
    write_fits(MOE_CALIBRATIONS_PATH, "t = t0 + max(T_compute / compute_efficiency, T_memory / memory_efficiency) of "
               "one fused MoE layer on one device, T at the catalog's nominal roofs (service/core/expectations/"
               "fused_moe.py)", calibrations, ROOT / "tests" / "data" / "aiconfigurator_moe_sample.csv",
               FusedMoeShape._fields, sample)


def with_families(data: Path) -> None:
    """The shipped fits, every other field kept byte for byte, with each one's family roofs (re)computed: least
    squares' last digits differ between machines, kernel_roofs' medians do not."""
    shipped = json.loads(MOE_CALIBRATIONS_PATH.read_text())
    theirs_of = {key: theirs for theirs, (key, _) in (MOE_DTYPES | LATER_MOE_DTYPES).items()}
    for fields in shipped["calibrations"]:
        theirs = theirs_of[KernelCalibration(**fields).key]
        fields["families"] = family_roofs(data / system_of(fields["device_id"]) / "moe" / fields["engine"], theirs,
                                          fields["device_id"])
        print(f"{fields['device_id']} {fields['engine']} {theirs}: {len(fields['families'])} families")
    MOE_CALIBRATIONS_PATH.write_text(json.dumps(shipped, indent=1) + "\n")


if __name__ == "__main__":
    if sys.argv[1] == "--families":
        with_families(Path(sys.argv[2]))
    else:
        main(Path(sys.argv[1]))
