"""A model step's expected time: each matmul row at what the kernel calibration of its device, engine and compute
dtype expects of it (service/core/expectations/kernels.py), every other row at its bound, none below its bound. The rows
carry no (m, n, k), so the calibration's formula answers without its nearest-shapes correction."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from service.core.expectations.kernels import KernelCalibration
from service.core.roofs import MeasuredRoofs
from service.core.transformer.analysis import RowExpectation, RowResult
from service.core.transformer.batched_steps import RowShape
from service.translation.operators.analyses import calibration_for


def row_calibrations(device_id: str, measured: MeasuredRoofs, engine: str | None):
    """(kind, compute dtype) -> the kernel calibration a row of them is expected by on the device, or None."""
    def of(kind: str, compute_dtype: str | None) -> KernelCalibration | None:
        return calibration_for(device_id, kind, compute_dtype, engine=engine, measured=measured) if compute_dtype else None

    return of


def row_expectation(device_id: str, measured: MeasuredRoofs, engine: str | None) -> RowExpectation:
    """The same as the step model's RowExpectation: what a row's calibration expects of (FLOPs, bytes)."""
    calibration_of = row_calibrations(device_id, measured, engine)

    def expect(kind: str, compute_dtype: str | None):
        calibration = calibration_of(kind, compute_dtype)
        return calibration.expected_time_s if calibration else None

    return expect


def step_expected(rows: Iterable[RowResult], *, device_id: str, measured: MeasuredRoofs,
                  engine: str | None) -> dict | None:
    """The answer's `expected`, or None where no row has a calibration."""
    expected = bound = covered = 0.0
    used = {}
    calibration_of = row_calibrations(device_id, measured, engine)
    for row in rows:
        total = row.time_s * row.instances
        bound += total
        calibration = calibration_of(row.kind, row.compute_dtype)
        if calibration is None:
            expected += total
            continue
        expected += max(calibration.expected_time_s(row.flops, row.bytes), row.time_s) * row.instances
        covered += total
        used[calibration.id] = calibration
    return _expected_fields(expected, covered, bound, used)


def steps_expected(rows: Sequence[RowShape], flops: np.ndarray, hbm_bytes: np.ndarray, time_s: np.ndarray, *,
                   device_id: str, measured: MeasuredRoofs, engine: str | None) -> list[dict | None]:
    """`step_expected` of many steps of the same rows on one device, bit for bit (`flops`, `hbm_bytes`, `time_s`:
    [steps, rows]): each row's terms as arrays over the steps, added up row after row as the loop adds them."""
    expected, bound, covered = (np.zeros(len(time_s)) for _ in range(3))
    used = {}
    calibration_of = row_calibrations(device_id, measured, engine)
    for at, row in enumerate(rows):
        total = time_s[:, at] * row.instances
        bound += total
        calibration = calibration_of(row.kind, row.compute_dtype)
        if calibration is None:
            expected += total
            continue
        expected += np.maximum(calibration.expected_times_s(flops[:, at], hbm_bytes[:, at]), time_s[:, at]) * row.instances
        covered += total
        used[calibration.id] = calibration
    return [_expected_fields(*sums, used) for sums in zip(expected.tolist(), covered.tolist(), bound.tolist(), strict=True)]


def _expected_fields(expected: float, covered: float, bound: float, used: dict) -> dict | None:
    if not used:
        return None
    share = covered / bound if bound else 0.0
    engines = sorted({calibration.engine for calibration in used.values()})
    return {"time_s": expected, "calibrated_share": share, "engine": ", ".join(engines), "calibrations": sorted(used),
            "basis": (f"the matmul rows ({share:.1%} of the bound's time) as {', '.join(sorted(used))} expects them "
                      "(its formula, without the nearest-shapes correction: a step's rows carry no m, n, k), every "
                      "other row at its bound, none below its bound")}
