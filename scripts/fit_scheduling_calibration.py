"""Fit the scheduling simulation's calibrations shipped in service/data/calibrations/scheduling.json from the measured
runs shipped in service/data/serving-runs/inferencex-dsr1.json (SemiAnalysis InferenceX), the newest run of each
configuration (inferencex.newest_runs): one per device, engine, precision and speculative method with at least three
runs, each run simulated as its benchmark ran it (its client, its recipe's scheduler) with every step at this
service's bound, then fitted (service/core/simulation/fit.py).

    .venv/bin/python scripts/fit_scheduling_calibration.py > service/data/calibrations/scheduling.json

Re-run it when the bounds or the simulation change. It prints, on stderr, how wrong each was on the workload shapes
a fit to its 1,024 / 1,024 runs never saw.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    from schemas.serving import ServingAnalysisRequest
    from scripts.fitting_app import dump_calibrations, shipped_runs_app
    from service.translation.serving.analyses import unit_run
    from service.translation.serving.inferencex import scheduling_calibrations

    with shipped_runs_app() as (rows, app, _):
        fitted = scheduling_calibrations(
            rows, lambda body: unit_run(ServingAnalysisRequest.model_validate(body), app.state.catalog))
    for c in fitted:
        checked = (f"TPOT {c.tpot_median_error:.1%} median, {c.tpot_p90_error:.1%} p90; TTFT {c.ttft_median_error:.1%} "
                   f"median, p99 TTFT {c.ttft_p99_median_error:.1%}" if c.checked_on else "not checked")
        print(f"{c.id}: {c.fitted_on} runs; decode x{c.decode_scale:.3g}, prefill x{c.prefill_scale:.3g}, "
              f"{c.step_overhead_s * 1e3:.3g} ms a step, {c.request_overhead_s * 1e3:.3g} ms a request; on "
              f"{c.checked_on} runs of other shapes: {checked}", file=sys.stderr)
    dump_calibrations("each simulated step = decode_scale x its decode bound + prefill_scale x its prefill bound + "
                        "step_overhead_s; each request's TTFT + request_overhead_s (service/core/simulation)", fitted)


if __name__ == "__main__":
    main()
