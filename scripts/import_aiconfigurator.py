"""Writes NVIDIA AIConfigurator's measured GEMM table of one system and engine as the CSV body of
POST /v1/devices/{id}/kernel-timings/csv, so a device's calibration can be fitted to it (another engine's than the
shipped TensorRT-LLM one, or to check your own kernels against). The project does not depend on AIConfigurator:

    .venv/bin/pip download aiconfigurator-core --no-deps -d /tmp/aic && unzip -q -o /tmp/aic/*.whl -d /tmp/aic
    .venv/bin/pip install pyarrow
    .venv/bin/python scripts/import_aiconfigurator.py /tmp/aic/aiconfigurator_core/systems/data h100_sxm vllm > t.csv
    split -l 10000 ... (a write takes at most 10,000 rows), then for each part, its header line first:
    curl -X POST 'http://127.0.0.1:8000/v1/devices/nvidia-h100-sxm/kernel-timings/csv?engine=vllm&source=AIC' \
        -H "Authorization: Bearer $TOKEN" -H 'Content-Type: text/csv' --data-binary @part.csv

`--every N` keeps every N-th GEMM (a table holds tens of thousands; a calibration fits on a tenth as well).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from service.translation.kernels.aiconfigurator import DEVICES, timings_csv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", type=Path, help="aiconfigurator_core/systems/data")
    parser.add_argument("system", help=f"their system name ({', '.join(DEVICES)} map to catalog devices)")
    parser.add_argument("engine", help="their engine folder: trtllm, vllm or sglang")
    parser.add_argument("--every", type=int, default=1, help="keep every N-th GEMM (default all)")
    args = parser.parse_args()
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise SystemExit("reading Parquet needs pyarrow: .venv/bin/pip install pyarrow") from None

    paths = sorted((args.data / args.system / "gemm" / args.engine).glob("*/gemm_perf.parquet"))
    if not paths:
        raise SystemExit(f"no gemm_perf.parquet under {args.data / args.system / 'gemm' / args.engine}")
    table = pq.read_table(max(paths, key=lambda p: p.stat().st_mtime),
                          columns=["m", "n", "k", "gemm_dtype", "latency"]).to_pydict()
    rows = list(zip(table["m"], table["n"], table["k"], table["gemm_dtype"], table["latency"], strict=True))
    sys.stdout.write(timings_csv(rows[::args.every]))


if __name__ == "__main__":
    main()
