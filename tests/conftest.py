"""Shared fixtures: a migrated SQLite template copied per test, and an app client against it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.config import Settings
from service.main import create_app
from service.migrate import upgrade

TOKEN = "test-token-7f3a"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SHARED = Path(__file__).resolve().parents[2] / "shared"


@pytest.fixture(scope="session")
def migrated_template(tmp_path_factory) -> Path:
    """Migrations run for real once per session; each test gets a copy of the resulting file."""
    path = tmp_path_factory.mktemp("template") / "roofline.db"
    upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture
def database_url(tmp_path, migrated_template) -> str:
    path = tmp_path / "roofline.db"
    shutil.copy(migrated_template, path)
    return f"sqlite:///{path}"


@pytest.fixture
def settings(database_url) -> Settings:
    return Settings(database_url=database_url, api_tokens=f"tester={TOKEN}", migrate_on_start=True)


@pytest.fixture
def client(settings):
    with TestClient(create_app(settings)) as test_client:
        yield test_client
