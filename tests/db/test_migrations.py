"""The real migrations on an empty database: schema, seed, and agreement with the models."""

import json

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from service.persistence.catalog import model_catalog, nominal_catalog
from service.persistence.migrate import upgrade
from service.persistence.tables import metadata
from tests.conftest import TEAM_DATASHEETS


def test_upgrade_on_empty_database_creates_and_seeds(empty_database_url):
    url = empty_database_url
    upgrade(url)
    engine = create_engine(url)
    with engine.connect() as connection:
        assert {"devices", "benchmarks", "models", "catalog_state"} <= set(inspect(connection).get_table_names())
        count = connection.execute(text("select count(*) from devices")).scalar_one()
        assert count == len(nominal_catalog())
        assert connection.execute(text("select count(*) from models")).scalar_one() == len(model_catalog())
        # The models and the migrations agree (the equivalent of `alembic check`).
        diff = compare_metadata(MigrationContext.configure(connection, opts={"compare_type": True}), metadata)
        assert diff == []
    upgrade(url)  # idempotent: a second run at head changes nothing
    with engine.connect() as connection:
        assert connection.execute(text("select count(*) from devices")).scalar_one() == count
    engine.dispose()


def test_catalog_numbers_are_positive_and_sourced():
    for device in nominal_catalog():
        assert device["memory_capacity_bytes"] > 0
        for peak in device["compute_peaks"]:
            assert peak["flops_per_s"] > 0 and peak["citation"].strip(), (device["id"], peak)
        levels = {level["level"] for level in device["memory_levels"]}
        assert "hbm" in levels
        for level in device["memory_levels"]:
            assert level["bandwidth_bytes_per_s"] > 0 and level["citation"].strip()
        for name in ("sm_count", "boost_clock_hz", "tdp_w", "interconnect_bandwidth_bytes_per_s"):
            if device.get(name) is not None:
                assert device[name] > 0 and device["citations"][name].strip(), (device["id"], name)


def test_catalog_covers_the_team_datasheets_with_dense_peaks():
    datasheets = json.loads(TEAM_DATASHEETS.read_text())["devices"]
    catalog = {d["id"]: d for d in nominal_catalog()}
    for sheet in datasheets:
        device = catalog[sheet["id"]]
        assert device["memory_levels"][0]["bandwidth_bytes_per_s"] == sheet["memory"]["bandwidth_gbps"] * 1e9
        sparse = (sheet.get("sparsity") or {}).get("sparse_values") or {}
        for peak in device["compute_peaks"]:
            if peak["unit"] == "tensor" and peak["dtype"] in sparse:
                # A dense peak is half the with-sparsity figure, never equal to it.
                assert peak["flops_per_s"] < sparse[peak["dtype"]] * 1e12, (sheet["id"], peak["dtype"])


def test_upgrade_from_the_previous_revision_keeps_rows(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade(url, "0001")
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text(
            "insert into devices (id, name, vendor, memory_capacity_bytes, compute_peaks, memory_levels, citations, "
            "origin, created_at, updated_at) values ('lab-card', 'Lab card', 'ACME', 1024, "
            "'[{\"dtype\": \"bf16\", \"unit\": \"tensor\", \"flops_per_s\": 1e12, \"citation\": \"lab\"}]', "
            "'[{\"level\": \"hbm\", \"bandwidth_bytes_per_s\": 1e11, \"citation\": \"lab\"}]', '{}', 'user', "
            "'2026-01-01 00:00:00', '2026-01-01 00:00:00')"))
        seeded = connection.execute(text("select count(*) from devices")).scalar_one()
    upgrade(url)
    with engine.connect() as connection:
        assert connection.execute(text("select count(*) from devices")).scalar_one() == seeded
        row = connection.execute(text("select name, base_device_id from devices where id = 'lab-card'")).one()
        assert tuple(row) == ("Lab card", None)
        assert "benchmarks" in inspect(connection).get_table_names()
    engine.dispose()


def test_the_head_read_from_the_revision_files_is_alembics():
    from alembic.script import ScriptDirectory

    from service.persistence.migrate import alembic_config, head_revision

    assert head_revision() == ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def test_a_worker_on_a_migrated_database_starts_without_alembic(empty_database_url):
    """The start-up check reads the revision with SQLAlchemy: alembic (11 MB a worker, for good) is imported only
    when there is something to migrate."""
    import os
    import subprocess
    import sys

    from service.persistence.migrate import at_head

    assert not at_head(empty_database_url)
    upgrade(empty_database_url)
    assert at_head(empty_database_url)
    script = ("import asyncio, sys\nfrom service.main import create_app\napp = create_app()\n"
              "async def start():\n    async with app.router.lifespan_context(app):\n        pass\n"
              "asyncio.run(start())\nprint('alembic' in sys.modules)")
    environment = {**os.environ, "ROOFLINE_DATABASE_URL": empty_database_url, "ROOFLINE_MIGRATE_ON_START": "true",
                   "ROOFLINE_LOG_LEVEL": "WARNING"}
    started = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr
    assert started.stdout.strip().splitlines()[-1] == "False"


def test_a_database_from_before_the_2025_26_devices_gains_them(tmp_path):
    """A database at 0013 whose catalog predates the five devices (deleted here, as if never seeded) gets them, with
    the fields later revisions added (node_size) as shipped; a catalog device a user deleted before 0013 is not
    what this covers (it stays deleted: the revision only adds the five ids)."""
    added = ("nvidia-b300", "nvidia-gb200", "nvidia-gb300", "amd-mi325x", "amd-mi355x")
    url = f"sqlite:///{tmp_path / 'before.db'}"
    upgrade(url, "0013")
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text("delete from devices where id in ('nvidia-b300', 'nvidia-gb200', 'nvidia-gb300', "
                                "'amd-mi325x', 'amd-mi355x')"))
    upgrade(url)
    shipped = {d["id"]: d for d in nominal_catalog()}
    with engine.connect() as connection:
        rows = connection.execute(text("select id, node_size, origin from devices where id in "
                                       "('nvidia-b300', 'nvidia-gb200', 'nvidia-gb300', 'amd-mi325x', "
                                       "'amd-mi355x')")).all()
    engine.dispose()
    assert {row[0]: (row[1], row[2]) for row in rows} == {i: (shipped[i]["node_size"], "catalog") for i in added}
