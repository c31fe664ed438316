"""Errors the core raises for inputs it cannot analyse. Each names the offending field."""

from __future__ import annotations


class CostModelError(ValueError):
    """An input the cost models refuse; `field` is a dotted path relative to the operator."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class NoComputePeakError(CostModelError):
    """The device publishes no peak for the dtype and unit the operator needs."""
