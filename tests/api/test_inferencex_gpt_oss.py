"""InferenceX's gpt-oss-120b runs (service/data/serving-runs/inferencex-gptoss-120b.json): each read as the deployment
its recipe gave, the bound under every one, and vLLM's line, fitted to them, read by a gpt-oss deployment over its
weight-only experts' own kernel table. How a row is read: service/translation/serving/inferencex.py; the figures:
bench/unmeasured.py and docs/serving.md."""

import pytest

from service.core.expectations.kernel_steps import weight_only_experts
from service.core.transformer.layers import ModelDTypes
from service.persistence.catalog import engine_calibrations, shipped_gpt_oss_runs
from service.translation.kernels.tables import shipped_kernel_tables
from service.translation.serving.inferencex import measured_tpot, measured_ttft, newest_runs, serving_request

# Reads nothing the database dialect changes.
pytestmark = pytest.mark.dialect_free


def row_of(hardware: str, framework: str, tp: int, conc: int, isl: int = 1024, osl: int = 1024) -> dict:
    (row,) = [r for r in newest_runs(shipped_gpt_oss_runs()) if (r["hardware"], r["framework"], r["decode_tp"],
                                                                  r["conc"], r["isl"], r["osl"])
              == (hardware, framework, tp, conc, isl, osl)]
    return row


def test_the_runs_read_are_the_extracts_and_each_becomes_its_recipes_deployment():
    """228 runs kept of the extract's 261 (the 25 GB200 Dynamo rows have no pool sizes; 8 TensorRT-LLM rows share a
    configuration and a day with another). vLLM on an H100 (gptoss_fp4_h100.sh): the checkpoint's MXFP4 experts,
    bf16 activations and cache, TP as run, and the requests it ran at once by Little's law from the run itself: at 64
    in flight on 4 H100s, 1,024 / 1,024, 1,558.4 output tokens/s a device x 4 devices x 9.896 ms = 61.69, so 61 (the
    rest waiting or in their prompt). vLLM on a B200 (VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8, kv-cache-dtype fp8): the
    experts multiplied in fp8, an fp8 cache."""
    rows = shipped_gpt_oss_runs()
    assert len(rows) == 228
    assert {(r["hardware"], r["framework"]) for r in rows} == {
        ("h100", "vllm"), ("h200", "vllm"), ("b200", "vllm"), ("b200", "trt"), ("mi355x", "atom")}
    hopper = serving_request(row_of("h100", "vllm", 4, 64))
    assert hopper["model_id"] == "gpt-oss-120b" and hopper["tensor_parallel"] == 4
    assert hopper["dtypes"] == {"weights": "bf16", "experts": "fp4", "experts_group_size": 32,
                                "weight_scale_bytes": 1.0, "activations": "bf16", "kv_cache": "bf16"}
    row = row_of("h100", "vllm", 4, 64)
    assert row["metrics"]["output_tput_per_gpu"] * 4 * row["metrics"]["mean_tpot"] == pytest.approx(61.69, abs=0.01)
    assert hopper["max_batch_per_group"] == 61
    blackwell = serving_request(row_of("b200", "vllm", 1, 4))["dtypes"]
    assert (blackwell["activations"], blackwell["kv_cache"]) == ("fp8", "fp8")
    # The extract kept means: they stand for the medians the DeepSeek-R1 rows hold.
    assert measured_tpot(row["metrics"]) == row["metrics"]["mean_tpot"]
    assert measured_ttft(row["metrics"]) == row["metrics"]["mean_ttft"]


def test_the_bound_holds_against_every_run(client):
    """Every run kept, every engine: the bound's TPOT and TTFT at or under the run's (mean) TPOT and TTFT."""
    for row in newest_runs(shipped_gpt_oss_runs()):
        body = serving_request(row) | {"calibration": "none"}
        answer = client.post("/v1/analyze/serving", json=body)
        assert answer.status_code == 200, answer.text
        bound = answer.json()["bound"]
        label = (row["hardware"], row["framework"], row["decode_tp"], row["conc"], row["isl"], row["osl"])
        assert bound["tpot_s"] <= measured_tpot(row["metrics"]), label
        assert bound["ttft_s"] <= measured_ttft(row["metrics"]), label


def test_weight_only_experts_read_their_own_fused_moe_table():
    """gpt-oss's checkpoint (bf16, MXFP4 experts, bf16 activations) keys the fp4-weights:bf16 table, which stands
    for vLLM's bf16 one on an H200 (Marlin reads the experts at 0.51 of the H200's HBM, the bf16 kernels at 0.82);
    in fp8 activations the fp4-weights:fp8 one; DeepSeek's fp8 blocks, stored as wide as they multiply, none."""
    gpt_oss = ModelDTypes("bf16", "bf16", "bf16", experts="fp4", experts_group_size=32, experts_scale_bytes=1.0)
    assert weight_only_experts(gpt_oss) == "fp4-weights:bf16"
    assert weight_only_experts(gpt_oss._replace(activations="fp8")) == "fp4-weights:fp8"
    assert weight_only_experts(ModelDTypes("fp8", "fp8", "fp8", 128 * 128, 4.0)) is None
    assert gpt_oss.headline_weights == "fp4" and ModelDTypes("fp8", "fp8").headline_weights == "fp8"
    plain = shipped_kernel_tables("nvidia-h200-sxm", "vllm")
    marlin = shipped_kernel_tables("nvidia-h200-sxm", "vllm", "fp4-weights:bf16")
    assert plain.moe_fits["bf16"].weights is None and marlin.moe_fits["bf16"].weights == "fp4"
    assert marlin.moe_fits["bf16"].id == "kernel:shipped:nvidia-h200-sxm:vllm:fused_moe:fp4-weights:bf16"
    assert marlin.moe_fits["bf16"].kernel_memory_efficiency == pytest.approx(0.509, abs=1e-3)
    assert plain.moe_fits["bf16"].kernel_memory_efficiency == pytest.approx(0.820, abs=1e-3)
    assert marlin.moe_fits["fp8"] is plain.moe_fits["fp8"]  # the other dtypes' tables as they were


def test_a_gpt_oss_deployment_under_vllm_reads_the_line_its_runs_fitted(client):
    """gpt-oss-120b on 4 H200s under vLLM at 64 in flight, 1,024 / 1,024, the checkpoint's own dtypes: vLLM's fp4
    line (the experts' type labels the deployment), its own model (36 layers: no scaling), composed over the Marlin
    table; TPOT = max(bound, scale x (composed + prefill share) + overhead) by hand from the answer's composed figures;
    not extrapolated (the workload is among those fitted). The run measured 9.57 ms (its mean): within the line's
    H200 error when the H200 was left out of its fit (14.0 % in the median)."""
    body = {"model_id": "gpt-oss-120b", "device_id": "nvidia-h200-sxm", "input_len": 1024, "output_len": 1024,
            "concurrency": 64, "tensor_parallel": 4, "engine": "vllm", "calibration": "kernels"}
    answer = client.post("/v1/analyze/serving", json=body).json()
    expected, bound = answer["expected"], answer["bound"]
    line = engine_calibrations()[("vllm", "fp4", "none")]
    assert line.models == ("gpt-oss-120b",) and line.layers == 36
    assert expected["calibration"]["id"] == "engine:vllm:fp4:none" and expected["calibration"]["extrapolated"] is False
    assert "kernel:shipped:nvidia-h200-sxm:vllm:fused_moe:fp4-weights:bf16" in expected["kernels"]["tables"]
    composed = expected["kernels"]["tpot_s"] + expected["kernels"]["prefill_share_s"]
    assert expected["tpot_s"] == pytest.approx(max(bound["tpot_s"], line.tpot_scale * composed + line.tpot_overhead_s),
                                               rel=1e-12)
    measured = measured_tpot(row_of("h200", "vllm", 4, 64)["metrics"])
    assert measured == pytest.approx(9.57e-3, abs=5e-6)
    assert abs(expected["tpot_s"] / measured - 1) < 0.2


def test_the_cross_model_error_an_answer_quotes_is_the_shipped_lines_on_these_runs(client):
    """An answer carried to another model quotes how far TensorRT-LLM's and ATOM's DeepSeek-R1 lines (61 layers), carried
    to gpt-oss-120b (36), were from their 78 gpt-oss runs (engines.ACROSS_MODELS_CHECK): recomputed here from the shipped
    lines and runs, TPOT |expected / measured - 1| pooled, 52.5 % in the median and 83.6 % at the 90th percentile;
    as fitted, without scaling by layers, they were further off (the median above 100 %)."""
    import numpy as np

    from schemas.serving import ServingAnalysisRequest
    from service.core.expectations.engines import ACROSS_MODELS_CHECK, carried_to_model
    from service.translation.serving.analyses import bound_and_composed
    from service.translation.serving.inferencex import engine_points

    points = engine_points(newest_runs(shipped_gpt_oss_runs()), lambda body: bound_and_composed(
        ServingAnalysisRequest.model_validate(body), client.app.state.catalog))
    scaled, unscaled = [], []
    for key in (("trt", "fp4", "none"), ("atom", "fp4", "none")):
        line = engine_calibrations()[key]
        assert (line.models, line.layers) == (("deepseek-v3",), 61)
        for layers, errors in ((36, scaled), (61, unscaled)):
            tpot, _ = carried_to_model(line, layers, points[key])
            errors += [abs(t / p.point.tpot_s - 1) for t, p in zip(tpot, points[key], strict=True)]
    assert len(scaled) == 78
    assert np.median(scaled) == pytest.approx(0.525, abs=5e-4)
    assert np.percentile(scaled, 90) == pytest.approx(0.836, abs=5e-4)
    assert "52.5 % in the median, 83.6 % at the 90th percentile, over 78 runs" in ACROSS_MODELS_CHECK
    assert np.median(unscaled) > 1.0
