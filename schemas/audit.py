"""The audit trail of writes."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field


class AuditEntryPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: int
    at: datetime = Field(description="When the write was committed (UTC)")
    writer: str = Field(description="The label of the writer token that sent it (never the token)")
    method: str = Field(description="The HTTP method: POST, PUT, PATCH or DELETE")
    path: str = Field(description="The path written to (its first 300 characters)")
    request_id: str = Field(description="Its X-Request-ID, to find its log lines")
