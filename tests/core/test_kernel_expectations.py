"""Steps composed from kernel tables, and the engines' costs carried between devices: by hand."""

import json

import pytest

from service.core.expectations.engines import EnginePoint, fit_engine_calibration, layout_signature
from service.core.expectations.kernel_steps import KernelEvaluator, KernelTables
from service.core.expectations.kernels import KernelCalibration
from service.core.expectations.serving_runs import ServingPoint
from service.core.transformer.analysis import Evaluator, analyze_model
from service.core.transformer.families import from_hf_config
from service.core.transformer.layers import ModelDTypes
from service.persistence.catalog import MODEL_CATALOG_DIR, nominal_device

DEEPSEEK = from_hf_config(json.loads((MODEL_CATALOG_DIR / "deepseek-ai__DeepSeek-V3.json").read_text()))
FP8 = ModelDTypes("fp8", "fp8", "fp8", 128 * 128, 4.0)


def fit(dtype: str, e_c: float, e_m: float, t0: float = 5e-6) -> KernelCalibration:
    return KernelCalibration(device_id="nvidia-h200-sxm", dtype=dtype, engine="e", source="s", peak_flops_per_s=1e15,
                             hbm_bytes_per_s=4.8e12, t0_s=t0, compute_efficiency=e_c, memory_efficiency=e_m,
                             fitted_on=100, checked_on=100, median_error=0.05, p90_error=0.1, bound_median_error=0.5)


TABLES = KernelTables("nvidia-h200-sxm", {"fp8": fit("fp8", 0.5, 0.6), "bf16": fit("bf16", 0.8, 0.75)})


def test_every_row_of_a_composed_step_is_its_bound_over_its_fits_efficiencies():
    """A decode step of DeepSeek-V3 in fp8 on an H200 (TP 8, 16 sequences at 2,048 tokens): each fp8 matmul row
    takes max(T_compute / 0.5, T_memory / 0.6) of its bound's terms, every other row (attention, norms, the
    router's softmax) the bf16 fit's max(T_compute / 0.8, T_memory / 0.75); t0 is left to the engine; collectives
    stay at their bound. No row is below its bound."""
    device = nominal_device("nvidia-h200-sxm")
    step = {"phase": "decode", "batch": 16, "seq_len": 2048, "dtypes": FP8, "tensor_parallel": 8, "explain": False}
    bound = analyze_model(DEEPSEEK, Evaluator(device), **step).rows
    composed = analyze_model(DEEPSEEK, KernelEvaluator(device, tables=TABLES), **step).rows
    kinds = set()
    for b, c in zip(bound, composed, strict=True):
        if b.bound == "interconnect":
            assert c.time_s == b.time_s
            continue
        matmul = b.kind in ("matmul", "grouped_matmul") and b.compute_dtype == "fp8"
        e_c, e_m = (0.5, 0.6) if matmul else (0.8, 0.75)
        assert c.time_s == pytest.approx(max(b.compute_time_s / e_c, b.memory_time_s / e_m), rel=1e-12), b.name
        assert c.time_s >= b.time_s
        kinds.add((b.kind, matmul))
    assert ("matmul", True) in kinds and ("grouped_matmul", True) in kinds and len(kinds) >= 4


def test_a_stand_in_takes_the_other_devices_efficiencies_at_its_own_roofs():
    """The MI325X has no aiter table: the MI300X's fits stand in at the MI325X's own nominal roofs (6.0 TB/s HBM
    against 5.3), so a memory-bound row runs 5.3 / 6.0 of the MI300X's time, the same efficiency on a faster memory."""
    from service.translation.kernels.tables import shipped_kernel_tables

    mi300x, mi325x = shipped_kernel_tables("amd-mi300x"), shipped_kernel_tables("amd-mi325x")
    assert mi300x.stand_in_for is None and mi325x.stand_in_for == "amd-mi300x"
    own, standing = mi300x.fits["fp8"], mi325x.fits["fp8"]
    assert standing.memory_efficiency == own.memory_efficiency and standing.hbm_bytes_per_s == 6.0e12
    assert own.hbm_bytes_per_s == 5.3e12
    weights = 1e9  # a memory-bound GEMV's bytes
    assert standing.expected_time_s(1e6, weights) - standing.t0_s == pytest.approx(
        (own.expected_time_s(1e6, weights) - own.t0_s) * 5.3 / 6.0)
    assert shipped_kernel_tables("nvidia-l40s") is None


def point(device: str, composed_tpot: float, measured_tpot: float, concurrency: int = 8) -> EnginePoint:
    return EnginePoint(device, "plain", ServingPoint(1024, 1024, concurrency, composed_tpot, 2 * composed_tpot,
                                                     measured_tpot, 4 * composed_tpot + 0.05),
                       composed_tpot / 3, composed_tpot / 2)


def test_an_engines_line_carries_exactly_to_a_device_on_the_same_line():
    """Runs on three devices all measured at 0.5 x composed + 2 ms: the fit is that line, and each device left out
    is predicted exactly by the fit to the other two. TTFT is 2 x composed measured as 4 x composed + 50 ms: the
    line 2 x (its composed TTFT) + 50 ms."""
    runs = [point(device, composed, 0.5 * composed + 0.002, c)
            for device, scale in (("a", 1.0), ("b", 1.7), ("c", 2.9))
            for composed, c in ((0.004 * scale, 4), (0.009 * scale, 32), (0.015 * scale, 128))]
    engine = fit_engine_calibration(runs, engine="x", precision="fp8", speculative="none", source="test")
    assert engine.tpot_scale == pytest.approx(0.5, rel=1e-6)
    assert engine.tpot_overhead_s == pytest.approx(0.002, rel=1e-5)
    assert engine.ttft_scale == pytest.approx(2.0, rel=1e-6) and engine.ttft_overhead_s == pytest.approx(0.05, rel=1e-5)
    assert engine.checked_by.startswith("each device's runs") and engine.checked_on == 9
    assert [device for device, *_ in engine.per_device] == ["a", "b", "c"]
    assert all(tpot < 1e-5 for _, tpot, _, _ in engine.per_device)
    assert engine.tpot_median_error < 1e-5 and engine.address == "engine:x:fp8:none"
    # The expectation never goes below the bound, whatever the line says: at composed 0.1 ms, 0.5 x 0.1 + 2 = 2.05 ms.
    assert engine.tpot_s(0.003, 0.0001) == pytest.approx(0.003)
    assert engine.tpot_s(0.001, 0.0001) == pytest.approx(0.00205)


def test_a_device_off_the_engines_line_is_reported_as_far_off_as_it_is():
    """Two devices on 0.5 x composed + 2 ms and a third measured 20 % slower than that line: left out, the third
    is predicted by the other two's line, 1 / 1.2 of its measurement, 16.7 % off; the other two, left out in turn,
    are predicted by a line the third pulls (soft-L1), so a few percent off at most."""
    runs = [point(device, composed, (0.5 * composed + 0.002) * slow, c)
            for device, slow in (("a", 1.0), ("b", 1.0), ("c", 1.2))
            for composed, c in ((0.004, 4), (0.009, 32), (0.015, 128))]
    engine = fit_engine_calibration(runs, engine="x", precision="fp8", speculative="none", source="test")
    errors = {device: tpot for device, tpot, _, _ in engine.per_device}
    assert errors["c"] == pytest.approx(1 - 1 / 1.2, rel=1e-4)
    assert errors["a"] < 0.1 and errors["b"] < 0.1


def test_one_device_is_checked_by_leaving_runs_out_and_says_so():
    runs = [point("a", composed, 0.5 * composed + 0.002, c) for composed, c in ((0.004, 4), (0.009, 32), (0.015, 64))]
    engine = fit_engine_calibration(runs, engine="x", precision="fp8", speculative="none", source="test")
    assert engine.per_device == () and "not checked on another device" in engine.checked_by
    with pytest.raises(ValueError, match="at least 3 runs"):
        fit_engine_calibration(runs[:2], engine="x", precision="fp8", speculative="none", source="test")


def test_a_layout_is_labelled_by_what_an_engines_costs_depend_on():
    assert layout_signature(expert_parallel=False, attention_data_parallel=False, disaggregated=False,
                            speculative="none") == "plain"
    assert layout_signature(expert_parallel=True, attention_data_parallel=True, disaggregated=True,
                            speculative="mtp") == "expert-parallel+attention-dp+disaggregated+speculative-mtp"
