"""Operators that touch each element a fixed number of times: elementwise maps, norms, softmax, RoPE.

They run on the vector units and read every input and write every output once (ideal single pass).
"""

from __future__ import annotations

from service.core.dtypes import bytes_per_element
from service.core.errors import CostModelError
from service.core.hardware import Unit
from service.core.operators.base import OperatorCost, element_count

# FLOP per output element by default, and how many same-shaped inputs each op reads.
ELEMENTWISE_OPS: dict[str, tuple[float, int]] = {
    "add": (1, 2),
    "sub": (1, 2),
    "mul": (1, 2),
    "relu": (1, 1),
    "silu": (4, 1),
    "gelu": (4, 1),
    "sigmoid": (4, 1),
}
ROW_OPS_FLOPS_PER_ELEMENT: dict[str, float] = {"rmsnorm": 4, "layernorm": 5, "softmax": 5, "rope": 3}


def _elements(shape: list[int] | tuple[int, ...]) -> int:
    return element_count("shape", "x", *shape)


def elementwise_cost(
    *,
    op: str,
    shape: list[int],
    dtype: str = "bf16",
    arity: int | None = None,
    flops_per_element: float | None = None,
    out_dtype: str | None = None,
) -> OperatorCost:
    if op not in ELEMENTWISE_OPS and flops_per_element is None:
        known = ", ".join(sorted(ELEMENTWISE_OPS))
        raise CostModelError("op", f"unknown elementwise op {op!r}; known: {known}, or give flops_per_element")
    default_flops, default_arity = ELEMENTWISE_OPS.get(op, (None, 1))
    fpe = default_flops if flops_per_element is None else flops_per_element
    arity = default_arity if arity is None else arity
    out_dtype = out_dtype or dtype
    elements = _elements(shape)
    return OperatorCost(
        "elementwise",
        flops=elements * fpe,
        bytes_read=arity * elements * bytes_per_element(dtype),
        bytes_written=elements * bytes_per_element(out_dtype),
        compute_dtype=dtype,
        unit=Unit.vector,
        assumptions=(
            f"elementwise {op}: {fpe:g} FLOP per element"
            + (" (given)" if flops_per_element is not None else " (default table)"),
            f"elementwise {op}: {arity} input(s) of the output's shape read once, the output written once",
        ),
    )


def _normalisation(kind: str, shape: list[int], dtype: str, param_dtype: str | None, params_per_row: int) -> OperatorCost:
    if len(shape) < 1:
        raise CostModelError("shape", "needs at least one axis")
    elements = _elements(shape)
    hidden = shape[-1]
    s = bytes_per_element(dtype)
    s_param = bytes_per_element(param_dtype or dtype)
    fpe = ROW_OPS_FLOPS_PER_ELEMENT[kind]
    assumptions = [
        f"{kind}: {fpe:g} FLOP per element, normalised over the last axis ({hidden})",
        f"{kind}: input read once, output written once",
    ]
    if params_per_row:
        assumptions.append(f"{kind}: {params_per_row} parameter vector(s) of {hidden} elements read once")
    return OperatorCost(
        kind,
        flops=elements * fpe,
        bytes_read=elements * s + params_per_row * hidden * s_param,
        bytes_written=elements * s,
        compute_dtype=dtype,
        unit=Unit.vector,
        assumptions=tuple(assumptions),
        weight_bytes_read=params_per_row * hidden * s_param,
    )


def layernorm_cost(*, shape: list[int], dtype: str = "bf16", elementwise_affine: bool = True,
                   bias: bool = True, param_dtype: str | None = None) -> OperatorCost:
    params = (1 + int(bias)) if elementwise_affine else 0
    return _normalisation("layernorm", shape, dtype, param_dtype, params)


def rmsnorm_cost(*, shape: list[int], dtype: str = "bf16", elementwise_affine: bool = True,
                 param_dtype: str | None = None) -> OperatorCost:
    return _normalisation("rmsnorm", shape, dtype, param_dtype, int(elementwise_affine))


def softmax_cost(*, shape: list[int], dtype: str = "bf16") -> OperatorCost:
    return _normalisation("softmax", shape, dtype, None, 0)


def rope_cost(*, batch: int = 1, seq_len: int, heads: int, head_dim: int, dtype: str = "bf16") -> OperatorCost:
    elements = element_count("seq_len", "x [batch, seq_len, heads, head_dim]", batch, seq_len, heads, head_dim)
    s = bytes_per_element(dtype)
    fpe = ROW_OPS_FLOPS_PER_ELEMENT["rope"]
    table_bytes = 2 * seq_len * head_dim * s
    return OperatorCost(
        "rope",
        flops=elements * fpe,
        bytes_read=elements * s + table_bytes,
        bytes_written=elements * s,
        compute_dtype=dtype,
        unit=Unit.vector,
        assumptions=(
            f"rope: {fpe:g} FLOP per element of the rotated tensor",
            "rope: cos and sin tables of [seq_len, head_dim] read once, shared by every batch item and head",
        ),
    )
