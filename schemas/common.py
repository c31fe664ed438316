"""Types shared by every part of the contract."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, FiniteFloat

DTypeName = Literal["fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp8_e4m3", "fp8_e5m2", "int8", "int4", "fp4"]
IndexDTypeName = Literal["int32", "int64"]
UnitName = Literal["tensor", "vector"]
MemoryLevelName = Literal["hbm", "l2", "smem"]
RoofSourceName = Literal["nominal", "measured"]
BoundName = Literal["memory", "compute"]

# Dimensions are bounded so that no product of a handful of them can leave float64's exact range.
MAX_DIM = 2**40
Dim = Annotated[int, Field(ge=1, le=MAX_DIM, description="A tensor dimension (elements)")]
PositiveFinite = Annotated[FiniteFloat, Field(gt=0)]
NonNegativeFinite = Annotated[FiniteFloat, Field(ge=0)]
DeviceId = Annotated[
    str,
    Field(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9._-]*$",
          description="Lower-case id: letters, digits, '.', '_', '-'", examples=["nvidia-h100-sxm"]),
]


class StrictModel(BaseModel):
    """Requests refuse unknown fields, so a misspelt parameter is an error and not silently ignored."""

    model_config = ConfigDict(extra="forbid")


class FieldError(BaseModel):
    loc: str = Field(description="Dotted path of the offending field in the request (e.g. body.operator.m)")
    msg: str = Field(description="Why the value was refused")


# Every `error` code the API answers with; clients may switch on them.
ErrorCode = Literal[
    "validation_error", "unprocessable", "malformed_json", "unsupported_media_type", "payload_too_large",
    "unauthorized", "not_found", "device_not_found", "model_not_found", "benchmark_not_found", "already_exists",
    "method_not_allowed", "database_unavailable", "overloaded", "deadline_exceeded", "request_timeout",
    "idempotency_conflict", "http_error", "internal_error",
]


class ErrorResponse(BaseModel):
    """The one error format of the API."""

    error: ErrorCode = Field(description="Stable machine-readable error code", examples=["validation_error"])
    detail: str = Field(description="Human-readable explanation")
    fields: list[FieldError] = Field(default_factory=list, description="Per-field reasons, for 422 responses")


def example_of(model: type[BaseModel]) -> dict[str, Any]:
    """The first example a request model documents (its json_schema_extra)."""
    extra: Any = model.model_config.get("json_schema_extra")
    return extra["examples"][0]
