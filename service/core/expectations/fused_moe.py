"""A fused MoE kernel's roofline terms, as the service counts the routed experts' rows (transformer/layers.py:
grouped_expert_matmul), for fitting a device's MoE kernel timings (scripts/fit_moe_calibration.py).

A fused MoE kernel times one layer's routed experts on one device: the gate and up projection of every routed token
row, the activation, the down projection, and the weighted sum back. With E experts of width I, top-k routing, T
tokens, experts split over `expert_parallel` devices and each expert's width over `tensor_parallel`, one device
(the mean one) multiplies T x k / ep token rows at width w = I / tp:
- FLOPs: 2 x rows x (2w x H) for the gate and up projection, 2 x rows x (H x w) for the down one: 6 x rows x H x w
  (a non-gated expert's 4 x rows x H x w);
- bytes: the expected active experts' weights (E_hit / ep of them, each 3 H w elements, 2 H w non-gated) once, plus
  the token rows in (H and w wide, in the activations' type) and out (2w and H wide, in bf16): what the service's two
  grouped-matmul rows read and write.
E_hit is the expected number of experts T tokens hit under uniform independent routing (expected_active_experts):
the tables' "balanced" timings, each expert given its share of the tokens.
"""

from __future__ import annotations

from typing import NamedTuple

from service.core.transformer.layers import expected_active_experts

OUTPUT_BYTES = 2  # the grouped GEMMs write bf16


class FusedMoeShape(NamedTuple):
    tokens: int
    hidden: int
    intermediate: int  # one expert's width, whole
    top_k: int
    experts: int
    tensor_parallel: int
    expert_parallel: int


def fused_moe_work(shape: FusedMoeShape, weight_bytes: float, activation_bytes: float,
                   gated: bool = True) -> tuple[float, float]:
    """(FLOPs, HBM bytes) of the mean device's share of one fused MoE layer; `weight_bytes` and `activation_bytes`
    per element, their scales included."""
    width = shape.intermediate / shape.tensor_parallel
    rows = shape.tokens * shape.top_k / shape.expert_parallel
    up = (2 if gated else 1) * width
    flops = 2 * rows * (up + width) * shape.hidden
    active = expected_active_experts(shape.tokens, shape.experts, shape.top_k) / shape.expert_parallel
    weights = active * (up + width) * shape.hidden * weight_bytes
    activations = rows * (shape.hidden + width) * activation_bytes + rows * (up + shape.hidden) * OUTPUT_BYTES
    return flops, weights + activations
