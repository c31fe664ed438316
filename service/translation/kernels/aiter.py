"""ROCm aiter's tuned GEMM tables (github.com/ROCm/aiter, MIT: `aiter/configs/*tuned_gemm*.csv` and
`aiter/configs/model_configs/*tuned_gemm*.csv`): the kernel aiter picked for each (M, N, K) on a GPU and the time it
measured, `us`, in microseconds. SGLang, vLLM and ATOM on ROCm run their GEMMs through these tables, so they are the
times those engines' GEMMs take.

How a table is read:
- the GPU by its (gfx, cu_num) columns: gfx942 with 304 CUs is the MI300X (the MI325X is the same chip with HBM3E,
  and has no table of its own), gfx950 with 256 CUs the MI355X; other parts (gfx942 with 80 CUs, the MI308X;
  gfx1250) are not in the catalog;
- the dtype by the file's name: `bf16_` (bf16 operands), `a8w8_blockscale` (fp8 operands, an fp32 scale per 1 x 128
  of A and per 128 x 128 of B: DeepSeek's scheme), `a4w4_blockscale` (fp4 operands, an 8-bit scale per 32);
  per-token a8w8 and batched tables are left out (their weights' type is int8 on some rows, or a batch dimension
  this mapping does not carry);
- a shape timed in several tables (plain and pre-shuffled weights) keeps its fastest time: the engine picks it;
- a GEMM timed faster than its operands can cross HBM at the datasheet's bandwidth ran from the 256 MB Infinity
  Cache (the tuner repeats a kernel on the same operands); it is left out, as a calibration of HBM-resident
  kernels must never expect less than the bound.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Iterator

REPOSITORY = "ROCm/aiter (MIT)"
DEVICES = {("gfx942", 304): "amd-mi300x", ("gfx950", 256): "amd-mi355x"}
# File name pieces and the dtype their operands are in: (the service's dtype, operand bytes an element, scale bytes
# an element of A and of B).
SCHEMES = {"a8w8_blockscale": ("fp8", 1.0, 4 / 128, 4 / (128 * 128)), "a4w4_blockscale": ("fp4", 0.5, 1 / 32, 1 / 32),
           "bf16_": ("bf16", 2.0, 0.0, 0.0)}
OUTPUT_BYTES = 2  # every table's GEMMs write bf16


def scheme_of(path: str) -> tuple[str, float, float, float] | None:
    """The operands' scheme a tuned table's file name says, or None for tables this mapping leaves out."""
    name = path.rsplit("/", 1)[-1]
    if ("untuned" in name or "tuned" not in name or "gemm" not in name or "batched" in name
            or not name.endswith(".csv")):
        return None
    for piece, scheme in SCHEMES.items():
        if piece in name:
            return scheme
    return None


def gemm_bytes(m: float, n: float, k: float, operand_bytes: float, a_scale: float, b_scale: float) -> float:
    """A and B read once in the operands' type with their scales, C written in bf16: the roofline's own count."""
    return (m * k) * (operand_bytes + a_scale) + (k * n) * (operand_bytes + b_scale) + m * n * OUTPUT_BYTES


def read_table(text: str) -> Iterator[tuple[str, int, int, int, float]]:
    """(device id, m, n, k, seconds) of each row of a catalog GPU with a positive, finite time."""
    for row in csv.DictReader(io.StringIO(text)):
        try:
            device = DEVICES.get((row["gfx"], int(row["cu_num"])))
            seconds = float(row["us"]) * 1e-6
            m, n, k = int(row["M"]), int(row["N"]), int(row["K"])
        except (KeyError, TypeError, ValueError):
            continue
        if device is not None and math.isfinite(seconds) and seconds > 0 and min(m, n, k) > 0:
            yield device, m, n, k, seconds


def fastest(tables: Iterable[tuple[str, str]]) -> dict[tuple[str, str], dict[tuple[int, int, int], float]]:
    """(device id, dtype) -> (m, n, k) -> the fastest time any of the (path, text) tables gives it."""
    found: dict[tuple[str, str], dict[tuple[int, int, int], float]] = {}
    for path, text in tables:
        scheme = scheme_of(path)
        if scheme is None:
            continue
        for device, m, n, k, seconds in read_table(text):
            shapes = found.setdefault((device, scheme[0]), {})
            shapes[(m, n, k)] = min(seconds, shapes.get((m, n, k), math.inf))
    return found
