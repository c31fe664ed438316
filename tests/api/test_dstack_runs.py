"""dstack's DeepSeek-R1 runs on 8 H200s and 8 MI300Xs (March 2025): devices with no serving runs of their own in
what is shipped. The runs are read as published, each becomes the deployment its launch command gave, the bound holds
against every one, and the expectation says its basis (the kernel tables with a carried engine line) or why it has
none. How a run is read: service/translation/serving/dstack_runs.py; the figures: bench/dstack_runs.py and
docs/serving.md."""

import pytest

from service.translation.serving.dstack_runs import dstack_runs, serving_body

# Reads nothing the database dialect changes.
pytestmark = pytest.mark.dialect_free


def run_of(device: str, engine: str, concurrency: int, output_len: int = 800) -> dict:
    (run,) = [r for r in dstack_runs() if (r["device_id"], r["engine"], r["concurrency"], r["output_len"])
              == (device, engine, concurrency, output_len)]
    return run


def test_the_runs_read_are_the_published_ones():
    """45 runs of the random dataset: five device-engine pairs at 4 to 128 in flight (3,200 / 800 tokens) and at 128
    with 1,600, 3,200 and 6,400 generated. SGLang on the H200 at 32 in flight, the CSV's row: 500 requests of 800
    generated tokens in 986.331 s, so 400,000 / 986.331 = 405.54 output tokens/s and 500 / 986.331 = 0.50693
    requests/s; median TPOT 61.186 ms, median TTFT 12.905 s."""
    runs = dstack_runs()
    assert len(runs) == 45
    assert {(r["device_id"], r["engine"]) for r in runs} == {
        ("nvidia-h200-sxm", "sglang"), ("nvidia-h200-sxm", "vllm"), ("nvidia-h200-sxm", "trt"),
        ("amd-mi300x", "sglang"), ("amd-mi300x", "vllm")}
    run = run_of("nvidia-h200-sxm", "sglang", 32)
    assert run["output_tokens_per_s"] == pytest.approx(400_000 / 986.331, rel=1e-5)
    assert run["requests_per_s"] == pytest.approx(500 / 986.331, rel=1e-5)
    assert run["median_tpot_s"] == pytest.approx(0.061186, rel=1e-4)
    assert run["median_ttft_s"] == pytest.approx(12.905, rel=1e-4)


def test_each_run_is_the_deployment_its_launch_command_gave():
    """SGLang on the H200 ran with --enable-dp-attention (8 attention groups); TensorRT-LLM with --max_batch_size 512
    and --max_num_tokens 16384; the rest plain 8-way tensor parallelism. 500 prompts a run: 500 / 32 = 15.6, so 16 a
    unit of concurrency at 32 in flight; at 4, 125, held to the service's 20."""
    sglang_h200 = serving_body(run_of("nvidia-h200-sxm", "sglang", 32))
    assert sglang_h200["attention_data_parallel"] == 8 and sglang_h200["tensor_parallel"] == 8
    assert sglang_h200["workload"] == {"prompts_per_concurrency": 16}
    assert serving_body(run_of("nvidia-h200-sxm", "trt", 4))["scheduler"] == {"max_running": 512, "step_tokens": 16384}
    plain = serving_body(run_of("amd-mi300x", "vllm", 4))
    assert "attention_data_parallel" not in plain and "scheduler" not in plain
    assert plain["workload"] == {"prompts_per_concurrency": 20}
    assert plain["dtypes"]["kv_cache"] == "bf16" and plain["dtypes"]["weights"] == "fp8"


def test_the_bound_holds_against_every_run_and_the_expectation_says_its_basis(client):
    """Every run: the bound's TPOT and TTFT at or under the measured medians, its output tokens/s at or over the
    measured. Every engine is expected from the devices' kernel tables and the engine lines carried over (basis
    kernels), never faster than the bound; vLLM's line was fitted to gpt-oss-120b's fp4 runs, and its answer says it
    was carried to these fp8 weights and to DeepSeek-V3, extrapolated."""
    for run in dstack_runs():
        answer = client.post("/v1/analyze/serving", json=serving_body(run)).json()
        bound, expected = answer["bound"], answer["expected"]
        label = (run["device_id"], run["engine"], run["concurrency"], run["output_len"])
        assert bound["tpot_s"] <= run["median_tpot_s"], label
        assert bound["ttft_s"] <= run["median_ttft_s"], label
        assert bound["output_tokens_per_s"] >= run["output_tokens_per_s"], label
        if run["engine"] == "vllm":
            assert expected["calibration"]["id"] == "engine:vllm:fp4:none", label
            assert expected["calibration"]["extrapolated"] is True, label
            assert any("its fp4 line" in note and "carried to deepseek-v3" in note
                       for note in answer["assumptions"]), label
        assert expected["basis"] == "kernels", label
        assert expected["tpot_s"] >= bound["tpot_s"] and expected["output_tokens_per_s"] <= bound["output_tokens_per_s"]
