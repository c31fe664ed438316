"""What a published config with its quantisation lists costs: a model step answered from NVIDIA's Qwen3.5-397B
NVFP4 config.json as shipped (13 KB of compact JSON) beside the same config with its ignore list grown to 3 MB (an entry for every
expert's projections, as MiniMax-M3 NVFP4's 3 MB config lists them), in-process through the HTTP stack, rounds
alternating, each request a distinct batch size so no cached row answers; and /healthz's latency while a worker
reads the large ones.

    .venv/bin/python bench/large_configs.py
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROUNDS = 9
PER_ROUND = 5
CONFIG = (Path(__file__).resolve().parent.parent / "tests" / "data" / "aiconfigurator_model_configs"
          / "nvidia--Qwen3.5-397B-A17B-NVFP4.json")


def grown(config: dict, size: int) -> dict:
    """The config with per-expert ignore entries appended until its JSON reaches `size` bytes."""
    q = dict(config["quantization_config"])
    names, layer, expert = list(q["ignore"]), 0, 0
    text = json.dumps(config)
    while len(text) + sum(len(n) + 4 for n in names[len(q["ignore"]):]) < size:
        names.append(f"model.language_model.layers.{layer}.mlp.experts.{expert}.down_proj.input_quantizer")
        expert = (expert + 1) % 512
        layer += expert == 0
    q["ignore"] = names
    return {**config, "quantization_config": q}


def main() -> None:
    os.environ.setdefault("ROOFLINE_LOG_LEVEL", "WARNING")
    from fastapi.testclient import TestClient

    from service.main import create_app
    from service.runtime.config import Settings

    shipped = json.loads(CONFIG.read_text())
    large = grown(shipped, 3_000_000)
    sizes = {name: len(json.dumps(c)) for name, c in (("shipped", shipped), ("large", large))}
    with tempfile.TemporaryDirectory() as folder, TestClient(create_app(Settings(
            database_url=f"sqlite:///{folder}/b.db", log_level="WARNING"))) as client:
        times: dict[str, list[float]] = {"shipped": [], "large": []}
        batch = 1
        for round_ in range(ROUNDS):
            for name in (("shipped", "large") if round_ % 2 == 0 else ("large", "shipped")):
                config = shipped if name == "shipped" else large
                start = time.perf_counter()
                for _ in range(PER_ROUND):
                    batch += 1
                    response = client.post("/v1/analyze/model", json={
                        "device_id": "nvidia-b200", "model": config, "phase": "decode", "seq_len": 1024,
                        "batch_size": batch, "tensor_parallel": 8})
                    assert response.status_code == 200, response.text[:300]
                times[name].append((time.perf_counter() - start) / PER_ROUND)
        probes: list[float] = []
        done = threading.Event()

        def load():
            nonlocal batch
            while not done.is_set():
                batch += 1
                client.post("/v1/analyze/model", json={"device_id": "nvidia-b200", "model": large, "phase": "decode",
                                                       "seq_len": 1024, "batch_size": batch, "tensor_parallel": 8})

        worker = threading.Thread(target=load)
        worker.start()
        for _ in range(40):
            start = time.perf_counter()
            assert client.get("/healthz").status_code == 200
            probes.append(time.perf_counter() - start)
            time.sleep(0.02)
        done.set()
        worker.join()
    shipped_s, large_s = statistics.median(times["shipped"]), statistics.median(times["large"])
    print(f"model step from the shipped config ({sizes['shipped']:,} bytes): {shipped_s * 1e3:.1f} ms median; from the "
          f"same config grown to {sizes['large']:,} bytes: {large_s * 1e3:.1f} ms ({large_s / shipped_s:.1f}x); "
          f"/healthz while large ones are read: {statistics.median(probes) * 1e3:.1f} ms median, "
          f"{max(probes) * 1e3:.1f} ms at most")


if __name__ == "__main__":
    main()
