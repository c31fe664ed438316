"""Many plain matmuls on one device's roofs at once, as numpy arrays: the batch endpoint's bulk path.

A scheduler's batch holds hundreds of matmuls that differ only in their dimensions; the per-operator path
(matmul_cost, matmul_efficiency, roofline.analyze) spends most of its time in Python's per-call overhead, not
in the few dozen multiplications each answer needs. Here the same formulas run once per array. Every value
must equal the per-operator path's bit for bit (tests/translation/test_matmul_batches.py compares whole
answers), so each expression keeps that path's order of operations and Python's int and float promotion
(numpy follows it for a Python scalar against an int64 array), and a matmul is taken here only where every
integer it produces stays below 2**52: there int64 cannot overflow, and every int-to-float conversion and
int / int division rounds as Python's arbitrary-precision ints do. Anything else (larger shapes, counts the
per-operator path refuses, non-finite results) is left to the per-operator path, which answers it as always.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from service.core.roofs import ComputeRoof, MemoryRoof

# Below 2**53 every int is exact in float64; the margin covers the float estimate used to decide.
EXACT_INT_LIMIT = 2.0**52


class MatmulShapes(NamedTuple):
    """A group's dimensions, one entry per matmul (int64 arrays)."""

    m: np.ndarray
    n: np.ndarray
    k: np.ndarray
    batch: np.ndarray


class MatmulGroupSpec(NamedTuple):
    """What the matmuls of a group share: operand sizes, options, the device's tile and roofs."""

    s_a: float
    s_b: float
    s_c: float
    bias: bool
    weight_shared: bool
    tile: tuple[int, int, int]
    sm_count: int | None
    apply_efficiency: bool
    compute: ComputeRoof
    hbm: MemoryRoof
    l2: MemoryRoof | None  # None: the device has no such roof in this mode, the L2 traffic is only noted


class MatmulRooflines(NamedTuple):
    """The per-operator path's numbers for each matmul of a group, as arrays (Python scalars where shared)."""

    exact: np.ndarray  # bool: computed here; False: left to the per-operator path
    flops: np.ndarray
    bytes_read: np.ndarray
    bytes_written: np.ndarray
    bytes_total: np.ndarray
    l2_bytes: np.ndarray
    padding_efficiency: np.ndarray
    model_flops: np.ndarray
    executed_flops: np.ndarray
    tiles: np.ndarray
    waves: np.ndarray | None
    wave_efficiency: np.ndarray | None
    efficiency: np.ndarray  # the compute roof's scale: padding x wave efficiency where applied, else 1.0
    flops_per_s: np.ndarray  # the compute roof after that scale
    compute_time_s: np.ndarray
    hbm_time_s: np.ndarray
    hbm_intensity: np.ndarray
    hbm_ridge: np.ndarray
    l2_time_s: np.ndarray | None
    l2_intensity: np.ndarray | None
    l2_ridge: np.ndarray | None
    time_s: np.ndarray
    l2_binds: np.ndarray  # bool: L2 is the slowest level (else HBM, when memory binds)
    memory_bound: np.ndarray  # bool
    attainable_flops_per_s: np.ndarray
    mfu: np.ndarray | None


def _ceil_div(size, tile):
    return -(-size // tile)


def _exact_domain(shapes: MatmulShapes, spec: MatmulGroupSpec) -> np.ndarray:
    """Which matmuls keep every integer below EXACT_INT_LIMIT, estimated in float64 (which cannot overflow)."""
    m, n, k, batch = (a.astype(np.float64) for a in shapes)
    tile_m, tile_n, tile_k = spec.tile
    widest = max(8.0, spec.s_a, spec.s_b, spec.s_c)
    largest = np.maximum.reduce([
        2 * batch * m * n * k + batch * m * n,  # FLOPs (and the model FLOPs of the shape efficiency)
        batch * m * k * widest, batch * m * n * widest, batch * k * n * widest,  # operands' bytes
        batch * (n + tile_n) * m * k * widest + batch * (m + tile_m) * k * n * widest,  # L2 traffic
        (m + tile_m) * (n + tile_n) * (k + tile_k),  # the padded volume
    ])
    return largest < EXACT_INT_LIMIT


def matmul_rooflines(shapes: MatmulShapes, spec: MatmulGroupSpec) -> MatmulRooflines:
    """The numbers of matmul_cost, matmul_efficiency and roofline.analyze (no what-ifs) for every matmul."""
    exact = _exact_domain(shapes, spec)
    # Matmuls outside the exact domain compute as 1x1x1 here, so that no int64 overflows; they are not answered.
    m, n, k, batch = (np.where(exact, a, 1) for a in shapes)
    s_a, s_b, s_c, bias = spec.s_a, spec.s_b, spec.s_c, spec.bias
    tile_m, tile_n, tile_k = spec.tile

    # matmul_cost
    a_elems, c_elems = batch * m * k, batch * m * n
    b_copies = 1 if spec.weight_shared else batch
    b_elems = b_copies * k * n
    flops = 2 * a_elems * n + (c_elems if bias else 0)
    bias_bytes = b_copies * n * s_c if bias else 0
    bytes_read = a_elems * s_a + b_elems * s_b + bias_bytes
    bytes_written = c_elems * s_c
    bytes_total = bytes_read + bytes_written
    l2_bytes = (batch * _ceil_div(n, tile_n) * m * k * s_a + batch * _ceil_div(m, tile_m) * k * n * s_b
                + bias_bytes + bytes_written)

    # matmul_efficiency
    padding = (m * n * k) / (_ceil_div(m, tile_m) * tile_m * (_ceil_div(n, tile_n) * tile_n)
                             * (_ceil_div(k, tile_k) * tile_k))
    model_flops = 2 * batch * m * n * k
    tiles = batch * _ceil_div(m, tile_m) * _ceil_div(n, tile_n)
    waves = wave_efficiency = None
    if spec.sm_count:
        waves = tiles / spec.sm_count
        wave_efficiency = waves / np.ceil(waves)
    efficiency = np.ones(len(m))
    if spec.apply_efficiency:
        efficiency = padding  # never the waves: service/core/efficiency.py says why

    # roofline.analyze: the compute roof scaled where the efficiency is below 1, every level's ceiling
    compute = spec.compute
    flops_per_s = np.where(efficiency < 1.0, compute.flops_per_s * efficiency, compute.flops_per_s)
    hbm_bandwidth = spec.hbm.bytes_per_s
    hbm_time = bytes_total / hbm_bandwidth
    hbm_intensity = flops / bytes_total
    hbm_ridge = flops_per_s / hbm_bandwidth
    slowest = hbm_time
    l2_time = l2_intensity = l2_ridge = None
    l2_binds = np.zeros(len(m), dtype=bool)
    if spec.l2 is not None:
        l2_time = l2_bytes / spec.l2.bytes_per_s
        l2_intensity = flops / l2_bytes
        l2_ridge = flops_per_s / spec.l2.bytes_per_s
        l2_binds = l2_time > hbm_time  # the first of equal times binds, as in analyze: HBM
        slowest = np.where(l2_binds, l2_time, hbm_time)
    compute_time = flops / flops_per_s
    time_s = np.maximum(compute_time, slowest)
    memory_bound = slowest > compute_time
    attainable = flops / time_s
    nominal = compute.nominal_flops_per_s
    mfu = attainable / nominal if nominal else None

    checked = [hbm_intensity, hbm_ridge, attainable, compute_time, time_s, flops_per_s]
    checked += [] if mfu is None else [mfu]
    finite = np.logical_and.reduce([np.isfinite(values) for values in checked])
    return MatmulRooflines(
        exact=exact & finite & (time_s > 0), flops=flops, bytes_read=bytes_read, bytes_written=bytes_written,
        bytes_total=bytes_total, l2_bytes=l2_bytes, padding_efficiency=padding, model_flops=model_flops,
        executed_flops=model_flops / padding, tiles=tiles, waves=waves, wave_efficiency=wave_efficiency,
        efficiency=efficiency, flops_per_s=flops_per_s, compute_time_s=compute_time, hbm_time_s=hbm_time,
        hbm_intensity=hbm_intensity, hbm_ridge=hbm_ridge, l2_time_s=l2_time, l2_intensity=l2_intensity,
        l2_ridge=l2_ridge, time_s=time_s, l2_binds=l2_binds & memory_bound, memory_bound=memory_bound,
        attainable_flops_per_s=attainable, mfu=mfu,
    )
