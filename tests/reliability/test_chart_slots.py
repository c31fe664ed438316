"""Charts render in a limiter of their own: slow charts queue among themselves, and analyses keep being answered."""

import threading

import httpx

from service.api.routes import plots


def test_slow_charts_never_hold_the_analyses_slots(live_server, monkeypatch):
    release, running, most = threading.Event(), [0], [0]
    lock = threading.Lock()

    def slow_chart(body, catalog):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        release.wait(30)
        with lock:
            running[0] -= 1
        return b"<svg/>"

    monkeypatch.setattr(plots, "plot_model_roofline", slow_chart)
    body = {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "phase": "decode", "batch_size": 1,
            "seq_len": 1024}
    answers = []
    # More charts than the thread pool has threads (40, anyio's default), fewer than the admission limit (64).
    charts = [threading.Thread(target=lambda: answers.append(
        httpx.post(f"{live_server}/v1/plot/model-roofline", json=body, timeout=60).status_code)) for _ in range(48)]
    for thread in charts:
        thread.start()
    try:
        # 48 charts in flight, none finished: analyses that run in the shared thread pool (a sweep, a training
        # step) are still answered.
        sweep = {"endpoint": "operator", "parameter": "operator.m", "values": [1, 64, 4096],
                 "request": {"device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": 1, "n": 4096,
                                                                          "k": 4096}}}
        training = {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "seq_len": 4096}
        assert httpx.post(f"{live_server}/v1/analyze/sweep", json=sweep, timeout=10).status_code == 200
        assert httpx.post(f"{live_server}/v1/analyze/training", json=training, timeout=10).status_code == 200
        assert answers == []
    finally:
        release.set()
        for thread in charts:
            thread.join(60)
    assert answers == [200] * 48
    # No more than the chart threads rendered at once.
    assert most[0] <= plots.CHART_THREADS
