"""dstack's DeepSeek-R1 runs on 8 H200s and 8 MI300Xs (SGLang, vLLM, TensorRT-LLM, March 2025) held against the
service: each run's bound and expectation (calibration "kernels": the devices' kernel tables and the engine lines
carried from the InferenceX devices; neither device has runs of its own in what is shipped) beside what was measured
(service/translation/serving/dstack_runs.py says how a run is read); per device and engine, the median of expected
over measured TPOT and output tokens/s; whether the bound held on every run; how the expectation orders the two
devices where the same engine at the same concurrency measured them at least 10 % apart.

    .venv/bin/python bench/dstack_runs.py      (make bench-dstack)
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.service_client import service_client
from bench.unmeasured import GAP, pairs_ordered


def main() -> None:
    from service.translation.serving.dstack_runs import dstack_runs, serving_body

    ratios: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    by_key: dict[tuple, dict[str, tuple[float, float]]] = defaultdict(dict)
    bound_held = 0
    runs = dstack_runs()
    with service_client() as client:
        print("| device | engine | input / output | in flight | TPOT measured | bound | expected | TTFT measured "
              "| expected | output tokens/s measured | bound | expected | basis |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for run in runs:
            answer = client.post("/v1/analyze/serving", json=serving_body(run)).json()
            bound, expected = answer["bound"], answer["expected"]
            bound_held += (bound["tpot_s"] <= run["median_tpot_s"] and bound["ttft_s"] <= run["median_ttft_s"]
                           and bound["output_tokens_per_s"] >= run["output_tokens_per_s"])
            cells = ["-", "-", "-"] if expected is None else [
                f"{expected['tpot_s'] * 1e3:.1f} ms", f"{expected['ttft_s']:.2f} s",
                f"{expected['output_tokens_per_s']:,.0f}"]
            print(f"| {run['device_id']} | {run['engine']} | {run['input_len']:,} / {run['output_len']:,} | "
                  f"{run['concurrency']} | {run['median_tpot_s'] * 1e3:.1f} ms | {bound['tpot_s'] * 1e3:.1f} ms | "
                  f"{cells[0]} | {run['median_ttft_s']:.2f} s | {cells[1]} | {run['output_tokens_per_s']:,.0f} | "
                  f"{bound['output_tokens_per_s']:,.0f} | {cells[2]} | "
                  f"{expected['basis'] if expected else 'none'} |")
            if expected is None:
                continue
            ratios[(run["device_id"], run["engine"])].append(
                (expected["tpot_s"] / run["median_tpot_s"],
                 expected["output_tokens_per_s"] / run["output_tokens_per_s"]))
            key = (run["engine"], run["input_len"], run["output_len"], run["concurrency"])
            by_key[key][run["device_id"]] = (expected["tpot_s"], run["median_tpot_s"])
    print(f"\nThe bound held on {bound_held} of {len(runs)} runs (TPOT and TTFT at or under the measured medians, "
          "output tokens/s at or over the measured)")
    print("\n| device | engine | runs with an expectation | expected / measured TPOT, median (range) | "
          "expected / measured output tokens/s, median (range) |")
    print("|---|---|---|---|---|")
    for (device, engine), values in sorted(ratios.items()):
        tpot, rate = [v[0] for v in values], [v[1] for v in values]
        print(f"| {device} | {engine} | {len(values)} | {statistics.median(tpot):.2f} ({min(tpot):.2f}-{max(tpot):.2f}) "
              f"| {statistics.median(rate):.2f} ({min(rate):.2f}-{max(rate):.2f}) |")
    counts = [pairs_ordered(devices) for devices in by_key.values() if len(devices) == 2]
    print(f"\nH200 against MI300X, same engine, lengths and concurrency, measured at least {GAP - 1:.0%} apart in "
          f"TPOT: {sum(right for _, right in counts)} of {sum(pairs for pairs, _ in counts)} ordered as measured by "
          "the expectation")


if __name__ == "__main__":
    main()
