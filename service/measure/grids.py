"""The shapes and sizes a run visits. Quick: enough for a calibration to be fitted and checked (CI, a first look);
full: the spread of shapes models run, decode's thin products to prefill's large ones."""

from __future__ import annotations

import itertools

# Matmul dimensions: m is the tokens a step multiplies (decode's few to prefill's many), n and k the model's widths.
QUICK_M = (1, 16, 128, 512)
QUICK_NK = ((1024, 1024), (2048, 1024), (1024, 4096))
FULL_M = (1, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096)
FULL_NK = ((1024, 1024), (2048, 2048), (4096, 1024), (1024, 4096), (4096, 4096), (8192, 2048), (2048, 8192),
           (14336, 4096), (4096, 14336))

# Main-memory bandwidth: arrays from 16 MiB (past most caches) up, the largest read most.
QUICK_COPY_BYTES = (16 << 20, 64 << 20)
FULL_COPY_BYTES = (16 << 20, 64 << 20, 256 << 20, 1 << 30)

# The square matmul whose rate stands for a dtype's peak.
QUICK_PEAK_SIZE, FULL_PEAK_SIZE = 1024, 4096


def matmul_shapes(quick: bool) -> list[tuple[int, int, int]]:
    ms, nks = (QUICK_M, QUICK_NK) if quick else (FULL_M, FULL_NK)
    return [(m, n, k) for m, (n, k) in itertools.product(ms, nks)]
