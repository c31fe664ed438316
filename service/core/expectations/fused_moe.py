"""A fused MoE kernel's roofline terms, counted by the service's own routed-expert rows
(transformer/layers.grouped_expert_matmul), for fitting a device's MoE kernel timings
(scripts/fit_moe_calibration.py).

A fused MoE kernel times one layer's routed experts on one device: the gate and up projection of every routed token
row, the activation, the down projection, and the weighted sum back. With E experts of width I, top-k routing, T
tokens, experts split over `expert_parallel` devices and each expert's width over `tensor_parallel`, the mean device
multiplies T x k / ep token rows at width w = I / tp through the layer's two grouped matmuls, each reading the
E_hit / ep experts it is expected to hit once (expected_active_experts: uniform independent routing, the tables'
"balanced" timings). The activation and the weighted sum, a few token rows wide, are left to the fit's t0.
"""

from __future__ import annotations

from typing import NamedTuple

from service.core.transformer.architecture import Architecture
from service.core.transformer.layers import ModelDTypes, expected_active_experts, grouped_expert_matmul


class FusedMoeShape(NamedTuple):
    tokens: int
    hidden: int
    intermediate: int  # one expert's width, whole
    top_k: int
    experts: int
    tensor_parallel: int
    expert_parallel: int


def family_of(hidden: int, intermediate: int, experts: int, top_k: int) -> str:
    """A fused MoE's model shape, as the fits keep their roofs by it (KernelCalibration.families): the tables time
    each model's own widths, expert count and routing at many token counts and layouts."""
    return f"{hidden}x{intermediate}x{experts} top-{top_k}"


def moe_shape(arch: Architecture) -> tuple[int, int, int, int] | None:
    """(hidden, an expert's width, experts, top-k) of a model's routed experts; None for a dense model."""
    moe = arch.moe
    if moe is None:
        return None
    return moe.routed_width(arch.hidden), moe.expert_intermediate, moe.experts, moe.top_k


def moe_family(arch: Architecture) -> str | None:
    """The family of a model's routed experts; None for a dense model."""
    shape = moe_shape(arch)
    return family_of(*shape) if shape is not None else None


def fused_moe_work(shape: FusedMoeShape, dtypes: ModelDTypes, gated: bool = True) -> tuple[float, float]:
    """(FLOPs, HBM bytes) of the mean device's share of one fused MoE layer in `dtypes`: its two grouped matmuls."""
    width = shape.intermediate // shape.tensor_parallel
    rows = shape.tokens * shape.top_k / shape.expert_parallel
    active = expected_active_experts(shape.tokens, shape.experts, shape.top_k) / shape.expert_parallel
    up = grouped_expert_matmul(token_rows=rows, active_experts=active, n=(2 if gated else 1) * width, k=shape.hidden,
                               dtypes=dtypes)
    down = grouped_expert_matmul(token_rows=rows, active_experts=active, n=shape.hidden, k=width, dtypes=dtypes)
    return up.flops + down.flops, up.bytes_total + down.bytes_total
