"""The counting conventions in force, as data a client can display."""

from __future__ import annotations

from service.core.dtypes import BYTES_PER_ELEMENT
from service.core.hardware import DEFAULT_LAUNCH_OVERHEAD_S, DEFAULT_MATMUL_TILE
from service.core.operators.attention import SOFTMAX_FLOPS_PER_SCORE
from service.core.operators.pointwise import ELEMENTWISE_OPS, ROW_OPS_FLOPS_PER_ELEMENT
from service.core.operators.registry import OPERATORS
from service.core.roofs import NOMINAL_TOLERANCE

UNIT_BY_KIND = {name: kind.unit.value for name, kind in OPERATORS.items()}


def conventions() -> dict:
    return {
        "units": "SI base units: FLOP, bytes, seconds, FLOP/s, bytes/s",
        "bytes_per_element": dict(BYTES_PER_ELEMENT),
        "flops_per_multiply_add": 2,
        "flops_per_element": {op: flops for op, (flops, _) in ELEMENTWISE_OPS.items()}
        | dict(ROW_OPS_FLOPS_PER_ELEMENT) | {"embedding": 0},
        "elementwise_default_arity": {op: arity for op, (_, arity) in ELEMENTWISE_OPS.items()},
        "attention_flops_per_pair": f"4 * head_dim (QK^T and PV) + {SOFTMAX_FLOPS_PER_SCORE} (softmax)",
        "causal_pairs": "q*n - q*(q-1)/2 for q queries at the end of n keys",
        "compute_unit_by_kind": UNIT_BY_KIND,
        "roofline": "time >= max(FLOPs / compute roof, bytes / bandwidth); bound compute when intensity >= ridge",
        "mfu": "attainable (or achieved) FLOP/s / nominal peak of the same dtype and unit",
        "effective_roof": "median of accepted measurements where any exist, else the nominal value",
        "measurement_tolerance_above_nominal": NOMINAL_TOLERANCE,
        "default_matmul_tile": list(DEFAULT_MATMUL_TILE),
        "default_kernel_launch_overhead_s": DEFAULT_LAUNCH_OVERHEAD_S,
        "kv_cache_bytes_per_token": "2 * layers * kv_heads * head_dim * bytes (MLA: layers * (kv_lora_rank + rope dims) * bytes)",
        "kv_capacity": "floor((capacity * utilisation - weights - workspace) / (context * kv bytes per token))",
    }
