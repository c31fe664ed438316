"""Fit the scheduling calibrations carried over to devices without runs, shipped in
service/data/calibrations/scheduling_carried.json, from the measured runs shipped in
service/data/serving-runs/inferencex-dsr1.json (SemiAnalysis InferenceX), the newest run of each configuration
(inferencex.newest_runs): one per engine, precision and speculative method whose aggregated runs cover two devices
with kernel tables or more, each run simulated as its benchmark ran it with every step as its device's kernel tables
compose it (service/core/simulation/carried_over.py), kept where, on the devices left out of it, it beats the engine's
steady-state line (engines.json; inferencex.beats_the_line).

    .venv/bin/python scripts/fit_carried_scheduling.py > service/data/calibrations/scheduling_carried.json

Re-run it when the bounds, the kernel tables or the simulation change. It prints, on stderr, how wrong each was on
each device left out of its fit.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    from schemas.serving import ServingAnalysisRequest
    from scripts.fitting_app import dump_calibrations, shipped_runs_app
    from service.persistence.catalog import engine_calibrations
    from service.translation.serving.analyses import unit_run
    from service.translation.serving.inferencex import carried_scheduling_calibrations, model_layers

    with shipped_runs_app() as (rows, app, _):
        fitted = carried_scheduling_calibrations(
            rows, lambda body: unit_run(ServingAnalysisRequest.model_validate(body), app.state.catalog,
                                        on_kernels=True), engine_calibrations(),
            layers=model_layers(app.state.catalog)["dsr1"])
    for c in fitted:
        held = ", ".join(f"{device} {tpot:.1%} / {ttft:.1%} ({runs})" for device, tpot, ttft, runs in c.per_device)
        print(f"{c.id}: {c.fitted_on} runs on {', '.join(c.devices)}; decode x{c.decode_scale:.3g}, prefill "
              f"x{c.prefill_scale:.3g}, {c.step_overhead_s * 1e3:.3g} ms a step, {c.request_overhead_s * 1e3:.3g} ms "
              f"a request; devices left out: TPOT {c.tpot_median_error:.1%} median, {c.tpot_p90_error:.1%} p90; TTFT "
              f"{c.ttft_median_error:.1%} median, {c.ttft_p90_error:.1%} p90; p99 TTFT "
              f"{c.ttft_p99_median_error or float('nan'):.1%}; per device (TPOT / TTFT): {held}", file=sys.stderr)
    dump_calibrations("each simulated step = decode_scale x its decode as its device's kernel tables compose it + "
                      "prefill_scale x its composed prefill + step_overhead_s; each request's TTFT + request_overhead_s "
                      "(service/core/simulation/carried_over.py)", fitted)


if __name__ == "__main__":
    main()
