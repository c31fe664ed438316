"""The scheduling fit recovers the numbers that made a set of runs; the step model reads a deployment's step times
back exactly where they are affine; the engines' presets are their code's defaults."""

from __future__ import annotations

import numpy as np
import pytest

from service.core.errors import CostModelError
from service.core.simulation.carried_over import LOWEST_SCALE, calibrate_carried
from service.core.simulation.engine_loop import Simulation, Timing, simulate
from service.core.simulation.engines import Scheduler, engine_family, engine_preset, overridden, sglang_graph_sizes
from service.core.simulation.fit import MeasuredRun, fit_scheduling
from service.core.simulation.step_model import StepModel, build_step_model
from service.core.simulation.workload import Lengths, benchmark_client

GiB = 1024**3
MODEL = StepModel((1, 4, 16, 64), (0.004, 0.0046, 0.007, 0.016), 1536, 3e-8, (64, 1024, 8192), (0.003, 0.012, 0.08),
                  2e-10, 0.0035)


def measured_runs(truth: Timing, shapes, concurrencies) -> list[MeasuredRun]:
    """Runs simulated under `truth`, their medians taken as the measurements, each beside its unit-timing features."""
    runs = []
    for input_len, output_len in shapes:
        for concurrency in concurrencies:
            simulation = Simulation(benchmark_client(input_len, output_len, concurrency, 0.8),
                                    Scheduler("sglang", "prefill_first", 8192, 256, recv_interval=4), MODEL,
                                    running_cap=256)
            measured = simulate(simulation, truth)
            runs.append(MeasuredRun(simulate(simulation).features, input_len, output_len,
                                    float(np.median(measured.tpot_s)), float(np.median(measured.ttft_s))))
    return runs


def test_the_fit_recovers_the_timing_that_made_the_runs():
    """Runs at one prompt length: the decode scale, the step overhead and the request overhead come back; the
    prefill scale is the prior given (it made the runs, so the TTFTs fit too)."""
    truth = Timing(decode_scale=1.8, prefill_scale=3.0, step_overhead_s=0.004, request_overhead_s=0.09)
    fit = fit_scheduling(measured_runs(truth, [(1024, 1024)], (1, 4, 16, 64)), prefill_prior=3.0)
    assert fit.timing.decode_scale == pytest.approx(1.8, rel=0.02)
    assert fit.timing.step_overhead_s == pytest.approx(0.004, rel=0.05)
    assert fit.timing.request_overhead_s == pytest.approx(0.09, rel=0.05)
    assert fit.timing.prefill_scale == 3.0 and fit.prior == ("prefill_scale = 3 (prior)",)


def test_two_prompt_lengths_identify_the_prefill_scale():
    truth = Timing(decode_scale=1.5, prefill_scale=5.0, step_overhead_s=0.002, request_overhead_s=0.05)
    fit = fit_scheduling(measured_runs(truth, [(1024, 512), (8192, 512)], (1, 8, 32)), prefill_prior=1.0)
    assert "prefill_scale" in fit.fitted and not fit.prior
    assert fit.timing.prefill_scale == pytest.approx(5.0, rel=0.05)
    assert fit.timing.request_overhead_s == pytest.approx(0.05, rel=0.1)


def test_the_step_model_reads_affine_steps_back_exactly():
    """Decode: 2 ms + 0.1 ms a sequence + 1e-8 s a cached token a sequence; prefill of n new tokens after c cached:
    1 ms + 2 us a token + attention of 0.1 us a token (reading its q, k, v) + 1e-9 s a token pair (n (c + n / 2)).
    Two prompts prefilled together share the 1 ms and attend each to its own tokens: 1000 and 500 new tokens (the
    second after 4000 cached) cost 1 ms + 2 us x 1500 + 0.1 us x 1500 + 1e-9 x (1000 x 500 + 500 x (4000 + 250))."""
    def decode_curve(batches, context):
        return [0.002 + 1e-4 * b + 1e-8 * b * context for b in batches]

    def prefill(new, cached):
        attention = 1e-7 * new + 1e-9 * new * (cached + new / 2)
        return 0.001 + 2e-6 * new + attention, attention

    model = build_step_model(decode_curve=decode_curve, prefill=prefill, largest_batch=48, reference_context=2000,
                             largest_prefill=16384)
    assert model.decode_s(7, 7 * 3000) == pytest.approx(0.002 + 7e-4 + 1e-8 * 7 * 3000)
    assert model.prefill_s([(1000, 0), (500, 4000)]) == pytest.approx(
        0.001 + 2e-6 * 1500 + 1e-7 * 1500 + 1e-9 * (1000 * 500 + 500 * (4000 + 250)))
    # One prompt of 1,500 tokens attends to all 1,500 (1e-9 x 1500^2 / 2 more than the two prompts' own pairs).
    assert model.prefill_s([(1500, 0)]) == pytest.approx(0.001 + 2.1e-6 * 1500 + 1e-9 * 1500**2 / 2)
    assert model.weights_s == pytest.approx(0.002 + 1e-4)


def test_the_presets_are_the_engines_defaults():
    """SGLang's chunk is 8,192 tokens below 160 GiB and 16,384 from it, prefill-first, graphs to 512; vLLM's budget
    8,192 and 1,024 sequences from 70 GiB (2,048 and 256 below), mixed; TensorRT-LLM 8,192 tokens, 2,048 requests,
    unchunked. InferenceX's engine names map to theirs."""
    assert engine_preset("sglang", 141 * GiB).step_tokens == 8192
    big = engine_preset("sglang", 192 * GiB)
    assert (big.step_tokens, big.batching, big.graph_batch_sizes[-1]) == (16384, "prefill_first", 512)
    assert sglang_graph_sizes(40) == (1, 2, 4, 8, 12, 16, 24, 32, 40)
    vllm = engine_preset("vllm", 80 * GiB)
    assert (vllm.step_tokens, vllm.max_running, vllm.batching) == (8192, 1024, "mixed")
    assert (engine_preset("vllm", 48 * GiB).step_tokens, engine_preset("vllm", 48 * GiB).max_running) == (2048, 256)
    trt = engine_preset("trt", 192 * GiB)
    assert (trt.step_tokens, trt.max_running, trt.chunked) == (8192, 2048, False)
    assert [engine_family(name) for name in ("dynamo-sglang", "mori-sglang", "dynamo-trt", "atom", "vLLM")] == [
        "sglang", "sglang", "trt", "vllm", "vllm"]
    with pytest.raises(CostModelError) as unknown:
        engine_preset("llama.cpp", GiB)
    assert unknown.value.field == "engine"


def test_an_override_replaces_its_field_and_says_so():
    changed = overridden(engine_preset("sglang", 192 * GiB), recv_interval=30, step_tokens=None)
    assert changed.recv_interval == 30 and changed.step_tokens == 16384
    assert changed.source.endswith("overridden: recv_interval 30")
    assert changed.padded(13) == 16 and changed.padded(600) == 600


def test_lengths_are_drawn_as_the_benchmark_draws_them():
    """--random-range-ratio 0.8 on 1,000: integers in [800, 1000], mean 900."""
    drawn = Lengths(1000, 0.8).draw(np.random.default_rng(0), 20_000)
    assert drawn.min() >= 800 and drawn.max() <= 1000
    assert drawn.mean() == pytest.approx(900, rel=0.01)


def test_a_fit_on_kernel_tables_may_scale_a_step_down_to_half():
    """A composed step is an expectation, not a floor: runs made at 0.7 of it come back at 0.7 (a fit on bounds, whose
    scales are at least 1, would stop at 1), and runs made at 0.3 stop at the floor of 0.5."""
    truth = Timing(decode_scale=0.7, prefill_scale=1.0, step_overhead_s=0.004, request_overhead_s=0.05)
    runs = measured_runs(truth, [(1024, 1024)], (1, 4, 16, 64))
    assert fit_scheduling(runs, 1.0, LOWEST_SCALE).timing.decode_scale == pytest.approx(0.7, rel=0.02)
    assert fit_scheduling(runs, 1.0).timing.decode_scale == pytest.approx(1.0)
    slower = measured_runs(Timing(0.3, 1.0, 0.004, 0.05), [(1024, 1024)], (1, 4, 16, 64))
    assert fit_scheduling(slower, 1.0, LOWEST_SCALE).timing.decode_scale == pytest.approx(LOWEST_SCALE)


def test_a_carried_calibration_is_checked_on_each_device_left_out():
    """Two devices' runs made under the same engine timing (what differs between them is in their steps, which the
    kernel tables carry): fitted without either, the other's runs come back within the fit's tolerance, so every
    held-out error is small; a third device's runs made at twice the decode time are missed by about half, and that
    shows in its own line and in the pooled p90 (the median is the two agreeing devices'). One device alone cannot be
    checked on a device it never saw: no calibration."""
    same = Timing(decode_scale=0.8, prefill_scale=2.0, step_overhead_s=0.003, request_overhead_s=0.02)
    shapes = [(1024, 1024), (8192, 1024)]
    a, b = measured_runs(same, shapes, (1, 8, 32)), measured_runs(same, shapes, (2, 16, 64))
    c = measured_runs(Timing(1.6, 2.0, 0.003, 0.02), shapes, (4, 16))
    runs = [("a", r) for r in a] + [("b", r) for r in b] + [("c", r) for r in c]
    (carried,) = calibrate_carried({("sglang", "fp8", "none"): runs}, "synthetic")
    assert carried.devices == ("a", "b", "c") and carried.fitted_on == 16 and carried.checked_on == 16
    per_device = {device: (tpot, ttft, count) for device, tpot, ttft, count in carried.per_device}
    assert per_device["a"][0] < 0.1 and per_device["b"][0] < 0.1
    # Fitted on a and b (decode x0.8), c's TPOTs at x1.6 (plus the same overhead) are read about half as long.
    assert 0.3 < per_device["c"][0] < 0.55 and per_device["c"][2] == 4
    assert carried.tpot_median_error < 0.1 < carried.tpot_p90_error
    assert calibrate_carried({("sglang", "fp8", "none"): [("a", r) for r in a]}, "synthetic") == []
