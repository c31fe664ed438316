"""Amdahl's law over a model's rows: speed some rows up by a factor and see what the whole gains."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from service.core.errors import CostModelError


@dataclass(frozen=True)
class WhatIfResult:
    target: str
    factor: float
    time_share: float
    time_s: float
    speedup: float
    ceiling: float | None


def amdahl(rows: Sequence, speedups: Sequence[tuple[str, float]], label: str | None = None) -> WhatIfResult:
    """T' = T - T_target + T_target / f for each (target, factor); ceiling T / (T - T_target) as f grows."""
    total = sum(r.total_time_s for r in rows)
    targeted = after = 0.0
    for target, factor in speedups:
        matched = sum(r.total_time_s for r in rows if target in (r.kind, r.name))
        if not any(target in (r.kind, r.name) for r in rows):
            kinds = sorted({r.kind for r in rows})
            raise CostModelError("speedups", f"target {target!r} matches no row (kinds: {', '.join(kinds)}; or a row name)")
        targeted += matched
        after += matched / factor
    remaining = total - targeted
    new_time = remaining + after
    return WhatIfResult(
        target=label or speedups[0][0], factor=speedups[0][1] if len(speedups) == 1 else 0.0,
        time_share=targeted / total if total else 0.0, time_s=new_time,
        speedup=total / new_time if new_time else float("inf"),
        ceiling=total / remaining if remaining > 0 else None,
    )
