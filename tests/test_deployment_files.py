"""The compose files, read (there is no Docker daemon here to run them): what each starts, and how; and every
install held to the pinned versions."""

import re
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement

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
    install = next(i for i, line in enumerate(lines) if "-r /tmp/requirements.txt" in line)
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


def pinned_versions() -> dict[str, str]:
    found = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            found[re.sub(r"[-_.]+", "-", name).lower()] = version
    return found


def test_every_dependency_is_pinned_within_its_range():
    # A fresh clone resolves what constraints.txt names, not the newest release: transformers 5.25.0, published
    # after a landing, broke two cross-checks of a clone whose pyproject.toml allowed it.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    pins = pinned_versions()
    for text in wanted:
        requirement = Requirement(text)
        name = re.sub(r"[-_.]+", "-", requirement.name).lower()
        assert name in pins, f"{name} is not pinned in constraints.txt"
        assert requirement.specifier.contains(pins[name], prereleases=True), (name, pins[name], str(requirement))


def test_every_install_of_the_project_is_held_to_the_pins():
    installs = []
    for name in ("Makefile", "Dockerfile", "scripts/check_readme_cli.sh"):
        installs += [(name, line) for line in (ROOT / name).read_text().splitlines()
                     if re.search(r"pip install\b", line) and not line.lstrip().startswith("#")]
    # The torch line installs the Makefile's own exact pin (TORCH_CPU) and the project's editable install in the image
    # takes no dependencies; every other install names the constraints.
    unpinned = [(name, line) for name, line in installs
                if "--constraint" not in line and "TORCH_CPU" not in line and "--no-deps" not in line]
    assert len(installs) >= 6 and not unpinned, unpinned
