"""KV-cache capacity: how many requests of a given context fit beside the weights.

Per device: W + B * kv(S) + M_workspace <= C_usable, so B_max = floor((C_usable - W - M) / kv(S)),
never rounded up. kv(S) = sum over layers of min(S, window) * (bytes per token of that layer).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from service.core.dtypes import bytes_per_element
from service.core.errors import CostModelError
from service.core.transformer.architecture import Architecture
from service.core.transformer.layers import ModelDTypes
from service.core.transformer.params import model_params

MAX_CONTEXT = 2**40


def kv_heads_per_device(arch: Architecture, tensor_parallel: int) -> float:
    """K/V heads each device caches: split by t, or replicated when there are fewer heads than devices."""
    return max(arch.kv_heads / tensor_parallel, 1)


def kv_bytes_per_token_per_layer(arch: Architecture, dtypes: ModelDTypes, tensor_parallel: int = 1) -> float:
    s = bytes_per_element(dtypes.kv_cache)
    if arch.latent is not None:  # the compressed latent and the shared rope key, whole on every device
        return (arch.latent.kv_lora_rank + arch.latent.qk_rope_head_dim) * s
    return 2 * kv_heads_per_device(arch, tensor_parallel) * arch.head_dim * s


def kv_bytes_per_request(arch: Architecture, dtypes: ModelDTypes, context: int, tensor_parallel: int = 1) -> float:
    per_layer = kv_bytes_per_token_per_layer(arch, dtypes, tensor_parallel)
    return sum(g.count * min(context, g.sliding_window or context) for g in arch.groups) * per_layer


def weight_bytes(arch: Architecture, dtypes: ModelDTypes, tensor_parallel: int = 1) -> float:
    """All parameters (every expert) in the weights' type, the embedding table in the activations' type."""
    params = model_params(arch)
    s_w = dtypes.weight_bytes_per_element() or bytes_per_element(dtypes.weights)
    other = params.total - params.embedding
    return (other * s_w + params.embedding * bytes_per_element(dtypes.activations)) / tensor_parallel


@dataclass(frozen=True)
class Capacity:
    usable_bytes: float
    weights_bytes: float
    workspace_bytes: float
    kv_bytes_per_token: float
    kv_bytes_per_request: float
    available_kv_bytes: float
    max_concurrent_requests: int
    max_context_len: int | None  # None: sliding windows make every length fit
    fits: bool
    shortfall_bytes: float


def kv_capacity(arch: Architecture, dtypes: ModelDTypes, *, context_len: int, capacity_bytes: float,
                memory_utilization: float = 1.0, workspace_bytes: float = 0.0, tensor_parallel: int = 1) -> Capacity:
    if tensor_parallel > 1 and arch.heads % tensor_parallel:
        raise CostModelError("tensor_parallel", f"num_attention_heads ({arch.heads}) is not divisible by {tensor_parallel}")
    usable = capacity_bytes * memory_utilization
    weights = weight_bytes(arch, dtypes, tensor_parallel)
    per_request = kv_bytes_per_request(arch, dtypes, context_len, tensor_parallel)
    available = usable - weights - workspace_bytes
    fits = available > 0
    max_requests = math.floor(available / per_request) if fits else 0
    return Capacity(
        usable_bytes=usable, weights_bytes=weights, workspace_bytes=workspace_bytes,
        kv_bytes_per_token=kv_bytes_per_token_per_layer(arch, dtypes, tensor_parallel) * arch.layers,
        kv_bytes_per_request=per_request, available_kv_bytes=available, max_concurrent_requests=max_requests,
        max_context_len=_longest_context(arch, dtypes, available, tensor_parallel) if fits else 0,
        fits=fits, shortfall_bytes=0.0 if fits else -available,
    )


def _longest_context(arch: Architecture, dtypes: ModelDTypes, available: float, tensor_parallel: int) -> int | None:
    if kv_bytes_per_request(arch, dtypes, MAX_CONTEXT, tensor_parallel) <= available:
        return None
    low, high = 0, MAX_CONTEXT  # per-request bytes never decrease with the context: bisect
    while low < high:
        middle = (low + high + 1) // 2
        if kv_bytes_per_request(arch, dtypes, middle, tensor_parallel) <= available:
            low = middle
        else:
            high = middle - 1
    return low
