"""Roofline evaluation on a synthetic device whose ridge point is exact: 300 FLOP/byte."""

import pytest

from service.core.errors import NoComputePeakError
from service.core.hardware import ComputePeak, DeviceSpec, MemoryLevel, MemoryLevelName, Unit
from service.core.operators import elementwise_cost, matmul_cost
from service.core.roofline import Bound, analyze_nominal

DEVICE = DeviceSpec(
    id="toy",
    name="Toy accelerator",
    vendor="test",
    memory_capacity_bytes=2**34,
    compute_peaks=(
        ComputePeak("bf16", Unit.tensor, 300e12, "test"),
        ComputePeak("fp32", Unit.vector, 50e12, "test"),
    ),
    memory_levels=(MemoryLevel(MemoryLevelName.hbm, 1e12, "test"),),
)


def intensity(side: int) -> float:
    return analyze_nominal(matmul_cost(m=side, n=side, k=side), DEVICE).arithmetic_intensity


def test_square_matmul_intensity_grows_linearly_with_its_side():
    # I = 2n^3 / (3 * n^2 * 2 bytes) = n / 3 in bf16.
    for side in (96, 384, 1536, 6144):
        assert intensity(side) == pytest.approx(side / 3, rel=1e-12)
        assert intensity(2 * side) == pytest.approx(2 * intensity(side), rel=1e-12)


def test_bound_flips_exactly_at_the_ridge():
    # Ridge = 300e12 / 1e12 = 300 FLOP/byte; side 900 gives I = 300 exactly, side 897 gives 299.
    at_ridge = analyze_nominal(matmul_cost(m=900, n=900, k=900), DEVICE)
    below = analyze_nominal(matmul_cost(m=897, n=897, k=897), DEVICE)
    assert at_ridge.ridge_point == 300
    assert at_ridge.arithmetic_intensity == 300
    assert at_ridge.bound == Bound.compute
    assert below.bound == Bound.memory
    assert at_ridge.compute_time_s == pytest.approx(at_ridge.memory_time_s, rel=1e-12)


def test_memory_bound_times_and_mfu_on_the_slope():
    result = analyze_nominal(matmul_cost(m=897, n=897, k=897), DEVICE)
    # I = 299: attainable = 299 * 1e12 FLOP/s; MFU = I / I* = 299 / 300.
    assert result.attainable_flops_per_s == pytest.approx(299e12)
    assert result.mfu == pytest.approx(299 / 300)
    assert result.time_s == result.memory_time_s == pytest.approx(result.cost.bytes_total / 1e12)


def test_compute_bound_mfu_is_one_at_the_roof():
    result = analyze_nominal(matmul_cost(m=4096, n=4096, k=4096), DEVICE)
    assert result.bound == Bound.compute
    assert result.mfu == 1.0
    assert result.time_s == pytest.approx(2 * 4096**3 / 300e12)


def test_vector_work_in_bf16_falls_back_to_the_fp32_vector_peak_and_says_so():
    result = analyze_nominal(elementwise_cost(op="silu", shape=[1024], dtype="bf16"), DEVICE)
    assert (result.compute_roof.dtype, result.compute_roof.unit) == ("fp32", Unit.vector)
    assert any("has no vector roof for bf16" in line for line in result.assumptions)


def test_missing_tensor_peak_is_an_error_naming_the_dtype():
    with pytest.raises(NoComputePeakError) as error:
        analyze_nominal(matmul_cost(m=8, n=8, k=8, dtype="fp8"), DEVICE)
    assert error.value.field == "dtype"
    assert "bf16" in error.value.reason


def test_fp32_matmul_without_a_matrix_peak_runs_on_vector_units():
    result = analyze_nominal(matmul_cost(m=64, n=64, k=64, dtype="fp32"), DEVICE)
    assert (result.compute_roof.dtype, result.compute_roof.unit) == ("fp32", Unit.vector)


def test_counts_beyond_float_range_are_refused_not_returned_as_infinity():
    from service.core.errors import CostModelError

    with pytest.raises(CostModelError):
        analyze_nominal(elementwise_cost(op="x", shape=[2**26, 2**26], flops_per_element=1e300), DEVICE)
