"""Fits the service's attention expectations to NVIDIA AIConfigurator's public measured attention tables.

Source: the `aiconfigurator-core` wheel on PyPI (Apache-2.0), `aiconfigurator_core/systems/data/<gpu>/`:
- `mla/<engine>/<version>/generation_mla_perf.parquet`: DeepSeek's latent attention (absorbed) at one query token a
  sequence, bf16 queries, the cache in bf16 or fp8 (columns kv_cache_dtype, num_heads (the device's), batch_size,
  step (the tokens cached before the query), kernel_source, latency in ms), for TensorRT-LLM and SGLang;
- `attention/<engine>/<version>/generation_attention_perf.parquet`: grouped-query attention likewise (num_heads,
  num_key_value_heads, head_dim, window_size), for TensorRT-LLM, SGLang and vLLM;
- `mla/<engine>/<version>/context_mla_perf.parquet` and `attention/<engine>/<version>/context_attention_perf.parquet`:
  the same kinds over prompts of `isl` tokens with nothing cached (a latent prompt's heads expanded, keys of 192 and
  values of 128; attn_dtype the queries' and kv_cache_dtype the cache's).
The project does not depend on it: a developer refreshes the shipped fit by hand,

    .venv/bin/pip download aiconfigurator-core==0.12.0 --no-deps -d /tmp/aic && unzip -q -o /tmp/aic/*.whl -d /tmp/aic
    .venv/bin/pip install pyarrow
    .venv/bin/python scripts/fit_attention_calibration.py /tmp/aic/aiconfigurator_core/systems/data

which rewrites service/data/calibrations/attention.json and tests/data/aiconfigurator_attention_sample.csv (a few
timings of each table, that the tests hold the shipped fits to), and prints each fit's error.

Per (device, engine, kind, dtype): the newest version of the engine's table, the fastest kernel of each shape (the
engine picks it), a shape's work counted as the service's attention row counts it
(service/core/expectations/attention_kernels.py), fitted as scripts/kernel_table_fits.py fits every kernel table. A
decode fit's dtype is its cache's; a prefill fit's the activations' the service's prompt row computes in: a latent
prompt's, the cache's (the service expands the latent in the activations' dtype and an engine serving an fp8 cache runs
the prompt's attention in fp8), a grouped-query prompt's, the timings whose queries and cache are both in it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from packaging.version import Version

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.kernel_table_fits import fit_line, fit_table, system_of, write_fits
from service.core.expectations.attention_kernels import (
    ATTENTION_DECODE,
    ATTENTION_PREFILL,
    DECODE_KINDS,
    MLA_CACHED,
    MLA_DECODE,
    MLA_PREFILL,
    MLA_PREFILL_KEY,
    MLA_PREFILL_VALUE,
    MLA_VALUES,
    AttentionShape,
    attention_work,
)
from service.persistence.catalog import ATTENTION_CALIBRATIONS_PATH, nominal_device
from service.translation.kernels.aiconfigurator import DEVICES, LATER_DEVICES, MOE_ENGINES, PACKAGE

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_ROWS = 20  # per fit, kept in tests/data for the tests
DTYPES = {"bfloat16": "bf16", "fp8": "fp8"}
# (the service's kind, the table's folder and file, its columns)
TABLES = {
    MLA_DECODE: ("mla", "generation_mla_perf.parquet", ["kv_cache_dtype", "num_heads", "batch_size", "step", "latency"]),
    ATTENTION_DECODE: ("attention", "generation_attention_perf.parquet",
                       ["kv_cache_dtype", "num_heads", "num_key_value_heads", "head_dim", "window_size", "batch_size",
                        "step", "latency"]),
    MLA_PREFILL: ("mla", "context_mla_perf.parquet", ["kv_cache_dtype", "num_heads", "batch_size", "isl", "latency"]),
    ATTENTION_PREFILL: ("attention", "context_attention_perf.parquet",
                        ["attn_dtype", "kv_cache_dtype", "num_heads", "num_key_value_heads", "head_dim", "window_size",
                         "batch_size", "isl", "latency"]),
}


def dtype_of(kind: str, row: dict) -> str | None:
    """The fit a timing belongs to (module docstring); None where no service row runs as it was timed."""
    cache = DTYPES.get(row["kv_cache_dtype"])
    if kind == ATTENTION_PREFILL and DTYPES.get(row["attn_dtype"]) != cache:
        return None
    return cache


def shape_of(kind: str, row: dict) -> AttentionShape | None:
    """The shape a table row times, as the service's attention row takes it; None where the service counts no such
    attention (query heads not a multiple of the key heads)."""
    batch, heads = int(row["batch_size"]), int(row["num_heads"])
    if kind == MLA_DECODE:
        return AttentionShape(True, batch, heads, 1, MLA_CACHED, MLA_VALUES, 1, int(row["step"]) + 1)
    if kind == MLA_PREFILL:
        isl = int(row["isl"])
        return AttentionShape(True, batch, heads, heads, MLA_PREFILL_KEY, MLA_PREFILL_VALUE, isl, isl)
    kv_heads = int(row["num_key_value_heads"])
    if kv_heads > heads or heads % kv_heads:
        return None
    window = int(row.get("window_size", 0)) or None  # tables without the column (A100's SGLang, vLLM) time full attention
    q_len, kv_len = (1, int(row["step"]) + 1) if kind == ATTENTION_DECODE else (int(row["isl"]), int(row["isl"]))
    return AttentionShape(False, batch, heads, kv_heads, int(row["head_dim"]), int(row["head_dim"]), q_len, kv_len,
                          window)


def newest_timings(folder: Path, kind: str) -> tuple[str, dict[str, dict[AttentionShape, float]]] | None:
    """(the table's version, by dtype the fastest time of each shape in seconds) of the newest version that has the
    table; None where none does."""
    _, name, columns = TABLES[kind]
    for path in sorted(folder.glob(f"*/{name}"), key=lambda p: Version(p.parent.name), reverse=True):
        present = [c for c in columns if c in pq.read_schema(path).names]
        table = pq.read_table(path, columns=present).to_pydict()
        fastest: dict[str, dict[AttentionShape, float]] = {}
        for values in zip(*(table[c] for c in present), strict=True):
            row = dict(zip(present, values, strict=True))
            dtype, shape = dtype_of(kind, row), shape_of(kind, row)
            if dtype is None or shape is None:
                continue
            timings = fastest.setdefault(dtype, {})
            timings[shape] = min(timings.get(shape, np.inf), row["latency"] * 1e-3)
        if fastest:
            return path.parent.name, fastest
    return None


def fit_one(device_id: str, engine: str, kind: str, dtype: str, version: str,
            timings: dict[AttentionShape, float], rng: np.random.Generator, sample: list) -> dict:
    folder, name, _ = TABLES[kind]
    shapes = list(timings)
    decode = kind in DECODE_KINDS
    return fit_table(
        device_id=device_id, engine=engine, dtype=dtype, operator=kind, peak_dtype="bf16" if decode else dtype,
        source=f"{PACKAGE}: systems/data/{system_of(device_id)}/{folder}/{engine}/{version}/{name}, its "
               f"{dtype}{'-cache' if decode else ''} timings, the fastest kernel of each of {len(shapes):,} shapes",
        shapes=shapes, work=np.array([attention_work(shape, dtype) for shape in shapes]),
        measured=np.array([timings[s] for s in shapes]),
        sizes=np.array([(s.batch, s.kv_len, s.heads) for s in shapes], dtype=float),
        rng=rng, sample=sample, sample_rows=SAMPLE_ROWS)


def main(data: Path) -> None:
    rng = np.random.default_rng(2026)
    calibrations, sample = [], []
    print("device engine kind dtype: fitted, checked; median and p90 error (the bound's median); the kernels' roofs")
    # The decode kinds first: the prompts' fits, added later, leave the decode fits' random splits as they were.
    # The systems added later after both (LATER_DEVICES).
    for devices in (DEVICES, LATER_DEVICES):
        for kinds in (DECODE_KINDS, (MLA_PREFILL, ATTENTION_PREFILL)):
            fit_kinds(data, devices, kinds, rng, calibrations, sample)
    write_fits(ATTENTION_CALIBRATIONS_PATH, "t = t0 + max(T_compute / compute_efficiency, T_memory / "
               "memory_efficiency) of one layer's attention core on one device (a decode step's, one query token a "
               "sequence, or a prompt's), T at the catalog's nominal roofs (a decode's at the bf16 peak, a prompt's at "
               "its dtype's; service/core/expectations/attention_kernels.py)", calibrations,
               ROOT / "tests" / "data" / "aiconfigurator_attention_sample.csv", AttentionShape._fields, sample)


def fit_kinds(data: Path, devices: dict[str, str], kinds: tuple[str, ...], rng: np.random.Generator,
              calibrations: list, sample: list) -> None:
    for system, device_id in devices.items():
        for engine in sorted(set(MOE_ENGINES.values())):
            for kind in kinds:
                folder = TABLES[kind][0]
                found = newest_timings(data / system / folder / engine, kind)
                if found is None:
                    continue
                version, by_dtype = found
                for dtype, timings in sorted(by_dtype.items()):
                    # A prompt computes in its dtype: a device with no tensor peak in it (the A100 in fp8) runs none.
                    if kind not in DECODE_KINDS and nominal_device(device_id).peak(dtype, "tensor") is None:
                        continue
                    fields = fit_one(device_id, engine, kind, dtype, version, timings, rng, sample)
                    calibrations.append(fields)
                    print(fit_line(f"{device_id} {engine} {kind} {dtype}", fields))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
