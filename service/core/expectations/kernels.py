"""Expectations beside bounds: what a kernel is expected to take on a device, from a fit to measured kernels.

A bound ranks hardware by its datasheet; measured GEMMs sit a device- and dtype-dependent factor above it (a fixed
launch-and-tail cost, large GEMMs at a fraction of the peak, small ones at a fraction of the bandwidth). A
calibration is that fit, t = t0 + max(T_compute / e_c, T_memory / e_m), with T_compute and T_memory the roofline's
own terms at the device's nominal roofs, times what the formula missed on the nearest shapes it was fitted to (the
shape effects a formula cannot say: tile quantisation, kernel choice): the weighted mean of log(measured / formula)
over the 8 fitted shapes nearest in (log2 m, log2 n, log2 k), each weighing 1 / (distance + 0.25). It carries what
it was fitted on and how wrong it was on measurements held out of the fit. An expectation is never below the bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property
from typing import NamedTuple

import numpy as np

from service.core.expectations.attention_kernels import (
    ATTENTION_DECODE,
    ATTENTION_PREFILL,
    DECODE_KINDS,
    MLA_DECODE,
    MLA_PREFILL,
)

TIMINGS_NAMES = {"matmul": "GEMM", "fused_moe": "fused-MoE", MLA_DECODE: "MLA decode",
                 ATTENTION_DECODE: "decode attention", MLA_PREFILL: "MLA prefill", ATTENTION_PREFILL: "prefill attention"}


def weight_only_key(weights: str, activations: str) -> str:
    """The key of a table of kernels whose weights are stored narrower than the activations they multiply."""
    return f"{weights}-weights:{activations}"


@dataclass(frozen=True)
class KernelCalibration:
    device_id: str
    dtype: str  # the compute dtype it was fitted on
    engine: str
    source: str
    peak_flops_per_s: float  # the roofs it was fitted at (the catalog's nominal ones then)
    hbm_bytes_per_s: float
    t0_s: float
    compute_efficiency: float
    memory_efficiency: float
    fitted_on: int  # measurements
    checked_on: int  # measurements held out of the fit
    median_error: float  # |expected / measured - 1| on those, median
    p90_error: float
    bound_median_error: float  # the bare bound's, on the same
    # "shipped" (fitted to public measurements, in service/data/calibrations) or "measured" (to timings submitted to
    # the device, POST /v1/devices/{id}/kernel-timings); how its error was checked.
    origin: str = "shipped"
    checked_by: str = "the other half of the measurements"
    # (least, most) of m, n and k over the timings fitted; None where they were not kept.
    shapes: tuple[tuple[int, int], ...] | None = None
    # The fitted shapes (log2 m, log2 n, log2 k) and log(measured / formula) of each: the nearest correct the formula.
    anchors: tuple[tuple[float, float, float, float], ...] | None = None
    # The efficiencies its timings could not tell (COMPUTE, MEMORY: no timing bound there), held at 1.
    unidentified: tuple[str, ...] = ()
    # The kernels' own roofs: what the largest clearly compute-bound (memory-bound) timings reach of the peak (of the
    # bandwidth), their median; None where the timings hold too few such shapes. A composed step reads these
    # (kernel_steps.py): a row carries no shape, and the formula's efficiencies are shaped by the many small kernels
    # that t0 also covers (on the MI355X's fp8 table they put HBM at 0.24 of the datasheet where its large GEMVs
    # reach 0.64).
    roof_compute_efficiency: float | None = None
    roof_memory_efficiency: float | None = None
    # What was timed: "matmul" (GEMM tables), "fused_moe" (one routed-experts layer on one device:
    # service/core/expectations/fused_moe.py), or one layer's attention (service/core/expectations/attention_kernels.py):
    # a decode step's, "mla_decode" or "attention_decode" (`dtype` then the cache's, the queries bf16), a prompt's,
    # "mla_prefill" or "attention_prefill" (`dtype` the activations').
    operator: str = "matmul"
    # A fused-MoE table of weight-only experts (vLLM's Marlin MXFP4 on Hopper): their stored type, narrower than
    # `dtype`, the activations' they are multiplied in; None: stored in `dtype` too.
    weights: str | None = None
    # The kernels' own roofs at each model's shape the tables time (a fused MoE's family, fused_moe.moe_family:
    # (family, compute roof, memory roof), either None where too few of its timings are bound by it), from the newest
    # version of the table that times that shape. How near a kernel comes to HBM depends on the model's widths and
    # experts as much as on the device: the table-wide roofs put gpt-oss-120b's MXFP4 experts on a B200 under
    # TensorRT-LLM at 0.55 of HBM, its own shape's timings at 0.71. A composed step of that model reads them (for_family).
    families: tuple[tuple[str, float | None, float | None], ...] = ()
    family: str | None = None  # the family whose roofs stand in for the table-wide ones (for_family), None: none

    @property
    def key(self) -> str:
        """What the fit is kept by among a device's and engine's tables: its dtype, and its weights' where apart."""
        return self.dtype if self.weights is None else weight_only_key(self.weights, self.dtype)

    @property
    def id(self) -> str:
        timed = "" if self.operator == "matmul" else f"{self.operator}:"
        return f"kernel:{self.origin}:{self.device_id}:{self.engine}:{timed}{self.key}"

    @property
    def timings_name(self) -> str:
        return TIMINGS_NAMES[self.operator]

    @property
    def compute_dtype(self) -> str:
        """The dtype whose peak it was fitted at: its own, but a decode attention's, whose queries are bf16."""
        return "bf16" if self.operator in DECODE_KINDS else self.dtype

    def __post_init__(self):
        for name in ("shapes", "anchors"):  # read back from JSON as lists
            if getattr(self, name) is not None:
                object.__setattr__(self, name, tuple(tuple(item) for item in getattr(self, name)))
        object.__setattr__(self, "unidentified", tuple(self.unidentified))
        object.__setattr__(self, "families", tuple(tuple(item) for item in self.families))
        roofs = [value for value in (self.roof_compute_efficiency, self.roof_memory_efficiency,
                                     *(roof for _, *pair in self.families for roof in pair)) if value is not None]
        if not (self.t0_s >= 0 and 0 < self.compute_efficiency <= 1 and 0 < self.memory_efficiency <= 1
                and all(0 < value <= 1 for value in roofs)):
            raise ValueError(f"calibration of {self.device_id} {self.dtype} would expect less than the bound")

    @property
    def kernel_compute_efficiency(self) -> float:
        """The compute roof a composed step's rows run at: the kernels' own where measured, else the fit's."""
        return self.roof_compute_efficiency or self.compute_efficiency

    @property
    def kernel_memory_efficiency(self) -> float:
        return self.roof_memory_efficiency or self.memory_efficiency

    def for_family(self, family: str | None) -> KernelCalibration:
        """The same fit at the roofs its tables measured at `family`'s shape (each where there is one), itself where
        they time no such shape."""
        found = next((pair for name, *pair in self.families if name == family), None)
        if found is None:
            return self
        compute, memory = found
        return replace(self, family=family, roof_compute_efficiency=compute or self.roof_compute_efficiency,
                       roof_memory_efficiency=memory or self.roof_memory_efficiency)

    def extrapolated(self, m: int, n: int, k: int) -> bool:
        """Whether a matmul lies outside the m, n and k the fitted timings covered (False where not recorded)."""
        return self.shapes is not None and any(
            not low <= size <= high for size, (low, high) in zip((m, n, k), self.shapes, strict=True))

    def outside(self, flops: float, hbm_bytes: float, sizes: tuple[int, int, int] | None) -> bool:
        """Whether its expectation of a matmul extrapolates: the shape lies outside those fitted, or the term that
        binds it is one the timings could not tell (a compute-bound matmul on a fit of memory-bound ones)."""
        if sizes is not None and self.extrapolated(*sizes):
            return True
        if not self.unidentified:
            return False
        compute_binds = (flops / (self.peak_flops_per_s * self.compute_efficiency)
                         >= hbm_bytes / (self.hbm_bytes_per_s * self.memory_efficiency))
        return (COMPUTE if compute_binds else MEMORY) in self.unidentified

    def expected_time_s(self, flops: float, hbm_bytes: float, sizes: tuple[int, int, int] | None = None) -> float:
        """The formula, corrected by the nearest fitted shapes where the matmul's (m, n, k) is given."""
        formula = self.t0_s + max(flops / (self.peak_flops_per_s * self.compute_efficiency),
                                  hbm_bytes / (self.hbm_bytes_per_s * self.memory_efficiency))
        if sizes is None or not self.anchors:
            return formula
        return formula * self._correction.at_one(*(math.log2(size) for size in sizes))

    def expected_times_s(self, flops: np.ndarray, hbm_bytes: np.ndarray, m: np.ndarray | None = None,
                         n: np.ndarray | None = None, k: np.ndarray | None = None) -> np.ndarray:
        """The same, element by element."""
        formula = self.t0_s + np.maximum(flops / (self.peak_flops_per_s * self.compute_efficiency),
                                         hbm_bytes / (self.hbm_bytes_per_s * self.memory_efficiency))
        if m is None or n is None or k is None or not self.anchors:
            return formula
        return formula * self.corrections(m, n, k)

    def expected_times_as_one_s(self, flops: list[float], hbm_bytes: list[float], m: list[int], n: list[int],
                                k: list[int]) -> np.ndarray:
        """`expected_time_s` of each matmul, bit for bit, computed together: its logarithms taken one by one as the
        scalar path takes them (numpy's may round apart), then the formula and the lattice read as arrays, the same
        operations in the same order."""
        formula = self.expected_times_s(np.array(flops), np.array(hbm_bytes))  # no sizes: the formula alone
        if not self.anchors:
            return formula
        log2 = math.log2
        points = np.array([(log2(a), log2(b), log2(c)) for a, b, c in zip(m, n, k, strict=True)], dtype=float)
        return formula * self._correction.at(points.reshape(-1, 3))

    @cached_property
    def _correction(self) -> ShapeCorrection:
        points = np.array(self.anchors, dtype=float)
        return ShapeCorrection(points[:, :3], points[:, 3])

    def use_lattice(self, correction: ShapeCorrection) -> None:
        """Read the nearest shapes' correction from the lattice tabulated when it was fitted (shipped beside it), not
        one tabulated here: no neighbour search (nor scipy, 40 MB a worker) on the first answer that needs it."""
        self.__dict__["_correction"] = correction

    def lattice(self) -> ShapeCorrection | None:
        """The nearest shapes' correction, tabulated (None without fitted shapes)."""
        return self._correction if self.anchors else None

    def corrections(self, m, n, k) -> np.ndarray:
        """measured / formula on the nearest fitted shapes, for each (m, n, k)."""
        return self._correction.at(np.log2(np.column_stack([m, n, k]).astype(float)))

    @cached_property
    def basis(self) -> str:
        """Written once: every matmul answer on the device and dtype carries it."""
        return (f"fitted to {self.fitted_on:,} {self.engine} {self.timings_name} timings on {self.device_id} in {self.dtype} "
                f"({self.source}): t = {self.t0_s * 1e6:.3g} us + max(T_compute / {self.compute_efficiency:.3g}, "
                f"T_memory / {self.memory_efficiency:.3g}) at the nominal roofs"
                + "".join(f" ({name} held at 1: no timing was {name.split('_')[0]}-bound)" for name in self.unidentified)
                + (f", times what it missed on the {NEIGHBOURS} nearest of {len(self.anchors):,} fitted shapes"
                   if self.anchors else "") + f"; on {self.checked_on:,} timings held "
                f"out ({self.checked_by}) it was off by {self.median_error:.1%} in the median ({self.p90_error:.1%} at the 90th "
                f"percentile), the bound by {self.bound_median_error:.1%}")



# The fewest timings a calibration is fitted to: three parameters, and a held-out error to report.
MIN_POINTS = 6
FOLDS = 5
NEIGHBOURS = 8
DISTANCE_FLOOR = 0.25  # octaves: the nearest shapes' weights, 1 / (distance + this), stay finite on an exact match


GRID_STEP = 0.5  # octaves between the lattice points the nearest shapes' mean is tabulated at, at the finest
GRID_POINTS = 33  # per axis at most: a lattice over a wider span steps wider, so tabulating it stays bounded


def nearest_mean(tree, residuals: np.ndarray, points: np.ndarray) -> np.ndarray:
    """The weighted mean of the residuals of each point's nearest fitted shapes."""
    count = min(NEIGHBOURS, len(residuals))
    distance, index = tree.query(points, k=count)
    distance, index = distance.reshape(len(points), count), index.reshape(len(points), count)
    weight = 1 / (distance + DISTANCE_FLOOR)
    return (weight * residuals[index]).sum(axis=1) / weight.sum(axis=1)


class ShapeCorrection:
    """The factor the nearest fitted shapes' mean residual stands for, exp(mean), tabulated once on a lattice over
    the fitted shapes' span (GRID_STEP octaves apart, wider over spans of more than 16 octaves: at most GRID_POINTS a
    side) and read by trilinear interpolation (a shape outside the span reads its edge): an answer then costs a few
    microseconds, not a neighbour search, and reads the same bits whether it is computed alone or in an array (no
    exp at the query, whose scalar and vector forms may round apart)."""

    def __init__(self, shapes: np.ndarray, residuals: np.ndarray):
        from scipy.spatial import cKDTree

        span = float((shapes.max(axis=0) - shapes.min(axis=0)).max())
        self.step = max(GRID_STEP, GRID_STEP * math.ceil(span / GRID_STEP / (GRID_POINTS - 1)))
        self.low = np.floor(shapes.min(axis=0) / self.step) * self.step
        high = np.ceil(shapes.max(axis=0) / self.step) * self.step
        self.size = np.round((high - self.low) / self.step).astype(int) + 1
        axes = [self.low[i] + self.step * np.arange(self.size[i]) for i in range(3)]
        lattice = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 3)
        self.values = np.exp(nearest_mean(cKDTree(shapes), residuals, lattice)).reshape(tuple(self.size))

    @classmethod
    def tabulated(cls, low: np.ndarray, step: float, values: np.ndarray) -> ShapeCorrection:
        """A lattice tabulated before (`low`, `step` and `values` as an instance holds them)."""
        correction = cls.__new__(cls)
        correction.step, correction.low, correction.values = float(step), np.asarray(low, dtype=float), values
        correction.size = np.array(values.shape)
        return correction

    @cached_property
    def _plain(self) -> tuple[list[float], list[int], list]:
        """The lattice as Python numbers, for `at_one` (made at its first use: as floats a table is four times its
        array's size, and a worker reads few of the shipped ones)."""
        return self.low.tolist(), self.size.tolist(), self.values.tolist()

    def at(self, points: np.ndarray) -> np.ndarray:
        """Each point's (log2 m, log2 n, log2 k) factor."""
        position = np.clip((points - self.low) / self.step, 0, self.size - 1)
        base = np.minimum(np.floor(position).astype(int), np.maximum(self.size - 2, 0))
        fraction = position - base
        total = np.zeros(len(points))
        for corner in range(8):
            offsets = [(corner >> axis) & 1 for axis in range(3)]
            index = tuple(np.minimum(base[:, axis] + offsets[axis], self.size[axis] - 1) for axis in range(3))
            weight = np.prod([fraction[:, axis] if offsets[axis] else 1 - fraction[:, axis] for axis in range(3)],
                             axis=0)
            total += weight * self.values[index]
        return total

    def at_one(self, x: float, y: float, z: float) -> float:
        """The same for one point, in plain Python, the same operations in the same order: bit for bit `at`'s."""
        lows, sizes, table = self._plain
        bases, fractions = [], []
        for value, low, size in zip((x, y, z), lows, sizes, strict=True):
            position = min(max((value - low) / self.step, 0.0), size - 1.0)
            base = min(math.floor(position), max(size - 2, 0))
            bases.append(base)
            fractions.append(position - base)
        total = 0.0
        for corner in range(8):
            offsets = [(corner >> axis) & 1 for axis in range(3)]
            i, j, k = (min(bases[axis] + offsets[axis], sizes[axis] - 1) for axis in range(3))
            weight = 1.0
            for axis in range(3):
                weight = weight * (fractions[axis] if offsets[axis] else 1 - fractions[axis])
            total += weight * table[i][j][k]
        return total


# A timing is clearly bound by one term where it is this many times the other; the largest tenth of those (at
# least ROOF_SHAPES of them) set the kernels' roof.
CLEARLY_BOUND = 4.0
ROOF_SHAPES = 10


def kernel_roofs(compute_s: np.ndarray, memory_s: np.ndarray, measured_s: np.ndarray) -> tuple[float | None,
                                                                                                 float | None]:
    """(compute, memory) efficiency of the kernels' own roofs: over the timings clearly bound by a term, the median
    of bound / measured of the largest tenth by that term (at most 1: an L2-resident timing cannot lift a roof
    above the datasheet); None where fewer than ROOF_SHAPES timings are clearly bound by it."""
    roofs: list[float | None] = []
    for term, other in ((compute_s, memory_s), (memory_s, compute_s)):
        bound = np.flatnonzero(term > CLEARLY_BOUND * other)
        if len(bound) < ROOF_SHAPES:
            roofs.append(None)
            continue
        largest = bound[np.argsort(term[bound])[-max(ROOF_SHAPES, len(bound) // 10):]]
        roofs.append(float(min(1.0, np.median(term[largest] / measured_s[largest]))))
    return roofs[0], roofs[1]


class KernelFit(NamedTuple):
    t0_s: float
    compute_efficiency: float
    memory_efficiency: float
    anchors: list[list[float]]  # (log2 m, log2 n, log2 k, log(measured / formula)) of every timing
    median_error: float  # |expected / measured - 1| of each timing predicted by a fit that did not see it
    p90_error: float
    bound_median_error: float
    checked_by: str
    unidentified: tuple[str, ...] = ()  # efficiencies the timings cannot tell, held at 1 (COMPUTE, MEMORY)
    roof_compute_efficiency: float | None = None  # kernel_roofs()
    roof_memory_efficiency: float | None = None


def _least_squares(compute_s: np.ndarray, memory_s: np.ndarray, measured_s: np.ndarray,
                   held_at_roof: tuple[str, ...] = ()) -> tuple[float, float, float]:
    """(t0, e_c, e_m) minimising the squared log error of t0 + max(T_c / e_c, T_m / e_m) against the measured
    times (scipy's bounded least squares), with t0 >= 0 and both efficiencies in (0, 1]: never below the bound. An
    efficiency named in `held_at_roof` is held at 1 (the timings cannot tell it)."""
    from scipy.optimize import least_squares

    hold_c, hold_m = COMPUTE in held_at_roof, MEMORY in held_at_roof

    def residuals(x: np.ndarray) -> np.ndarray:
        t0, inverse_c, inverse_m = x
        inverse_c, inverse_m = (1.0 if hold_c else inverse_c), (1.0 if hold_m else inverse_m)
        return np.log((t0 + np.maximum(compute_s * inverse_c, memory_s * inverse_m)) / measured_s)

    start = np.array([float(np.min(measured_s)) / 4, 1.5, 1.5])
    fit = least_squares(residuals, start, bounds=([0.0, 1.0, 1.0], [np.inf, 1e4, 1e4]), x_scale="jac")
    t0, inverse_c, inverse_m = fit.x
    return float(t0), (1.0 if hold_c else float(1 / inverse_c)), (1.0 if hold_m else float(1 / inverse_m))


COMPUTE, MEMORY = "compute_efficiency", "memory_efficiency"
# The fewest timings whose fitted time an efficiency's term must set for the timings to tell that efficiency: a
# fit of memory-bound shapes alone leaves e_c anywhere low enough never to bind (one such fit reported 0.27).
MIN_BINDING = 2


def unidentified_terms(compute_s: np.ndarray, memory_s: np.ndarray, measured_s: np.ndarray) -> tuple[str, ...]:
    """The efficiencies a fit to these timings cannot tell: those whose term sets the fitted time of fewer than
    MIN_BINDING of them (held at the roof, 1, such a term never binds where it did not)."""
    _, e_c, e_m = _least_squares(compute_s, memory_s, measured_s)
    compute_binds = compute_s / e_c >= memory_s / e_m
    return tuple(name for name, count in ((COMPUTE, int(compute_binds.sum())), (MEMORY, int((~compute_binds).sum())))
                 if count < MIN_BINDING)


def _predict(compute_s: np.ndarray, memory_s: np.ndarray, measured_s: np.ndarray, shapes: np.ndarray,
             fitted: np.ndarray, predicted: np.ndarray, held_at_roof: tuple[str, ...] = ()) -> np.ndarray:
    """The `predicted` timings' times (never below their bound) from a calibration fitted to the `fitted` ones: the
    formula, and its residual on each fitted shape."""
    t0, e_c, e_m = _least_squares(compute_s[fitted], memory_s[fitted], measured_s[fitted], held_at_roof)
    formula = t0 + np.maximum(compute_s / e_c, memory_s / e_m)
    residuals = np.log(measured_s[fitted] / formula[fitted])
    correction = ShapeCorrection(shapes[fitted], residuals).at(shapes[predicted])
    bound = np.maximum(compute_s[predicted], memory_s[predicted])
    return np.maximum(bound, formula[predicted] * correction)


def fit_kernel_terms(compute_s: np.ndarray, memory_s: np.ndarray, measured_s: np.ndarray, sizes: np.ndarray, *,
                     seed: int = 2026) -> KernelFit:
    """The calibration of matmul timings, each with its bound's compute and memory terms and its (m, n, k): fitted
    to all of them, its error reported on timings held out of the fit: each of 5 folds predicted by a fit to the
    other four (or each timing by a fit to the others, under 25 timings)."""
    n = len(measured_s)
    if n < MIN_POINTS:
        raise ValueError(f"a calibration needs at least {MIN_POINTS} timings, not {n}")
    shapes = np.log2(np.asarray(sizes, dtype=float))
    held_at_roof = unidentified_terms(compute_s, memory_s, measured_s)
    t0, e_c, e_m = _least_squares(compute_s, memory_s, measured_s, held_at_roof)
    order = np.random.default_rng(seed).permutation(n)
    folds = [order[i::FOLDS] for i in range(FOLDS)] if n >= 25 else [np.array([i]) for i in range(n)]
    predicted = np.empty(n)
    for held in folds:
        predicted[held] = _predict(compute_s, memory_s, measured_s, shapes, np.setdiff1d(order, held), held,
                                   held_at_roof)
    error = np.abs(predicted / measured_s - 1)
    bound_error = np.abs(np.maximum(compute_s, memory_s) / measured_s - 1)
    residuals = np.log(measured_s / (t0 + np.maximum(compute_s / e_c, memory_s / e_m)))
    anchors = np.column_stack([shapes, residuals]).round(5).tolist()
    return KernelFit(t0, e_c, e_m, anchors, float(np.median(error)), float(np.quantile(error, 0.9)),
                     float(np.median(bound_error)),
                     f"{FOLDS}-fold cross-validation" if n >= 25 else "leave-one-out", held_at_roof,
                     *kernel_roofs(compute_s, memory_s, measured_s))
