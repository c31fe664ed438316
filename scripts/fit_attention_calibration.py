"""Fits the service's decode-attention expectations to NVIDIA AIConfigurator's public measured attention tables.

Source: the `aiconfigurator-core` wheel on PyPI (Apache-2.0), `aiconfigurator_core/systems/data/<gpu>/`:
- `mla/<engine>/<version>/generation_mla_perf.parquet`: DeepSeek's latent attention (absorbed) at one query token a
  sequence, bf16 queries, the cache in bf16 or fp8 (columns kv_cache_dtype, num_heads (the device's), batch_size,
  step (the tokens cached before the query), kernel_source, latency in ms), for TensorRT-LLM and SGLang;
- `attention/<engine>/<version>/generation_attention_perf.parquet`: grouped-query attention likewise (num_heads,
  num_key_value_heads, head_dim, window_size), for TensorRT-LLM, SGLang and vLLM.
The project does not depend on it: a developer refreshes the shipped fit by hand,

    .venv/bin/pip download aiconfigurator-core==0.12.0 --no-deps -d /tmp/aic && unzip -q -o /tmp/aic/*.whl -d /tmp/aic
    .venv/bin/pip install pyarrow
    .venv/bin/python scripts/fit_attention_calibration.py /tmp/aic/aiconfigurator_core/systems/data

which rewrites service/data/calibrations/attention.json and tests/data/aiconfigurator_attention_sample.csv (a few
timings of each table, that the tests hold the shipped fits to), and prints each fit's error.

Per (device, engine, kind, cache dtype): the newest version of the engine's table, the fastest kernel of each shape
(the engine picks it), a shape's work counted as the service's attention row counts it
(service/core/expectations/decode_attention.py), fitted as scripts/kernel_table_fits.py fits every kernel table.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from packaging.version import Version

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.kernel_table_fits import fit_line, fit_table, system_of, write_fits
from service.core.expectations.decode_attention import (
    ATTENTION_DECODE,
    MLA_CACHED,
    MLA_DECODE,
    MLA_VALUES,
    DecodeAttentionShape,
    decode_attention_work,
)
from service.persistence.catalog import ATTENTION_CALIBRATIONS_PATH
from service.translation.kernels.aiconfigurator import DEVICES, MOE_ENGINES, PACKAGE

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_ROWS = 20  # per fit, kept in tests/data for the tests
CACHE_DTYPES = {"bfloat16": "bf16", "fp8": "fp8"}
# (the service's kind, the table's folder and file, its columns)
TABLES = {
    MLA_DECODE: ("mla", "generation_mla_perf.parquet",
                   ["kv_cache_dtype", "num_heads", "batch_size", "step", "latency"]),
    ATTENTION_DECODE: ("attention", "generation_attention_perf.parquet",
                         ["kv_cache_dtype", "num_heads", "num_key_value_heads", "head_dim", "window_size", "batch_size",
                          "step", "latency"]),
}


def shape_of(kind: str, row: dict) -> DecodeAttentionShape | None:
    """The shape a table row times, as the service's attention row takes it; None where the service counts no such
    attention (query heads not a multiple of the key heads)."""
    kv_len = int(row["step"]) + 1
    if kind == MLA_DECODE:
        return DecodeAttentionShape(True, int(row["batch_size"]), int(row["num_heads"]), 1, MLA_CACHED, MLA_VALUES,
                                    kv_len)
    heads, kv_heads = int(row["num_heads"]), int(row["num_key_value_heads"])
    if kv_heads > heads or heads % kv_heads:
        return None
    window = int(row["window_size"]) or None
    return DecodeAttentionShape(False, int(row["batch_size"]), heads, kv_heads, int(row["head_dim"]),
                                int(row["head_dim"]), kv_len, window)


def newest_timings(folder: Path, kind: str) -> tuple[str, dict[str, dict[DecodeAttentionShape, float]]] | None:
    """(the table's version, by cache dtype the fastest time of each shape in seconds) of the newest version that
    has the table; None where none does."""
    _, name, columns = TABLES[kind]
    for path in sorted(folder.glob(f"*/{name}"), key=lambda p: Version(p.parent.name), reverse=True):
        table = pq.read_table(path, columns=columns).to_pydict()
        fastest: dict[str, dict[DecodeAttentionShape, float]] = {}
        for values in zip(*(table[c] for c in columns), strict=True):
            row = dict(zip(columns, values, strict=True))
            dtype, shape = CACHE_DTYPES.get(row["kv_cache_dtype"]), shape_of(kind, row)
            if dtype is None or shape is None:
                continue
            timings = fastest.setdefault(dtype, {})
            timings[shape] = min(timings.get(shape, np.inf), row["latency"] * 1e-3)
        if fastest:
            return path.parent.name, fastest
    return None


def fit_one(device_id: str, engine: str, kind: str, dtype: str, version: str,
            timings: dict[DecodeAttentionShape, float], rng: np.random.Generator, sample: list) -> dict:
    folder, name, _ = TABLES[kind]
    shapes = list(timings)
    return fit_table(
        device_id=device_id, engine=engine, dtype=dtype, operator=kind, peak_dtype="bf16",
        source=f"{PACKAGE}: systems/data/{system_of(device_id)}/{folder}/{engine}/{version}/{name}, its "
               f"{dtype}-cache timings, the fastest kernel of each of {len(shapes):,} shapes",
        shapes=shapes, work=np.array([decode_attention_work(shape, dtype) for shape in shapes]),
        measured=np.array([timings[s] for s in shapes]),
        sizes=np.array([(s.batch, s.kv_len, s.heads) for s in shapes], dtype=float),
        rng=rng, sample=sample, sample_rows=SAMPLE_ROWS)


def main(data: Path) -> None:
    rng = np.random.default_rng(2026)
    calibrations, sample = [], []
    print("device engine kind dtype: fitted, checked; median and p90 error (the bound's median); the kernels' roofs")
    for system, device_id in DEVICES.items():
        for engine in sorted(set(MOE_ENGINES.values())):
            for kind, (folder, _, _) in TABLES.items():
                found = newest_timings(data / system / folder / engine, kind)
                if found is None:
                    continue
                version, by_dtype = found
                for dtype, timings in sorted(by_dtype.items()):
                    fields = fit_one(device_id, engine, kind, dtype, version, timings, rng, sample)
                    calibrations.append(fields)
                    print(fit_line(f"{device_id} {engine} {kind} {dtype}", fields))
    write_fits(ATTENTION_CALIBRATIONS_PATH, "t = t0 + max(T_compute / compute_efficiency, T_memory / "
               "memory_efficiency) of one layer's attention core at one query token a sequence on one device, T at "
               "the catalog's nominal roofs (bf16 peak; service/core/expectations/decode_attention.py)", calibrations,
               ROOT / "tests" / "data" / "aiconfigurator_attention_sample.csv", DecodeAttentionShape._fields, sample)

if __name__ == "__main__":
    main(Path(sys.argv[1]))
