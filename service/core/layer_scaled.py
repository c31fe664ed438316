"""A fit to one model's serving runs whose fixed costs come a layer at a time (the launches, synchronisations and
graph nodes between a layer's kernels): carried to a model of another depth, those costs scale by its layers. An
engine's line (expectations/engines.py) and its scheduling fit carried to kernel tables (simulation/carried_over.py)
are both such fits, and scale alike."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar, Self


class LayerScaled:
    """Mixed into a frozen dataclass with a `layers` field: the fitted model's decoder layers (0: not recorded, and
    nothing is scaled)."""

    layers: int
    PER_LAYER: ClassVar[tuple[str, ...]]  # its fields that are fixed costs a step or a request

    def for_layers(self, layers: int) -> Self:
        """The fit for a model of `layers` decoder layers: its PER_LAYER costs scaled from its own model's."""
        if not self.layers or layers == self.layers:
            return self
        factor = layers / self.layers
        fitted: Any = self  # a dataclass instance: what replace takes
        return replace(fitted, **{name: getattr(self, name) * factor for name in self.PER_LAYER})
