"""Whole-model roofline: every operator row of each distinct layer evaluated once, multiplied by the
layers that share it, and summed into totals and serving metrics.

Time is the sum of per-operator lower bounds (kernels run one after another; each is at its own roof).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from service.core.errors import CostModelError
from service.core.hardware import DeviceSpec
from service.core.operators import attention_cost
from service.core.roofline import analyze
from service.core.roofs import NO_MEASUREMENTS, MeasuredRoofs, RoofMode
from service.core.transformer.architecture import Architecture, LayerGroup
from service.core.transformer.layers import ModelDTypes, Row, Step, layer_rows, model_level_rows


@dataclass(frozen=True)
class RowResult:
    name: str
    kind: str
    group: str
    layers: int
    count: int
    flops: float
    bytes: float
    arithmetic_intensity: float | None
    bound: str
    bound_level: str | None
    time_s: float
    weight_bytes: float
    kv_bytes_read: float
    kv_bytes_written: float

    @property
    def instances(self) -> int:
        return self.layers * self.count

    @property
    def total_time_s(self) -> float:
        return self.time_s * self.instances


@dataclass(frozen=True)
class Totals:
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


@dataclass(frozen=True)
class ModelAnalysisResult:
    rows: tuple[RowResult, ...]
    totals: Totals
    mfu: float | None
    peak_flops_per_s: float | None
    compute_roof_source: str
    memory_roof_source: str
    e2e_decode_time_s: float | None
    assumptions: tuple[str, ...]


@dataclass(frozen=True)
class Evaluator:
    device: DeviceSpec
    measured: MeasuredRoofs = NO_MEASUREMENTS
    mode: RoofMode = RoofMode.effective
    sustained_clock_hz: float | None = None

    def evaluate(self, row: Row, group: str, layers: int) -> tuple[RowResult, tuple[str, ...], object]:
        if row.is_comm:
            link = self.device.interconnect_bandwidth_bytes_per_s
            if not link:
                raise CostModelError("tensor_parallel", f"device {self.device.id} has no interconnect bandwidth")
            return (RowResult(row.name, row.kind, group, layers, row.count, 0.0, row.comm_bytes, None, "interconnect",
                              None, row.comm_bytes / link, 0.0, 0.0, 0.0), (), None)
        result = analyze(row.cost, self.device, measured=self.measured, mode=self.mode,
                         sustained_clock_hz=self.sustained_clock_hz)
        cost = row.cost
        return (RowResult(row.name, row.kind, group, layers, row.count, cost.flops, cost.bytes_total,
                          result.arithmetic_intensity, result.bound.value, result.memory_roof.level, result.time_s,
                          cost.weight_bytes_read, cost.kv_bytes_read, cost.kv_bytes_written),
                result.assumptions, result)


def group_label(group: LayerGroup) -> str:
    label = "moe layers" if group.moe else "dense layers"
    return label + (f", window {group.sliding_window}" if group.sliding_window else "")


def model_step(arch: Architecture, phase: str, batch: int, seq_len: int, tensor_parallel: int,
               attention_implementation: str) -> Step:
    if phase == "prefill":
        return Step(batch, seq_len, seq_len, tensor_parallel, attention_implementation)
    return Step(batch, 1, seq_len + 1, tensor_parallel, attention_implementation)


def _totals(rows: list[RowResult]) -> Totals:
    time = sum(r.total_time_s for r in rows)
    share = (lambda bound: sum(r.total_time_s for r in rows if r.bound == bound) / time) if time else (lambda _: 0.0)
    return Totals(
        flops=sum(r.flops * r.instances for r in rows),
        bytes=sum(r.bytes * r.instances for r in rows if r.bound != "interconnect"),
        weight_bytes_read=sum(r.weight_bytes * r.instances for r in rows),
        kv_bytes_read=sum(r.kv_bytes_read * r.instances for r in rows),
        kv_bytes_written=sum(r.kv_bytes_written * r.instances for r in rows),
        interconnect_bytes=sum(r.bytes * r.instances for r in rows if r.bound == "interconnect"),
        time_s=time,
        memory_bound_time_share=share("memory"),
        compute_bound_time_share=share("compute"),
        interconnect_time_share=share("interconnect"),
    )


def analyze_model(arch: Architecture, evaluator: Evaluator, *, phase: str, batch: int, seq_len: int,
                  dtypes: ModelDTypes, tensor_parallel: int = 1, attention_implementation: str = "flash",
                  output_len: int | None = None) -> ModelAnalysisResult:
    step = model_step(arch, phase, batch, seq_len, tensor_parallel, attention_implementation)
    before, after = model_level_rows(arch, step, dtypes)
    results: list[RowResult] = []
    notes: list[str] = list(arch.defaults_applied and [f"config defaults applied: {', '.join(arch.defaults_applied)}"])
    matmul_result = None
    for row in before:
        results.append(evaluator.evaluate(row, "model", 1)[0])
    for group in arch.groups:
        for row in layer_rows(arch, group, step, dtypes):
            result, _, raw = evaluator.evaluate(row, group_label(group), group.count)
            results.append(result)
            if row.kind == "matmul" and matmul_result is None:
                matmul_result = raw
    for row in after:
        results.append(evaluator.evaluate(row, "model", 1)[0])

    totals = _totals(results)
    peak = matmul_result.compute_roof.nominal_flops_per_s if matmul_result else None
    mfu = totals.flops / (totals.time_s * peak) if peak and totals.time_s else None
    e2e_decode = None
    if output_len and output_len > 1:
        e2e_decode = decode_time_sum(arch, evaluator, batch=batch, first_context=seq_len + 1, steps=output_len - 1,
                                     dtypes=dtypes, tensor_parallel=tensor_parallel,
                                     attention_implementation=attention_implementation)
    notes += [
        f"model: {arch.family}, {arch.layers} layers ({arch.layer_kinds()}); each distinct layer is costed once",
        f"step: {phase}, batch {batch}, {step.q_len} new token(s) per sequence attending to {step.kv_len} keys",
        f"dtypes: weights {dtypes.weights}"
        + (f" (+{dtypes.weight_scale_bytes:g}-byte scale per {dtypes.weight_group_size})" if dtypes.weight_group_size else "")
        + f", activations {dtypes.activations}, kv cache {dtypes.kv_cache}; embedding table and router in activations' type",
        "time: the sum of each operator's lower bound (kernels in sequence, each at its own roof)",
        "lm_head: computed for the last token of each sequence only",
    ]
    if tensor_parallel > 1:
        notes.append(f"tensor parallel {tensor_parallel}: heads, MLP and expert widths split; a ring all-reduce of "
                     "[tokens, hidden] after attention and after the MLP, 2(t-1)/t of it per device over the interconnect")
    if arch.moe:
        notes.append("moe: uniform independent routing; weights of the expected number of distinct experts hit are read")
    if matmul_result:
        notes.extend(line for line in matmul_result.assumptions if line.startswith(("compute roof", "memory roof")))
    return ModelAnalysisResult(
        rows=tuple(results), totals=totals, mfu=mfu, peak_flops_per_s=peak,
        compute_roof_source=matmul_result.compute_roof.source.value if matmul_result else "nominal",
        memory_roof_source=matmul_result.memory_roof.source.value if matmul_result else "nominal",
        e2e_decode_time_s=e2e_decode, assumptions=tuple(notes),
    )


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

    Only attention depends on the context, and its FLOPs and bytes are affine in the keys it reads
    (the context plus the new token, capped by a sliding window); the sum is taken in closed form."""
    step = Step(batch, 1, first_context + 1, tensor_parallel, attention_implementation)
    fixed = 0.0
    total = 0.0
    before, after = model_level_rows(arch, step, dtypes)
    for row in before + after:
        fixed += evaluator.evaluate(row, "model", 1)[0].total_time_s
    for group in arch.groups:
        for row in layer_rows(arch, group, step, dtypes):
            if row.kind != "attention":
                fixed += evaluator.evaluate(row, "", group.count)[0].total_time_s
                continue
            times = []
            for keys in (1, 2):
                probe = attention_cost(**{**row.attention_params, "kv_len": keys, "window": None})
                result = analyze(probe, evaluator.device, measured=evaluator.measured, mode=evaluator.mode,
                                 sustained_clock_hz=evaluator.sustained_clock_hz)
                times.append((result.compute_time_s, result.memory_time_s))
            (c1, m1), (c2, m2) = times
            a, b, c, d = c1 - (c2 - c1), c2 - c1, m1 - (m2 - m1), m2 - m1  # lines through keys = 1 and 2
            lo, hi = first_context + 1, first_context + steps  # keys read by the first and last step
            window = group.sliding_window
            if window and hi > window:
                capped = hi - max(lo, window) + 1
                per_step = max(a + b * window, c + d * window)
                total += group.count * row.count * (_sum_max_affine(a, b, c, d, lo, min(hi, window - 1)) + capped * per_step)
            else:
                total += group.count * row.count * _sum_max_affine(a, b, c, d, lo, hi)
    return fixed * steps + total
