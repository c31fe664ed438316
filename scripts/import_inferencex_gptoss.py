"""Write service/data/serving-runs/inferencex-gptoss-120b.json from the InferenceX gpt-oss-120b runs as gminneci/mantile
extracted them from InferenceX's GitHub Actions artifacts (reconcile/by_model/openai_GPT-OSS-120B/inferencemax.csv,
commit 11a8e89, 2026-01-21; one row per configuration, the newest of its repeats):

    .venv/bin/python scripts/import_inferencex_gptoss.py inferencemax.csv > service/data/serving-runs/inferencex-gptoss-120b.json

Each kept row becomes a row in the shape of inferencex-dsr1.json's (single node, aggregated, the recipe's tensor and
expert parallelism), so service/translation/serving/inferencex.py reads both. Left out, and why:
- the GB200 Dynamo rows: disaggregated, and the extract keeps no prefill or decode pool sizes;
- TensorRT-LLM rows whose configuration appears twice on one day: the recipe runs each with and without attention
  data parallelism, which the extract does not record, so neither can be placed.
The extract keeps the mean TPOT and TTFT, not the median the dsr1 rows hold: the metrics say `mean_*`.
"""

from __future__ import annotations

import csv
import json
import sys
from collections import Counter
from typing import Any

HARDWARE = {"h100": ("h100", "vllm"), "h200": ("h200", "vllm"), "b200": ("b200", "vllm"), "b200-trt": ("b200", "trt"),
            "mi355x": ("mi355x", "atom")}
RUNS_URL = "https://github.com/SemiAnalysisAI/InferenceX/actions/runs/"
SOURCE = ("SemiAnalysis InferenceX (formerly InferenceMAX) gpt-oss-120b serving runs, December 2025 to January 2026, as "
          "extracted from its GitHub Actions artifacts by github.com/gminneci/mantile "
          "(reconcile/by_model/openai_GPT-OSS-120B/inferencemax.csv, commit 11a8e89); each row's run_url is the workflow "
          "run that measured it. Recipes: benchmarks/single_node/fixed_seq_len/deprecated/gptoss_fp4_*.sh at "
          "SemiAnalysisAI/InferenceX 843c6254f (vLLM on Hopper: MXFP4 experts through Marlin, bf16 activations and cache; "
          "vLLM on B200, TensorRT-LLM and ATOM: an fp8 cache)")
NOTE = ("Times in seconds, throughput in tokens/s per GPU. The extract keeps each run's mean TPOT and TTFT (mean_tpot, "
        "mean_ttft) and p99 TTFT, not the medians inferencex-dsr1.json holds. Left out: GB200 Dynamo rows (no pool "
        "sizes) and TensorRT-LLM configurations run twice on one day (with and without attention data parallelism, "
        "which the extract does not say).")


def _ambiguous(rows: list[dict[str, str]]) -> set[tuple[str, ...]]:
    counts = Counter(_configuration(row) + (row["benchmark_date"][:10],) for row in rows)
    return {key[:-1] for key, count in counts.items() if count > 1}


def _configuration(row: dict[str, str]) -> tuple[str, ...]:
    return tuple(row[name] for name in ("gpu_model", "framework", "input_seq_len", "output_seq_len", "tensor_parallel",
                                         "expert_parallel", "concurrency"))


def _row(row: dict[str, str]) -> dict[str, Any]:
    hardware, framework = HARDWARE[row["gpu_model"]]
    tp, ep = int(float(row["tensor_parallel"])), int(float(row["expert_parallel"]))
    pool = {"tp": tp, "ep": ep, "dp_attention": False, "num_workers": 0}
    return {
        "hardware": hardware, "framework": framework, "model": "gptoss", "precision": row["precision"],
        "spec_method": "none", "disagg": False, "is_multinode": False,
        **{f"{role}_{name}": value for role in ("prefill", "decode") for name, value in pool.items()},
        "num_prefill_gpu": tp, "num_decode_gpu": tp, "isl": int(row["input_seq_len"]), "osl": int(row["output_seq_len"]),
        "conc": int(row["concurrency"]), "date": row["benchmark_date"][:10],
        "run_url": RUNS_URL + row["run_id"],
        "metrics": {"mean_tpot": float(row["mean_time_per_output_token_sec"]),
                    "mean_ttft": float(row["mean_time_to_first_token_sec"]),
                    "p99_ttft": float(row["p99_time_to_first_token_sec"]),
                    "mean_e2el": float(row["mean_end_to_end_latency_sec"]),
                    "median_e2el": float(row["median_end_to_end_latency_sec"]),
                    "tput_per_gpu": float(row["throughput_tokens_per_sec_per_gpu"]),
                    "output_tput_per_gpu": float(row["output_throughput_per_gpu"])},
    }


def main(path: str) -> None:
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    ambiguous = _ambiguous(rows)
    kept = [_row(row) for row in rows if row["gpu_model"] in HARDWARE and _configuration(row) not in ambiguous]
    lines = ",\n".join(json.dumps(row) for row in kept)  # a run a line: a diff shows which runs changed
    sys.stdout.write(f'{{"source": {json.dumps(SOURCE)},\n"note": {json.dumps(NOTE)},\n"rows": [\n{lines}\n]}}\n')


if __name__ == "__main__":
    main(sys.argv[1])
