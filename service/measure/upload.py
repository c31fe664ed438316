"""A run's files posted to a service with a write token: the device created from the run's draft where the service
does not know it, the roofs as measured-roof benchmarks, the matmuls as kernel timings (which the service fits a
calibration to, answering with its cross-validated error)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx


class UploadError(RuntimeError):
    pass


def _checked(response: httpx.Response, what: str) -> Any:
    if response.status_code >= 400:
        raise UploadError(f"{what}: {response.status_code} {response.text[:500]}")
    return response.json() if response.content else None


def upload(client: httpx.Client, out: Path, device_id: str, token: str, *, create_device: bool = False) -> dict[str, Any]:
    """Posts the files of `out` for `device_id`; returns what the service fitted."""
    auth = {"Authorization": f"Bearer {token}"}
    created = False
    if client.get(f"/v1/devices/{device_id}").status_code == 404:
        if not create_device:
            raise UploadError(f"device {device_id} is not in the service: pass --create-device to create it from "
                              f"{out / 'device.json'}, or give a catalog device's id")
        draft = {**json.loads((out / "device.json").read_text()), "id": device_id}
        _checked(client.post("/v1/devices", json=draft, headers=auth), "creating the device")
        created = True
    for benchmark in json.loads((out / "benchmarks.json").read_text()):
        _checked(client.post(f"/v1/devices/{device_id}/benchmarks", json=benchmark, headers=auth),
                 f"posting the {benchmark['kind']} roof")
    body = json.loads((out / "kernel_timings.json").read_text())
    fitted = _checked(client.post(f"/v1/devices/{device_id}/kernel-timings", json=body, headers=auth),
                      "posting the kernel timings")
    return {"device_created": created, "timings": len(fitted["created"]),
            "calibrations": [{"id": c["id"], "fitted_on": c["fitted_on"], "median_error": c["median_error"],
                              "p90_error": c["p90_error"], "checked_by": c["checked_by"]} for c in fitted["calibrations"]],
            "not_fitted": fitted.get("not_fitted", [])}
