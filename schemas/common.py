"""Types shared by every part of the contract."""

from __future__ import annotations

import copy
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, FiniteFloat, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

DTypeName = Literal["fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp8_e4m3", "fp8_e5m2", "int8", "int4", "fp4"]
# The dtypes a compute peak (nominal or measured) is declared in: fp8_e4m3 and fp8_e5m2 compute at the fp8 peak, so a
# peak declared in either would never be found (service.core.dtypes.PEAK_DTYPE_ALIASES).
PeakDTypeName = Literal["fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4", "fp4"]
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
# Physical bounds, far beyond any single device, so that no stored value (nor a median of two) can
# overflow a later computation or a chart's axis: 1 MFLOP/s to 1 ZFLOP/s, 1 kB/s to 1 EB/s.
MIN_FLOPS_PER_S, MAX_FLOPS_PER_S = 1e6, 1e21
MIN_BYTES_PER_S, MAX_BYTES_PER_S = 1e3, 1e18
FlopRate = Annotated[FiniteFloat, Field(ge=MIN_FLOPS_PER_S, le=MAX_FLOPS_PER_S)]
ByteRate = Annotated[FiniteFloat, Field(ge=MIN_BYTES_PER_S, le=MAX_BYTES_PER_S)]
EngineName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*$",
                                  description="A free label of the engine or kernel library (vllm, sglang, trtllm, ...)")]
DeviceId = Annotated[
    str,
    Field(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9._-]*$",
          description="Lower-case id: letters, digits, '.', '_', '-'", examples=["nvidia-h100-sxm"]),
]


class StrictModel(BaseModel):
    """Requests refuse unknown fields, so a misspelt parameter is an error and not silently ignored.

    `schema_rules` states, as JSON Schema keywords, the rules a model's validators apply across its fields, so
    that a body the OpenAPI document accepts is not refused by a rule the document never stated. Rules JSON
    Schema cannot express (uniqueness by a key, sums, divisibility) are said in the field's description."""

    model_config = ConfigDict(extra="forbid")
    schema_rules: ClassVar[dict[str, Any]] = {}

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        schema = handler(core_schema)
        # A request composed of several models (a model choice, memory options, ...) keeps each one's rules.
        rules = [klass.__dict__["schema_rules"] for klass in cls.__mro__ if klass.__dict__.get("schema_rules")]
        if rules:
            handler.resolve_ref_schema(schema).update(copy.deepcopy(rules[0] if len(rules) == 1 else all_rules(*rules)))
        return schema


def given(*fields: str) -> dict[str, Any]:
    """Matches an object in which every one of `fields` is present and not null (how the validators read 'given')."""
    return {"required": list(fields), "properties": {field: {"not": {"type": "null"}} for field in fields}}


def exactly_one_of(first: str, second: str) -> dict[str, Any]:
    return {"oneOf": [given(first), given(second)]}


def not_both(first: str, second: str) -> dict[str, Any]:
    return {"not": given(first, second)}


def all_rules(*rules: dict[str, Any]) -> dict[str, Any]:
    """Several rules on one model: each under allOf, so two rules with the same keyword do not overwrite."""
    return {"allOf": [part for rule in rules for part in (rule["allOf"] if list(rule) == ["allOf"] else [rule])]}


class FieldError(BaseModel):
    loc: str = Field(description="Dotted path of the offending field in the request (e.g. body.operator.m)")
    msg: str = Field(description="Why the value was refused")


# Every `error` code the API answers with; clients may switch on them.
ErrorCode = Literal[
    "validation_error", "unprocessable", "malformed_json", "unsupported_media_type", "payload_too_large",
    "unauthorized", "not_found", "device_not_found", "model_not_found", "benchmark_not_found", "kernel_timing_not_found",
    "serving_run_not_found", "calibration_not_found", "already_exists",
    "method_not_allowed", "database_unavailable", "overloaded", "deadline_exceeded", "request_timeout",
    "too_many_requests", "headers_too_large", "shutting_down",
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
