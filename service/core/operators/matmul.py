"""Dense matrix multiplication: C[b, M, N] = A[b, M, K] @ B[(b,) K, N] (+ bias[N])."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

from service.core.dtypes import bytes_per_element
from service.core.hardware import Unit
from service.core.operators.base import OperatorCost, element_count
from service.core.operators.kind import OperatorKind, Wiring


class MatmulOperands(NamedTuple):
    a_dtype: str
    b_dtype: str
    c_dtype: str
    s_a: float  # bytes per element of A, B (with its group scales) and C
    s_b: float
    s_c: float
    compute_dtype: str


def matmul_operands(dtype: str, a_dtype: str | None = None, b_dtype: str | None = None, c_dtype: str | None = None,
                    compute_dtype: str | None = None, b_bytes_per_element: float | None = None) -> MatmulOperands:
    """Each operand's type and size, and the type the product is computed in."""
    a_dtype, b_dtype, c_dtype = a_dtype or dtype, b_dtype or dtype, c_dtype or dtype
    s_a, s_b, s_c = bytes_per_element(a_dtype), bytes_per_element(b_dtype), bytes_per_element(c_dtype)
    # Group-quantised weights carry scales: bytes per element = bits / 8 + scale bytes / group size.
    s_b = b_bytes_per_element or s_b
    # Weight-only quantisation (int4 B times bf16 A) dequantises to the wider operand's type.
    return MatmulOperands(a_dtype, b_dtype, c_dtype, s_a, s_b, s_c, compute_dtype or (a_dtype if s_a >= s_b else b_dtype))


def matmul_cost(
    *,
    m: int,
    n: int,
    k: int,
    batch: int = 1,
    bias: bool = False,
    dtype: str = "bf16",
    a_dtype: str | None = None,
    b_dtype: str | None = None,
    c_dtype: str | None = None,
    compute_dtype: str | None = None,
    weight_shared: bool = True,
    tile: tuple[int, int, int] | None = None,
    b_bytes_per_element: float | None = None,
    b_is_weight: bool | None = None,
) -> OperatorCost:
    """b_is_weight: whether B is model weights (counted in weight_bytes_read). Default: when it is shared
    by the batch; per-item weights (MLA's absorbed per-head projections) set it."""
    a_dtype, b_dtype, c_dtype, s_a, s_b, s_c, compute_dtype = matmul_operands(
        dtype, a_dtype, b_dtype, c_dtype, compute_dtype, b_bytes_per_element)

    a_elems = element_count("m", "A [batch, m, k]", batch, m, k)
    c_elems = element_count("n", "C [batch, m, n]", batch, m, n)
    b_copies = 1 if weight_shared else batch
    b_elems = element_count("k", "B [k, n]", b_copies, k, n)

    flops = 2 * a_elems * n + (c_elems if bias else 0)
    bias_bytes = b_copies * n * s_c if bias else 0
    bytes_read = a_elems * s_a + b_elems * s_b + bias_bytes
    bytes_written = c_elems * s_c

    traffic: tuple[tuple[str, float], ...] = ()
    if tile is not None:
        tile_m, tile_n, _ = tile
        # Each output tile streams its A row panel and B column panel from L2: A is fetched once per
        # column of tiles and B once per row of tiles (per batch item when B is not shared).
        l2_bytes = (batch * -(-n // tile_n) * m * k * s_a
                    + batch * -(-m // tile_m) * k * n * s_b
                    + bias_bytes + bytes_written)
        traffic = (("l2", l2_bytes),)
    assumptions = matmul_notes(bias, weight_shared, a_dtype, b_dtype, c_dtype, compute_dtype,
                                (tile[0], tile[1]) if tile is not None else None)
    return OperatorCost("matmul", flops, bytes_read, bytes_written, compute_dtype, Unit.tensor, assumptions,
                        traffic, weight_bytes_read=b_elems * s_b + bias_bytes if (weight_shared if b_is_weight is None
                                                                                    else b_is_weight) else 0.0)


@lru_cache(maxsize=256)
def matmul_notes(bias: bool, weight_shared: bool, a_dtype: str, b_dtype: str, c_dtype: str, compute_dtype: str,
                  tile: tuple[int, int] | None) -> tuple[str, ...]:
    """A matmul's conventions in words: the same few combinations describe every matmul a batch costs."""
    notes = [
        "matmul: FLOPs = 2*batch*m*n*k (one multiply-add = 2 FLOP)" + (" + batch*m*n for the bias" if bias else ""),
        "matmul: ideal single pass, A and B read once and C written once",
        "matmul: B is " + ("a weight shared across the batch, read once" if weight_shared else "read once per batch item"),
        f"matmul: A {a_dtype}, B {b_dtype}, C {c_dtype}; computed in {compute_dtype} on the tensor unit",
    ]
    if bias:
        notes.append(f"matmul: bias of n elements read in the output type ({c_dtype})")
    if tile is not None:
        notes.append(f"matmul: {tile[0]}x{tile[1]} output tiles; L2 serves A once per tile column and B once "
                     "per tile row (plus C written), HBM sees each operand once")
    return tuple(notes)


def grouped_matmul_cost(
    *,
    tokens_per_expert: list[int],
    n: int,
    k: int,
    dtype: str = "bf16",
    a_dtype: str | None = None,
    b_dtype: str | None = None,
    c_dtype: str | None = None,
    min_row_tile: int = 16,
) -> OperatorCost:
    """Experts' projections in one grouped GEMM: expert e multiplies its t_e routed rows [t_e, k] by its
    own weight [k, n]. Experts that receive no token are skipped: their weights are not read."""
    from service.core.efficiency import grouped_rows

    a_dtype, b_dtype, c_dtype = a_dtype or dtype, b_dtype or dtype, c_dtype or dtype
    s_a, s_b, s_c = (bytes_per_element(d) for d in (a_dtype, b_dtype, c_dtype))
    rows, executed_rows = grouped_rows(tokens_per_expert, min_row_tile)
    active = sum(1 for t in tokens_per_expert if t)
    element_count("n", "weights [experts, k, n]", active, k, n)
    weights = active * k * n * s_b
    return OperatorCost(
        "grouped_matmul",
        flops=2 * rows * n * k,
        bytes_read=rows * k * s_a + weights,
        bytes_written=rows * n * s_c,
        compute_dtype=a_dtype if s_a >= s_b else b_dtype,
        unit=Unit.tensor,
        assumptions=(
            f"grouped matmul: {rows} routed rows over {active} of {len(tokens_per_expert)} experts; "
            "each active expert's weight read once, idle experts' weights not at all",
            f"grouped matmul: each expert's rows padded to the {min_row_tile}-row tile: {executed_rows} rows executed "
            f"for {rows} that carry data (executed FLOPs {2 * executed_rows * n * k})",
        ),
        weight_bytes_read=weights,
    )


def _matmul_fields(wiring: Wiring) -> dict:
    """A [..., m, k] times B [k, n] (a weight) or [batch, k, n] (one per item), and an optional bias [n]."""
    wiring.expect((2, 3))
    a, b = wiring.inputs[0], wiring.inputs[1]
    if len(a.shape) < 2 or len(b.shape) not in (2, 3):
        wiring.fail("matmul takes A [..., m, k] and B [k, n] or [batch, k, n]")
    if a.shape[-1] != b.shape[-2]:
        wiring.fail(f"inner dimensions differ: A {list(a.shape)} and B {list(b.shape)}")
    n, k = b.shape[-1], a.shape[-1]
    wiring.output_shape_is(a.shape[:-1] + (n,))
    if len(b.shape) == 3:
        if len(a.shape) != 3 or a.shape[0] != b.shape[0]:
            wiring.fail("a batched B [batch, k, n] needs A [batch, m, k] of the same batch")
        fields = {"m": a.shape[1], "batch": a.shape[0], "weight_shared": False}
    else:
        fields = {"m": math.prod(a.shape[:-1])}
    bias = wiring.inputs[2:]
    if bias and bias[0].shape != (n,):
        wiring.fail(f"bias {bias[0].name} must have shape [{n}]")
    return fields | {"n": n, "k": k, "bias": bool(bias), "a_dtype": a.dtype, "b_dtype": b.dtype,
                     "c_dtype": wiring.outputs[0].dtype}


def _grouped_matmul_fields(wiring: Wiring) -> dict:
    wiring.expect((2,))
    a, w = wiring.inputs
    if len(a.shape) != 2 or len(w.shape) != 3 or a.shape[1] != w.shape[1]:
        wiring.fail("grouped_matmul takes rows [rows, k] and weights [experts, k, n]")
    wiring.output_shape_is((a.shape[0], w.shape[2]))
    return {"n": w.shape[2], "k": a.shape[1], "a_dtype": a.dtype, "b_dtype": w.dtype,
            "c_dtype": wiring.outputs[0].dtype, "experts": w.shape[0], "rows": a.shape[0]}


MATMUL = OperatorKind("matmul", "a dense matrix product C = A B (+ bias)", matmul_cost, Unit.tensor, "#1f77b4",
                      "matrix", _matmul_fields, "matmul", "activations_read", array_path=True)
GROUPED_MATMUL = OperatorKind("grouped_matmul", "mixture-of-experts projections in one grouped GEMM",
                              grouped_matmul_cost, Unit.tensor, "#aec7e8", "matrix", _grouped_matmul_fields, "matmul",
                              "activations_read")
