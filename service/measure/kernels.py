"""Matmul timings over a grid of shapes, as the service's kernel timings (one operator, one median time each)."""

from __future__ import annotations

from typing import Any

from service.measure.environment import TORCH_DTYPES
from service.measure.timing import median_time


def time_matmul(torch: Any, device: str, m: int, n: int, k: int, dtype: str) -> float:
    """Seconds of A [m, k] x B [k, n] in `dtype`, operands resident (as a layer's weights are between steps)."""
    kind = getattr(torch, TORCH_DTYPES[dtype])
    a = torch.randn(m, k, device=device).to(kind)
    b = torch.randn(k, n, device=device).to(kind)
    return median_time(torch, device, lambda: a @ b)


def timing(m: int, n: int, k: int, dtype: str, seconds: float) -> dict[str, Any]:
    return {"operator": {"kind": "matmul", "m": m, "n": n, "k": k, "dtype": dtype}, "time_s": seconds}


def shape_of(row: dict[str, Any]) -> tuple[int, int, int, str]:
    op = row["operator"]
    return op["m"], op["n"], op["k"], op["dtype"]
