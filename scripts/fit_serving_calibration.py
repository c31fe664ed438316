"""Fit the serving calibrations shipped in service/data/calibrations/serving.json from the measured runs shipped in
service/data/serving-runs/inferencex-dsr1.json and inferencex-gptoss-120b.json (SemiAnalysis InferenceX), the newest
run of each configuration (inferencex.newest_runs: today's engine), one per device, engine, model, precision and
speculative method with at least three runs, each against this service's own bound at the run's deployment.

    .venv/bin/python scripts/fit_serving_calibration.py > service/data/calibrations/serving.json

Re-run it when the bounds change (a calibration is fitted to them). It prints, on stderr, how wrong each was on
the runs held out of its fit.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    from scripts.fitting_app import dump_calibrations, shipped_runs_app
    from service.persistence.catalog import shipped_gpt_oss_runs
    from service.translation.serving.inferencex import device_calibrations

    with shipped_runs_app() as (rows, _, client):
        def bound_of(body):
            return client.post("/v1/analyze/serving", json=body | {"calibration": "none"}).json()["bound"]

        fitted = device_calibrations(rows, shipped_gpt_oss_runs(), bound_of)
    for calibration in fitted:
        print(f"{calibration.id}: {calibration.fitted_on} runs, checked by {calibration.checked_by} on "
              f"{calibration.checked_on}: TPOT {calibration.tpot_median_error:.1%} median, "
              f"{calibration.tpot_p90_error:.1%} p90 (bound {calibration.bound_tpot_median_error:.1%}); "
              f"TTFT {calibration.ttft_median_error:.1%}", file=sys.stderr)
    dump_calibrations("TPOT = tpot_scale x (bound + prefill_share) + tpot_overhead_s; TTFT = ttft_scale x bound + ttft_overhead_s; "
                        "the bound is /v1/analyze/serving's at the run's deployment", fitted)


if __name__ == "__main__":
    main()
