"""The scheduling simulation against timelines worked out by hand on step models simple enough to follow: a decode
step of d seconds whatever the batch, a prefill of p0 + p1 x tokens, no cost per cached token."""

from __future__ import annotations

import numpy as np
import pytest

from service.core.simulation import engine_loop
from service.core.simulation.engine_loop import (
    MAX_EVENTS,
    Disaggregation,
    Simulation,
    Timing,
    estimated_events,
    simulate,
)
from service.core.simulation.engines import Scheduler
from service.core.simulation.step_model import StepModel
from service.core.simulation.workload import ClosedLoop, Lengths, OpenLoop, Traffic, benchmark_client

D = 0.010  # a decode step, seconds, at any batch
P0, P1 = 0.002, 1e-5  # a prefill of n tokens: P0 + P1 x n


def flat_model(*, decode_by_batch: tuple[float, ...] = (D, D), weights: float = 0.0) -> StepModel:
    batches = tuple(range(1, len(decode_by_batch) + 1))
    return StepModel(batches, decode_by_batch, 1000, 0.0, (64, 65536), (P0 + P1 * 64, P0 + P1 * 65536), 0.0, weights)


def prefill_time(tokens: int) -> float:
    return P0 + P1 * tokens


def scheduler(**fields) -> Scheduler:
    defaults = {"engine": "test", "batching": "prefill_first", "step_tokens": 100_000, "max_running": 1024}
    return Scheduler(**(defaults | fields))


def closed(input_len: int, output_len: int, concurrency: int, prompts: int) -> Traffic:
    return Traffic(Lengths(input_len), Lengths(output_len), ClosedLoop(concurrency, prompts))


def engine_with_outputs(simulation: Simulation, outputs: tuple[int, ...]):
    """The simulation run with these output lengths, in the order the client sends them (its engine, to read)."""
    engine = engine_loop._Engine(simulation, Timing())
    engine.outputs[:] = outputs
    engine.run()
    return engine


def test_one_request_alone_takes_its_prefill_then_its_decode_steps():
    """TTFT = prefill_scale x (P0 + P1 x 1,000) + step overhead + request overhead; TPOT = decode_scale x D + step
    overhead; end to end = TTFT + 99 x TPOT."""
    timing = Timing(decode_scale=2.0, prefill_scale=3.0, step_overhead_s=0.001, request_overhead_s=0.05)
    run = simulate(Simulation(closed(1000, 100, 1, 1), scheduler(), flat_model(), running_cap=8), timing)
    ttft = 3.0 * prefill_time(1000) + 0.001 + 0.05
    tpot = 2.0 * D + 0.001
    assert run.ttft_s[0] == pytest.approx(ttft)
    assert run.tpot_s[0] == pytest.approx(tpot)
    assert run.e2e_s[0] == pytest.approx(ttft + 99 * tpot)


def test_a_burst_prefills_one_prompt_a_step_first_then_decodes_together():
    """Four requests at once, a step's budget one prompt: prefill first, so their first tokens come at P, 2P, 3P,
    4P; then the four decode together, each its 9 steps after its first token (the running ones wait while the
    others prefill: the first request's TPOT holds three prefills: (3P + 9D) / 9)."""
    p = prefill_time(512)
    run = simulate(Simulation(closed(512, 10, 4, 4), scheduler(step_tokens=512), flat_model(), running_cap=8))
    assert np.sort(run.ttft_s) == pytest.approx([p, 2 * p, 3 * p, 4 * p])
    first = int(np.argmin(run.ttft_s))
    assert run.tpot_s[first] == pytest.approx((3 * p + 9 * D) / 9)
    assert run.tpot_s[int(np.argmax(run.ttft_s))] == pytest.approx(D)


def test_a_request_waits_for_the_schedulers_next_look():
    """recv_interval 10: A (5 tokens) and B (100) prefill together in forward pass 1; A's 4 decode steps are passes
    2-5 and it finishes; its successor C arrives then and is seen at pass 10, after 5 more decode steps of B, and
    prefills in pass 11: TTFT(C) = 5 D + P."""
    engine = engine_with_outputs(Simulation(Traffic(Lengths(256), Lengths(100), ClosedLoop(2, 3)),
                                            scheduler(recv_interval=10), flat_model(), running_cap=8), (5, 100, 5))
    assert engine.arrival[2] == pytest.approx(prefill_time(512) + 4 * D)
    assert engine.first[2] - engine.arrival[2] == pytest.approx(5 * D + prefill_time(256))


def test_an_idle_engine_looks_at_once():
    """One request in flight: each next one arrives at an idle engine, which sees it at once: every TTFT is P."""
    run = simulate(Simulation(closed(256, 20, 1, 5), scheduler(recv_interval=30), flat_model(), running_cap=8))
    assert run.ttft_s == pytest.approx([prefill_time(256)] * 5)


def test_closed_loop_times_are_the_features_times_the_calibration():
    """The step order of a closed loop does not depend on the timing, so each request's times are its features
    times the calibration's numbers (what fit.py relies on), here under a scheduler that polls, chunks and mixes."""
    model = StepModel((1, 4, 16), (0.004, 0.005, 0.009), 1500, 2e-8, (64, 4096), (0.002, 0.03), 1e-10, 0.003)
    traffic = benchmark_client(1024, 1024, 16, 0.8)
    for batching in ("prefill_first", "mixed"):
        simulation = Simulation(traffic, scheduler(batching=batching, step_tokens=2048, recv_interval=7), model,
                                running_cap=12)
        features = simulate(simulation).features
        for timing in (Timing(1.0, 1.0, 0.0, 0.0), Timing(1.7, 4.0, 0.003, 0.08)):
            run = simulate(simulation, timing)
            assert run.ttft_s == pytest.approx(features.ttft(timing))
            assert run.tpot_s == pytest.approx(features.tpot(timing))


def test_speculative_steps_emit_the_acceptance_length():
    """Acceptance 2: 9 tokens are the prefill's one and 4 verification steps of 2 (the last one partly used)."""
    run = simulate(Simulation(closed(128, 9, 1, 1), scheduler(), flat_model(), running_cap=8, acceptance=2.0))
    assert run.tpot_s[0] == pytest.approx(4 * D / 8)


def test_a_mixed_step_reads_the_weights_once():
    """A prompt arriving beside a running request: the mixed step costs decode + prefill - the weights' read
    (here 3 ms, the smallest of the three)."""
    engine = engine_with_outputs(Simulation(Traffic(Lengths(256), Lengths(50), ClosedLoop(2, 3)),
                                            scheduler(batching="mixed"), flat_model(weights=0.003), running_cap=8),
                                 (3, 50, 3))
    # A and B prefill together (no one running: a plain prefill), A decodes twice and ends; C's prefill rides
    # B's next decode step.
    assert engine.first[2] - engine.arrival[2] == pytest.approx(D + prefill_time(256) - 0.003)


def test_decode_batches_run_padded_to_the_captured_sizes():
    """Three sequences with graphs captured at 1, 2 and 4 run as four: the step of 4 (20 ms), not of 3 (15 ms)."""
    model = flat_model(decode_by_batch=(0.005, 0.010, 0.015, 0.020))
    run = simulate(Simulation(closed(64, 11, 3, 3), scheduler(graph_batch_sizes=(1, 2, 4)), model, running_cap=8))
    assert run.tpot_s == pytest.approx([0.020] * 3)


def test_the_running_cap_makes_the_rest_wait_for_a_place():
    """Two places for four requests: the last two wait for the first two to finish (one prefill step of two
    prompts, 9 decode steps), then prefill: their TTFT is 2 x P(2 prompts) + 9 D."""
    p2 = P0 + P1 * 2 * 128
    run = simulate(Simulation(closed(128, 10, 4, 4), scheduler(), flat_model(), running_cap=2))
    assert np.sort(run.ttft_s)[2:] == pytest.approx([2 * p2 + 9 * D] * 2)
    assert run.steps_full > 0


def test_disaggregated_requests_take_the_prefill_pool_and_the_transfer():
    """A prefill pool of one group at the same speed: TTFT = P + the transfer; the decode pool then decodes it."""
    model = flat_model()
    pool = Disaggregation(model, servers=1, speed=1.0, transfer_s=0.004, mean_input=512)
    run = simulate(Simulation(closed(512, 21, 1, 2), scheduler(), model, running_cap=8, disaggregation=pool))
    assert run.ttft_s == pytest.approx([prefill_time(512) + 0.004] * 2)
    assert run.tpot_s == pytest.approx([D] * 2)


def test_an_open_loop_at_a_low_rate_never_queues():
    """One request every ten seconds on average (Poisson): the engine is idle at each arrival, TTFT = P."""
    traffic = Traffic(Lengths(256), Lengths(5), OpenLoop(rate=0.1, prompts=20), seed=3)
    run = simulate(Simulation(traffic, scheduler(), flat_model(), running_cap=8))
    assert run.ttft_s == pytest.approx([prefill_time(256)] * 20)


def test_the_events_are_counted_before_it_runs():
    """20,000 requests in flight, 200,000 prompts of 8,192 tokens in 8,192-token chunks: 5 events each at most
    (arrival, look, one chunk, finish, and one more), 1,000,000 in all, over the limit; the runs above stay far under
    it and their estimates bound what they took."""
    huge = Simulation(benchmark_client(8192, 1024, 20_000), scheduler(step_tokens=8192), flat_model(),
                      running_cap=20_000)
    assert estimated_events(huge) == 200_000 * 5 > MAX_EVENTS
    small = Simulation(benchmark_client(1024, 256, 16, 0.8), scheduler(step_tokens=512, recv_interval=4),
                       flat_model(), running_cap=8)
    assert simulate(small).events <= estimated_events(small) == 160 * (4 + 2)
