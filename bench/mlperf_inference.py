"""MLPerf Inference v5.1's Llama 2 70B Offline results held against the service: for each catalog device with closed-
division results, the bound's and the expectation's generated tokens/s per device of the same deployment
(service/translation/serving/mlperf.py says how a result is read), beside the measured median and range; how the
bound and the expectation order the devices against the measurements; and, as a what-if where the submitters'
engine has no carried line, the expectation under the nearest engine the service has for the device.

    .venv/bin/python bench/mlperf_inference.py      (make bench-mlperf)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.service_client import service_client
from bench.unmeasured import GAP, pairs_ordered

# For a device whose submitters' engine has no carried line: the engine the service has for it, as a labelled what-if.
WHAT_IF_ENGINE = {"amd-mi300x": "atom", "amd-mi325x": "atom"}


def main() -> None:
    from service.translation.serving.mlperf import measured_per_device, median_per_device, offline_body

    measured, medians = measured_per_device(), median_per_device()
    bounds: dict[str, float] = {}
    expected: dict[str, float] = {}
    with service_client() as client:
        print("| device | results | measured per device, median (range) | bound | bound / measured | expected "
              "| expected / measured | basis |")
        print("|---|---|---|---|---|---|---|---|")
        what_ifs = []
        for device in sorted(medians, key=lambda d: -medians[d]):
            answer = client.post("/v1/analyze/serving", json=offline_body(device)).json()
            bound = answer["bound"]["output_tokens_per_s_per_device"]
            figures = answer.get("expected") or {}
            bounds[device], expected[device] = bound, figures.get("output_tokens_per_s_per_device") or 0.0
            values = measured[device]
            shown = (f"{expected[device]:,.0f} | {expected[device] / medians[device]:.2f}x | "
                     f"{figures.get('basis')}" if figures else "- | - | none: " + next(
                         a for a in answer["assumptions"] if a.startswith("expected")))
            print(f"| {device} | {len(values)} | {medians[device]:,.0f} ({min(values):,.0f}-{max(values):,.0f}) | "
                  f"{bound:,.0f} | {bound / medians[device]:.2f}x | {shown} |")
            if device in WHAT_IF_ENGINE and not figures:
                other = client.post("/v1/analyze/serving",
                                    json=offline_body(device, engine=WHAT_IF_ENGINE[device])).json()
                what_if = (other.get("expected") or {}).get("output_tokens_per_s_per_device")
                if what_if:
                    what_ifs.append(f"{device} under {WHAT_IF_ENGINE[device]}'s line: {what_if:,.0f} "
                                    f"({what_if / medians[device]:.2f}x the measured vLLM median)")
    below = [device for device in bounds if bounds[device] < max(measured[device])]
    print(f"\nbound under a measured result: {', '.join(below) or 'none'}")
    for name, figures in (("bound", bounds), ("expected", expected)):
        pairs, right = pairs_ordered({device: (figures[device], medians[device]) for device in figures
                                      if figures[device]})
        print(f"{name}: {right} of {pairs} pairs of devices measured >= {GAP - 1:.0%} apart ordered as measured")
    for line in what_ifs:
        print(f"what-if: {line}")


if __name__ == "__main__":
    main()
