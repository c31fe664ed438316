"""Expectations where nobody has measured: each device's InferenceX runs left out in turn and predicted from its
kernel tables and the engine's costs fitted over the other devices (basis 'kernels'), beside the same engine's line
carried over on the bare bounds (no kernel tables); per device, the median and p90 TPOT and TTFT errors; how often
two devices measured at least 10 % apart (same engine, precision, speculative method, lengths and concurrency) are
ordered as measured; and what an answer with expectations costs beside one without (side by side, round by round,
every request a distinct body).

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


def held_out(groups):
    """(device, run key, predicted TPOT, measured TPOT, predicted TTFT, measured TTFT) of every run of an engine
    scope with two devices or more, each predicted by the fit to the other devices' runs, as the engine
    calibration's own check predicts it (engines.left_out, engines.predicted)."""
    from service.core.expectations.engines import left_out, predicted

    out = []
    for (engine, precision, method), points in sorted(groups.items()):
        for device, own in left_out(points):
            others = [p for p in points if p.device_id != device]
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
    pairs = right = 0
    for devices in medians.values():
        names = sorted(devices)
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


def main() -> None:
    os.environ.setdefault("ROOFLINE_LOG_LEVEL", "WARNING")
    from fastapi.testclient import TestClient

    from schemas.serving import ServingAnalysisRequest
    from service.main import create_app
    from service.persistence.catalog import DATA_DIR
    from service.runtime.config import Settings
    from service.translation.serving.analyses import bound_and_composed
    from service.translation.serving.inferencex import engine_points

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

            kernels = engine_points(rows, of)
            bounds = engine_points(rows, of, on_bounds=True)
            predicted = {"kernels": held_out(kernels), "bounds only": held_out(bounds)}
            print("## Each device's runs predicted from the other devices' (engine scopes with two devices or more)\n")
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
