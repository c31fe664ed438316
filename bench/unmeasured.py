"""Expectations where nobody has measured: each device's InferenceX runs left out in turn and predicted from its
kernel tables and the engine's costs fitted over the other devices (basis 'kernels'), beside the same engine's line
carried over on the bare bounds (no kernel tables); per device, the median and p90 TPOT and TTFT errors; how often
two devices measured at least 10 % apart (same engine, precision, speculative method, lengths and concurrency) are
ordered as measured; and what an answer with expectations costs beside one without (side by side, round by round,
every request a distinct body). The fits are made to the newest run of each configuration (what the shipped engine
calibrations are fitted to: inferencex.newest_runs), and checked on those and on every run. Then the serving
planner on each SGLang device, every fit made without its runs, against the best output tokens/s per GPU measured
within the same TPOT target.

    .venv/bin/python bench/unmeasured.py      (make bench-unmeasured)
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

ROUNDS = 7
PER_ROUND = 60
GAP = 1.1  # two devices measured at least this far apart are "ordered"


def held_out(groups, checked=None):
    """(device, run key, predicted TPOT, measured TPOT, predicted TTFT, measured TTFT) of every run in `checked` (by
    default `groups`) of an engine scope with two devices or more, each predicted by the fit to the other devices'
    runs in `groups`, as the engine calibration's own check predicts it (engines.left_out, engines.predicted)."""
    from service.core.expectations.engines import left_out, predicted

    out = []
    for (engine, precision, method), points in sorted((checked or groups).items()):
        for device, own in left_out(points):
            others = [p for p in groups.get((engine, precision, method), []) if p.device_id != device]
            if len(others) < 3:
                continue
            for p, tpot, ttft in zip(own, *predicted(others, own), strict=True):
                q = p.point
                out.append((device, (engine, precision, method, q.input_len, q.output_len, q.concurrency, p.layout),
                            tpot, q.tpot_s, ttft, q.ttft_s))
    return out


def per_device(predictions) -> dict[str, tuple[int, float, float, float, float]]:
    by: dict[str, list] = defaultdict(list)
    for device, _, tpot, measured_tpot, ttft, measured_ttft in predictions:
        by[device].append((abs(tpot / measured_tpot - 1), abs(ttft / measured_ttft - 1)))
    return {device: (len(v), float(np.median([e[0] for e in v])), float(np.percentile([e[0] for e in v], 90)),
                     float(np.median([e[1] for e in v])), float(np.percentile([e[1] for e in v], 90)))
            for device, v in sorted(by.items())}


def orderings(predictions) -> tuple[int, int]:
    """(pairs measured at least GAP apart, of those ordered as measured), over the medians of each (device, key)."""
    medians: dict[tuple, dict[str, tuple[float, float]]] = defaultdict(dict)
    grouped: dict[tuple, list] = defaultdict(list)
    for device, key, tpot, measured, *_ in predictions:
        grouped[(key, device)].append((tpot, measured))
    for (key, device), values in grouped.items():
        medians[key][device] = (statistics.median(v[0] for v in values), statistics.median(v[1] for v in values))
    counts = [pairs_ordered(devices) for devices in medians.values()]
    return sum(pairs for pairs, _ in counts), sum(right for _, right in counts)


def pairs_ordered(devices: dict[str, tuple[float, float]]) -> tuple[int, int]:
    """(pairs measured at least GAP apart, of those ordered as predicted) over each device's (predicted, measured)."""
    names = sorted(devices)
    pairs = right = 0
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            (pa, ma), (pb, mb) = devices[a], devices[b]
            if max(ma, mb) < GAP * min(ma, mb):
                continue
            pairs += 1
            right += (pa < pb) == (ma < mb)
    return pairs, right


def costs(client, bodies) -> tuple[float, float, float]:
    """Median per-round ratio of an answer with expectations (basis kernels) to one without, and the medians of
    each, seconds: the same bodies, one input token apart so no cached row serves the second."""
    ratios, with_, without = [], [], []
    for round_ in range(ROUNDS):
        chunk = bodies[round_ * PER_ROUND:(round_ + 1) * PER_ROUND]
        times = {}
        order = ("kernels", "none") if round_ % 2 == 0 else ("none", "kernels")
        for calibration in order:
            start = time.perf_counter()
            for body in chunk:
                shifted = body | {"input_len": body["input_len"] + (calibration == "none"), "calibration": calibration}
                assert client.post("/v1/analyze/serving", json=shifted).status_code == 200
            times[calibration] = (time.perf_counter() - start) / len(chunk)
        ratios.append(times["kernels"] / times["none"])
        with_.append(times["kernels"])
        without.append(times["none"])
    return statistics.median(ratios), statistics.median(with_), statistics.median(without)


INTERACTIVITY = (20, 40, 60)  # output tokens/s per user the planner is asked for: TPOT at most 1/x


def sglang_runs(rows, device: str, precision: str, shape: tuple[int, int]) -> list[dict]:
    """The newest aggregated SGLang runs of the device without speculative decoding at that precision and shape."""
    from service.translation.serving.inferencex import DEVICE_IDS

    return [r for r in rows if DEVICE_IDS[r["hardware"]] == device and r["framework"] == "sglang" and not r["disagg"]
            and r["precision"] == precision and r["spec_method"] == "none" and (r["isl"], r["osl"]) == shape
            and "output_tput_per_gpu" in r["metrics"]]


def without(device: str, groups, rows, run_of):
    """The engine lines and carried scheduling calibrations as the shipped fits would be without the device's runs."""
    from service.core.expectations.engines import fit_engine_calibration
    from service.translation.serving.inferencex import DEVICE_IDS, SOURCE, carried_scheduling_calibrations

    lines = {key: fit_engine_calibration(others, engine=key[0], precision=key[1], speculative=key[2], source=SOURCE)
             for key, points in groups.items() if len(others := [p for p in points if p.device_id != device]) >= 3}
    carried = carried_scheduling_calibrations([r for r in rows if DEVICE_IDS[r["hardware"]] != device], run_of, lines)
    return lines, {(c.engine, c.precision, c.speculative): c for c in carried}


def planned_best(catalog, device: str, precision_of: dict, shape: tuple[int, int], per_user: float,
                 concurrency: int | None = None) -> float:
    """The serving planner's best expected output tokens/s per device on 8 devices at TPOT <= 1 / per_user
    (calibration 'kernels'), at a fixed concurrency per replica where given; 0 where nothing met it."""
    from schemas.plans import ServingPlanRequest
    from service.runtime.errors import Unprocessable
    from service.translation.serving.plans import plan_serving

    try:
        plan = plan_serving(ServingPlanRequest.model_validate({
            "model_id": "deepseek-v3", "device_ids": [device], "total_devices": 8, "input_len": shape[0],
            "output_len": shape[1], "engine": "sglang", "dtypes": precision_of, "slo": {"tpot_s": 1 / per_user},
            "calibration": "kernels", "top_n": 1, "concurrency": concurrency}), catalog)
    except Unprocessable:  # no configuration meets the target (the planner's 422)
        return 0.0
    return plan.configs[0].expected.tokens_per_s_per_device


def planner_against_measured(rows, groups, catalog, run_of) -> None:
    """Per device with SGLang runs: the serving planner (8 devices, calibration 'kernels', the engine's fits made
    without this device's runs) against the best measured output tokens/s per GPU at the same TPOT target: searching
    every concurrency up to 512 and only those the device's runs measured (InferenceX sweeps 4 to 64 in flight, so
    the best measured at a loose target is often its largest concurrency, not the device's best)."""
    from unittest import mock

    from service.translation.serving.inferencex import serving_request

    print("## The planner's best at an interactivity target against the best measured (the device's runs left out of "
          "every fit)\n")
    print("| device | precision | input / output | tokens/s per user | best measured (output tokens/s per GPU) | "
          "planner, measured concurrencies | planner, any concurrency |")
    print("|---|---|---|---|---|---|---|")
    ratios: dict[tuple[str, str], list[float]] = defaultdict(list)
    for device in ("amd-mi355x", "nvidia-b200", "nvidia-b300"):
        lines, carried = without(device, groups, rows, run_of)
        patches = [mock.patch(f"service.translation.serving.{module}.{name}", return_value=value)
                   for module, name, value in (("plans", "engine_calibrations", lines),
                                               ("analyses", "engine_calibrations", lines),
                                               ("analyses", "carried_scheduling_calibrations", carried),
                                               ("plan_tails", "carried_scheduling_calibrations", carried))]
        for patch in patches:
            patch.start()
        try:
            for precision in ("fp8", "fp4"):
                for shape in ((1024, 1024), (1024, 8192), (8192, 1024)):
                    runs = sglang_runs(rows, device, precision, shape)
                    if not runs:
                        continue
                    dtypes = serving_request(runs[0])["dtypes"]
                    for per_user in INTERACTIVITY:
                        met = [r["metrics"]["output_tput_per_gpu"] for r in runs
                               if r["metrics"]["median_tpot"] <= 1 / per_user]
                        if not met:
                            continue
                        best = max(met)
                        in_range = max(planned_best(catalog, device, dtypes, shape, per_user, c)
                                       for c in sorted({r["conc"] for r in runs}))
                        anywhere = planned_best(catalog, device, dtypes, shape, per_user)
                        for precisions in (precision, "fp8 and fp4"):
                            ratios[("measured", precisions)].append(in_range / best)
                            ratios[("any", precisions)].append(anywhere / best)
                        print(f"| {device} | {precision} | {shape[0]:,} / {shape[1]:,} | {per_user} | {best:,.0f} | "
                              f"{in_range:,.0f} ({in_range / best:.2f}x) | {anywhere:,.0f} ({anywhere / best:.2f}x) |")
        finally:
            for patch in patches:
                patch.stop()
    for (name, precisions), values in sorted(ratios.items()):
        within = sum(1 / 1.5 <= r <= 1.5 for r in values)
        print(f"\nplanner at {name} concurrency, {precisions}: {within} of {len(values)} within 1.5x of the best measured; "
              f"planner / measured median {statistics.median(values):.2f}, from {min(values):.2f} to "
              f"{max(values):.2f}")
    print()


def report(checked_on: str, predicted: dict[str, list]) -> None:
    print(f"## Each device's runs predicted from the other devices' (engine scopes with two devices or more), checked "
          f"on {checked_on}\n")
    print("| device | runs | basis | TPOT error median | p90 | TTFT error median | p90 |")
    print("|---|---|---|---|---|---|---|")
    tables = {name: per_device(p) for name, p in predicted.items()}
    for device in tables["kernels"]:
        for name, table in tables.items():
            runs, tm, tp, fm, fp = table[device]
            print(f"| {device} | {runs} | {name} | {tm:.1%} | {tp:.1%} | {fm:.1%} | {fp:.1%} |")
    for name, p in predicted.items():
        errors = [abs(t / m - 1) for _, _, t, m, _, _ in p]
        pairs, right = orderings(p)
        print(f"\n{name}: all {len(errors)} held-out runs, TPOT {np.median(errors):.1%} median, "
              f"{np.percentile(errors, 90):.1%} p90; pairs of devices measured >= {GAP - 1:.0%} apart: "
              f"{right} of {pairs} ordered as measured")
    print()


def across_precisions(groups) -> None:
    """Each engine's line fitted in one weights' type (every device's newest runs) predicting its runs in the other
    (fp8 and fp4), beside the same runs predicted within their type with their device left out: what carrying a line
    to an unmeasured type (engines.CARRIED_PRECISIONS: bf16 reads fp8's) is checked by."""
    from service.core.expectations.engines import across_types, left_out, tpot_errors

    across, within = [], []
    print("| engine | weights | speculative | runs | TPOT error, the other type's line: median / p90 | "
          "within the type, device left out: median |")
    print("|---|---|---|---|---|---|")
    for (engine, precision, method), carried in across_types(groups).items():
        points = groups[(engine, precision, method)]
        own = [e for device, runs in left_out(points)
               if len(others := [p for p in points if p.device_id != device]) >= 3 for e in tpot_errors(others, runs)]
        across += carried
        within += own
        print(f"| {engine} | {precision} | {method} | {len(points)} | {np.median(carried):.1%} / "
              f"{np.percentile(carried, 90):.1%} | {f'{np.median(own):.1%}' if own else '-'} |")
    print(f"\nAcross weights' types: {len(across)} runs, TPOT {np.median(across):.1%} median, "
          f"{np.percentile(across, 90):.1%} p90; within a type, device left out: {len(within)} runs, "
          f"{np.median(within):.1%} median, {np.percentile(within, 90):.1%} p90\n")


def across_models(dsr1, gpt_oss, layers: dict[str, int]) -> None:
    """Each engine's line fitted to its DeepSeek-R1 runs (every device's newest) predicting its gpt-oss-120b runs, a
    model it never saw (dense attention with sinks and a sliding window, 128 small experts in MXFP4), its overheads as
    fitted and scaled to gpt-oss's layers (EngineCalibration.for_layers, what the service does); and vLLM's, fitted
    to gpt-oss alone, with each device left out in turn."""
    from service.core.expectations.engines import carried_to_model, fit_engine_calibration, left_out, predicted

    print("| engine | weights | gpt-oss runs | devices | fitted to | TPOT error: median / p90 | TTFT error: median |")
    print("|---|---|---|---|---|---|---|")
    carried: list[float] = []
    for (engine, precision, method), points in sorted(gpt_oss.items()):
        devices = ", ".join(sorted({p.device_id for p in points}))
        if len(train := dsr1.get((engine, precision, method), [])) >= 3:
            fitted = fit_engine_calibration(train, engine=engine, precision=precision, speculative=method, source="",
                                            layers=layers["dsr1"])
            for label, to_layers in (("as fitted", layers["dsr1"]), ("per layer", layers["gptoss"])):
                tpot, ttft = carried_to_model(fitted, to_layers, points)
                errors = _across_models_row(engine, precision, points, devices,
                                            f"DeepSeek-R1 ({len(train)} runs), {label}", points, tpot, ttft)
            carried += errors  # the last line's: per layer, as the service carries it
            continue
        pairs = [(predicted([p for p in points if p.device_id != device], runs), runs)
                 for device, runs in left_out(points)]
        tpot = [t for (times, _), _ in pairs for t in times]
        ttft = [t for (_, times), _ in pairs for t in times]
        _across_models_row(engine, precision, points, devices, "gpt-oss, its device left out",
                           [p for _, runs in pairs for p in runs], tpot, ttft)
    print(f"\nDeepSeek-R1 lines carried to gpt-oss per layer: {len(carried)} runs, TPOT {np.median(carried):.1%} median, "
          f"{np.percentile(carried, 90):.1%} p90\n")


def _across_models_row(engine, precision, points, devices, basis, tested, tpot, ttft) -> list[float]:
    from service.core.expectations.serving_runs import relative_errors

    tpot_errors = list(relative_errors(tpot, [p.point.tpot_s for p in tested]))
    ttft_errors = relative_errors(ttft, [p.point.ttft_s for p in tested])
    print(f"| {engine} | {precision} | {len(points)} | {devices} | {basis} | {np.median(tpot_errors):.1%} / "
          f"{np.percentile(tpot_errors, 90):.1%} | {np.median(ttft_errors):.1%} |")
    return tpot_errors


def main() -> None:
    os.environ.setdefault("ROOFLINE_LOG_LEVEL", "WARNING")
    from fastapi.testclient import TestClient

    from schemas.serving import ServingAnalysisRequest
    from service.main import create_app
    from service.persistence.catalog import DATA_DIR, shipped_gpt_oss_runs
    from service.runtime.config import Settings
    from service.translation.serving.analyses import bound_and_composed, unit_run
    from service.translation.serving.inferencex import engine_points, model_layers, newest_runs

    rows = json.loads((DATA_DIR / "serving-runs" / "inferencex-dsr1.json").read_text())["rows"]
    with tempfile.TemporaryDirectory() as folder:
        app = create_app(Settings(database_url=f"sqlite:///{folder}/bench.db", log_level="WARNING"))
        with TestClient(app) as client:
            catalog = app.state.catalog
            deployments = {}

            def of(body):
                key = json.dumps(body, sort_keys=True)
                if key not in deployments:
                    deployments[key] = bound_and_composed(ServingAnalysisRequest.model_validate(body), catalog)
                return deployments[key]

            newest = newest_runs(rows)
            fitted = {"kernels": engine_points(newest, of), "bounds only": engine_points(newest, of, on_bounds=True)}
            every = {"kernels": engine_points(rows, of), "bounds only": engine_points(rows, of, on_bounds=True)}
            report(f"the newest run of each configuration ({len(newest)} of {len(rows)} rows: what the shipped fits "
                   "are fitted to)", {name: held_out(groups) for name, groups in fitted.items()})
            report(f"every run ({len(rows)} rows: older engines' runs of the same configurations too), by the same "
                   "fits", {name: held_out(fitted[name], every[name]) for name in fitted})
            print("## An engine's line carried across weights' types\n")
            across_precisions(fitted["kernels"])
            print("## An engine's line carried to another model (gpt-oss-120b, InferenceX's means)\n")
            across_models(fitted["kernels"], engine_points(newest_runs(shipped_gpt_oss_runs()), of),
                          model_layers(catalog))
            planner_against_measured(newest, fitted["kernels"], catalog, lambda body: unit_run(
                ServingAnalysisRequest.model_validate(body), catalog, on_kernels=True))
            h200 = [serving_body(device, c) for c in range(1, 1 + ROUNDS * PER_ROUND)
                    for device in ("nvidia-h200-sxm",)]
            ratio, with_, without = costs(client, h200)
            print(f"\nCost of an answer (DeepSeek-V3 fp8 on 8 H200s, {ROUNDS} rounds of {PER_ROUND} distinct "
                  f"bodies): with expectations (basis kernels) {with_ * 1e3:.2f} ms, without {without * 1e3:.2f} ms; "
                  f"median of the rounds' ratios {ratio:.2f}x")


def serving_body(device: str, concurrency: int) -> dict:
    return {"model_id": "deepseek-v3", "device_id": device, "input_len": 1024, "output_len": 1024,
            "concurrency": concurrency, "tensor_parallel": 8, "engine": "sglang",
            "dtypes": {"weights": "fp8", "activations": "fp8", "kv_cache": "fp8", "weight_group_size": 16384,
                       "weight_scale_bytes": 4}}


if __name__ == "__main__":
    main()
