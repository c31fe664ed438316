"""Writes service/data/calibrations/gemm_lattices.npz: each shipped GEMM calibration's nearest-shapes correction,
tabulated on its lattice (service/core/expectations/kernels.py, ShapeCorrection) from the fitted shapes gemm.json
holds. The service reads these tables instead of tabulating them at the first answer that needs one (a neighbour
search of up to 33^3 lattice points among thousands of shapes, and scipy's 40 MB in every worker). Only a developer
runs it, after scripts/fit_gemm_calibration.py (which calls it):

    .venv/bin/python scripts/tabulate_gemm_lattices.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def tabulate() -> Path:
    from service.core.expectations.kernels import KernelCalibration
    from service.persistence.catalog import GEMM_CALIBRATIONS_PATH, GEMM_LATTICES_PATH, lattice_key

    tables = {}
    for entry in json.loads(GEMM_CALIBRATIONS_PATH.read_text())["calibrations"]:
        lattice = KernelCalibration(**entry).lattice()  # built here from its anchors, not read back
        if lattice is None:
            continue
        key = lattice_key(entry["device_id"], entry["dtype"])
        tables |= {f"{key}:low": lattice.low, f"{key}:step": np.array(lattice.step), f"{key}:values": lattice.values}
    np.savez_compressed(GEMM_LATTICES_PATH, **tables)
    return GEMM_LATTICES_PATH


if __name__ == "__main__":
    print(f"wrote {tabulate()}")
