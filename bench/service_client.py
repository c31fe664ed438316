"""The service in process on a fresh SQLite database, with a test client: what a bench that posts analyses runs on."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def service_client() -> Iterator:
    """A TestClient of a fresh app (its database a temporary file, its logs quiet but for warnings)."""
    os.environ.setdefault("ROOFLINE_LOG_LEVEL", "WARNING")
    from fastapi.testclient import TestClient

    from service.main import create_app
    from service.runtime.config import Settings

    with tempfile.TemporaryDirectory() as folder:
        app = create_app(Settings(database_url=f"sqlite:///{folder}/bench.db", log_level="WARNING"))
        with TestClient(app) as client:
            yield client
