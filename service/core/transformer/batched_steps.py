"""Many steps of one model at once, as numpy arrays: the batch endpoint's bulk path for model steps.

The rows come from the scalar path's own cost models (analysis.step_rows), handed arrays of batch sizes and
lengths, one element a step, in float64; each step is placed on its own device's roofs and summed as
analyze_model does, element by element. Every count those expressions form is a whole number of elements, FLOPs
or bytes, or one times a fixed fraction (half a byte, a group's scale): while each stays below 2**53 it is exact in
float64, so every operation rounds as Python's int and float arithmetic rounds it, and each step's rows and totals
are the same bits as analyze_model's. A step any of whose counts reaches 2**53, or whose numbers are not finite,
is left out (`exact`), for the caller to run on its own and to meet its own error there.

Architectures whose cost models branch on a step's lengths in ways not written for arrays (mixture-of-experts
routing, latent attention, recurrent layers' chunked scans) are not taken (`vectorisable`).
"""

from __future__ import annotations

from typing import NamedTuple, cast

import numpy as np

from service.core.errors import CostModelError
from service.core.memo import costing_arrays
from service.core.transformer.analysis import (
    Evaluator,
    ModelAnalysisResult,
    RowResult,
    Totals,
    explain_model,
    first_matmul,
    model_step,
    step_note,
    step_rows,
)
from service.core.transformer.architecture import Architecture
from service.core.transformer.layers import ModelDTypes

EXACT_LIMIT = 2.0**53
# RowResult's numbers, in its order, as the columns of SteppedRows.numbers; the bound as a code (BOUNDS).
NUMBERS = ("flops", "bytes", "arithmetic_intensity", "bound", "time_s", "total_time_s", "weight_bytes",
           "kv_bytes_read", "kv_bytes_written", "compute_time_s", "memory_time_s")
BOUNDS = ("memory", "compute", "interconnect")
_FLOPS, _BYTES, _INTENSITY, _BOUND, _TIME, _TOTAL, _WEIGHTS, _KV_READ, _KV_WRITTEN, _COMPUTE, _MEMORY = range(len(NUMBERS))
_TOTALS_TIME = Totals._fields.index("time_s")


class NotVectorisable(Exception):
    """These steps go one by one (where the scalar path words any error)."""


def vectorisable(arch: Architecture) -> bool:
    return (arch.moe is None and arch.latent is None and arch.recurrent is None
            and not any(group.chunk for group in arch.groups))


class RowShape(NamedTuple):
    """What every step shares about one of its rows."""

    name: str
    kind: str
    group: str
    layers: int
    count: int  # type: ignore[assignment]  # shadows tuple.count, which no shape is asked for
    interconnect: bool
    compute_dtype: str | None = None  # an operator's; None for a collective

    @property
    def instances(self) -> int:
        return self.layers * self.count


class SteppedRows:
    """Steps of one model, phase, dtypes and parallelism, each on its own evaluator's roofs (`evaluators[which[i]]`).
    `numbers[i]` holds step i's rows (a line each, NUMBERS' columns), `totals[i]` its Totals' values, `exact[i]`
    whether it was taken; `result(i)` is what analyze_model answers for it (no e2e: that needs output_len)."""

    def __init__(self, arch: Architecture, evaluators: list[Evaluator], which: list[int], *, phase: str,
                 batch: list[int], seq_len: list[int], dtypes: ModelDTypes, tensor_parallel: int,
                 attention_implementation: str):
        if not vectorisable(arch):
            raise NotVectorisable(f"{arch.family}: its cost models branch on the step's lengths")
        self._arch, self._evaluators, self._which, self._phase = arch, evaluators, which, phase
        self._batch, self._seq_len, self._options = batch, seq_len, (tensor_parallel, attention_implementation)
        # Arrays stand in for the step's counts, element by element: the cost models' expressions are the same.
        batches, lengths = cast(int, np.asarray(batch, dtype=float)), cast(int, np.asarray(seq_len, dtype=float))
        steps = model_step(arch, phase, batches, lengths, tensor_parallel, attention_implementation)
        with costing_arrays():
            placed = [(row, label, layers) for rows, label, layers in step_rows(arch, steps, dtypes) for row in rows]
        self.shapes = [RowShape(row.name, row.kind, label, layers, row.count, row.is_comm,
                                None if row.cost is None else row.cost.compute_dtype) for row, label, layers in placed]
        matmul_cost = first_matmul(row for row, _, _ in placed)
        if matmul_cost is None:
            raise NotVectorisable(f"{arch.family}: a step with no matmul")
        # A device without a roof these rows need (or without a link for their collectives) leaves its own steps out.
        self._usable = [self._has_roofs(evaluator, placed) for evaluator in evaluators]
        self._peaks: list[tuple[float, float | None, str] | None] = [
            evaluator.compute_roof(matmul_cost) if usable else None for evaluator, usable in zip(evaluators, self._usable)]
        self._notes: list[tuple | None] = [
            explain_model(arch, evaluator, tensor_parallel, dtypes, matmul_cost) if usable else None
            for evaluator, usable in zip(evaluators, self._usable)]
        index = np.asarray(which)
        numbers = np.empty((len(placed), len(NUMBERS), len(batch)))
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            for line, (row, _, _) in zip(numbers, placed):
                if row.is_comm:
                    self._interconnect(line, row, index)
                else:
                    self._on_hbm(line, row, index)
            line_time = np.maximum(numbers[:, _COMPUTE], numbers[:, _MEMORY])
            numbers[:, _TIME] = line_time
            numbers[:, _TOTAL] = line_time * np.array([[shape.instances] for shape in self.shapes])
            exact = ((numbers[:, _FLOPS] < EXACT_LIMIT) & (numbers[:, _BYTES] < EXACT_LIMIT)
                     & np.isfinite(numbers[:, _COMPUTE] + numbers[:, _MEMORY])).all(axis=0)
            on_hbm = [not shape.interconnect for shape in self.shapes]
            exact &= (numbers[on_hbm, _BYTES] > 0).all(axis=0)  # the scalar path refuses a row that moves nothing
            totals = self._sum(numbers)
        self.exact = exact & (totals[_TOTALS_TIME] > 0)
        self.numbers = numbers.transpose(2, 0, 1)  # step, row, number
        self.totals = np.stack(totals, axis=-1).tolist()

    @staticmethod
    def _has_roofs(evaluator: Evaluator, placed: list) -> bool:
        try:
            for row, _, _ in placed:
                if row.is_comm:
                    evaluator.intra_node_link()  # raises where the device has no scale-up link
                else:
                    evaluator.compute_roof(row.cost)
            _ = evaluator.hbm  # raises where the device has no HBM roof
        except CostModelError:
            return False
        return True

    def _on_hbm(self, line: np.ndarray, row, index: np.ndarray) -> None:
        """Evaluator._evaluate, element by element, each step on its own evaluator's roofs (NaN for a device
        without them: its steps are not finite, so not exact)."""
        cost = row.cost
        roofs = [(evaluator.compute_roof(cost)[0], evaluator.hbm.bytes_per_s) if usable else (np.nan, np.nan)
                 for evaluator, usable in zip(self._evaluators, self._usable)]
        flops_per_s = np.array([compute for compute, _ in roofs])[index]
        bandwidth = np.array([memory for _, memory in roofs])[index]
        balance = np.array([compute / memory for compute, memory in roofs])[index]
        flops, moved = cost.flops, cost.bytes_read + cost.bytes_written
        line[_FLOPS], line[_BYTES] = flops, moved
        line[_COMPUTE], line[_MEMORY] = flops / flops_per_s, moved / bandwidth
        line[_INTENSITY] = intensity = flops / moved
        line[_BOUND] = np.where(intensity >= balance, 1.0, 0.0)
        line[_WEIGHTS], line[_KV_READ], line[_KV_WRITTEN] = cost.weight_bytes_read, cost.kv_bytes_read, cost.kv_bytes_written

    def _interconnect(self, line: np.ndarray, row, index: np.ndarray) -> None:
        """Evaluator.collective, element by element (NaN for a device without a link): each step's bytes timed by
        its device's link, in the scalar path's own arithmetic (Link.collective_time_s)."""
        comm_bytes = np.broadcast_to(np.asarray(row.comm_bytes, dtype=float), index.shape)
        times = np.full(index.shape, np.nan)
        for which, (evaluator, usable) in enumerate(zip(self._evaluators, self._usable)):
            mine = index == which
            if usable and mine.any():
                times[mine] = evaluator.intra_node_link().collective_time_s(row.kind, comm_bytes[mine])
        line[_FLOPS], line[_BYTES], line[_INTENSITY], line[_BOUND] = 0.0, row.comm_bytes, np.nan, 2.0
        line[_COMPUTE], line[_MEMORY] = 0.0, times
        line[_WEIGHTS] = line[_KV_READ] = line[_KV_WRITTEN] = 0.0

    def _sum(self, numbers: np.ndarray) -> list[np.ndarray]:
        """analysis._totals, element by element: the same additions in the same order. Totals' values, each a
        vector over the steps."""
        flops = hbm = weights = kv_read = kv_written = link = 0.0
        memory: float | np.ndarray = 0.0
        compute: float | np.ndarray = 0.0
        interconnect = 0.0
        for line, shape in zip(numbers, self.shapes):
            n = shape.instances
            total = line[_TOTAL]
            flops = flops + line[_FLOPS] * n
            weights = weights + line[_WEIGHTS] * n
            kv_read = kv_read + line[_KV_READ] * n
            kv_written = kv_written + line[_KV_WRITTEN] * n
            if shape.interconnect:
                link = link + line[_BYTES] * n
                interconnect = interconnect + total
            else:
                hbm = hbm + line[_BYTES] * n
                is_compute = line[_BOUND] == 1.0
                memory = memory + np.where(is_compute, 0.0, total)
                compute = compute + np.where(is_compute, total, 0.0)
        time = 0 + memory + compute + interconnect  # sum() over the three, as _totals takes it
        shares = [np.where(time != 0, part / time, 0.0) for part in (memory, compute, interconnect)]
        size = len(self._batch)
        return [np.broadcast_to(np.asarray(value, dtype=float), (size,))
                for value in (flops, hbm, weights, kv_read, kv_written, link, time, *shares)]

    def rows(self, index: int) -> tuple[RowResult, ...]:
        rows = []
        for shape, values in zip(self.shapes, self.numbers[index].tolist()):
            flops, moved, intensity, bound, time_s, total, weights, kv_read, kv_written, compute, memory = values
            level = None if shape.interconnect else "hbm"
            rows.append(RowResult(shape.name, shape.kind, shape.group, shape.layers, shape.count, flops, moved,
                                  None if shape.interconnect else intensity, BOUNDS[int(bound)], time_s, total, weights,
                                  kv_read, kv_written, level, shape.instances, compute, memory, shape.compute_dtype))
        return tuple(rows)

    def result(self, index: int, with_rows: bool = True) -> ModelAnalysisResult:
        """Step `index` as analyze_model answers it (an exact one); `with_rows=False` leaves its rows out, for a
        caller that writes them from `numbers`."""
        at = self._which[index]
        evaluator = self._evaluators[at]
        found, notes = self._peaks[at], self._notes[at]
        if found is None or notes is None:
            raise ValueError(f"step {index} was left out: its device lacks a roof its rows need")
        flops_per_s, peak, compute_source = found
        totals = Totals(*self.totals[index])
        mfu = totals.flops / (totals.time_s * peak) if peak and totals.time_s else None
        step = model_step(self._arch, self._phase, self._batch[index], self._seq_len[index], *self._options)
        before, after = notes
        return ModelAnalysisResult(
            rows=self.rows(index) if with_rows else (), totals=totals, mfu=mfu, peak_flops_per_s=peak,
            compute_roof_source=compute_source, memory_roof_source=evaluator.hbm.source.value, e2e_decode_time_s=None,
            assumptions=(*before, step_note(self._phase, step), *after))
