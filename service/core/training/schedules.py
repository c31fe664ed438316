"""Pipeline schedules: how long m micro-batches take through p stages, and how many micro-batches' activations
the first stage holds at its fullest.

- `1f1b` (Narayanan et al. 2021, PipeDream-Flush): p - 1 micro-batch slots of warm-up and drain around the m
  slots of work: (m + p - 1) x T, T one micro-batch's forward and backward on the slowest stage with its sends.
  The first stage holds min(m, p) micro-batches.
- `interleaved` with v model chunks a stage (Megatron's virtual pipeline stages): the warm-up and drain shrink v
  times, m x T + (p - 1) x T / v, while every micro-batch crosses v times as many stage boundaries. The first
  stage runs 2(p - 1) + (v - 1)p + 1 chunk forwards before its first backward: p + (p - 1)/v stages' worth of
  one micro-batch (Korthikanti et al. 2022: the 1F1B footprint times 1 + (p - 1)/(p v)), at most m.
- `zero_bubble` (Qi et al. 2024, their ZB-H1): the weight-gradient half of the backward (W) no longer waits in
  line, so it fills the drain: m x T + (p - 1) x max(0, T_F + T_B - T_W), with 1F1B's memory (min(m, p)).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from service.core.errors import CostModelError

SCHEDULES = ("1f1b", "interleaved", "zero_bubble")


class PhaseTimes(NamedTuple):
    """One micro-batch on the slowest stage, seconds: its forward (with its sends), the activation-gradient
    backward with any recomputation (with its sends), the weight-gradient backward, and all of it."""

    forward_s: float
    backward_input_s: float
    backward_weight_s: float
    micro_batch_s: float


@dataclass(frozen=True)
class Schedule:
    name: str = "1f1b"
    virtual_stages: int = 1  # model chunks a stage holds; more than one only when interleaved

    def check(self, stages: int, layers: int) -> None:
        if self.name not in SCHEDULES:
            raise CostModelError("pipeline_schedule", f"one of {', '.join(SCHEDULES)}")
        v = self.virtual_stages
        if self.name != "interleaved":
            if v != 1:
                raise CostModelError("virtual_pipeline_stages", f"{v} model chunks a stage need the interleaved "
                                                                "schedule; leave it out or set it to 1")
            return
        if stages < 2:
            raise CostModelError("pipeline_schedule", "interleaving needs at least 2 pipeline stages")
        if v < 2:
            raise CostModelError("virtual_pipeline_stages", "the interleaved schedule needs at least 2 model chunks "
                                                            "a stage")
        if v * stages > layers:
            raise CostModelError("virtual_pipeline_stages", f"{v} chunks on each of {stages} stages is more chunks "
                                                            f"than the model's {layers} layers")

    def pipeline_time(self, micro_batches: int, stages: int, phases: PhaseTimes) -> tuple[float, float]:
        """(the pipeline's time for the step, the part of it that is bubble), seconds."""
        work = micro_batches * phases.micro_batch_s
        if self.name == "interleaved":
            bubble = (stages - 1) * phases.micro_batch_s / self.virtual_stages
        elif self.name == "zero_bubble":
            bubble = (stages - 1) * max(0.0, phases.forward_s + phases.backward_input_s - phases.backward_weight_s)
        else:
            bubble = (stages - 1) * phases.micro_batch_s
        return work + bubble, bubble

    def in_flight(self, micro_batches: int, stages: int) -> float:
        """Micro-batches' activations the first stage holds at its fullest, in units of its layers' worth."""
        if self.name == "interleaved":
            return min(float(micro_batches), stages + (stages - 1) / self.virtual_stages)
        return float(min(micro_batches, stages))
