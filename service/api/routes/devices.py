"""Device catalog: reads are open, writes need a bearer token."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from schemas.devices import DeviceCreate, DevicePublic, DeviceSummary, DeviceUpdate, ProfileCreate
from service.api.deps import DevicePath, SessionDep, WriterDep
from service.api.responses import CONFLICT, INVALID, NOT_FOUND, UNAUTHORIZED
from service.persistence import repository
from service.persistence.catalog import nominal_catalog
from service.runtime.errors import DeviceNotFound
from service.translation.devices.views import device_public, device_summary, profile_spec, with_derived_peaks

router = APIRouter(prefix="/v1/devices", tags=["devices"])


@router.get("", summary="List devices", operation_id="list_devices",
            description="Every device in the catalog, summarised. Capacity in bytes, bandwidth in bytes/s, peaks in FLOP/s.")
def list_devices(session: SessionDep) -> list[DeviceSummary]:
    return [device_summary(device) for device in repository.list_devices(session)]


@router.get("/{device_id}", summary="Get a device", operation_id="get_device", responses=NOT_FOUND,
            description="The full specification: dense compute peaks per (dtype, unit) in FLOP/s, bandwidth per "
                        "memory level in bytes/s, capacity in bytes, and a citation for every number.")
def get_device(device_id: DevicePath, session: SessionDep) -> DevicePublic:
    return device_public(repository.get_device(session, device_id=device_id))


@router.post("", status_code=status.HTTP_201_CREATED, summary="Add a device", operation_id="create_device",
             responses={**UNAUTHORIZED, **CONFLICT, **INVALID},
             description="Adds a device. Units: FLOP/s, bytes/s, bytes, Hz, W. Every number needs a citation.")
def create_device(body: DeviceCreate, session: SessionDep, _writer: WriterDep) -> DevicePublic:
    device = repository.create_device(session, device_id=body.id, spec=with_derived_peaks(body.model_dump(exclude={"id"})))
    return device_public(device)


@router.put("/{device_id}", summary="Replace a device", operation_id="replace_device",
            responses={**UNAUTHORIZED, **NOT_FOUND, **INVALID},
            description="Replaces the whole specification of an existing device (fields left out take their defaults). "
                        "A catalog device so replaced reads origin 'catalog_modified'; POST .../restore brings the "
                        "shipped specification back.")
def replace_device(device_id: DevicePath, body: DeviceUpdate, session: SessionDep, _writer: WriterDep) -> DevicePublic:
    device = repository.replace_device(session, device_id=device_id, spec=with_derived_peaks(body.model_dump()))
    return device_public(device)


@router.post("/{device_id}/restore", summary="Restore a catalog device", operation_id="restore_device",
             responses={**UNAUTHORIZED, **NOT_FOUND},
             description="Puts a device of the shipped nominal catalog back as it ships (after a PUT changed it, or a "
                         "DELETE removed it); origin becomes 'catalog' again. Its benchmark submissions are kept. "
                         "404 for an id the shipped catalog does not have.")
def restore_device(device_id: DevicePath, session: SessionDep, _writer: WriterDep) -> DevicePublic:
    entry = next((e for e in nominal_catalog() if e["id"] == device_id), None)
    if entry is None:
        raise DeviceNotFound(device_id, "the shipped catalog has no such device to restore")
    return device_public(repository.restore_catalog_device(session, device_id=device_id, entry=entry))


@router.post("/{device_id}/profiles", status_code=status.HTTP_201_CREATED, summary="Create a device profile",
             operation_id="create_profile", responses={**UNAUTHORIZED, **NOT_FOUND, **CONFLICT, **INVALID},
             description="A new device that copies the base device's nominal specification (e.g. one cluster's H100s "
                         "capped at 500 W) and then carries its own benchmark submissions and effective roofs.")
def create_profile(device_id: DevicePath, body: ProfileCreate, session: SessionDep, _writer: WriterDep) -> DevicePublic:
    base = repository.get_device(session, device_id=device_id)
    device = repository.create_device(session, device_id=body.id, spec=profile_spec(base, body))
    return device_public(device)


@router.delete("/{device_id}", status_code=status.HTTP_204_NO_CONTENT, summary="Delete a device",
               operation_id="delete_device", responses={**UNAUTHORIZED, **NOT_FOUND},
               description="Removes a device. A deleted catalog device is not seeded again.")
def delete_device(device_id: DevicePath, session: SessionDep, _writer: WriterDep) -> Response:
    repository.delete_device(session, device_id=device_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
