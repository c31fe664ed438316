"""Mapping an Empirical Roofline Toolkit result (roofline.json) onto roof measurements.

ERT reports `empirical.gflops.data` and `empirical.gbytes.data` as [name, value] pairs in GFLOP/s and
GB/s (1e9). Its FLOP kernels are fused multiply-add loops on the ordinary (vector) units, so a
"FP64 GFLOPs" entry becomes an fp64 vector roof. Memory names map DRAM/HBM to hbm, L2 to l2 and L1
(on GPUs the L1/shared-memory level) to smem; other levels (L3, MCDRAM caches) have no counterpart.
"""

from __future__ import annotations

from typing import Any

from service.core.errors import CostModelError

LEVEL_NAMES = {"dram": "hbm", "hbm": "hbm", "mcdram": "hbm", "l2": "l2", "l1": "smem", "smem": "smem"}
DTYPE_NAMES = {"fp64": "fp64", "fp32": "fp32", "fp16": "fp16", "bf16": "bf16"}


def _pairs(document: dict[str, Any], section: str) -> list:
    try:
        data = document["empirical"][section]["data"]
    except (KeyError, TypeError):
        raise CostModelError(f"roofline.empirical.{section}.data", "missing: expected a list of [name, value] pairs") from None
    if not isinstance(data, list):
        raise CostModelError(f"roofline.empirical.{section}.data", "must be a list of [name, value] pairs")
    return data


def _pair(section: str, index: int, entry) -> tuple[str, float]:
    where = f"roofline.empirical.{section}.data.{index}"
    if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
            and isinstance(entry[1], (int, float)) and not isinstance(entry[1], bool)):
        raise CostModelError(where, "must be a [name, number] pair")
    value = float(entry[1])
    if not (value > 0 and value < float("inf")):
        raise CostModelError(where, "the value must be positive and finite")
    return entry[0], value


def ert_records(document: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """Benchmark records (kind, dtype/unit or level, value in SI) and the entries skipped, with why."""
    records, skipped = [], []
    for index, entry in enumerate(_pairs(document, "gflops")):
        name, value = _pair("gflops", index, entry)
        dtype = DTYPE_NAMES.get(name.split()[0].lower())
        if dtype is None:
            skipped.append(f"gflops {name!r}: no dtype recognised in the name")
            continue
        records.append({"kind": "compute", "dtype": dtype, "unit": "vector", "flops_per_s": value * 1e9})
    for index, entry in enumerate(_pairs(document, "gbytes")):
        name, value = _pair("gbytes", index, entry)
        level = LEVEL_NAMES.get(name.strip().lower())
        if level is None:
            skipped.append(f"gbytes {name!r}: no matching memory level (hbm, l2, smem)")
            continue
        records.append({"kind": "memory_bandwidth", "level": level, "bytes_per_s": value * 1e9})
    return records, skipped
