"""Operators that touch each element a fixed number of times: elementwise maps, norms, softmax, RoPE.

They run on the vector units and read every input and write every output once (ideal single pass).
"""

from __future__ import annotations

from service.core.dtypes import bytes_per_element
from service.core.errors import CostModelError
from service.core.hardware import Unit
from service.core.operators.base import OperatorCost, element_count
from service.core.operators.kind import OperatorKind, Wiring

# FLOP per output element by default, and how many same-shaped inputs each op reads.
ELEMENTWISE_OPS: dict[str, tuple[float, int]] = {
    "add": (1, 2),
    "sub": (1, 2),
    "mul": (1, 2),
    "relu": (1, 1),
    "relu2": (2, 1),  # relu(x)^2 (Nemotron-H's MLP)
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
    default_flops, default_arity = ELEMENTWISE_OPS.get(op, (0.0, 1))
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


def _broadcast(wiring: Wiring) -> tuple[int, ...]:
    shapes = [t.shape for t in wiring.inputs]
    width = max(len(s) for s in shapes)
    result = []
    for axis in range(width):
        sizes = {s[axis - width + len(s)] for s in shapes if axis - width + len(s) >= 0} - {1}
        if len(sizes) > 1:
            wiring.fail(f"input shapes {[list(s) for s in shapes]} do not broadcast together")
        result.append(sizes.pop() if sizes else 1)
    return tuple(result)


def _elementwise_fields(wiring: Wiring) -> dict:
    wiring.expect(range(1, 17))
    wiring.output_shape_is(_broadcast(wiring))
    ins, out = wiring.inputs, wiring.outputs[0]
    return {"shape": list(out.shape), "dtype": ins[0].dtype, "arity": len(ins), "out_dtype": out.dtype}


def _norm_fields(wiring: Wiring, most_inputs: int) -> dict:
    """x, then the optional weight (and, for a layer norm, bias), each of x's last dimension."""
    wiring.expect(range(1, most_inputs + 1))
    x, params = wiring.inputs[0], wiring.inputs[1:]
    wiring.output_shape_is(x.shape)
    for param in params:
        if param.shape != x.shape[-1:]:
            wiring.fail(f"parameter {param.name} must have shape [{x.shape[-1]}]")
    fields = {"shape": list(x.shape), "dtype": x.dtype, "elementwise_affine": bool(params)}
    if params:
        fields["param_dtype"] = params[0].dtype
    return fields


def _layernorm_fields(wiring: Wiring) -> dict:
    return _norm_fields(wiring, 3) | {"bias": len(wiring.inputs) > 2}


def _rmsnorm_fields(wiring: Wiring) -> dict:
    return _norm_fields(wiring, 2)


def _softmax_fields(wiring: Wiring) -> dict:
    wiring.expect((1,))
    x = wiring.inputs[0]
    wiring.output_shape_is(x.shape)
    return {"shape": list(x.shape), "dtype": x.dtype}


def _rope_fields(wiring: Wiring) -> dict:
    wiring.expect((1,))
    x = wiring.inputs[0]
    if len(x.shape) != 4:
        wiring.fail("rope input must be [batch, seq_len, heads, head_dim]")
    wiring.output_shape_is(x.shape)
    return dict(zip(("batch", "seq_len", "heads", "head_dim"), x.shape)) | {"dtype": x.dtype}


def _pointwise(name: str, summary: str, cost, colour: str, fields, saved) -> OperatorKind:
    return OperatorKind(name, summary, cost, Unit.vector, colour, "pointwise", fields, "pointwise", saved)


ELEMENTWISE = _pointwise("elementwise", "a map over same-shaped tensors (add, mul, silu, ...)", elementwise_cost,
                         "#2ca02c", _elementwise_fields, "input")
LAYERNORM = _pointwise("layernorm", "layer normalisation over the last dimension", layernorm_cost, "#98df8a",
                       _layernorm_fields, "output")
RMSNORM = _pointwise("rmsnorm", "RMS normalisation over the last dimension", rmsnorm_cost, "#98df8a",
                     _rmsnorm_fields, "output")
SOFTMAX = _pointwise("softmax", "softmax over the last dimension", softmax_cost, "#ff7f0e", _softmax_fields, "output")
ROPE = _pointwise("rope", "rotary position embedding of queries or keys", rope_cost, "#9467bd", _rope_fields,
                  "nothing")
