"""How much of the matrix units a GEMM keeps busy: tile padding and wave quantisation.

padding efficiency = M*N*K / (ceil(M/m_t) m_t * ceil(N/n_t) n_t * ceil(K/k_t) k_t); executed FLOPs =
model FLOPs / padding efficiency; tiles = ceil(M/m_t) * ceil(N/n_t) (per batch item); waves = tiles / SMs;
wave efficiency = waves / ceil(waves) (the last wave leaves SMs idle).
"""

from __future__ import annotations

import math
from typing import NamedTuple


class ShapeEfficiency(NamedTuple):
    tile: tuple[int, int, int]
    padding_efficiency: float
    model_flops: float
    executed_flops: float
    tiles: int
    sm_count: int | None
    waves: float | None
    wave_efficiency: float | None

    @property
    def combined(self) -> float:
        return self.padding_efficiency * (self.wave_efficiency or 1.0)


def _padded(size: int, tile: int) -> int:
    return -(-size // tile) * tile


def matmul_efficiency(m: int, n: int, k: int, batch: int, tile: tuple[int, int, int], sm_count: int | None,
                      model_flops: float) -> ShapeEfficiency:
    tile_m, tile_n, tile_k = tile
    padding = (m * n * k) / (_padded(m, tile_m) * _padded(n, tile_n) * _padded(k, tile_k))
    tiles = batch * -(-m // tile_m) * -(-n // tile_n)
    waves = tiles / sm_count if sm_count else None
    return ShapeEfficiency(tile, padding, model_flops, model_flops / padding, tiles, sm_count, waves,
                           waves / math.ceil(waves) if waves else None)


def grouped_rows(tokens_per_expert: list[int], min_row_tile: int) -> tuple[int, int]:
    """(rows that carry data, rows executed): each expert's rows are padded up to the row tile."""
    data = sum(tokens_per_expert)
    executed = sum(_padded(t, min_row_tile) for t in tokens_per_expert if t)
    return data, executed
