"""Attention as the serving engine's kernels run it, a decode step's and a prompt's (AIConfigurator's MLA and attention
tables, fitted in service/data/calibrations/attention.json): the counting by hand, which fit a row reads, and the
shipped fits held to a sample of the timings they were fitted to."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from service.core.expectations.attention_kernels import AttentionShape, attention_key, attention_work
from service.core.expectations.kernel_steps import KernelEvaluator, KernelTables
from service.core.expectations.kernels import KernelCalibration
from service.core.transformer.analysis import Evaluator, analyze_model
from service.core.transformer.families import from_hf_config
from service.core.transformer.layers import ModelDTypes
from service.persistence.catalog import MODEL_CATALOG_DIR, attention_calibrations, nominal_device
from service.translation.kernels.tables import shipped_kernel_tables

DEEPSEEK = from_hf_config(json.loads((MODEL_CATALOG_DIR / "deepseek-ai__DeepSeek-V3.json").read_text()))
FP8 = ModelDTypes("fp8", "fp8", "fp8", 128 * 128, 4.0)
SAMPLE = Path(__file__).parents[1] / "data" / "aiconfigurator_attention_sample.csv"


def test_a_latent_decode_timing_is_counted_as_the_services_attention_row_counts_it():
    """DeepSeek's absorbed latent attention at 64 sequences of 8,192 cached tokens, 16 heads a device (TP 8), the cache
    in fp8: each head scores every cached token over 576 values and sums 512: 2 x 64 x 16 x 8,192 x (576 + 512) =
    18,253,611,008 FLOPs, and 5 a score for the softmax, 64 x 16 x 8,192 x 5 = 41,943,040: 18,295,554,048. It reads
    the shared latent once a sequence, 64 x 8,192 x 576 x 1 byte = 301,989,888, and the bf16 queries,
    64 x 16 x 576 x 2 = 1,179,648; it writes 64 x 16 x 512 x 2 = 1,048,576 bytes."""
    shape = AttentionShape(True, 64, 16, 1, 576, 512, 1, 8192)
    flops, hbm = attention_work(shape, "fp8")
    assert flops == 18_253_611_008 + 41_943_040 == 18_295_554_048
    assert hbm == 301_989_888 + 1_179_648 + 1_048_576
    # The same layer as the service builds its decode step (the row "attention" of a moe layer at TP 8, batch 64,
    # context 8,191 + the token decoded), bf16 activations over the fp8 cache: the same counts; with fp8 activations
    # (the InferenceX deployments') its queries and outputs are a byte each, 589,824 + 524,288 bytes fewer.
    for activations, fewer in (("bf16", 0), ("fp8", 589_824 + 524_288)):
        dtypes = ModelDTypes("fp8", activations, "fp8", 128 * 128, 4.0)
        step = analyze_model(DEEPSEEK, Evaluator(nominal_device("nvidia-b200")), phase="decode", batch=64,
                             seq_len=8191, dtypes=dtypes, tensor_parallel=8, explain=False)
        row = next(r for r in step.rows if r.name == "attention" and r.group == "moe layers")
        assert (row.flops, row.bytes) == (flops, hbm - fewer)


def test_a_grouped_query_decode_timing_is_counted_as_the_services_attention_row_counts_it():
    """8 sequences of 4,096 cached tokens, 32 query heads over 8 key heads of 128, a bf16 cache: 2 x 8 x 32 x 4,096 x
    256 + 5 x 8 x 32 x 4,096 = 542,113,792 FLOPs; keys and values of 8 heads read, 8 x 4,096 x 8 x 128 x 2 x 2 =
    134,217,728 bytes, the queries 65,536 and the output 65,536."""
    flops, hbm = attention_work(AttentionShape(False, 8, 32, 8, 128, 128, 1, 4096), "bf16")
    assert flops == 536_870_912 + 5_242_880
    assert hbm == 134_217_728 + 65_536 + 65_536


def test_a_latent_prompt_timing_is_counted_as_the_services_prompt_row_counts_it():
    """DeepSeek's latent attention over a prompt of 1,024 tokens, 2 of them, 16 heads a device (TP 8), expanded: keys of
    192 and values of 128 a head, fp8 throughout (an fp8 deployment's activations). Causal: 1,024 x 1,025 / 2 =
    524,800 pairs a head, each 2 x 192 + 2 x 128 + 5 = 645 FLOPs: 2 x 16 x 524,800 x 645 = 10,831,872,000. A byte an
    element, it reads the queries and the keys, 2 x 1,024 x 16 x 192 = 6,291,456 bytes each, and the values,
    2 x 1,024 x 16 x 128 = 4,194,304, and writes the output, 4,194,304 more: 20,971,520 (flash attention keeps the
    scores on chip)."""
    shape = AttentionShape(True, 2, 16, 16, 192, 128, 1024, 1024)
    assert shape.kind == "mla_prefill"
    flops, hbm = attention_work(shape, "fp8")
    assert flops == 2 * 16 * 524_800 * 645 == 10_831_872_000
    assert hbm == 2 * 6_291_456 + 2 * 4_194_304 == 20_971_520
    # The same layer as the service builds a prompt of 1,024 tokens for 2 sequences on 8 devices, fp8 activations.
    step = analyze_model(DEEPSEEK, Evaluator(nominal_device("nvidia-b200")), phase="prefill", batch=2, seq_len=1024,
                         dtypes=FP8, tensor_parallel=8, explain=False)
    row = next(r for r in step.rows if r.name == "attention" and r.group == "moe layers")
    assert (row.flops, row.bytes) == (flops, hbm)


def test_which_rows_read_an_attention_fit():
    """A decode's by its cache dtype, a prompt's by its activations' (the dtype its compute runs in); a latent prompt
    is told by its expanded heads (keys of 192, values of 128, as many key heads as query heads)."""
    latent = {"q_len": 1, "kv_len": 2048, "shared_kv": True, "kv_dtype": "fp8", "dtype": "bf16"}
    assert attention_key(latent) == "mla_decode:fp8"
    assert attention_key(latent | {"q_len": 4}) == "mla_decode:fp8"  # a verification of 3 drafts
    assert attention_key({"q_len": 1, "kv_len": 100, "dtype": "bf16"}) == "attention_decode:bf16"
    expanded = {"q_len": 2048, "kv_len": 2048, "heads": 16, "head_dim": 192, "v_head_dim": 128, "dtype": "fp8",
                "kv_dtype": "fp8"}
    assert attention_key(expanded) == "mla_prefill:fp8"
    assert attention_key(expanded | {"q_len": 9, "kv_len": 4096}) == "mla_prefill:fp8"  # a chunk after a cache
    grouped = {"q_len": 512, "kv_len": 512, "heads": 32, "kv_heads": 8, "head_dim": 128, "dtype": "bf16",
               "kv_dtype": "fp8"}
    assert attention_key(grouped) == "attention_prefill:bf16"  # the activations' dtype, not the cache's
    assert attention_key(grouped | {"kv_heads": 32, "head_dim": 192, "v_head_dim": 128}) == "mla_prefill:bf16"
    assert attention_key(grouped | {"q_len": 1024}) is None  # more queries than keys: no such row
    assert attention_key(None) is None


def fit(dtype: str, e_c: float, e_m: float, operator: str = "matmul", unidentified: tuple = ()) -> KernelCalibration:
    return KernelCalibration(device_id="nvidia-b200", dtype=dtype, engine="sglang", source="s", peak_flops_per_s=1e15,
                             hbm_bytes_per_s=8e12, t0_s=5e-6, compute_efficiency=e_c, memory_efficiency=e_m,
                             fitted_on=100, checked_on=100, median_error=0.05, p90_error=0.1, bound_median_error=0.5,
                             operator=operator, unidentified=unidentified)


def test_each_steps_attention_reads_its_fit_else_the_floor():
    """DeepSeek-V3 in fp8 on a B200 with a bf16 GEMM fit at 0.8 / 0.75 (the floor) and an fp8-cache latent decode fit
    whose timings told its memory roof, 0.5, but not its compute one (held at 1 in the fit): a decode step's attention
    rows take max(T_c / 0.8, T_m / 0.5), the floor's compute roof where the table could not tell it; a prompt's
    attention, with no prefill fit, and every other row keep the floor's; with an fp8 latent prefill fit at 0.3 / 0.2
    (a dtype the prompt's rows compute in), its attention rows take max(T_c / 0.3, T_m / 0.2)."""
    device = nominal_device("nvidia-b200")
    decode_fit = fit("fp8", 1.0, 0.5, "mla_decode", ("compute_efficiency",))
    tables = KernelTables("nvidia-b200", {"bf16": fit("bf16", 0.8, 0.75)}, attention_fits={"mla_decode:fp8": decode_fit})
    with_prefill = KernelTables("nvidia-b200", {"bf16": fit("bf16", 0.8, 0.75)}, attention_fits={
        "mla_decode:fp8": decode_fit, "mla_prefill:fp8": fit("fp8", 0.3, 0.2, "mla_prefill")})
    for phase, chosen, e_c, e_m in (("decode", tables, 0.8, 0.5), ("prefill", tables, 0.8, 0.75),
                                    ("prefill", with_prefill, 0.3, 0.2), ("decode", with_prefill, 0.8, 0.5)):
        step = {"phase": phase, "batch": 16, "seq_len": 2048, "dtypes": FP8, "tensor_parallel": 8, "explain": False}
        bound = analyze_model(DEEPSEEK, Evaluator(device), **step).rows
        composed = analyze_model(DEEPSEEK, KernelEvaluator(device, tables=chosen), **step).rows
        attention = [(b, c) for b, c in zip(bound, composed, strict=True) if b.kind == "attention"]
        assert attention
        for b, c in attention:
            assert c.time_s == pytest.approx(max(b.compute_time_s / e_c, b.memory_time_s / e_m), rel=1e-12), phase
    assert "mla_decode:fp8" in tables.describe()


def test_each_engine_reads_its_own_attention_table_else_tensorrt_llms_and_training_none():
    """SGLang's latent attention over an fp8 cache on an H200 reads it at 0.06 of the datasheet's bandwidth (its
    bf16 cache at 0.89, TensorRT-LLM's fp8 at 0.63): which engine runs the attention decides more than the device."""
    h200 = {engine: shipped_kernel_tables("nvidia-h200-sxm", engine) for engine in ("sglang", "dynamo-trt")}
    assert {fit.engine for fit in h200["sglang"].attention_fits.values()} == {"sglang"}
    assert {fit.engine for fit in h200["dynamo-trt"].attention_fits.values()} == {"trtllm"}
    assert set(h200["sglang"].attention_fits) == {f"{kind}:{dtype}" for dtype in ("bf16", "fp8") for kind in (
        "mla_decode", "attention_decode", "mla_prefill", "attention_prefill")}
    sglang_fp8 = h200["sglang"].attention_fits["mla_decode:fp8"]
    assert sglang_fp8.roof_memory_efficiency < 0.1 < 0.8 < h200["sglang"].attention_fits["mla_decode:bf16"].roof_memory_efficiency
    assert h200["dynamo-trt"].attention_fits["mla_decode:fp8"].roof_memory_efficiency > 0.5
    assert "kernel:shipped:nvidia-h200-sxm:sglang:mla_decode:fp8" in h200["sglang"].ids  # what an answer names
    assert "kernel:shipped:nvidia-h200-sxm:sglang:fused_moe:fp8" in h200["sglang"].ids
    assert shipped_kernel_tables("nvidia-h200-sxm").attention_fits == {}  # training: the floor
    assert shipped_kernel_tables("amd-mi355x", "atom").attention_fits == {}  # no AMD attention table shipped
    pcie = shipped_kernel_tables("nvidia-h100-pcie", "sglang")
    assert pcie.stand_in_for == "nvidia-h100-sxm" and pcie.attention_fits["mla_decode:bf16"].hbm_bytes_per_s == 2.0e12
    assert pcie.attention_fits["mla_decode:bf16"].peak_flops_per_s == nominal_device("nvidia-h100-pcie").peak(
        "bf16", "tensor").flops_per_s


def sample():
    with SAMPLE.open() as handle:
        for row in csv.DictReader(handle):
            shape = AttentionShape(row["latent"] == "True", *(int(row[name]) for name in AttentionShape._fields[1:8]),
                                   int(row["window"]) if row["window"] else None)
            yield (row["device_id"], row["engine"], f"{shape.kind}:{row['dtype']}"), shape, float(row["latency_s"])


def test_the_shipped_attention_fits_hold_to_the_timings_they_were_fitted_to():
    """On a sample of each table's timings (20 each, shipped in tests/data): the bound, counted as the service counts
    it, is under every timing, and each fit's formula is off as it reports: on 20 timings, a median within the
    reported 90th percentile and at least 12 within it (90 % expected; fewer than 12 of 20 has a chance under 1e-4),
    and the fit's reported median below the bound's."""
    shipped = attention_calibrations()
    errors: dict[tuple, list[float]] = {}
    for key, shape, measured in sample():
        calibration = shipped[key]
        flops, hbm = attention_work(shape, key[2].split(":")[1])
        bound = max(flops / calibration.peak_flops_per_s, hbm / calibration.hbm_bytes_per_s)
        assert bound <= measured, (key, shape)
        expected = max(bound, calibration.expected_time_s(flops, hbm))
        errors.setdefault(key, []).append(abs(expected / measured - 1))
    # 6 devices: decode and prefill; latent attention for TensorRT-LLM and SGLang, grouped-query for them and vLLM, each
    # in 2 dtypes, but vLLM's grouped-query prompts in bf16 only (its table times none in fp8 throughout); and the A100:
    # bf16 grouped-query decodes and prompts of the three engines, TensorRT-LLM's latent decodes (bf16 and fp8 caches)
    # and its bf16 latent prompts: 3 + 2 + 3 + 1 (no fp8 prompt: the A100 has no fp8 peak)
    assert len(errors) == len(shipped) == 6 * ((2 + 3) * 2 + (2 + 3) * 2 - 1) + 9
    for key, values in errors.items():
        calibration = shipped[key]
        assert calibration.median_error < calibration.bound_median_error, key
        within = np.array(values) <= calibration.p90_error
        assert np.median(values) <= calibration.p90_error and within.sum() >= 12, (key, within.sum())
