"""Writes tests/data/aiconfigurator_collectives.json, the measured collectives the bound is held to
(tests/core/test_collective_bounds.py), from NVIDIA AIConfigurator's public tables (PyPI `aiconfigurator-core`
0.12.0, Apache-2.0), which the project does not depend on: a developer refreshes them by hand,

    .venv/bin/pip download aiconfigurator-core==0.12.0 --no-deps -d /tmp/aic && unzip -q -o /tmp/aic/*.whl -d /tmp/aic
    .venv/bin/pip install pyarrow
    .venv/bin/python scripts/import_aiconfigurator_collectives.py /tmp/aic/aiconfigurator_core/systems/data \\
        > tests/data/aiconfigurator_collectives.json

Per catalog device AIConfigurator measured (service/translation/kernels/aiconfigurator.py's DEVICES), the newest version
of each table:
- all-reduce: `comm/<engine>/<version>/custom_allreduce_perf.parquet` for TensorRT-LLM, SGLang and vLLM, each
  engine's kernel as it serves (TensorRT-LLM's own; SGLang's and vLLM's captured in a CUDA graph and eager), bf16;
- all-gather, reduce-scatter and all-reduce through NCCL: `comm/nccl/<version>/nccl_perf.parquet`, fp16.
Their message_size counts elements (AIConfigurator's models pass tokens x hidden; for an all-gather, the gathered
buffer): a row here is (elements, seconds), the median where a size was timed more than once.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pyarrow.parquet as pq
from packaging.version import Version

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from service.translation.kernels.aiconfigurator import DEVICES, PACKAGE

KINDS = {"all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reducescatter"}


def newest(folder: Path, name: str) -> Path | None:
    found = [(Version(path.parent.name), path) for path in folder.glob(f"*/{name}")]
    return max(found)[1] if found else None


def tables_of(system: str, device_id: str, root: Path):
    sources = [newest(root / system / "comm" / engine, "custom_allreduce_perf.parquet")
               for engine in ("trtllm", "sglang", "vllm")] + [newest(root / system / "comm" / "nccl", "nccl_perf.parquet")]
    for path in filter(None, sources):
        frame = pq.read_table(path).to_pydict()
        kernel = frame.get("backend") or frame.get("implementation") or [f"nccl {path.parent.name}"] * len(frame["op_name"])
        dtype = frame.get("allreduce_dtype") or frame.get("nccl_dtype")
        timings: dict[tuple[str, str, int], dict[int, list[float]]] = {}
        for op, ranks, size, latency, kernel_, dtype_ in zip(frame["op_name"], frame["num_gpus"], frame["message_size"],
                                                             frame["latency"], kernel, dtype, strict=True):
            if op in KINDS and dtype_ in ("bfloat16", "half"):
                timings.setdefault((KINDS[op], kernel_, int(ranks)), {}).setdefault(int(size), []).append(latency * 1e-3)
        for (kind, kernel_, ranks), by_size in sorted(timings.items()):
            yield {"device_id": device_id, "kind": kind, "kernel": kernel_, "ranks": ranks,
                   "source": f"{PACKAGE}: systems/data/{system}/comm/{path.parent.parent.name}/{path.parent.name}/"
                             f"{path.name}",
                   "elements_and_seconds": [[size, statistics.median(by_size[size])] for size in sorted(by_size)]}


def main(root: Path) -> None:
    tables = [table for system, device_id in DEVICES.items() for table in tables_of(system, device_id, root)]
    json.dump({"source": f"{PACKAGE}, systems/data/<system>/comm (NVIDIA, Apache-2.0)", "bytes_per_element": 2,
               "tables": tables}, sys.stdout, indent=None, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
