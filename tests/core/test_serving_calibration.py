"""Serving calibrations: a fit derived by hand, and expectations that never undercut the bound."""

import pytest

from service.core.expectations.serving_runs import ServingPoint, fit_scale_and_overhead, fit_serving_calibration


def test_three_runs_fit_a_scale_and_an_overhead_by_hand():
    """Bounds of 1, 2 and 3 ms measured at 2.5, 4.5 and 6.5 ms lie on TPOT = 2 x bound + 0.5 ms exactly, so the
    least-squares fit finds it."""
    scale, overhead = fit_scale_and_overhead([1e-3, 2e-3, 3e-3], [2.5e-3, 4.5e-3, 6.5e-3])
    assert scale == pytest.approx(2.0) and overhead == pytest.approx(0.5e-3)


def test_an_overhead_that_would_be_negative_is_held_at_zero():
    """Measured 1, 2 and 4 for the bounds 1, 2, 3: the line through them has a negative intercept, so the overhead
    sits at its bound, 0, and the scale alone is fitted. The soft-L1 cost of the relative errors r = s b/m - 1 (with
    b/m = 1, 1, 0.75) is C^2 sum(sqrt(1 + (r/C)^2) - 1), C = ROBUST_SCALE, whose derivative in s vanishes where
    sum(r (b/m) / sqrt(1 + (r/C)^2)) = 0: that root, found by bisection here, is the fitted scale. At it, raising
    the overhead from 0 would raise the cost: the derivative in the overhead, sum(r / m / sqrt(1 + (r/C)^2)), is
    positive."""
    from scipy.optimize import brentq

    from service.core.expectations.serving_runs import ROBUST_SCALE

    scale, overhead = fit_scale_and_overhead([1.0, 2.0, 3.0], [1.0, 2.0, 4.0])
    ratios, measured = [1.0, 1.0, 0.75], [1.0, 2.0, 4.0]

    def weighted(s, by):
        return sum((s * x - 1) * w / (1 + ((s * x - 1) / ROBUST_SCALE) ** 2) ** 0.5 for x, w in zip(ratios, by))

    root = brentq(lambda s: weighted(s, ratios), 1.0, 4 / 3)
    assert overhead == pytest.approx(0, abs=1e-9) and scale == pytest.approx(root, rel=1e-5)
    assert weighted(root, [1 / m for m in measured]) > 0
    # Plain least squares would have put it at sum(b/m) / sum((b/m)^2) = 2.75 / 2.5625, pulled up by the third run.
    assert scale < 2.75 / 2.5625


def points(shape, tpot_bounds, scale, overhead_s):
    return [ServingPoint(*shape, concurrency=2**i, bound_tpot_s=b, bound_ttft_s=10 * b, tpot_s=scale * b + overhead_s,
                         ttft_s=3 * 10 * b) for i, b in enumerate(tpot_bounds)]


def test_a_calibration_checked_on_other_shapes_is_exact_where_the_runs_lie_on_its_line():
    runs = points((1024, 1024), [1e-3, 2e-3, 4e-3], 3, 2e-3) + points((8192, 1024), [3e-3, 5e-3], 3, 2e-3)
    calibration = fit_serving_calibration(runs, id="d:e:fp8:none", device_id="d", engine="e", precision="fp8",
                                          speculative="none", source="test")
    assert calibration.checked_by == "other workload shapes" and calibration.checked_on == 2
    assert calibration.tpot_scale == pytest.approx(3) and calibration.tpot_overhead_s == pytest.approx(2e-3)
    assert calibration.tpot_median_error == pytest.approx(0, abs=1e-9)
    assert calibration.ttft_scale == pytest.approx(3) and calibration.ttft_overhead_s == pytest.approx(0, abs=1e-9)
    # The bare bound was off by |b / (3 b + 2 ms) - 1| on the two held out (b = 3 and 5 ms): 8/11 and 12/17.
    assert calibration.bound_tpot_median_error == pytest.approx((8 / 11 + 12 / 17) / 2)
    assert calibration.covers(8192, 1024, 2) and not calibration.covers(1024, 8192, 2)
    assert not calibration.covers(1024, 1024, 64)  # concurrencies fitted: 1 to 4
    # Never below the bound, even where the line would be.
    assert calibration.tpot_s(1.0) == pytest.approx(3.002) and calibration.tpot_s(1e-3) >= 1e-3


def test_too_few_runs_are_refused():
    with pytest.raises(ValueError, match="three runs"):
        fit_serving_calibration(points((1024, 1024), [1e-3, 2e-3], 2, 0), id="x", device_id="d", engine="e",
                                precision="fp8", speculative="none", source="test")


def test_the_prefill_share_takes_the_decode_scale_and_carries_it_to_a_longer_prompt():
    """Three aggregated runs at 1,024 / 1,024 with step bounds 1, 2, 4 ms and prefill shares 0.1, 0.2, 0.4 ms a token
    (T_p(B) / 1,024), measured at 2 x (bound + share) + 1 ms: 3.2, 5.4, 9.8 ms. The fit finds 2 and 1 ms; two runs
    at 8,192 / 1,024, where the prefills weigh far more (shares 1 and 3 ms on bounds of 1.5 and 3 ms), measured on
    the same line (6, 13 ms), are then expected exactly, where a fit that ignored the share would have missed them
    by 28 % and 42 %."""
    def run(shape, bound, share):
        return ServingPoint(*shape, concurrency=8, bound_tpot_s=bound, bound_ttft_s=10 * bound,
                            tpot_s=2 * (bound + share) + 1e-3, ttft_s=30 * bound, bound_prefill_share_s=share)

    runs = [run((1024, 1024), 1e-3, 0.1e-3), run((1024, 1024), 2e-3, 0.2e-3), run((1024, 1024), 4e-3, 0.4e-3),
            run((8192, 1024), 1.5e-3, 1e-3), run((8192, 1024), 3e-3, 3e-3)]
    assert [r.tpot_s for r in runs] == pytest.approx([3.2e-3, 5.4e-3, 9.8e-3, 6e-3, 13e-3])
    calibration = fit_serving_calibration(runs, id="d:e:fp8:none", device_id="d", engine="e", precision="fp8",
                                          speculative="none", source="test")
    assert calibration.tpot_scale == pytest.approx(2) and calibration.tpot_overhead_s == pytest.approx(1e-3)
    assert calibration.checked_by == "other workload shapes"
    assert calibration.tpot_median_error == pytest.approx(0, abs=1e-9)
    assert calibration.tpot_s(3e-3, 3e-3) == pytest.approx(13e-3)
    # Without the share, the line through the first three (2.2 x bound + 1 ms) expects 4.3 ms and 7.6 ms: 28 % and
    # 42 % short.
    without = fit_scale_and_overhead([r.bound_tpot_s for r in runs[:3]], [r.tpot_s for r in runs[:3]])
    assert without == pytest.approx((2.2, 1e-3))


def test_runs_at_one_bound_fit_without_a_start_outside_the_bounds():
    # Three runs at one bound: the plain line through them is any line through one point; numpy's least-norm one
    # had a scale of 1e-15 here, under the fit's floor of 1e-12, and least_squares refused to start (a 500 on
    # POST /v1/serving-runs). The fit now starts on the floor; the line still meets the runs.
    from service.core.expectations.serving_runs import fit_scale_and_overhead, separable

    scale, overhead = fit_scale_and_overhead([1e-9] * 3, [1e-3] * 3)
    assert scale * 1e-9 + overhead == pytest.approx(1e-3, rel=1e-6)
    assert not separable([1e-9] * 3) and not separable([1.0, 1.05]) and separable([1.0, 1.1])


class Line:
    """A calibration's two lines (serving_runs.FittedLine) covering every workload."""

    def __init__(self, tpot_scale: float, ttft_scale: float):
        self.tpot_scale, self.tpot_overhead_s, self.ttft_scale, self.ttft_overhead_s = tpot_scale, 0.0, ttft_scale, 0.0

    def covers(self, *args) -> bool:
        return True


def test_a_full_deployment_is_full_longer_at_its_expected_speed():
    """A bound with 400 requests running and 1,000 in flight (600 wait): TPOT 10 ms with 2 ms of prefill a token, TTFT
    100 ms, 101 tokens out, 100 requests/s, 10 s end to end (1,000 / 100, Little's law). A line doubling TPOT and its
    prefill share (24 ms) and keeping TTFT: a request is served in 0.1 + 100 x 0.024 = 2.5 s once admitted, the
    deployment completes 100 / (24 / 12) = 50 requests/s (the bound's rate slowed as its TPOT), so the 1,000 spend
    1,000 / 50 = 20 s each, 17.5 of them waiting; 50 x 101 = 5,050 tokens/s. Below the running batch (200 in flight,
    all served at once) the concurrency bounds the rate: 200 / 2.5 = 80 requests/s, 2.5 s each. The bound limited
    by decode here."""
    from types import SimpleNamespace

    from service.core.expectations.serving_runs import expect

    bound = SimpleNamespace(tpot_s=0.010, prefill_share_s=0.002, ttft_s=0.100, itl_s=0.010, requests_per_s=100.0,
                            e2e_latency_s=10.0, devices=8, limited_by="decode")
    full = expect(Line(2.0, 1.0), bound, input_len=1000, output_len=101, concurrency=1000)
    assert full.tpot_s == pytest.approx(0.024) and full.ttft_s == pytest.approx(0.100)
    assert full.requests_per_s == pytest.approx(50.0) and full.e2e_latency_s == pytest.approx(20.0)
    assert full.output_tokens_per_s == pytest.approx(5050.0)
    quiet = expect(Line(2.0, 1.0), SimpleNamespace(**{**vars(bound), "requests_per_s": 200 / 1.1, "e2e_latency_s": 1.1}),
                   input_len=1000, output_len=101, concurrency=200)
    assert quiet.requests_per_s == pytest.approx(80.0) and quiet.e2e_latency_s == pytest.approx(2.5)
    # A disaggregated deployment whose prefill pool limits it (no prefill share on the decode devices) slows as its
    # TTFT does: a TTFT line of 1.5 makes it 150 ms, 100 / 1.5 = 66.7 requests/s, though TPOT doubled (20 ms).
    prefill_limited = SimpleNamespace(**{**vars(bound), "prefill_share_s": 0.0, "limited_by": "prefill"})
    split = expect(Line(2.0, 1.5), prefill_limited, input_len=1000, output_len=101, concurrency=1000)
    assert split.tpot_s == pytest.approx(0.020) and split.requests_per_s == pytest.approx(100 / 1.5)
