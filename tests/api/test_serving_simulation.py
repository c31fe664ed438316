"""POST /v1/analyze/serving's expected, from the scheduling simulation: percentiles, the scheduler it ran, and the
limits on what it runs. DeepSeek-R1 on 8 B200s with SGLang in fp8 has a shipped scheduling calibration (fitted to its
InferenceX runs); the bodies below are those runs' own (service/translation/serving/inferencex.py)."""

from __future__ import annotations

import json

import pytest

from service.persistence.catalog import DATA_DIR
from service.translation.serving.inferencex import newest_runs, simulated_request

RUNS = json.loads((DATA_DIR / "serving-runs" / "inferencex-dsr1.json").read_text())["rows"]


def b200_sglang_fp8(concurrency: int) -> dict:
    row = next(r for r in RUNS if (r["hardware"], r["framework"], r["precision"], r["spec_method"], r["disagg"],
                                   r["isl"], r["osl"], r["conc"]) == ("b200", "sglang", "fp8", "none", False, 1024,
                                                                      1024, concurrency))
    return simulated_request(row)


def analyze(client, body: dict) -> dict:
    response = client.post("/v1/analyze/serving", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_expected_holds_the_simulations_medians_and_percentiles_above_the_bound(client):
    answer = analyze(client, b200_sglang_fp8(64))
    expected, bound = answer["expected"], answer["bound"]
    assert expected["basis"] == "runs"
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        p = expected["percentiles"][name]
        assert p["p50"] <= p["p90"] <= p["p99"]
    assert expected["ttft_s"] == expected["percentiles"]["ttft_s"]["p50"] >= bound["ttft_s"]
    assert expected["tpot_s"] == expected["percentiles"]["tpot_s"]["p50"] >= bound["tpot_s"]
    assert expected["requests_per_s"] <= bound["requests_per_s"]
    simulation = expected["simulation"]
    # The recipe's scheduler: looks every 30 steps from 16 in flight, 32,768-token chunks, 128 running at most,
    # chunks of 30 tokens streamed (the run's ITL / TPOT): ITL = 30 x TPOT.
    assert (simulation["scheduler"]["recv_interval"], simulation["scheduler"]["step_tokens"],
            simulation["scheduler"]["max_running"]) == (30, 32768, 128)
    assert expected["itl_s"] == pytest.approx(simulation["stream_interval"] * expected["tpot_s"])
    # 64 requests in flight, 10 x 64 timed: one group's share, all simulated.
    assert simulation["requests"] == 640 and simulation["events"] > 640
    assert simulation["calibration"].startswith("scheduling:nvidia-b200:sglang:fp8:none")
    assert any("scheduling simulation" in note for note in answer["assumptions"])


def test_the_schedulers_receive_interval_is_the_wait_a_new_request_sees(client):
    """Looking every 30 forward passes instead of every one: a request arriving at a random step waits for the next
    multiple of 30, 15 steps on average, so the median TTFT grows by about 15 decode steps (between 10 and 20 of the
    expected TPOT, which holds the steps' prefills too)."""
    body = b200_sglang_fp8(64)
    every_step = analyze(client, body | {"scheduler": body["scheduler"] | {"recv_interval": 1}})["expected"]
    every_30 = analyze(client, body | {"scheduler": body["scheduler"] | {"recv_interval": 30}})["expected"]
    extra_steps = (every_30["ttft_s"] - every_step["ttft_s"]) / every_30["tpot_s"]
    assert 10 <= extra_steps <= 20


def test_lengths_are_drawn_as_the_client_draws_them(client):
    """Range ratio 0.8: outputs uniform over [819, 1024] tokens, 921.5 on average, so the simulated output tokens a
    request are about 921.5 (640 draws: within 1 %); with ratio 1 every request has 1,024."""
    ranged = analyze(client, b200_sglang_fp8(64))["expected"]
    fixed = analyze(client, b200_sglang_fp8(64) | {"workload": {"range_ratio": 1.0}})["expected"]
    assert ranged["output_tokens_per_s"] / ranged["requests_per_s"] == pytest.approx(921.5, rel=0.01)
    assert fixed["output_tokens_per_s"] / fixed["requests_per_s"] == pytest.approx(1024)
    assert ranged["percentiles"]["ttft_s"]["p99"] > ranged["percentiles"]["ttft_s"]["p50"]


def test_a_simulation_beyond_its_events_is_refused_when_asked_for_and_left_out_otherwise(client):
    """8,192 requests in flight, 81,920 timed prompts of about 5 events each: over the limit."""
    body = b200_sglang_fp8(64) | {"concurrency": 8192, "max_batch_per_group": 8192}
    refused = client.post("/v1/analyze/serving", json=body)
    assert refused.status_code == 422
    field = refused.json()["fields"][0]
    assert field["loc"] == "body.concurrency" and "events" in field["msg"]
    plain = {k: v for k, v in body.items() if k not in ("scheduler", "workload")}
    answer = analyze(client, plain)
    assert answer["expected"]["percentiles"] is None and answer["expected"]["tpot_s"] >= answer["bound"]["tpot_s"]
    assert any("percentiles: null" in note and "events" in note for note in answer["assumptions"])


@pytest.mark.parametrize(("scheduler", "field"), [({"batching": "fifo"}, "body.scheduler.batching"),
                                                   ({"recv_interval": 0}, "body.scheduler.recv_interval"),
                                                   ({"graph_batch_sizes": [0]}, "body.scheduler.graph_batch_sizes.0")])
def test_a_bad_scheduler_field_is_named(client, scheduler, field):
    response = client.post("/v1/analyze/serving", json=b200_sglang_fp8(4) | {"scheduler": scheduler})
    assert response.status_code == 422
    assert response.json()["fields"][0]["loc"] == field


def test_a_device_without_runs_is_simulated_on_its_kernel_tables_with_the_carried_calibration(client):
    """The H200 has no InferenceX runs: its expectation comes from its kernel tables, and SGLang's scheduling
    calibration carried over from the devices it was measured on (fitted on each run's steps as its own device's
    tables compose them) simulates it: the medians are the percentiles' p50, none below the bound, and the account
    names the carried calibration and how wrong it was on the devices left out of it."""
    answer = analyze(client, b200_sglang_fp8(4) | {"device_id": "nvidia-h200-sxm"})
    expected, bound = answer["expected"], answer["bound"]
    assert expected["basis"] == "kernels"
    percentiles = expected["percentiles"]
    assert percentiles["ttft_s"]["p50"] == expected["ttft_s"] and percentiles["tpot_s"]["p50"] == expected["tpot_s"]
    for name, floor in (("ttft_s", bound["ttft_s"]), ("tpot_s", bound["tpot_s"])):
        p50, p90, p99 = (percentiles[name][q] for q in ("p50", "p90", "p99"))
        assert floor <= p50 <= p90 <= p99
    simulation = expected["simulation"]
    assert simulation["calibration"].startswith("scheduling:kernels:sglang:fp8:none")
    assert "fitted without each device in turn" in simulation["basis"]
    assert "amd-mi355x" in simulation["basis"] and "nvidia-b200" in simulation["basis"]


def test_where_the_carried_simulation_missed_there_are_no_percentiles_and_the_answer_says_why(client):
    """SGLang with MTP: simulated on their kernel tables, the devices left out were predicted worse than by the
    steady-state line (scripts/fit_carried_scheduling.py keeps no such calibration), so the H200's answer keeps the
    line, without percentiles, and says why."""
    row = next(r for r in RUNS if (r["hardware"], r["framework"], r["precision"], r["spec_method"], r["disagg"])
               == ("b200", "sglang", "fp8", "mtp", False))
    answer = analyze(client, simulated_request(row) | {"device_id": "nvidia-h200-sxm"})
    assert answer["expected"]["basis"] == "kernels" and answer["expected"]["percentiles"] is None
    assert any("no scheduling calibration is carried over" in note for note in answer["assumptions"])


def test_disaggregated_pools_keep_the_steady_state_line_and_say_why(client):
    """The simulation of disaggregated pools was checked on InferenceX's disaggregated runs and missed them by more
    than the line (docs/serving.md): such an answer keeps the line, without percentiles."""
    row = next(r for r in RUNS if r["disagg"] and r["hardware"] == "gb200" and r["framework"] == "dynamo-trt")
    answer = analyze(client, simulated_request(row))
    assert answer["expected"]["basis"] == "runs" and answer["expected"]["percentiles"] is None
    assert any("disaggregated pools missed" in note for note in answer["assumptions"])


def test_an_open_loop_at_a_low_rate_waits_for_nothing(client):
    """One request a second on a deployment that serves a request in about 25 s of decode: a Poisson arrival finds
    the scheduler idle or decoding a few others, so the median TTFT is close to one prefill (the calibrated closed
    loop at 64 in flight, whose recipe looks every 30 steps, waits far longer)."""
    body = b200_sglang_fp8(64)
    closed = analyze(client, body)["expected"]
    opened = analyze(client, body | {"workload": {"range_ratio": 0.8, "request_rate": 1.0}})["expected"]
    assert opened["percentiles"]["ttft_s"]["p50"] < closed["percentiles"]["ttft_s"]["p50"]
    assert opened["requests_per_s"] <= 1.2


def test_length_histograms_are_drawn_and_bounded_by_the_lengths(client):
    """Outputs of 256 or 1,024 tokens, equally likely: 640 draws average about 640 tokens (within 5 %)."""
    body = b200_sglang_fp8(64) | {"workload": {"output_histogram": [[256, 1], [1024, 1]]}}
    expected = analyze(client, body)["expected"]
    assert expected["output_tokens_per_s"] / expected["requests_per_s"] == pytest.approx(640, rel=0.05)
    too_long = client.post("/v1/analyze/serving",
                           json=body | {"workload": {"input_histogram": [[4096, 1]]}})
    assert too_long.status_code == 422
    assert "input_histogram" in too_long.json()["fields"][0]["msg"]


def test_the_scheduling_calibration_an_answer_names_is_listed_with_how_it_was_checked(client):
    """An answer's simulation names its calibration (its id, then its numbers): GET /v1/calibrations/{id} has it, for
    a device's own (the B200's, checked on its other shapes) and for one carried to kernel tables (the H200's answer;
    fitted over three devices, each left out in turn), each with its four numbers and its parity chart.
    A device's calibration whose runs cover one shape could not be checked: its errors are null, not invented."""
    for body in (b200_sglang_fp8(4), b200_sglang_fp8(4) | {"device_id": "nvidia-h200-sxm"}):
        named = analyze(client, body)["expected"]["simulation"]["calibration"].split(": ")[0]
        calibration = client.get(f"/v1/calibrations/{named}").json()
        assert calibration["kind"] == "scheduling" and calibration["id"] == named
        assert [p["name"] for p in calibration["parameters"]] == ["decode_scale", "prefill_scale", "step_overhead",
                                                                  "request_overhead"]
        assert 0 <= calibration["median_error"] <= calibration["p90_error"] and calibration["checked_on"] > 0
        chart = client.get(f"/v1/calibrations/{named}/parity.svg")
        assert chart.status_code == 200 and chart.text.lstrip().startswith("<?xml")
    carried = client.get("/v1/calibrations/scheduling:kernels:sglang:fp8:none").json()
    # checked on the newest run of each aggregated configuration: 11 on the MI355X, 15 on the B200, 9 on the B300
    assert carried["device_id"] == "amd-mi355x, nvidia-b200, nvidia-b300" and carried["checked_on"] == 11 + 15 + 9
    listed = [c for c in client.get("/v1/calibrations").json() if c["kind"] == "scheduling"]
    unchecked = [c for c in listed if c["checked_on"] == 0]
    assert unchecked and all(c["median_error"] is None and c["p90_error"] is None for c in unchecked)


def test_parity_charts_of_engine_and_scheduling_calibrations_plot_what_answers_expect(client):
    """A shipped scheduling or engine calibration's chart has a point for each run it was fitted to, and a run's
    expected TPOT there is what POST /v1/analyze/serving answers for that run's deployment: the B200's own scheduling
    calibration's simulation, SGLang's carried to kernel tables (the same run on basis 'kernels'), and the engine line
    of SGLang fp8 with MTP over the composed deployment (no scheduling calibration is carried for it)."""
    from service.translation.kernels.calibrations import parity_points

    def points(calibration_id: str) -> list:
        title, quantity, found = parity_points(calibration_id, client.app.state.catalog, None, None)
        assert quantity == "TPOT" and calibration_id in title
        return found

    def plotted(found: list, measured: float, expected: float) -> bool:
        return any(p.measured_s == measured and p.expected_s == pytest.approx(expected, rel=1e-9) for p in found)

    def row_of(concurrency: int, method: str = "none") -> dict:  # a run the shipped fits read: its newest
        return next(r for r in newest_runs(RUNS) if (r["hardware"], r["framework"], r["precision"], r["spec_method"],
                                                     r["disagg"], r["isl"], r["osl"], r["conc"]) == (
            "b200", "sglang", "fp8", method, False, 1024, 1024, concurrency))

    row = row_of(4)
    own, carried = "scheduling:nvidia-b200:sglang:fp8:none", "scheduling:kernels:sglang:fp8:none"
    for calibration_id, body in ((own, simulated_request(row)),
                                 (carried, simulated_request(row) | {"calibration": "kernels"})):
        found = points(calibration_id)
        assert len(found) == client.get(f"/v1/calibrations/{calibration_id}").json()["fitted_on"]
        answer = analyze(client, body)["expected"]
        assert answer["simulation"]["calibration"].startswith(calibration_id + ":")
        assert plotted(found, row["metrics"]["median_tpot"], answer["tpot_s"])
        assert all(p.expected_s >= p.bound_s for p in found)

    mtp = row_of(4, "mtp")
    engine = "engine:sglang:fp8:mtp"
    found = points(engine)
    assert len(found) == client.get(f"/v1/calibrations/{engine}").json()["fitted_on"]
    answer = analyze(client, simulated_request(mtp) | {"calibration": "kernels"})["expected"]
    assert answer["percentiles"] is None and answer["calibration"]["id"] == engine
    assert plotted(found, mtp["metrics"]["median_tpot"], answer["tpot_s"])


def test_expert_parallel_steps_are_simulated_at_their_busiest_device(client):
    """InferenceX measured DeepSeek-R1 fp8 under TensorRT-LLM on eight B200s at 4 in flight (1,024 / 1,024) at 14.6 ms
    TPOT with the experts over the devices and 8.7 ms with them split by width: 1.68x. The bounds read the mean
    device's experts and part them by their all-to-all alone; the simulation reads the busiest device's (at 4 tokens,
    6.6 of the experts hit against the mean's 3.8: tests/core/test_deployment.py), so it parts them further, and its
    answer says so where the experts are over the devices."""
    body = {"model_id": "deepseek-v3", "device_id": "nvidia-b200", "input_len": 1024, "output_len": 1024,
            "concurrency": 4, "tensor_parallel": 8, "engine": "trt", "dtypes": {"scheme": "w8a8-fp8", "kv_cache": "fp8"}}
    split, over = analyze(client, body), analyze(client, body | {"expert_parallel": 8})
    assert split["expected"]["percentiles"] is not None and over["expected"]["percentiles"] is not None
    bounds = over["bound"]["tpot_s"] / split["bound"]["tpot_s"]
    expected = over["expected"]["tpot_s"] / split["expected"]["tpot_s"]
    assert 1.0 < bounds < 1.15 and expected > 1.05 * bounds
    mark = "busiest device's experts"
    assert any(mark in note for note in over["assumptions"]) and not any(mark in note for note in split["assumptions"])


def test_four_device_fp8_runs_take_their_recipes_scheduler_and_memory_share(client):
    """InferenceX's dsr1_fp8_b200.sh runs four devices at 8,192 / 1,024 only, with --scheduler-recv-interval 10,
    --chunked-prefill-size 8192, --max-running-requests 32 and --mem-fraction-static 0.95 (eight devices: 30 from 16
    in flight, 32,768, 128 and 0.82). At 0.95 each B200 (180 GiB = 193.27e9 bytes) offers 183.6e9 bytes; less the
    weights' 168.3e9 and the activations' 0.17e9 that leaves 15.1e9 for the KV cache, 46 requests of 9,215 tokens at
    0.324e9 each: all 32 run at once (the run's own cap of 30 a group binds), where 0.9 held 16 and queued the rest."""
    row = next(r for r in newest_runs(RUNS) if (r["hardware"], r["framework"], r["precision"], r["spec_method"],
                                                 r["disagg"], r["decode_tp"], r["conc"]) == (
        "b200", "sglang", "fp8", "none", False, 4, 32))
    body = simulated_request(row)
    assert body["memory_utilization"] == 0.95 and body["scheduler"]["recv_interval"] == 10
    assert (body["scheduler"]["step_tokens"], body["scheduler"]["max_running"]) == (8192, 32)
    answer = analyze(client, body)
    pool = answer["bound"]["pools"][0]
    assert pool["memory"]["usable_bytes"] == pytest.approx(0.95 * 193.27e9, rel=1e-3)
    assert pool["batch_per_group"] == 30
    per_request = pool["memory"]["kv_cache_bytes"] / pool["batch_per_group"]
    free = pool["memory"]["usable_bytes"] - pool["memory"]["weights_bytes"] - pool["memory"]["activation_bytes"]
    assert int(free // per_request) == 46
    queued = analyze(client, body | {"memory_utilization": 0.9})
    assert queued["bound"]["pools"][0]["batch_per_group"] == 16
    # The measured median TTFT is 0.89 s: at 0.9 the simulation queues half the requests for tens of seconds.
    assert answer["expected"]["ttft_s"] < 2.0 < queued["expected"]["ttft_s"]
    eight = simulated_request(next(r for r in newest_runs(RUNS) if (
        r["hardware"], r["framework"], r["precision"], r["disagg"], r["decode_tp"], r["conc"]) == (
        "b200", "sglang", "fp8", False, 8, 32)))
    assert eight["memory_utilization"] == 0.82 and eight["scheduler"]["step_tokens"] == 32768


def test_a_step_of_several_prompts_shares_their_work_but_not_their_attention(client):
    """The step model on DeepSeek-R1's eight-B200 deployment: four 8,192-token prompts prefilled in one step cost the
    bound's rows of one 32,768-token step but its attention (the weights read once, the token-wise work of all four)
    plus four times the attention of one 8,192-token prompt (each attends to its own tokens: 4 x 8,192^2 / 2 pairs,
    not 32,768^2 / 2); one prompt alone costs its own bound; a chunk after cached tokens adds its attention to them."""
    from schemas.serving import ServingAnalysisRequest
    from service.core.planning import deployment
    from service.translation.serving.analyses import serving_setup
    from service.translation.serving.simulation import WITHIN_REQUEST_KINDS, _step_model

    setup = serving_setup(ServingAnalysisRequest.model_validate(b200_sglang_fp8(4)), client.app.state.catalog)
    worker = deployment.WorkerStep(setup.arch, setup.evaluator, setup.topology, setup.decode, setup.dtypes)
    steps = _step_model(worker, worker, None, None, largest_batch=4, reference_context=1536, largest_prefill=32768)

    def split(tokens: int) -> tuple[float, float]:
        rows = worker.evaluate(batch=1, q_len=tokens, kv_len=tokens)
        attention = sum(r.total_time_s for r in rows if r.kind in WITHIN_REQUEST_KINDS)
        return sum(r.total_time_s for r in rows) - attention, attention

    shared_32k, own_32k = split(32768)
    _, own_8k = split(8192)
    assert steps.prefill_s([(8192, 0)] * 4) == pytest.approx(shared_32k + 4 * own_8k)
    assert steps.prefill_s([(32768, 0)]) == pytest.approx(shared_32k + own_32k)
    assert own_32k > 10 * own_8k  # attention grows as the square: 16 x the pairs
    assert steps.prefill_s([(8192, 0)]) == pytest.approx(worker.time_s(batch=1, q_len=8192, kv_len=8192))
    assert steps.prefill_s([(1024, 8192)]) > steps.prefill_s([(1024, 0)])
