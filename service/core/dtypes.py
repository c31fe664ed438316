"""Data types and their storage sizes (bytes per element)."""

from __future__ import annotations

from enum import StrEnum


class DType(StrEnum):
    fp64 = "fp64"
    fp32 = "fp32"
    tf32 = "tf32"
    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"
    fp8_e4m3 = "fp8_e4m3"
    fp8_e5m2 = "fp8_e5m2"
    int8 = "int8"
    int4 = "int4"
    fp4 = "fp4"


class IndexDType(StrEnum):
    """Integer types used for indices (token ids), never for arithmetic peaks."""

    int32 = "int32"
    int64 = "int64"


BYTES_PER_ELEMENT: dict[str, float] = {
    DType.fp64: 8,
    DType.fp32: 4,
    DType.tf32: 4,  # TF32 is a compute mode; operands are stored as fp32
    DType.bf16: 2,
    DType.fp16: 2,
    DType.fp8: 1,
    DType.fp8_e4m3: 1,
    DType.fp8_e5m2: 1,
    DType.int8: 1,
    DType.int4: 0.5,
    DType.fp4: 0.5,
    IndexDType.int32: 4,
    IndexDType.int64: 8,
}

# Both fp8 encodings run at the device's single fp8 peak.
PEAK_DTYPE_ALIASES: dict[str, str] = {DType.fp8_e4m3: DType.fp8, DType.fp8_e5m2: DType.fp8}


def bytes_per_element(dtype: str) -> float:
    return BYTES_PER_ELEMENT[dtype]


def peak_dtype(dtype: str) -> str:
    """The dtype whose peak a computation in `dtype` runs at."""
    return PEAK_DTYPE_ALIASES.get(dtype, dtype)


# Sub-byte weights ship group-quantised; without a stated group size, 128 elements per scale is assumed
# (the common size of GPTQ/AWQ int4 checkpoints).
DEFAULT_SUB_BYTE_GROUP_SIZE = 128


def weight_group_size(dtype: str, stated: int | None) -> int | None:
    """The group size a weight of this type is charged for: the stated one, or the default for sub-byte types."""
    if stated is not None:
        return stated
    return DEFAULT_SUB_BYTE_GROUP_SIZE if BYTES_PER_ELEMENT[dtype] < 1 else None


def quantized_bytes_per_element(bits: float, scale_bytes: float = 0.0, group_size: int | None = None) -> float:
    """Storage of group-quantized values: bits/8 plus one scale of `scale_bytes` per group."""
    overhead = scale_bytes / group_size if group_size else 0.0
    return bits / 8 + overhead
