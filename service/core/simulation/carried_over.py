"""A scheduling calibration carried over to devices an engine was never measured on: one fit per engine, precision
and speculative method over the runs of every device with kernel tables, each run simulated with its steps as its
device's kernel tables compose them (not at their bounds). The kernel tables carry what differs between devices, so
what is left to fit is the engine's: how far its steps sit from the tables' (the scales) and its fixed costs a step
and a request.

The composed step is already an expectation, not a floor, so a fit may scale it down, to half at most
(LOWEST_SCALE); an answer's figures stay at or above the bound whatever the fit. On the shipped runs a floor of 0.5
held the devices left out to the same errors as one of 0.1 (TPOT 20.9 % median, TTFT within a point), where a floor
of 1, as on bounds, made their TPOT 29.3 %.

Each is checked the way it is used: fitted on every device but one and held to the runs of the one left out, for each
device in turn; the errors are those pooled over every held-out run, and per device."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from service.core.layer_scaled import LayerScaled
from service.core.simulation.fit import FittedTiming, MeasuredRun, fit_scheduling, run_errors

LOWEST_SCALE = 0.5
# The prefill scale where the runs cover one prompt length: the composed prefill as the tables expect it.
PREFILL_PRIOR = 1.0

EngineScope = tuple[str, str, str]  # engine, precision, speculative method


@dataclass(frozen=True)
class CarriedSchedulingCalibration(FittedTiming, LayerScaled):
    """A scheduling fit of one engine, weights' type and speculative method over several devices' kernel tables, with
    how wrong it was on each device left out of it."""

    devices: tuple[str, ...]
    checked_on: int  # held-out runs, over every device left out in turn
    tpot_median_error: float
    tpot_p90_error: float
    ttft_median_error: float
    ttft_p90_error: float
    ttft_p99_median_error: float | None
    per_device: tuple[tuple[str, float, float, int], ...]  # (device left out, TPOT and TTFT median errors, runs)
    # The model its runs served and its decoder layers: its fixed costs a step and a request are that model's
    # (for_layers scales them to another's, as an engine line's overheads).
    models: tuple[str, ...] = ()
    layers: int = 0
    PER_LAYER: ClassVar[tuple[str, ...]] = ("step_overhead_s", "request_overhead_s")

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "devices", tuple(self.devices))
        object.__setattr__(self, "per_device", tuple(map(tuple, self.per_device)))
        object.__setattr__(self, "models", tuple(self.models))


    @property
    def address(self) -> str:
        return f"scheduling:kernels:{self.id}"

    @property
    def basis(self) -> str:
        held = ", ".join(f"{device} {tpot:.1%} / {ttft:.1%} ({runs} runs)" for device, tpot, ttft, runs in self.per_device)
        return (f"a scheduling simulation of {self.fitted_on} {self.engine} runs on {', '.join(self.devices)} "
                f"({self.precision}, speculative {self.speculative}; {self.source}), every step as its device's kernel "
                f"tables compose it: {self.timing_sentence('its composed decode', 'its composed prefill')}"
                + f"; fitted without each device in turn and held to its {self.checked_on} runs in all: TPOT off by "
                f"{self.tpot_median_error:.1%} in the median ({self.tpot_p90_error:.1%} p90), TTFT by "
                f"{self.ttft_median_error:.1%} ({self.ttft_p90_error:.1%} p90)"
                + (f", p99 TTFT by {self.ttft_p99_median_error:.1%}" if self.ttft_p99_median_error is not None else "")
                + f"; per device left out (TPOT / TTFT): {held}")


def calibrate_carried(groups: Mapping[EngineScope, Sequence[tuple[str, MeasuredRun]]], source: str, *,
                      model: str = "", layers: int = 0) -> list[CarriedSchedulingCalibration]:
    """One calibration per scope whose runs (device id, run: of `model`, of `layers` decoder layers) cover two devices
    or more (so that it can be checked on a device it never saw), each device left out leaving three runs or more to
    fit."""
    found = []
    for (engine, precision, method), runs in sorted(groups.items()):
        devices = sorted({device for device, _ in runs})
        if len(devices) < 2 or any(sum(d != device for d, _ in runs) < 3 for device in devices):
            continue
        tpot: list[float] = []
        ttft: list[float] = []
        tail: list[float] = []
        per_device = []
        for device in devices:
            held = fit_scheduling([run for d, run in runs if d != device], PREFILL_PRIOR, LOWEST_SCALE).timing
            errors = run_errors(held, [run for d, run in runs if d == device])
            tpot += errors[0]
            ttft += errors[1]
            tail += errors[2]
            per_device.append((device, float(np.median(errors[0])), float(np.median(errors[1])), len(errors[0])))
        fit = fit_scheduling([run for _, run in runs], PREFILL_PRIOR, LOWEST_SCALE)
        timing = fit.timing
        found.append(CarriedSchedulingCalibration(
            id=f"{engine}:{precision}:{method}", engine=engine, precision=precision, speculative=method, source=source,
            decode_scale=float(timing.decode_scale), prefill_scale=float(timing.prefill_scale),
            step_overhead_s=float(timing.step_overhead_s), request_overhead_s=float(timing.request_overhead_s),
            fitted=fit.fitted, prior=fit.prior, fitted_on=len(runs), devices=tuple(devices), checked_on=len(tpot),
            tpot_median_error=float(np.median(tpot)), tpot_p90_error=float(np.percentile(tpot, 90)),
            ttft_median_error=float(np.median(ttft)), ttft_p90_error=float(np.percentile(ttft, 90)),
            ttft_p99_median_error=float(np.median(tail)) if tail else None, per_device=tuple(per_device),
            models=(model,) if model else (), layers=layers))
    return found
