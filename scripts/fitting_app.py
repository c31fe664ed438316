"""What the serving fits share: the shipped InferenceX rows every shipped fit is fitted to and the service's app on a
throwaway SQLite database, for scripts/fit_serving_calibration.py, fit_scheduling_calibration.py,
fit_engine_calibration.py and fit_carried_scheduling.py."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any


@contextmanager
def shipped_runs_app() -> Iterator[tuple[list[dict[str, Any]], Any, Any]]:
    """(the shipped runs the shipped fits are fitted to: the newest of each configuration, inferencex.newest_runs;
    the app, a TestClient on it), the app started and stopped around the block."""
    os.environ.setdefault("ROOFLINE_LOG_LEVEL", "WARNING")
    from fastapi.testclient import TestClient

    from service.main import create_app
    from service.persistence.catalog import shipped_runs
    from service.runtime.config import Settings
    from service.translation.serving.inferencex import newest_runs

    rows = newest_runs(shipped_runs())
    with tempfile.TemporaryDirectory() as folder:
        app = create_app(Settings(database_url=f"sqlite:///{folder}/fit.db", log_level="WARNING"))
        with TestClient(app) as client:
            yield rows, app, client


def dump_calibrations(model: str, fitted: list) -> None:
    """The shipped form of fitted calibrations, on stdout: what their numbers mean (`model`) and each one's fields."""
    json.dump({"model": model, "calibrations": [asdict(c) for c in fitted]}, sys.stdout, indent=1)
    sys.stdout.write("\n")
