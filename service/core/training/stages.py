"""How a pipeline's stages divide the layers: evenly by default, or with lighter first and last stages (Megatron's
--decoder-first/last-pipeline-num-layers), as Llama 3 balanced the embedding and the LM head against the layers.

By default every stage is priced at ceil(L / p) layers, the fullest stage's count. With `first` or `last` given,
those stages hold that many and the other stages the rest, split as evenly as they go (the fullest priced).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from service.core.errors import CostModelError


@dataclass(frozen=True)
class StagePlan:
    layers: tuple[int, ...]  # per pipeline stage, first to last
    total_layers: int

    @property
    def stages(self) -> int:
        return len(self.layers)

    def share(self, stage: int) -> float:
        return self.layers[stage] / self.total_layers

    @property
    def fullest_share(self) -> float:
        return max(self.layers) / self.total_layers

    def kinds(self) -> tuple[int, ...]:
        """One stage of each kind: the first, the fullest middle one, the last."""
        if self.stages <= 2:
            return tuple(range(self.stages))
        middle = max(range(1, self.stages - 1), key=lambda s: self.layers[s])
        return 0, middle, self.stages - 1


def plan_stages(layers: int, stages: int, first: int | None = None, last: int | None = None) -> StagePlan:
    if first is None and last is None:
        return StagePlan((math.ceil(layers / stages),) * stages, layers)
    if stages < 2:
        raise CostModelError("first_stage_layers" if first is not None else "last_stage_layers",
                             "uneven first and last stages need at least 2 pipeline stages")
    given = [n for n in (first, last) if n is not None]
    rest, others = layers - sum(given), stages - len(given)
    if others == 0 and rest != 0:
        raise CostModelError("last_stage_layers", f"two stages of {first} and {last} layers are not the model's "
                                                  f"{layers}")
    if others and rest < others:
        raise CostModelError("first_stage_layers" if first is not None else "last_stage_layers",
                             f"{sum(given)} layers on the end stages leave {rest} for the other {others} stages: "
                             "at least one each")
    middle = math.ceil(rest / others) if others else 0
    plan = [middle] * stages
    if first is not None:
        plan[0] = first
    if last is not None:
        plan[-1] = last
    return StagePlan(tuple(plan), layers)
