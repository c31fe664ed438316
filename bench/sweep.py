"""How long a 4,096-point model sweep takes, in-process through the full request path:
`make bench-sweep` (or `python bench/sweep.py`). Prints the median of 7 runs per swept parameter."""

from __future__ import annotations

import statistics
import tempfile
import time
import warnings

warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")

from fastapi.testclient import TestClient  # noqa: E402

from service.main import create_app  # noqa: E402
from service.runtime.config import Settings  # noqa: E402

REQUEST = {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-70b", "phase": "decode", "batch_size": 32,
           "seq_len": 4096, "tensor_parallel": 4}
RUNS = 7


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        settings = Settings(database_url=f"sqlite:///{scratch}/sweep.db", log_level="WARNING")
        with TestClient(create_app(settings)) as client:
            print(f"4,096-point sweeps of llama-3.1-70b decode (TP 4) on nvidia-h100-sxm, median of {RUNS} runs:")
            for parameter in ("seq_len", "batch_size"):
                body = {"endpoint": "model", "parameter": parameter, "request": REQUEST,
                        "range": {"start": 1, "stop": 4096, "step": 1}}
                times = []
                for _ in range(RUNS):
                    started = time.perf_counter()
                    response = client.post("/v1/analyze/sweep", json=body)
                    times.append(time.perf_counter() - started)
                    assert response.status_code == 200 and len(response.json()["rows"]) == 4096
                print(f"  {parameter:<10} {statistics.median(times):.3f} s  (min {min(times):.3f}, max {max(times):.3f})")


if __name__ == "__main__":
    main()
