"""What every operator cost model returns, and the guards shared by all of them."""

from __future__ import annotations

import math
from typing import NamedTuple

from service.core.errors import CostModelError
from service.core.hardware import Unit

# Element counts above 2**53 are no longer exact in float64; nothing real is that large.
MAX_ELEMENTS = 2**53


class OperatorCost(NamedTuple):
    """Model FLOPs and ideal HBM traffic of one operator, plus the conventions used to count them.

    (An immutable tuple rather than a frozen dataclass: model analyses build thousands of them.)"""

    kind: str
    flops: float
    bytes_read: float
    bytes_written: float
    compute_dtype: str
    unit: Unit
    assumptions: tuple[str, ...]
    # Traffic at on-chip levels (l2, smem) where the model knows it; HBM traffic is bytes_total.
    traffic_by_level: tuple[tuple[str, float], ...] = ()
    # The parts of bytes_read / bytes_written that are weights and KV cache (for model totals).
    weight_bytes_read: float = 0.0
    kv_bytes_read: float = 0.0
    kv_bytes_written: float = 0.0

    @property
    def bytes_total(self) -> float:
        return self.bytes_read + self.bytes_written


def element_count(field: str, tensor: str, *dims: int) -> int:
    """Product of `dims`, refused (naming `field` and `tensor`) when it cannot be represented exactly."""
    count = math.prod(dims)
    over = count > MAX_ELEMENTS
    if over if over.__class__ is bool else over.any():  # any_true, inline: every cost model counts its tensors
        raise CostModelError(field, f"tensor {tensor} would hold {count} elements, above the limit of 2**53")
    return count


# The cost models also run on numpy arrays of steps, one element a step (core.transformer.batched_steps): the same
# expressions, element by element. These two stand in for the comparisons that a Python `if` or min() cannot take
# from an array.
def any_true(condition) -> bool:
    """A comparison's outcome, or whether it holds for any element of an array."""
    return condition if isinstance(condition, bool) else bool(condition.any())


def at_most(value, limit):
    """min(value, limit), element by element for an array."""
    return min(value, limit) if isinstance(value, (int, float)) else value.clip(max=limit)
