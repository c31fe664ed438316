"""Where the CLI's questions go: the service's own code in this process, or a running service over HTTP.

Both answer with the JSON the HTTP API would send, and both turn an error into CliError with the
service's status, code, detail and fields, so the commands never care which one they talk to.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any, Protocol


class CliError(SystemExit):
    def __init__(self, status: int, error: dict[str, Any]):
        fields = "; ".join(f"{f['loc']}: {f['msg']}" for f in error.get("fields", []))
        super().__init__(f"error {status} {error.get('error')}: {error.get('detail')}" + (f" ({fields})" if fields else ""))
        self.status = status
        self.error = error


class Backend(Protocol):
    def devices(self) -> list[dict[str, Any]]: ...
    def models(self) -> list[dict[str, Any]]: ...
    def analyze(self, analysis: str, body: dict[str, Any]) -> dict[str, Any]: ...
    def plot(self, body: dict[str, Any]) -> bytes: ...


class LocalBackend:
    """The translation layer called directly, against the configured database (migrated first when
    ROOFLINE_MIGRATE_ON_START allows, as the server would), measured roofs included."""

    def __init__(self) -> None:
        from service.persistence.catalog import DeviceCatalog
        from service.persistence.db import make_engine
        from service.persistence.migrate import upgrade
        from service.runtime.config import get_settings

        settings = get_settings()
        if settings.migrate_on_start:
            upgrade(settings.database_url)
        self._engine = make_engine(settings.database_url)
        self._catalog = DeviceCatalog(make_engine(settings.database_url, connections=1))
        self._catalog.refresh()

    def close(self) -> None:
        self._catalog.close()
        self._engine.dispose()

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        from service.runtime.errors import ServiceError

        try:
            yield
        except ServiceError as exc:
            raise CliError(exc.status_code, {"error": exc.code, "detail": exc.detail, "fields": exc.fields}) from None

    def devices(self) -> list[dict[str, Any]]:
        from sqlmodel import Session

        from service.persistence import repository
        from service.translation.devices.views import device_summary

        with Session(self._engine) as session:
            return [device_summary(d).model_dump(mode="json") for d in repository.list_devices(session)]

    def models(self) -> list[dict[str, Any]]:
        from sqlmodel import Session

        from service.persistence import repository
        from service.translation.models.analyses import catalog_model, model_summary

        with Session(self._engine) as session, self._errors():
            return [model_summary(*catalog_model(self._catalog, row.id)).model_dump(mode="json")
                    for row in repository.list_models(session)]

    def analyze(self, analysis: str, body: dict[str, Any]) -> dict[str, Any]:
        from service.translation.analyses import run_analysis_json

        with self._errors():
            return json.loads(run_analysis_json(analysis, body, self._catalog))

    def plot(self, body: dict[str, Any]) -> bytes:
        from pydantic import ValidationError

        from schemas.plots import PlotRequest
        from service.runtime.errors import invalid_nested
        from service.translation.charts import plot_request

        with self._errors():
            try:
                request = PlotRequest.model_validate(body)
            except ValidationError as exc:
                raise invalid_nested(exc, ["body"]) from None
            return plot_request(request, self._catalog)


class RemoteBackend:
    """A running service over HTTP (httpx)."""

    def __init__(self, url: str, timeout_s: float = 120) -> None:
        import httpx

        self._client = httpx.Client(base_url=url, timeout=timeout_s)

    def close(self) -> None:
        self._client.close()

    def _call(self, method: str, path: str, body: dict | None = None):
        response = self._client.request(method, path, json=body)
        if response.status_code >= 400:
            try:
                error = response.json()
            except ValueError:
                error = {"error": "http_error", "detail": response.text[:200]}
            raise CliError(response.status_code, error)
        return response

    def devices(self) -> list[dict[str, Any]]:
        return self._call("GET", "/v1/devices").json()

    def models(self) -> list[dict[str, Any]]:
        return self._call("GET", "/v1/models").json()

    def analyze(self, analysis: str, body: dict[str, Any]) -> dict[str, Any]:
        path = f"/v1/plan/{analysis.removeprefix('plan-')}" if analysis.startswith("plan-") else f"/v1/analyze/{analysis}"
        return self._call("POST", path, body).json()

    def plot(self, body: dict[str, Any]) -> bytes:
        return self._call("POST", "/v1/plot/roofline", body).content


@contextlib.contextmanager
def backend(url: str | None) -> Iterator[Backend]:
    chosen = RemoteBackend(url) if url else LocalBackend()
    try:
        yield chosen
    finally:
        chosen.close()
