"""An engine's line carried where its runs did not reach: to a model of other depth (its overheads scaled by the
layers) and to a weights' type it has no line in (the nearest type's line)."""

import pytest

from service.core.expectations.engines import EngineCalibration, deployment_line, line_for, model_note


def line(precision: str = "fp8", models: tuple[str, ...] = ("deepseek-v3",), layers: int = 61) -> EngineCalibration:
    return EngineCalibration(
        id=f"e:{precision}:none", engine="e", precision=precision, speculative="none", source="s", tpot_scale=1.2,
        tpot_overhead_s=6.1e-3, ttft_scale=2.0, ttft_overhead_s=30.5e-3, devices=("d",), fitted_on=10, checked_by="c",
        checked_on=10, tpot_median_error=0.1, tpot_p90_error=0.2, ttft_median_error=0.3, ttft_p90_error=0.4,
        per_device=(), shapes=((1024, 1024),), concurrency=(4, 64), layouts=("plain",), models=models, layers=layers)


def test_a_line_carried_to_another_model_scales_its_overheads_by_the_layers():
    """Fitted to 61 layers with 6.1 ms between steps and 30.5 ms before the first token: a model of 80 layers pays
    6.1 x 80 / 61 = 8.0 ms and 30.5 x 80 / 61 = 40.0 ms; its scales stay. At a composed 10 ms step (no prefill share)
    over a 5 ms bound: TPOT = 1.2 x 10 + 8.0 = 20.0 ms. The line's own model, or a line with no depth recorded, is
    the line itself; the note names the model and says it extrapolates, and is empty for the line's own model."""
    fitted = line()
    deeper = fitted.for_layers(80)
    assert (deeper.tpot_overhead_s, deeper.ttft_overhead_s) == pytest.approx((8.0e-3, 40.0e-3), rel=1e-12)
    assert (deeper.tpot_scale, deeper.ttft_scale) == (1.2, 2.0)
    assert deeper.tpot_s(5e-3, 10e-3) == pytest.approx(20.0e-3, rel=1e-12)
    assert fitted.for_layers(61) is fitted and line(layers=0).for_layers(80).tpot_overhead_s == 6.1e-3
    note = model_note(fitted, "llama-3.1-70b", 80)
    assert "carried to llama-3.1-70b, its overheads scaled to its 80 layers" in note and "extrapolated" in note
    assert model_note(fitted, "deepseek-v3", 61) == ""


def test_a_carried_scheduling_fit_scales_its_fixed_costs_by_the_layers_as_the_line_does():
    """SGLang's fp8 scheduling fit, carried to devices without runs, was fitted to DeepSeek-R1 (61 layers): for an
    80-layer model its fixed costs a step and a request are 80 / 61 of its own; its scales stay."""
    from service.persistence.catalog import carried_scheduling_calibrations

    fitted = carried_scheduling_calibrations()[("sglang", "fp8", "none")]
    deeper = fitted.for_layers(80)
    assert deeper.step_overhead_s == pytest.approx(fitted.step_overhead_s * 80 / 61, rel=1e-12)
    assert deeper.request_overhead_s == pytest.approx(fitted.request_overhead_s * 80 / 61, rel=1e-12)
    assert (deeper.decode_scale, deeper.prefill_scale) == (fitted.decode_scale, fitted.prefill_scale)
    assert fitted.for_layers(61) is fitted


def test_a_weights_type_without_a_line_reads_the_nearest_type_with_one():
    """bf16 reads fp8's line, else fp4's; fp8 reads fp4's and fp4 fp8's; a type's own line first; none where the
    engine has no line in any of them."""
    fp8, fp4 = line("fp8"), line("fp4")
    both = {("e", "fp8", "none"): fp8, ("e", "fp4", "none"): fp4}
    only_fp4 = {("e", "fp4", "none"): fp4}
    assert line_for(both, "e", "bf16", "none") == (fp8, "fp8")
    assert line_for(only_fp4, "e", "bf16", "none") == (fp4, "fp4")
    assert line_for(only_fp4, "e", "fp8", "none") == (fp4, "fp4")
    assert line_for(both, "e", "fp4", "none") == (fp4, None)
    assert line_for(only_fp4, "e", "int4", "none") == (None, None)
    assert line_for(only_fp4, "other", "bf16", "none") == (None, None)


def test_a_deployment_reads_the_line_scaled_to_its_layers_and_says_what_was_carried():
    """DeepSeek-V3 (61 layers) in fp8 reads the fp8 line as fitted, nothing carried; Llama (80 layers) in bf16 reads the
    same line with its overheads at 80 / 61 (6.1 ms to 8.0 ms), carried from fp8 and to another model: both notes,
    and it extrapolates; an engine without a line, none."""
    lines = {("e", "fp8", "none"): line("fp8")}
    own = deployment_line(lines, "e", "fp8", "none", "deepseek-v3", 61)
    assert own.line is own.fitted and own.note == "" and not own.carried
    llama = deployment_line(lines, "e", "bf16", "none", "llama-3.1-70b", 80)
    assert llama.fitted is lines[("e", "fp8", "none")] and llama.carried
    assert llama.line.tpot_overhead_s == pytest.approx(8.0e-3, rel=1e-12)
    assert "its fp8 line" in llama.note and "carried to llama-3.1-70b" in llama.note
    assert deployment_line(lines, "other", "fp8", "none", "deepseek-v3", 61) is None
