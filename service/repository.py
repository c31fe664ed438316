"""Every query and commit of the service. Functions take the session and keyword arguments only."""

from __future__ import annotations

from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from service.errors import AlreadyExists, DeviceNotFound
from service.models import Device, utcnow


def list_devices(session: Session) -> list[Device]:
    return list(session.exec(select(Device).order_by(Device.id)))


def get_device(session: Session, *, device_id: str) -> Device:
    device = session.get(Device, device_id)
    if device is None:
        raise DeviceNotFound(device_id)
    return device


def create_device(session: Session, *, device_id: str, spec: dict[str, Any], origin: str = "user") -> Device:
    now = utcnow()
    device = Device(id=device_id, origin=origin, created_at=now, updated_at=now, **spec)
    session.add(device)
    try:
        session.commit()
    except IntegrityError:
        session.rollback()
        raise AlreadyExists("device", device_id) from None
    session.refresh(device)
    return device


def replace_device(session: Session, *, device_id: str, spec: dict[str, Any]) -> Device:
    device = get_device(session, device_id=device_id)
    for name, value in spec.items():
        setattr(device, name, value)
    device.updated_at = utcnow()
    session.add(device)
    session.commit()
    session.refresh(device)
    return device


def delete_device(session: Session, *, device_id: str) -> None:
    device = get_device(session, device_id=device_id)
    session.delete(device)
    session.commit()


def ping(session: Session) -> None:
    session.exec(select(1)).one()
