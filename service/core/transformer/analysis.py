"""Whole-model roofline: every operator row of each distinct layer evaluated once, multiplied by the
layers that share it, and summed into totals and serving metrics.

Time is the sum of per-operator lower bounds (kernels run one after another; each is at its own roof).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

from service.core.errors import CostModelError
from service.core.hardware import DeviceSpec, MemoryLevelName
from service.core.operators import OPERATORS
from service.core.operators.base import OperatorCost
from service.core.roofs import (
    NO_MEASUREMENTS,
    MeasuredRoofs,
    MemoryRoof,
    RoofMode,
    require_memory_roof,
    select_collective_latency,
    select_compute_roof,
)
from service.core.training.collectives import Link, in_network_reduction_note
from service.core.transformer.architecture import Architecture, LayerGroup, MoE
from service.core.transformer.layers import ModelDTypes, Row, Step, attention_params_of, layer_rows, model_level_rows


class RowResult(NamedTuple):
    # The answer's RowOut fields first, in its order: an answer writes a row as dict(zip(its fields, row)).
    name: str
    kind: str
    group: str
    layers: int
    count: int  # type: ignore[assignment]  # shadows tuple.count, which no row is asked for
    flops: float
    bytes: float
    arithmetic_intensity: float | None
    bound: str
    time_s: float
    total_time_s: float  # time_s x instances
    weight_bytes: float
    kv_bytes_read: float
    kv_bytes_written: float
    bound_level: str | None
    instances: int  # layers x count
    compute_time_s: float  # of one instance: FLOPs / compute roof
    memory_time_s: float  # of one instance: bytes / bandwidth (HBM, or the interconnect)
    compute_dtype: str | None = None  # an operator's, whose roof (and calibration) it is read at; None: a collective


def _row(name, kind, group, layers, count, flops, bytes_, intensity, bound, level, compute_time, memory_time, weights,
         kv_read, kv_written) -> RowResult:
    instances = layers * count
    time_s = max(compute_time, memory_time)
    # Counts as floats, whatever the cost model computed them in, as every consumer of a row reads them.
    return RowResult(name, kind, group, layers, count, float(flops), float(bytes_), intensity, bound, time_s,
                     time_s * instances, float(weights), float(kv_read), float(kv_written), level, instances,
                     compute_time, memory_time)


class Totals(NamedTuple):
    flops: float
    bytes: float
    weight_bytes_read: float
    kv_bytes_read: float
    kv_bytes_written: float
    interconnect_bytes: float
    time_s: float
    memory_bound_time_share: float
    compute_bound_time_share: float
    interconnect_time_share: float


class ModelAnalysisResult(NamedTuple):
    rows: tuple[RowResult, ...]
    totals: Totals
    mfu: float | None
    peak_flops_per_s: float | None
    compute_roof_source: str
    memory_roof_source: str
    e2e_decode_time_s: float | None
    assumptions: tuple[str, ...]


# Row results an evaluator keeps, a generation: about 600 bytes each, so at most 2.5 MB an evaluator over its two
# generations. A serving plan on DeepSeek-V3 evaluates some 5,000 distinct rows, many of them again in its tails:
# one generation of 2,048 cleared whole when full made it re-evaluate them (a plan 10-15 % slower).
ROW_CACHE_GENERATION = 2048


@dataclass
class Evaluator:
    """Places rows on the device's roofs. The roof for each (dtype, unit) is looked up once per evaluator,
    so a model's rows cost a division or two each."""

    device: DeviceSpec
    measured: MeasuredRoofs = NO_MEASUREMENTS
    mode: RoofMode = RoofMode.effective
    sustained_clock_hz: float | None = None
    collective_latency_s: float | None = None  # overrides the device's

    def __post_init__(self):
        self._compute: dict[tuple[str, str], tuple[float, float | None, str]] = {}
        self._hbm: MemoryRoof | None = None
        self._rows: dict[tuple, RowResult] = {}  # identical rows recur across the points of a sweep
        self._older_rows: dict[tuple, RowResult] = {}

    def intra_node_latency_s(self) -> float:
        """A tensor-parallel collective's fixed cost: the request's, else the measured median, else the device's."""
        if self.collective_latency_s is not None:
            return self.collective_latency_s
        return select_collective_latency(self.device, self.measured, "intra_node", self.mode)[0]

    def evaluate(self, row: Row, group: str, layers: int) -> RowResult:
        cost = row.cost
        key: tuple
        if cost is None:
            key = (row.name, group, layers, row.count, row.comm_bytes)
        else:
            key = (row.name, group, layers, row.count, cost.flops, cost.bytes_read, cost.bytes_written,
                   cost.compute_dtype, cost.unit, cost.weight_bytes_read, cost.kv_bytes_read, cost.kv_bytes_written)
        found = self._rows.get(key)
        if found is None:
            found = self._older_rows.get(key)
            if found is None:
                found = self._evaluate(row, group, layers)
            if len(self._rows) >= ROW_CACHE_GENERATION:
                # Two generations: the rows a plan keeps asking for survive the turn, the rest age out.
                self._older_rows, self._rows = self._rows, {}
            self._rows[key] = found
        return found

    def compute_roof(self, cost: OperatorCost) -> tuple[float, float | None, str]:
        """(FLOP/s, nominal FLOP/s, source) of the roof the cost runs at."""
        key = (cost.compute_dtype, cost.unit)
        found = self._compute.get(key)
        if found is None:
            roof, _ = select_compute_roof(self.device, self.measured, cost.compute_dtype, cost.unit, self.mode)
            scale = 1.0
            if self.sustained_clock_hz is not None:
                if not self.device.boost_clock_hz:
                    raise CostModelError("sustained_clock_hz", f"device {self.device.id} has no boost clock to scale from")
                scale = self.sustained_clock_hz / self.device.boost_clock_hz
            found = self._compute[key] = (roof.flops_per_s * scale, roof.nominal_flops_per_s, roof.source.value)
        return found

    @property
    def hbm(self) -> MemoryRoof:
        if self._hbm is None:
            self._hbm = require_memory_roof(self.device, self.measured, MemoryLevelName.hbm, self.mode)
        return self._hbm

    @staticmethod
    def collective(row: Row, group: str, layers: int, link: Link) -> RowResult:
        """A collective row at a link: its fixed latency plus its bytes per device over the link's bandwidth
        (an all-reduce's halved where the link's switch reduces, Link.collective_time_s)."""
        return _row(row.name, row.kind, group, layers, row.count, 0.0, row.comm_bytes, None, "interconnect",
                    None, 0.0, link.collective_time_s(row.kind, row.comm_bytes), 0.0, 0.0, 0.0)

    def intra_node_link(self) -> Link:
        """The scale-up link a model step's tensor-parallel collectives run on, at the device's figures."""
        link = Link.nominal(self.device, "intra_node", self.intra_node_latency_s())
        if link is None:
            raise CostModelError("tensor_parallel", f"device {self.device.id} has no interconnect bandwidth")
        return link

    def _evaluate(self, row: Row, group: str, layers: int) -> RowResult:
        cost = row.cost
        if cost is None:
            return self.collective(row, group, layers, self.intra_node_link())
        roof = self._compute.get((cost.compute_dtype, cost.unit)) or self.compute_roof(cost)
        flops_per_s = roof[0]
        bandwidth = (self._hbm or self.hbm).bytes_per_s
        flops, moved = cost.flops, cost.bytes_read + cost.bytes_written
        compute_time, memory_time = flops / flops_per_s, moved / bandwidth
        weights = float(cost.weight_bytes_read)
        if self.below_roofs:
            e_c, e_m = self.efficiencies(row, cost.compute_dtype)
            compute_time, memory_time, weights = compute_time / e_c, memory_time / e_m, weights / e_m
        if not math.isfinite(compute_time + memory_time):
            raise CostModelError(row.name, "the counts exceed the floating-point range")
        intensity = flops / moved
        bound = "compute" if intensity >= flops_per_s / bandwidth else "memory"
        instances = layers * row.count
        time_s = compute_time if compute_time > memory_time else memory_time
        # Counts as floats, whatever the cost model computed them in, as every consumer of a row reads them.
        return RowResult(row.name, row.kind, group, layers, row.count, float(flops), float(moved), intensity, bound, time_s,
                         time_s * instances, weights, float(cost.kv_bytes_read),
                         float(cost.kv_bytes_written), "hbm", instances, compute_time, memory_time, cost.compute_dtype)

    # Whether rows run below the roofs (efficiencies()): never for a bound, so its rows skip the call.
    below_roofs = False

    def efficiencies(self, row: Row, compute_dtype: str) -> tuple[float, float]:
        """(compute, memory) fractions of the roofs a row of its kind and this dtype runs at, where below_roofs (an
        expectation's evaluator, kernel_steps.KernelEvaluator); a row's weight bytes are then reported over the
        memory fraction, so the experts-hit curve reads them at the speed they are read."""
        return 1.0, 1.0

    def times(self, cost: OperatorCost) -> tuple[float, float]:
        return cost.flops / self.compute_roof(cost)[0], cost.bytes_total / self.hbm.bytes_per_s


def group_label(group: LayerGroup) -> str:
    label = "moe layers" if group.moe else "dense layers"
    label += f", window {group.sliding_window}" if group.sliding_window else ""
    label += f", chunk {group.chunk}" if group.chunk else ""
    return label + ("" if group.rope else ", no rope")


def model_step(arch: Architecture, phase: str, batch: int, seq_len: int, tensor_parallel: int,
               attention_implementation: str) -> Step:
    if phase == "prefill":
        return Step(batch, seq_len, seq_len, tensor_parallel, attention_implementation)
    return Step(batch, 1, seq_len + 1, tensor_parallel, attention_implementation)


def step_rows(arch: Architecture, step: Step, dtypes: ModelDTypes) -> Iterator[tuple[list[Row], str, int]]:
    """A step's rows in the answer's order, a list at a time (the embedding, each layer group's, the head), each
    with its group's label and the layers that repeat it."""
    before, after = model_level_rows(arch, step, dtypes)
    yield before, "model", 1
    for group in arch.groups:
        yield layer_rows(arch, group, step, dtypes), group_label(group), group.count
    yield after, "model", 1


def first_matmul(rows: Iterable[Row]) -> OperatorCost | None:
    """The cost of the first matmul among a step's rows: its dtype's roof is the one MFU and the notes speak of."""
    for row in rows:
        if row.kind == "matmul":
            return row.cost
    return None


def _totals(rows: list[RowResult]) -> Totals:
    flops = hbm_bytes = weights = kv_read = kv_written = link_bytes = 0.0
    time_by_bound = {"memory": 0.0, "compute": 0.0, "interconnect": 0.0}
    for r in rows:
        n = r.instances
        flops += r.flops * n
        weights += r.weight_bytes * n
        kv_read += r.kv_bytes_read * n
        kv_written += r.kv_bytes_written * n
        if r.bound == "interconnect":
            link_bytes += r.bytes * n
        else:
            hbm_bytes += r.bytes * n
        time_by_bound[r.bound] += r.total_time_s
    time = sum(time_by_bound.values())
    share = {bound: (t / time if time else 0.0) for bound, t in time_by_bound.items()}
    return Totals(flops=flops, bytes=hbm_bytes, weight_bytes_read=weights, kv_bytes_read=kv_read,
                  kv_bytes_written=kv_written, interconnect_bytes=link_bytes, time_s=time,
                  memory_bound_time_share=share["memory"], compute_bound_time_share=share["compute"],
                  interconnect_time_share=share["interconnect"])


def analyze_model(arch: Architecture, evaluator: Evaluator, *, phase: str, batch: int, seq_len: int,
                  dtypes: ModelDTypes, tensor_parallel: int = 1, attention_implementation: str = "flash",
                  output_len: int | None = None, explain: bool = True) -> ModelAnalysisResult:
    """`explain=False` skips writing the assumptions (sweeps read only the numbers)."""
    step = model_step(arch, phase, batch, seq_len, tensor_parallel, attention_implementation)
    results: list[RowResult] = []
    matmul_cost = None
    for rows, label, layers in step_rows(arch, step, dtypes):  # evaluated as built: the first error is the first row's
        results += [evaluator.evaluate(row, label, layers) for row in rows]
        if matmul_cost is None:
            matmul_cost = first_matmul(rows)
    totals = _totals(results)
    if matmul_cost is None:
        raise CostModelError("model", "a step with no matmul has no compute roof to measure MFU against")
    _, peak, compute_source = evaluator.compute_roof(matmul_cost)
    mfu = totals.flops / (totals.time_s * peak) if peak and totals.time_s else None
    e2e_decode = None
    if output_len and output_len > 1:
        e2e_decode = decode_time_sum(arch, evaluator, batch=batch, first_context=seq_len, steps=output_len - 1,
                                     dtypes=dtypes, tensor_parallel=tensor_parallel,
                                     attention_implementation=attention_implementation)
    return ModelAnalysisResult(
        rows=tuple(results), totals=totals, mfu=mfu, peak_flops_per_s=peak,
        compute_roof_source=compute_source, memory_roof_source=evaluator.hbm.source.value,
        e2e_decode_time_s=e2e_decode,
        assumptions=explain_step(arch, evaluator, step, phase, dtypes, matmul_cost) if explain else (),
    )


def explain_step(arch: Architecture, evaluator: Evaluator, step: Step, phase: str, dtypes: ModelDTypes,
                 matmul_cost: OperatorCost) -> tuple[str, ...]:
    before, after = explain_model(arch, evaluator, step.tensor_parallel, dtypes, matmul_cost)
    return (*before, step_note(phase, step), *after)


def step_note(phase: str, step: Step) -> str:
    return f"step: {phase}, batch {step.batch}, {step.q_len} new token(s) per sequence attending to {step.kv_len} keys"


def explain_model(arch: Architecture, evaluator: Evaluator, tensor_parallel: int, dtypes: ModelDTypes,
                  matmul_cost: OperatorCost) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A step's notes before and after its step_note: what every step of the model on these roofs shares."""
    before = [f"config defaults applied: {', '.join(arch.defaults_applied)}"] if arch.defaults_applied else []
    before.append(f"model: {arch.family}, {arch.layers} layers ({arch.layer_kinds()}); each distinct layer is costed once")
    if arch.positions_extended:
        before.append(arch.positions_extended)
    notes = [
        f"dtypes: weights {dtypes.weights}"
        + (f" (+{dtypes.weight_scale_bytes:g}-byte scale per {dtypes.weight_group_size})" if dtypes.weight_group_size else "")
        + f", activations {dtypes.activations}, kv cache {dtypes.kv_cache}; embedding table, LM head (unless "
        f"dtypes.lm_head), routers and norms in {dtypes.unquantised}"
        + "".join(f", {name.replace('_', ' ')} in {dtypes.unquantised} (the checkpoint's lists)" for name in sorted(dtypes.kept)),
        "time: the sum of each operator's lower bound (kernels in sequence, each at its own roof)",
        "lm_head: computed for the last token of each sequence only",
    ]
    if tensor_parallel > 1:
        notes.append(f"tensor parallel {tensor_parallel}: heads, MLP and expert widths split; a ring all-reduce of "
                     "[tokens, hidden] after attention and after the MLP, 2(t-1)/t of it per device over the interconnect, "
                     "plus a fixed latency per collective")
        if evaluator.device.in_network_reduction:
            notes.append(in_network_reduction_note(evaluator.device.id))
    if arch.moe:
        notes.append("moe: uniform independent routing; weights of the expected number of distinct experts hit are read")
    flops_per_s, _, compute_source = evaluator.compute_roof(matmul_cost)
    hbm = evaluator.hbm
    notes += [
        f"compute roof of the matmuls: {compute_source} {matmul_cost.compute_dtype} tensor, {flops_per_s:.4g} FLOP/s; "
        "other rows at their own dtype and unit's roof",
        f"memory roof: {hbm.source} hbm bandwidth, {hbm.bytes_per_s:.4g} bytes/s",
        "mfu: model FLOPs / (time x nominal peak of the matmuls' dtype)",
    ]
    if evaluator.sustained_clock_hz is not None:
        notes.append(f"what-if: compute roofs scaled to a sustained clock of {evaluator.sustained_clock_hz:.4g} Hz")
    return tuple(before), tuple(notes)


def _sum_max_affine(a: float, b: float, c: float, d: float, lo: int, hi: int) -> float:
    """Sum over integers m in [lo, hi] of max(a + b*m, c + d*m)."""
    if hi < lo:
        return 0.0

    def series(p: float, q: float, start: int, end: int) -> float:
        count = end - start + 1
        return p * count + q * (start + end) * count / 2 if count > 0 else 0.0

    if b == d:
        return series(max(a, c), b, lo, hi)
    crossing = (c - a) / (b - d)  # where the two lines meet
    # The line on top at `lo` stays on top up to the crossing, or to the end when they met before `lo`.
    split = min(math.floor(crossing), hi) if crossing >= lo else hi
    first = (a, b) if a + b * lo >= c + d * lo else (c, d)
    second = (c, d) if first == (a, b) else (a, b)
    return series(*first, lo, split) + series(*second, split + 1, hi)


def decode_time_sum(arch: Architecture, evaluator: Evaluator, *, batch: int, first_context: int, steps: int,
                    dtypes: ModelDTypes, tensor_parallel: int, attention_implementation: str) -> float:
    """Total time of `steps` decode steps whose caches hold first_context, first_context + 1, ... tokens.

    Only attention (and a sparse-attention indexer) depends on the context, and its FLOPs and bytes are affine in
    the keys it reads (the context plus the new token, capped by a sliding window or the indexer's selection); the
    sum is taken in closed form."""
    step = Step(batch, 1, first_context + 1, tensor_parallel, attention_implementation)
    fixed = 0.0
    total = 0.0
    before, after = model_level_rows(arch, step, dtypes)
    for row in before + after:
        fixed += evaluator.evaluate(row, "model", 1).total_time_s
    for group in arch.groups:
        for row in layer_rows(arch, group, step, dtypes):
            if row.attention_params is None:
                fixed += evaluator.evaluate(row, "", group.count).total_time_s
                continue
            params = attention_params_of(row)
            uncapped = {"window": None} if row.kind == "attention" else {}
            times = [evaluator.times(OPERATORS[row.kind].cost(**{**params, "kv_len": keys, **uncapped}))
                     for keys in (1, 2)]
            (c1, m1), (c2, m2) = times
            a, b, c, d = c1 - (c2 - c1), c2 - c1, m1 - (m2 - m1), m2 - m1  # lines through keys = 1 and 2
            lo, hi = first_context + 1, first_context + steps  # keys read by the first and last step
            window = params.get("window")
            if group.chunk:
                total += group.count * row.count * _chunked_sum(a, b, c, d, first_context, steps, group.chunk)
            elif window and hi > window:
                capped = hi - max(lo, window) + 1
                per_step = max(a + b * window, c + d * window)
                total += group.count * row.count * (_sum_max_affine(a, b, c, d, lo, min(hi, window - 1)) + capped * per_step)
            else:
                total += group.count * row.count * _sum_max_affine(a, b, c, d, lo, hi)
    return fixed * steps + total


def _chunked_sum(a: float, b: float, c: float, d: float, first_context: int, steps: int, chunk: int) -> float:
    """Sum of max(a + b k, c + d k) over decode steps whose caches hold first_context, first_context + 1, ...
    tokens under chunked attention: the step at context L reads the (L mod chunk) + 1 keys of its chunk, so the
    keys climb 1..chunk and start again; whole chunks share one sum."""
    total, position, last = 0.0, first_context, first_context + steps - 1
    while position <= last:
        start = position % chunk + 1  # keys at this position
        run = min(chunk - start + 1, last - position + 1)  # steps before the chunk ends (or the steps do)
        if start == 1 and run == chunk:  # whole chunks from here: the same sum each
            whole = (last - position + 1) // chunk
            total += whole * _sum_max_affine(a, b, c, d, 1, chunk)
            position += whole * chunk
            continue
        total += _sum_max_affine(a, b, c, d, start, start + run - 1)
        position += run
    return total


class StepSummary(NamedTuple):
    value: int
    totals: Totals
    mfu: float | None
    expected_time_s: float | None = None  # with a row expectation: the step as calibrated kernels would take it


# What a calibration expects of one instance of a row of this kind and compute dtype, (FLOPs, HBM bytes) -> seconds;
# None where none applies. The caller knows the calibrations; the step model only sums what they expect.
RowExpectation = Callable[[str, str | None], Callable[[float, float], float] | None]


def _affine_lines(arch: Architecture, evaluator: Evaluator, *, parameter: str, phase: str, batch: int, seq_len: int,
                  dtypes: ModelDTypes, tensor_parallel: int,
                  attention_implementation: str) -> tuple[list[tuple], float | None, list[tuple[str, str | None]]]:
    """Per row: (instances, is it a collective, then value at 1 and slope of FLOPs, bytes, compute time, memory
    time, weight bytes, KV read, KV written), from the step at 1 and at 2; the matmuls' peak; each row's kind and
    compute dtype."""
    step = partial(analyze_model, arch, evaluator, phase=phase, dtypes=dtypes, tensor_parallel=tensor_parallel,
                   attention_implementation=attention_implementation, explain=False)
    if parameter == "batch_size":
        one, two = (step(batch=v, seq_len=seq_len) for v in (1, 2))
    else:
        one, two = (step(batch=batch, seq_len=v) for v in (1, 2))
    lines = []
    keys = [(row.kind, row.compute_dtype) for row in one.rows]
    for r1, r2 in zip(one.rows, two.rows, strict=True):
        lines.append((r1.instances, r1.bound == "interconnect", r1.flops, r2.flops - r1.flops, r1.bytes,
                      r2.bytes - r1.bytes, r1.compute_time_s, r2.compute_time_s - r1.compute_time_s,
                      r1.memory_time_s, r2.memory_time_s - r1.memory_time_s, r1.weight_bytes,
                      r2.weight_bytes - r1.weight_bytes, r1.kv_bytes_read, r2.kv_bytes_read - r1.kv_bytes_read,
                      r1.kv_bytes_written, r2.kv_bytes_written - r1.kv_bytes_written))
    return lines, one.peak_flops_per_s, keys


def batch_time_curve(arch: Architecture, evaluator: Evaluator, *, values: Sequence[int], phase: str, seq_len: int,
                     dtypes: ModelDTypes, tensor_parallel: int = 1,
                     attention_implementation: str = "flash") -> list[float] | None:
    """The step time at each batch size, exactly, all values at once: each row's time is max(compute line, memory
    line) at the batch, summed over rows. The routed experts' weight reads are not affine (the experts a batch hits,
    E (1 - (1 - k/E)^T)), so their rows' memory time is the affine rest plus the weights of the experts expected at
    each batch. None where the rows are not so (an embedding past its vocabulary)."""
    q_len = seq_len if phase == "prefill" else 1
    if max(values) * q_len >= arch.vocab:
        return None
    step = partial(analyze_model, arch, evaluator, phase=phase, seq_len=seq_len, dtypes=dtypes,
                   tensor_parallel=tensor_parallel, attention_implementation=attention_implementation, explain=False)
    return curve_from_two(step(batch=1).rows, step(batch=2).rows, values, bandwidth=evaluator.hbm.bytes_per_s,
                          moe=arch.moe, routed_tokens_per_value=q_len)


def curve_from_two(one: Sequence[RowResult], two: Sequence[RowResult], values: Sequence[int], *, bandwidth: float,
                   moe: MoE | None, routed_tokens_per_value: int, at: tuple[int, int] = (1, 2),
                   experts_hit: Callable[[Any], Any] | None = None) -> list[float]:
    """A step's time at each value of a parameter from its rows at the two values `at` (1 and 2 unless told): every
    row's compute and memory times are lines through those, but a routed row's weight reads, which follow the experts
    hit by the tokens the routing sees (`routed_tokens_per_value` per unit of the parameter): the expected experts hit,
    or `experts_hit(tokens)` where the rows were built on another count (an array of tokens in, one out)."""
    import numpy as np  # here, not at the top: only the serving planner needs it, and it is 20 MB a worker

    low, high = at
    x = (np.asarray(values, dtype=float) - low) / (high - low)
    total = np.zeros_like(x)
    hit = None  # the experts hit at each value, over those at the lower anchor (a routed row's weights scale with them)
    if moe is not None:
        tokens = np.asarray(values, dtype=float) * routed_tokens_per_value
        if experts_hit is None:
            miss = 1 - moe.top_k / moe.experts
            hit = (1 - miss**tokens) / (1 - miss ** (low * routed_tokens_per_value))
        else:
            hit = np.asarray(experts_hit(tokens)) / experts_hit(float(low * routed_tokens_per_value))
    # Every row's lines at once (an array line a row, a column a value), summed over the rows in their order (numpy
    # reduces a leading axis row after row): a few array operations for the step's dozens of rows, not a few each.
    compute: list[tuple[float, float]] = []
    memory: list[tuple[float, float]] = []
    routed: list[tuple[int, float]] = []  # (row, its weights' read at the lower anchor) of the routed rows
    instances: list[int] = []
    for r1, r2 in zip(one, two, strict=True):
        compute.append((r1.compute_time_s, r2.compute_time_s - r1.compute_time_s))
        if r1.kind == "grouped_matmul" and hit is not None:
            w1, w2 = r1.weight_bytes / bandwidth, r2.weight_bytes / bandwidth
            routed.append((len(memory), w1))
            memory.append((r1.memory_time_s - w1, (r2.memory_time_s - w2) - (r1.memory_time_s - w1)))
        else:
            memory.append((r1.memory_time_s, r2.memory_time_s - r1.memory_time_s))
        instances.append(r1.instances)
    if not instances:
        return total.tolist()
    c, m = np.array(compute).T[..., None], np.array(memory).T[..., None]
    memory_lines = m[0] + m[1] * x
    for index, weights in routed:
        assert hit is not None  # a row is routed only where the experts hit are known
        memory_lines[index] += weights * hit
    total += (np.maximum(c[0] + c[1] * x, memory_lines) * np.array(instances, dtype=float)[:, None]).sum(axis=0)
    return total.tolist()


def _expected_at(x: float, lines: list[tuple], formulas: list) -> float:
    """The step's expected time at x: each row with a formula at the larger of what it expects and the row's bound,
    every other row at its bound."""
    total = 0.0
    for (n, _, f0, f1, b0, b1, c0, c1, m0, m1, *_), formula in zip(lines, formulas, strict=True):
        own = max(c0 + c1 * x, m0 + m1 * x)
        total += (max(formula(f0 + f1 * x, b0 + b1 * x), own) if formula else own) * n
    return total


def affine_sweep(arch: Architecture, evaluator: Evaluator, *, parameter: str, values: list[int], phase: str,
                 batch: int, seq_len: int, dtypes: ModelDTypes, tensor_parallel: int = 1,
                 attention_implementation: str = "flash", expect: RowExpectation | None = None) -> list[StepSummary] | None:
    """The same step at many values of batch_size (or, in decode, seq_len), exactly, from two analyses.

    Every row's FLOPs and bytes are affine in the batch (tokens = batch x q_len), and in a decode step's
    context (only attention reads it, over context + 1 keys), so each row's compute and memory times are lines
    through their values at 1 and 2, and its time the larger of the two. Where a row is not affine the answer
    is None and the caller steps point by point: MoE (expected distinct experts) or the embedding past the
    vocabulary (it reads min(tokens, vocab) rows) in a batch sweep; sliding windows (capped keys) or prefill
    (quadratic attention) in a context sweep.
    """
    if parameter == "batch_size":
        q_len = seq_len if phase == "prefill" else 1
        if arch.moe is not None or max(values) * q_len >= arch.vocab:
            return None
    elif (parameter != "seq_len" or phase != "decode" or any(g.sliding_window or g.chunk for g in arch.groups)
          or arch.sparse_index is not None):
        return None
    lines, peak, keys = _affine_lines(arch, evaluator, parameter=parameter, phase=phase, batch=batch,
                                      seq_len=seq_len, dtypes=dtypes, tensor_parallel=tensor_parallel,
                                      attention_implementation=attention_implementation)
    formulas = [expect(kind, dtype) if expect and not line[1] else None for line, (kind, dtype) in zip(lines, keys)]
    expecting = any(formulas)
    summaries = []
    for value in values:
        x = value - 1
        flops = hbm = link = weights = kv_read = kv_written = 0.0
        by_bound = {"memory": 0.0, "compute": 0.0, "interconnect": 0.0}
        for n, comm, f0, f1, b0, b1, c0, c1, m0, m1, w0, w1, kr0, kr1, kw0, kw1 in lines:
            compute, memory = c0 + c1 * x, m0 + m1 * x
            flops += (f0 + f1 * x) * n
            weights += (w0 + w1 * x) * n
            kv_read += (kr0 + kr1 * x) * n
            kv_written += (kw0 + kw1 * x) * n
            if comm:
                link += (b0 + b1 * x) * n
                by_bound["interconnect"] += memory * n
            else:
                hbm += (b0 + b1 * x) * n
                by_bound["compute" if compute >= memory else "memory"] += max(compute, memory) * n
        time = sum(by_bound.values())
        totals = Totals(flops=flops, bytes=hbm, weight_bytes_read=weights, kv_bytes_read=kv_read,
                        kv_bytes_written=kv_written, interconnect_bytes=link, time_s=time,
                        memory_bound_time_share=by_bound["memory"] / time,
                        compute_bound_time_share=by_bound["compute"] / time,
                        interconnect_time_share=by_bound["interconnect"] / time)
        summaries.append(StepSummary(value, totals, flops / (time * peak) if peak else None,
                                     _expected_at(x, lines, formulas) if expecting else None))
    return summaries
