"""Concurrent writers to one calibration's scope: none gets a 500, and the stored calibration is the fit of every
stored measurement. On PostgreSQL each refit read without the other writers' uncommitted rows and both inserted the
calibration (an IntegrityError, and a fit of part of the rows left behind); SQLite serialised them already."""

import threading

import httpx

from tests.api.test_kernel_timings import DEVICE, SHAPES, by_hand
from tests.conftest import AUTH

WRITERS, WRITES = 12, 3


def race(send) -> list[int]:
    """Every writer's statuses, the writers released together."""
    statuses: list[int] = []
    start = threading.Barrier(WRITERS)

    def writer(index: int) -> None:
        with httpx.Client(timeout=60) as client:
            start.wait()
            for write in range(WRITES):
                statuses.append(send(client, index, write).status_code)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return statuses


def test_concurrent_kernel_timing_writers_leave_the_fit_of_every_timing(live_server):
    def send(client, index, write):
        # Each write a shape of its own (k varies), so every write changes the fit's points.
        timings = [{"operator": {"kind": "matmul", "m": m, "n": n, "k": k + 16 * (index * WRITES + write), "dtype": "bf16"},
                    "time_s": by_hand(m, n, k + 16 * (index * WRITES + write))[2]} for m, n, k in SHAPES]
        return client.post(f"{live_server}/v1/devices/{DEVICE}/kernel-timings", headers=AUTH,
                           json={"engine": "racers", "source": f"writer {index}", "timings": timings})

    statuses = race(send)
    assert statuses == [201] * (WRITERS * WRITES), statuses
    stored = httpx.get(f"{live_server}/v1/calibrations/kernel:measured:{DEVICE}:racers:bf16").json()
    assert stored["fitted_on"] == WRITERS * WRITES * len(SHAPES) == len(stored["residuals"])


def test_concurrent_serving_run_writers_leave_the_fit_of_every_run(live_server):
    from tests.api.test_serving_runs import ENGINE, LAYOUT, MODEL, WORKLOADS, native_runs

    with httpx.Client(base_url=live_server) as client:
        runs = native_runs(client, WORKLOADS[:3])

    def send(client, index, write):
        return client.post(f"{live_server}/v1/serving-runs", headers=AUTH, json={
            "format": "native", "device_id": DEVICE, "model_id": MODEL, "engine": ENGINE,
            "source": f"writer {index}.{write}", "deployment": LAYOUT, "runs": runs})

    statuses = race(send)
    assert statuses == [201] * (WRITERS * WRITES), statuses
    stored = httpx.get(f"{live_server}/v1/calibrations/serving:measured:{DEVICE}:{ENGINE}:{MODEL}:bf16:none").json()
    assert stored["fitted_on"] == WRITERS * WRITES * len(runs) == len(stored["run_residuals"])
