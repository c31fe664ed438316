"""The compose files, read (there is no Docker daemon here to run them): what each starts, and how."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def compose(name: str) -> dict:
    return yaml.safe_load((ROOT / name).read_text())


def test_the_default_file_serves_sqlite_alone():
    services = compose("docker-compose.yml")["services"]
    assert list(services) == ["api"]
    assert services["api"]["restart"] == "unless-stopped"


def test_the_scale_out_file_never_starts_the_sqlite_service_and_restarts_everything():
    document = compose("docker-compose.scale-out.yml")
    services = document["services"]
    assert "api" not in services and {"postgres", "migrate", "api-1", "api-2", "lb"} <= set(services)
    for name, service in services.items():
        assert service.get("restart"), name
    for replica in ("api-1", "api-2"):
        environment = services[replica]["environment"]
        assert environment["ROOFLINE_MIGRATE_ON_START"] == "false"
        assert environment["ROOFLINE_DATABASE_URL"].startswith("postgresql+psycopg://")
    nginx = document["configs"]["nginx-conf"]["content"]
    # The client's request id survives the proxy; nginx's own 413 speaks the service's JSON.
    assert "map $$http_x_request_id" in nginx and "X-Request-ID $$roofline_request_id" in nginx
    assert "error_page 413" in nginx and '"error": "payload_too_large"' in nginx


def test_the_image_gives_matplotlib_a_writable_config_directory():
    assert "MPLCONFIGDIR=/tmp/matplotlib" in (ROOT / "Dockerfile").read_text()


def test_the_scale_out_database_password_comes_from_the_environment():
    text = (ROOT / "docker-compose.scale-out.yml").read_text()
    assert "roofline:roofline@" not in text and "POSTGRES_PASSWORD: roofline" not in text
    assert text.count("${POSTGRES_PASSWORD:?") == 3  # the server, the migration job and the replicas


def test_the_image_installs_dependencies_before_it_copies_the_code():
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    install = next(i for i, line in enumerate(lines) if "pip install -r /tmp/requirements.txt" in line)
    copy_code = next(i for i, line in enumerate(lines) if line.startswith("COPY service"))
    assert install < copy_code
    assert any("pip install --no-deps -e ." in line for line in lines[copy_code:])
    # Every server start goes through service.runtime.server: in-flight requests get a bounded time to finish on
    # SIGTERM there, and headers a bounded size.
    assert "python -m service.runtime.server" in lines[-1]
    scale_out = (ROOT / "docker-compose.scale-out.yml").read_text()
    makefile = (ROOT / "Makefile").read_text()
    assert "service.runtime.server" in scale_out and "service.runtime.server" in makefile
    assert "uvicorn service.main:app" not in scale_out + makefile + lines[-1]
