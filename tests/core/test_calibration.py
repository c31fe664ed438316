"""GEMM expectations: the shipped fit against the public measurements it was fitted to, and by hand."""

import csv
from pathlib import Path

import pytest

from service.core.expectations.kernels import KernelCalibration
from service.persistence.catalog import gemm_calibrations

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "aiconfigurator_gemm_sample.csv"
OPERAND_BYTES = {"bf16": 2, "fp8": 1, "fp4": 0.5 + 1 / 16}


def sample_rows():
    """150 held-out measurements a (device, dtype) from AIConfigurator's tables (scripts/fit_gemm_calibration.py)."""
    with SAMPLE.open() as handle:
        return [{**row, "m": int(row["m"]), "n": int(row["n"]), "k": int(row["k"]),
                 "latency_s": float(row["latency_s"])} for row in csv.DictReader(handle)]


def terms(row):
    """The roofline's FLOPs and HBM bytes of the GEMM: 2mnk; A and B in the operands' type, C in bf16."""
    m, n, k, s = row["m"], row["n"], row["k"], OPERAND_BYTES[row["dtype"]]
    return 2 * m * n * k, (m * k + k * n) * s + m * n * 2


@pytest.mark.parametrize("key", sorted(gemm_calibrations()))
def test_the_expectation_is_closer_to_the_measurements_than_the_bound(key):
    calibration = gemm_calibrations()[key]
    rows = [r for r in sample_rows() if (r["device_id"], r["dtype"]) == key]
    assert len(rows) == 150
    errors, bound_errors = [], []
    for row in rows:
        flops, hbm = terms(row)
        bound = max(flops / calibration.peak_flops_per_s, hbm / calibration.hbm_bytes_per_s)
        expected = max(bound, calibration.expected_time_s(flops, hbm, (row["m"], row["n"], row["k"])))
        errors.append(abs(expected / row["latency_s"] - 1))
        bound_errors.append(abs(bound / row["latency_s"] - 1))
    errors.sort(), bound_errors.sort()
    median, bound_median = errors[len(errors) // 2], bound_errors[len(bound_errors) // 2]
    # The sample is drawn from the held-out half: its median error is the stated one's, give or take the sample.
    assert median <= calibration.median_error + 0.05
    assert median < bound_median / 2


# L2 per GPU: GH100's 50 MB (NVIDIA H100 Tensor Core GPU Architecture whitepaper, 2022; the H200 is the same die).
L2_BYTES = {"nvidia-h100-sxm": 50e6, "nvidia-h200-sxm": 50e6}


def test_the_bound_stays_below_every_measurement_bar_l2_resident_operands():
    """A bound above a measurement is a GEMM whose operands fit in L2 and were timed warm (read from L2, not HBM)."""
    above = []
    for row in sample_rows():
        calibration = gemm_calibrations()[(row["device_id"], row["dtype"])]
        flops, hbm = terms(row)
        if max(flops / calibration.peak_flops_per_s, hbm / calibration.hbm_bytes_per_s) > row["latency_s"]:
            above.append(row)
            assert hbm <= L2_BYTES[row["device_id"]], row
    # One of 900: an H100 bf16 GEMM of 27 MB, measured 0.08 % under its bound.
    assert len(above) <= 1


def test_an_expectation_by_hand_over_http(client):
    # H100 bf16, m = 1, n = k = 8192: FLOPs 2 x 8192^2 = 134,217,728; bytes (8192 + 8192^2) x 2 + 8192 x 2 =
    # 134,250,496; the bound is memory's, 134,250,496 / 3.35e12 = 40.07 us; the fit adds t0 to it over e_m, and
    # multiplies by what it missed on the nearest fitted shapes.
    answer = client.post("/v1/analyze/operator", json={"device_id": "nvidia-h100-sxm",
                                                       "operator": {"kind": "matmul", "m": 1, "n": 8192, "k": 8192}})
    body = answer.json()
    assert body["time_s"] == pytest.approx(134_250_496 / 3.35e12)
    calibration = gemm_calibrations()[("nvidia-h100-sxm", "bf16")]
    formula = calibration.t0_s + 134_250_496 / 3.35e12 / calibration.memory_efficiency
    correction = float(calibration.corrections([1], [8192], [8192])[0])
    assert body["expected"]["time_s"] == pytest.approx(formula * correction)
    assert 0.5 < correction < 2
    assert "held out" in body["expected"]["basis"] and body["expected"]["engine"] == "trtllm"
    # A device without a calibration says so with null, and the bound stands alone.
    other = client.post("/v1/analyze/operator", json={"device_id": "nvidia-l40s",
                                                      "operator": {"kind": "matmul", "m": 1, "n": 8192, "k": 8192}})
    assert other.json()["expected"] is None


def test_a_calibration_that_would_expect_less_than_the_bound_is_refused():
    fields = dict(device_id="d", dtype="bf16", engine="e", source="s", peak_flops_per_s=1e15, hbm_bytes_per_s=3e12,
                  t0_s=0.0, compute_efficiency=1.2, memory_efficiency=0.8, fitted_on=1, checked_on=1,
                  median_error=0.1, p90_error=0.2, bound_median_error=0.3)
    with pytest.raises(ValueError, match="less than the bound"):
        KernelCalibration(**fields)


# The sample's first tables (H100, H200 and B200 in bf16 and fp8): what the count of 142 below was made on.
FIRST_NINE_HUNDRED = {(device, dtype) for device in ("nvidia-h100-sxm", "nvidia-h200-sxm", "nvidia-b200")
                      for dtype in ("bf16", "fp8")}


def test_apply_efficiency_stays_a_bound_on_the_measurements():
    """The padding slows the bound by the work padded tiles execute; the waves would not (stream-K and split-K fill
    the SMs): over the 900 measured GEMMs the padded bound exceeds no more measurements than the bare one, while
    padding times waves would exceed 142 of them (up to 41x on the whole tables: service/core/efficiency.py)."""
    from service.core.efficiency import matmul_efficiency
    from service.persistence.catalog import nominal_device

    padded_above = waves_above = bare_above = 0
    for row in sample_rows():
        if (row["device_id"], row["dtype"]) not in FIRST_NINE_HUNDRED:
            continue
        calibration = gemm_calibrations()[(row["device_id"], row["dtype"])]
        device = nominal_device(row["device_id"])
        flops, hbm = terms(row)
        shape = matmul_efficiency(row["m"], row["n"], row["k"], 1, device.matmul_tile, device.sm_count, flops)
        compute, memory = flops / calibration.peak_flops_per_s, hbm / calibration.hbm_bytes_per_s
        bare_above += max(compute, memory) > row["latency_s"]
        padded_above += max(compute / shape.applied, memory) > row["latency_s"]
        waves_above += max(compute / (shape.applied * shape.wave_efficiency), memory) > row["latency_s"]
    assert padded_above == bare_above <= 1
    assert waves_above == 142


def test_the_nearest_shapes_correct_the_formula_by_hand():
    """Two fitted shapes: (m, n, k) = (2^10, 2^10, 2^10), measured 2x the formula (log residual ln 2), and
    (2^12, 2^10, 2^10), measured as the formula (0). At (2^11, 2^10, 2^10) both are 1 octave away: weights
    1 / (1 + 0.25) each, the mean residual ln 2 / 2, the correction sqrt(2). At (2^10, 2^10, 2^10) the first is at
    distance 0 (weight 4) and the second 2 octaves away (weight 1 / 2.25): ln 2 x 4 / (4 + 0.444) = 0.9 ln 2."""
    import math

    calibration = KernelCalibration(
        device_id="d", dtype="bf16", engine="e", source="s", peak_flops_per_s=1e15, hbm_bytes_per_s=1e12, t0_s=1e-6,
        compute_efficiency=0.5, memory_efficiency=0.5, fitted_on=2, checked_on=2, median_error=0, p90_error=0,
        bound_median_error=0, anchors=((10, 10, 10, math.log(2)), (12, 10, 10, 0.0)))
    assert calibration.corrections([2048], [1024], [1024])[0] == pytest.approx(math.sqrt(2))
    assert calibration.corrections([1024], [1024], [1024])[0] == pytest.approx(2 ** (4 / (4 + 1 / 2.25)))
    # 2 x 2048 x 1024^2 FLOPs = 4.29e9 over 0.5 x 1e15, 8.59 us; plus 1 us; times sqrt(2).
    flops = 2 * 2048 * 1024 * 1024
    assert calibration.expected_time_s(flops, 1.0, (2048, 1024, 1024)) == pytest.approx(
        (1e-6 + flops / 0.5e15) * math.sqrt(2))


def test_a_fit_recovers_its_formula_and_its_error_is_measured_on_timings_it_did_not_see():
    import numpy as np

    from service.core.expectations.kernels import fit_kernel_terms

    rng = np.random.default_rng(7)
    sizes = 2 ** rng.integers(4, 14, size=(400, 3))
    compute = 2 * sizes.prod(axis=1) / 1e15
    memory = (sizes[:, 0] * sizes[:, 2] + sizes[:, 2] * sizes[:, 1] + sizes[:, 0] * sizes[:, 1]) * 2 / 3e12
    measured = 4e-6 + np.maximum(compute / 0.7, memory / 0.6)
    fit = fit_kernel_terms(compute, memory, measured, sizes)
    assert (fit.t0_s, fit.compute_efficiency, fit.memory_efficiency) == pytest.approx((4e-6, 0.7, 0.6), rel=1e-6)
    assert fit.median_error < 1e-6 and fit.checked_by == "5-fold cross-validation"
    # With 10 % noise the error on held-out timings reports it.
    noisy = measured * np.exp(rng.normal(0, 0.1, size=400))
    assert 0.05 < fit_kernel_terms(compute, memory, noisy, sizes).median_error < 0.2


def test_an_efficiency_no_timing_binds_is_held_at_the_roof_and_said_to_be_unidentified():
    import numpy as np

    from service.core.expectations.kernels import COMPUTE, fit_kernel_terms

    # GEMVs (m = 1): 2nk FLOPs against about 2nk bytes, an intensity of 1 against a ridge of 333 FLOP/byte.
    sizes = np.array([[1, 2**n, 2**k] for n in range(10, 15) for k in range(10, 14)])
    compute = 2 * sizes.prod(axis=1) / 1e15
    memory = (sizes[:, 0] * sizes[:, 2] + sizes[:, 2] * sizes[:, 1] + sizes[:, 0] * sizes[:, 1]) * 2 / 3e12
    measured = 3e-6 + memory / 0.6
    fit = fit_kernel_terms(compute, memory, measured, sizes)
    assert fit.unidentified == (COMPUTE,) and fit.compute_efficiency == 1.0
    assert (fit.t0_s, fit.memory_efficiency) == pytest.approx((3e-6, 0.6), rel=1e-6)
    fields = dict(device_id="d", dtype="bf16", engine="e", source="s", peak_flops_per_s=1e15, hbm_bytes_per_s=3e12,
                  t0_s=fit.t0_s, compute_efficiency=1.0, memory_efficiency=fit.memory_efficiency, fitted_on=20,
                  checked_on=20, median_error=0.0, p90_error=0.0, bound_median_error=0.5, unidentified=[COMPUTE])
    calibration = KernelCalibration(**fields)
    # A 4,096-cube is compute-bound (1.4e11 FLOPs take 137 us at the peak, its 100 MB 56 us at 0.6 of 3 TB/s): the
    # fit knows nothing of it. A GEMV is memory-bound: the fit speaks for it.
    cube = 2 * 4096**3, 3 * 4096 * 4096 * 2
    gemv = 2 * 8192 * 8192, (8192 * 8192 + 2 * 8192) * 2
    assert calibration.outside(*cube, None) and not calibration.outside(*gemv, None)
    assert not KernelCalibration(**{**fields, "unidentified": []}).outside(*cube, None)


def test_matmuls_expected_together_are_the_same_bits_as_one_by_one():
    # A batch's matmuls are expected as arrays; each must be the float the single-operator path computes (the batch
    # answers are byte for byte the operator endpoint's). 2,000 shapes over and beyond every shipped fit's span.
    import random

    rng = random.Random(7)
    shapes = [(rng.randint(1, 1 << 17), rng.randint(1, 1 << 16), rng.randint(1, 1 << 16)) for _ in range(2_000)]
    flops = [2.0 * m * n * k for m, n, k in shapes]
    moved = [2.0 * (m * k + k * n + m * n) for m, n, k in shapes]
    for calibration in gemm_calibrations().values():
        together = calibration.expected_times_as_one_s(flops, moved, *map(list, zip(*shapes, strict=True))).tolist()
        assert together == [calibration.expected_time_s(f, b, s) for f, b, s in zip(flops, moved, shapes, strict=True)]


def test_the_shipped_lattices_are_those_of_the_shipped_fits():
    # gemm_lattices.npz is tabulated from gemm.json's fitted shapes (scripts/tabulate_gemm_lattices.py): the same
    # lattice tabulated here from the same shapes (to the last bits of exp, which may round apart between CPUs).
    import numpy as np

    shipped = gemm_calibrations()
    assert sum(calibration.anchors is not None for calibration in shipped.values()) >= 10
    for key, calibration in shipped.items():
        if not calibration.anchors:
            continue
        fresh = KernelCalibration(**{name: getattr(calibration, name) for name in KernelCalibration.__dataclass_fields__})
        read, built = calibration.lattice(), fresh.lattice()
        assert read is not built and read is not None and built is not None, key
        assert read.step == built.step and read.low.tolist() == built.low.tolist(), key
        assert read.values.shape == built.values.shape and np.allclose(read.values, built.values, rtol=1e-12), key


def test_a_matmul_answer_needs_no_neighbour_search():
    # A worker answering matmuls on a calibrated device reads the shipped lattice: scipy (40 MB a worker) stays out.
    import subprocess
    import sys

    script = ("import sys; from service.persistence.catalog import gemm_calibrations; "
              "c = gemm_calibrations()[('nvidia-h100-sxm', 'bf16')]; "
              "t = c.expected_time_s(2 * 4096.0 ** 3, 3 * 4096.0 ** 2 * 2, (4096, 4096, 4096)); "
              "assert t > 0; print(any(m.split('.')[0] == 'scipy' for m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
