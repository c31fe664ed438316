"""Fit the engines' costs shipped in service/data/calibrations/engines.json from the measured runs shipped in
service/data/serving-runs/inferencex-dsr1.json (SemiAnalysis InferenceX), the newest run of each configuration
(inferencex.newest_runs: today's engine): one per engine, precision and speculative method with at least three runs,
each run against its deployment as its device's kernel tables compose it
(service/core/expectations/kernel_steps.py), over every device with tables. An engine with no DeepSeek-R1 run (vLLM)
is fitted on InferenceX's gpt-oss-120b runs (inferencex-gptoss-120b.json); the other engines' gpt-oss runs are left
to check their DeepSeek-R1 lines on a model those never saw (bench/unmeasured.py).

    .venv/bin/python scripts/fit_engine_calibration.py > service/data/calibrations/engines.json

Re-run it when the bounds or the kernel tables change. It prints, on stderr, how wrong each was on each device left
out of its fit.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    from schemas.serving import ServingAnalysisRequest
    from scripts.fitting_app import dump_calibrations, shipped_runs_app
    from service.persistence.catalog import shipped_gpt_oss_runs
    from service.translation.serving.analyses import bound_and_composed
    from service.translation.serving.inferencex import engine_lines, model_layers

    with shipped_runs_app() as (rows, app, _):
        catalog = app.state.catalog
        fitted = engine_lines(rows, shipped_gpt_oss_runs(), lambda body: bound_and_composed(
            ServingAnalysisRequest.model_validate(body), catalog), model_layers(catalog))
    for calibration in fitted:
        held = ", ".join(f"{device} {tpot:.1%} / {ttft:.1%} ({runs})" for device, tpot, ttft, runs in calibration.per_device)
        print(f"{calibration.id}: {calibration.fitted_on} runs on {', '.join(calibration.devices)}; TPOT "
              f"{calibration.tpot_median_error:.1%} median, {calibration.tpot_p90_error:.1%} p90; TTFT "
              f"{calibration.ttft_median_error:.1%}; per device left out (TPOT / TTFT): {held or '-'}", file=sys.stderr)
    dump_calibrations("TPOT = tpot_scale x (composed + composed prefill_share) + tpot_overhead_s; TTFT = ttft_scale x "
                      "composed + ttft_overhead_s; composed: the run's deployment with every row as its device's "
                      "kernel tables expect it; the overheads are those of a model of `layers` decoder layers "
                      "(EngineCalibration.for_layers scales them to another's)", fitted)


if __name__ == "__main__":
    main()
