"""An engine's own costs, carried from the devices it was measured on to those it was not.

A measured TPOT sits above the step its kernels make (kernel_steps.py) by what no kernel table holds: the engine's
scheduler, launches and sampling between steps, and its kernels' share of the step the tables do not time (fused
MoE dispatch, attention by context, collectives). Those are the engine's, not the device's: an engine
calibration is the fit TPOT = scale x (composed step + composed prefill share) + overhead and TTFT = scale x
composed prefill + overhead (the same soft-L1 line as a device's own, serving_runs.py) over the runs of one engine,
weights' type and speculative method, of one model, on every device that has both runs and kernel tables. A device
without runs then takes its own kernels' step and the engine's line; another model, the line with its overheads
scaled by its layers (for_layers), said to extrapolate.

It is checked as it is used: each device's runs left out in turn and predicted by the fit to the other devices'
(its error per device is kept), so the error it reports is the error on a device it never saw.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar, NamedTuple

import numpy as np

from service.core.expectations.serving_runs import (
    ServingPoint,
    covered,
    fit_lines,
    on_line,
    on_lines,
    relative_errors,
    unidentified_overheads,
)
from service.core.layer_scaled import LayerScaled


class EnginePoint(NamedTuple):
    """One measured run beside its composed (kernel-table) deployment: the ServingPoint's bounds are the composed
    figures, what the line multiplies; the run's own bounds are the floor no expectation goes below."""

    device_id: str
    layout: str  # layout_signature() of its deployment
    point: ServingPoint
    bound_tpot_s: float
    bound_ttft_s: float


def layout_signature(*, expert_parallel: bool, attention_data_parallel: bool, disaggregated: bool,
                     speculative: str) -> str:
    """What of a deployment's layout an engine's costs depend on, as one label ("plain" where none)."""
    parts = [name for name, on in (("expert-parallel", expert_parallel), ("attention-dp", attention_data_parallel),
                                   ("disaggregated", disaggregated)) if on]
    if speculative != "none":
        parts.append(f"speculative-{speculative}")
    return "+".join(parts) or "plain"


@dataclass(frozen=True)
class EngineCalibration(LayerScaled):
    id: str  # engine:precision:speculative
    engine: str
    precision: str
    speculative: str
    source: str
    tpot_scale: float
    tpot_overhead_s: float
    ttft_scale: float
    ttft_overhead_s: float
    devices: tuple[str, ...]  # the devices whose runs it was fitted to
    fitted_on: int
    checked_by: str
    checked_on: int
    tpot_median_error: float  # on devices left out of the fit
    tpot_p90_error: float
    ttft_median_error: float
    ttft_p90_error: float
    # (device, TPOT median error, TTFT median error, runs) with that device left out of the fit
    per_device: tuple[tuple[str, float, float, int], ...]
    shapes: tuple[tuple[int, int], ...]
    concurrency: tuple[int, int]
    layouts: tuple[str, ...]
    unidentified: tuple[str, ...] = ()
    # The model its runs served (catalog ids) and its decoder layers: the overheads are that model's, and scale with
    # the layers of another (for_layers: carried from DeepSeek-R1's 61 layers to gpt-oss-120b's 36 unscaled,
    # TensorRT-LLM's and ATOM's lines put gpt-oss's TPOT at twice what was measured: ACROSS_MODELS_CHECK).
    models: tuple[str, ...] = ()
    layers: int = 0
    PER_LAYER: ClassVar[tuple[str, ...]] = ("tpot_overhead_s", "ttft_overhead_s")

    def __post_init__(self):
        for name in ("devices", "layouts", "unidentified", "models"):  # read back from JSON as lists
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "per_device", tuple(tuple(item) for item in self.per_device))
        object.__setattr__(self, "shapes", tuple(tuple(item) for item in self.shapes))
        object.__setattr__(self, "concurrency", tuple(self.concurrency))
        if not (self.tpot_scale > 0 and self.ttft_scale > 0 and self.tpot_overhead_s >= 0 and self.ttft_overhead_s >= 0):
            raise ValueError(f"engine calibration {self.id}: scales must be positive and overheads not negative")

    @property
    def address(self) -> str:
        return f"engine:{self.id}"

    @property
    def device_id(self) -> str:
        """Not one device's: the devices it was fitted over."""
        return ", ".join(self.devices)

    def tpot_s(self, bound: float, composed: float, prefill_share_s: float = 0.0) -> float:
        """`composed`, `prefill_share_s`: the composed deployment's; `bound`: the bound's TPOT, the floor."""
        return on_line(self.tpot_scale, self.tpot_overhead_s, bound, composed + prefill_share_s)

    def ttft_s(self, bound: float, composed: float) -> float:
        return on_line(self.ttft_scale, self.ttft_overhead_s, bound, composed)

    def covers(self, input_len: int, output_len: int, concurrency: int, layout: str | None = None) -> bool:
        """Whether a workload, and its layout where given, lies among those fitted."""
        return covered(self, input_len, output_len, concurrency, layout)

    @cached_property
    def basis(self) -> str:
        held = ", ".join(f"{device} {tpot:.1%}" for device, tpot, _, _ in self.per_device)
        return (f"the {self.engine} engine's costs ({self.precision}, speculative {self.speculative}), fitted to "
                f"{self.fitted_on} runs on {', '.join(self.devices)} ({self.source}) against their deployments as "
                f"their kernel tables compose them: TPOT = {self.tpot_scale:.3g} x composed + "
                f"{self.tpot_overhead_s * 1e3:.3g} ms, TTFT = {self.ttft_scale:.3g} x composed + "
                f"{self.ttft_overhead_s * 1e3:.3g} ms; checked by {self.checked_by} on {self.checked_on} runs: TPOT "
                f"off by {self.tpot_median_error:.1%} in the median ({self.tpot_p90_error:.1%} at the 90th "
                f"percentile), TTFT by {self.ttft_median_error:.1%}" + (f"; each device left out: {held}" if held else ""))


def _errors(train: Sequence[EnginePoint], test: Sequence[EnginePoint]) -> tuple[np.ndarray, np.ndarray]:
    tpot, ttft = predicted(train, test)
    return (relative_errors(tpot, [p.point.tpot_s for p in test]),
            relative_errors(ttft, [p.point.ttft_s for p in test]))


def predicted(train: Sequence[EnginePoint], test: Sequence[EnginePoint]) -> tuple[list[float], list[float]]:
    """`test`'s TPOT and TTFT as the lines fitted to `train` expect them, never below their bounds."""
    return on_lines(fit_lines([p.point for p in train]), [p.point for p in test],
                    [(p.bound_tpot_s, p.bound_ttft_s) for p in test])


def tpot_errors(train: Sequence[EnginePoint], test: Sequence[EnginePoint]) -> list[float]:
    """|expected / measured - 1| of each of `test`'s TPOTs, by the line fitted to `train`."""
    return list(relative_errors(predicted(train, test)[0], [p.point.tpot_s for p in test]))


def across_types(groups: Mapping[tuple[str, str, str], Sequence[EnginePoint]]) -> dict[tuple[str, str, str], list[float]]:
    """Each scope's runs predicted by its engine's line fitted in the other weights' type (fp8 and fp4 each other's,
    the same speculative method), where that type has MIN_RUNS runs or more: their TPOT errors (ACROSS_PRECISIONS_CHECK
    pools them)."""
    found = {}
    for (engine, precision, method), points in sorted(groups.items()):
        train = groups.get((engine, "fp4" if precision == "fp8" else "fp8", method), [])
        if len(train) >= MIN_RUNS:
            found[(engine, precision, method)] = tpot_errors(train, points)
    return found


def carried_to_model(line: EngineCalibration, layers: int,
                     points: Sequence[EnginePoint]) -> tuple[list[float], list[float]]:
    """Another model's runs (`points`, of `layers` decoder layers): their TPOT and TTFT as `line`, carried to that
    model, expects them (what an answer does: for_layers)."""
    carried = line.for_layers(layers)
    return ([carried.tpot_s(p.bound_tpot_s, p.point.bound_tpot_s, p.point.bound_prefill_share_s) for p in points],
            [carried.ttft_s(p.bound_ttft_s, p.point.bound_ttft_s) for p in points])


def left_out(points: Sequence[EnginePoint]) -> Iterator[tuple[str, list[EnginePoint]]]:
    """Each device's runs, where the points span two devices or more: what the fit to the others predicts."""
    devices = sorted({p.device_id for p in points})
    if len(devices) >= 2:
        for device in devices:
            yield device, [p for p in points if p.device_id == device]


MIN_RUNS = 3


def fit_engine_calibration(points: Sequence[EnginePoint], *, engine: str, precision: str, speculative: str,
                           source: str, model: str = "", layers: int = 0) -> EngineCalibration:
    """Fitted to every point (runs of one `model`, of `layers` decoder layers); checked by leaving each device out in
    turn where there are two devices or more, else (one device: its costs cannot be told from its kernels') by leaving
    each run out."""
    if len(points) < MIN_RUNS:
        raise ValueError(f"an engine calibration needs at least {MIN_RUNS} runs")
    devices = tuple(sorted({p.device_id for p in points}))
    plain = [p.point for p in points]
    per_device, tpot_errors, ttft_errors = [], [], []
    if len(devices) >= 2:
        checked_by = "each device's runs predicted by the fit to the other devices'"
        for device, own in left_out(points):
            tpot, ttft = _errors([p for p in points if p.device_id != device], own)
            tpot_errors.append(tpot)
            ttft_errors.append(ttft)
            per_device.append((device, float(np.median(tpot)), float(np.median(ttft)), len(own)))
    else:
        checked_by = "leave-one-out on its one device (not checked on another device)"
        every = list(points)
        for i in range(len(every)):
            tpot, ttft = _errors(every[:i] + every[i + 1:], [every[i]])
            tpot_errors.append(tpot)
            ttft_errors.append(ttft)
    tpot_all, ttft_all = np.concatenate(tpot_errors), np.concatenate(ttft_errors)
    (tpot_scale, tpot_overhead), (ttft_scale, ttft_overhead) = fit_lines(plain)
    return EngineCalibration(
        id=f"{engine}:{precision}:{speculative}", engine=engine, precision=precision, speculative=speculative,
        source=source, tpot_scale=tpot_scale, tpot_overhead_s=tpot_overhead, ttft_scale=ttft_scale,
        ttft_overhead_s=ttft_overhead, devices=devices, fitted_on=len(points), checked_by=checked_by,
        checked_on=len(tpot_all), tpot_median_error=float(np.median(tpot_all)),
        tpot_p90_error=float(np.percentile(tpot_all, 90)), ttft_median_error=float(np.median(ttft_all)),
        ttft_p90_error=float(np.percentile(ttft_all, 90)), per_device=tuple(per_device),
        shapes=tuple(sorted({(p.input_len, p.output_len) for p in plain})),
        concurrency=(min(p.concurrency for p in plain), max(p.concurrency for p in plain)),
        layouts=tuple(sorted({p.layout for p in points})),
        unidentified=unidentified_overheads(plain), models=(model,) if model else (), layers=layers)


# For a weights' type an engine has no line in, the types whose line stands in, nearest first. Checked where it can
# be: across the two types measured (each engine's fp8 line predicting its fp4 runs, and the reverse; every newest
# InferenceX run, bench/unmeasured.py) the TPOT was off by 19.3 % in the median and 52.3 % at the 90th percentile,
# against 15.5 % and 40.5 % within a type with the device left out. A deployment's kernels are its own (a 16-bit one's
# composed step reads its bf16 tables); what is carried is the engine's costs around them. vLLM's only line is fp4
# (gpt-oss's MXFP4 experts): its fp8 and 16-bit deployments carry it.
CARRIED_PRECISIONS = {"bf16": ("fp8", "fp4"), "fp16": ("fp8", "fp4"), "fp8": ("fp4",), "fp4": ("fp8",)}
ACROSS_PRECISIONS_CHECK = ("carried across weights' types (fp8 and fp4 lines predicting each other's runs: TPOT off "
                           "by 19.3 % in the median, 52.3 % at the 90th percentile, over 401 runs)")


# Measured by bench/unmeasured.py (across_models): each engine's DeepSeek-R1 line predicting its gpt-oss-120b runs;
# tests/api/test_inferencex_gpt_oss.py holds the figures to the shipped lines and runs.
ACROSS_MODELS_CHECK = ("checked where it could be: TensorRT-LLM's and ATOM's DeepSeek-R1 lines so carried to their gpt-oss-120b "
                       "runs put TPOT off by 52.5 % in the median, 83.6 % at the 90th percentile, over 78 runs")


def model_note(line: EngineCalibration, model: str, layers: int) -> str:
    """What an answer says of a line carried to a model its runs did not serve: nothing where they did."""
    if not line.models or model in line.models:
        return ""
    return (f" (fitted to {', '.join(line.models)} of {line.layers} layers: carried to {model}, its overheads scaled "
            f"to its {layers} layers, {ACROSS_MODELS_CHECK}; extrapolated)")


def carried_note(engine: str, precision: str, carried_from: str | None) -> str:
    """What an answer says of a line carried from another weights' type (line_for): nothing where it is its own."""
    if carried_from is None:
        return ""
    return (f" (no {engine} serving run in {precision} weights is shipped: its {carried_from} line, "
            f"{ACROSS_PRECISIONS_CHECK}, over this deployment's own {precision} kernels; extrapolated)")


def line_for(lines: dict[tuple[str, str, str], EngineCalibration], engine: str, precision: str,
             speculative: str) -> tuple[EngineCalibration | None, str | None]:
    """The engine's line for the weights' type and speculative method, else the line of the nearest type that stands
    in for an unmeasured one (CARRIED_PRECISIONS): (the line, the type it was fitted in where carried, else None)."""
    own = lines.get((engine, precision, speculative))
    if own is not None:
        return own, None
    for stand_in in CARRIED_PRECISIONS.get(precision, ()):
        carried = lines.get((engine, stand_in, speculative))
        if carried is not None:
            return carried, stand_in
    return None, None


class DeploymentLine(NamedTuple):
    """An engine's line as one deployment reads it (deployment_line)."""

    fitted: EngineCalibration  # as shipped: its id, basis and the workloads it covers
    line: EngineCalibration  # its overheads at the deployment's layers (for_layers)
    note: str  # what was carried from another weights' type or model, "" where nothing was

    @property
    def carried(self) -> bool:
        """Carried to a weights' type or a model no run of it measured: it extrapolates at every workload."""
        return bool(self.note)


def deployment_line(lines: dict[tuple[str, str, str], EngineCalibration], engine: str, precision: str,
                    speculative: str, model: str, layers: int) -> DeploymentLine | None:
    """The line a deployment of `model` (of `layers` decoder layers) in `precision` weights reads under `engine`
    (line_for), scaled to its layers, and what an answer says of what was carried; None where the engine has none."""
    fitted, carried_from = line_for(lines, engine, precision, speculative)
    if fitted is None:
        return None
    return DeploymentLine(fitted, fitted.for_layers(layers),
                          carried_note(engine, precision, carried_from) + model_note(fitted, model, layers))
