"""KV-cache capacity: how many requests of a given context fit beside the weights.

Per device: W + A + B * kv(S) + M_workspace <= C_usable, so B_max = floor((C_usable - W - A - M) / kv(S)),
where A is the activation peak of the engine's profiling step, which it holds back before sizing the cache,
never rounded up. kv(S) = sum over attention layers of blocks(min(S, window)) * (bytes per token of that layer),
where blocks() rounds up to whole blocks of a paged cache, plus the fixed state of the recurrent layers (their
scan state and their convolution's last inputs), the same whatever S. C_usable is what the runtime exposes (CUDA's total, less
than the as-built capacity) times the utilisation an engine is given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from service.core.dtypes import bytes_per_element
from service.core.errors import CostModelError
from service.core.memo import by_identity
from service.core.transformer import compressed
from service.core.transformer.architecture import Architecture, LayerGroup
from service.core.transformer.layers import KEPT_MODULES, ModelDTypes, router_params
from service.core.transformer.params import layer_params, model_params

MAX_CONTEXT = 2**40


def kv_heads_per_device(arch: Architecture, tensor_parallel: int, group: LayerGroup | None = None) -> float:
    """K/V heads each device caches in one of `group`'s layers (else the model's): split by t, or replicated when
    there are fewer heads than devices."""
    return max((arch.kv_heads_of(group) if group else arch.kv_heads) / tensor_parallel, 1)


def kv_bytes_per_token_per_layer(arch: Architecture, dtypes: ModelDTypes, tensor_parallel: int = 1,
                                 group: LayerGroup | None = None) -> float:
    """One token's cache in one attention layer (`group`'s; else a layer that runs its own indexer)."""
    s = bytes_per_element(dtypes.kv_cache)
    # An indexer's key (DeepSeek-V3.2's layers, MiniMax-M3's sparse ones) is whole on every device.
    index = arch.sparse_index.head_dim if arch.sparse_index is not None and (group is None or group.indexed) else 0
    if arch.latent is not None:  # the compressed latent and the shared rope key, whole on every device
        return (arch.latent.kv_lora_rank + arch.latent.qk_rope_head_dim + index) * s
    widths = arch.head_dim_of(group) + arch.value_dim_of(group) if group else arch.head_dim + arch.value_dim
    return kv_heads_per_device(arch, tensor_parallel, group) * widths * s + index * s


def recurrent_state_bytes(arch: Architecture, dtypes: ModelDTypes, tensor_parallel: int = 1) -> float:
    """One request's fixed state on one device, over every recurrent layer: each head's key_dim x value_dim scan
    state (in the checkpoint's state type, else the activations') and the convolution's last kernel - 1 inputs
    (in the activations' type). Heads split by tensor parallelism."""
    mixer = arch.recurrent
    layers = sum(g.count for g in arch.groups if g.recurs)
    if mixer is None or not layers:
        return 0.0
    scan = mixer.heads * mixer.key_dim * mixer.value_dim * bytes_per_element(mixer.state_dtype or dtypes.activations)
    conv = mixer.conv_channels * (mixer.conv_kernel - 1) * bytes_per_element(dtypes.activations)
    return layers * (scan + conv) / tensor_parallel


def cached_tokens(tokens: int, block_size: int) -> int:
    """A paged cache holds whole blocks: the tokens rounded up to a multiple of the block size."""
    return -(-tokens // block_size) * block_size


def layer_cache_bytes(arch: Architecture, dtypes: ModelDTypes, group: LayerGroup, context: int,
                      tensor_parallel: int = 1, block_size: int = 1) -> float:
    """One request's cache in one of `group`'s attention layers: at most its window (or chunk) of tokens, in whole
    blocks of `block_size` (1: a contiguous cache); DeepSeek-V4's its window and compressed entries."""
    if arch.compressed is not None:  # its window of one K=V head, and an entry every `compress` tokens
        entries = context // group.compress * compressed.entry_width(arch, arch.compressed, group) if group.compress else 0
        return _window_bytes(arch, dtypes, context, block_size) + entries * bytes_per_element(dtypes.kv_cache)
    return windowed_cache_bytes(context, group.sliding_window or group.chunk or None, block_size,
                                kv_bytes_per_token_per_layer(arch, dtypes, tensor_parallel, group))


def windowed_cache_bytes(context: int, window: int | None, block_size: int, per_token: float) -> float:
    """One layer's cache of a request's `context` tokens: at most its `window` (None: every token), in whole blocks."""
    return cached_tokens(min(context, window or context), block_size) * per_token


def kv_bytes_per_request(arch: Architecture, dtypes: ModelDTypes, context: int, tensor_parallel: int = 1,
                         block_size: int = 1) -> float:
    """The cache of one request's `context` tokens on one device: every attention layer's (layer_cache_bytes),
    and the recurrent layers' fixed state."""
    return (sum(g.count * layer_cache_bytes(arch, dtypes, g, context, tensor_parallel, block_size)
                for g in arch.groups if g.attends)
            + recurrent_state_bytes(arch, dtypes, tensor_parallel))


def kv_bytes_per_token(arch: Architecture, dtypes: ModelDTypes, tensor_parallel: int = 1) -> float:
    """One more token of context, over the layers whose cache grows with every token (DeepSeek-V4's compressing
    layers by one entry every `compress` tokens)."""
    if arch.compressed is not None:
        return sum(g.count * compressed.entry_width(arch, arch.compressed, g) * bytes_per_element(dtypes.kv_cache)
                   / g.compress for g in arch.groups if g.attends and g.compress)
    return sum(g.count * kv_bytes_per_token_per_layer(arch, dtypes, tensor_parallel, g) for g in arch.groups
               if g.attends and not (g.sliding_window or g.chunk))


def _window_bytes(arch: Architecture, dtypes: ModelDTypes, context: int, block_size: int) -> float:
    """DeepSeek-V4's window in one layer: at most `window` tokens (in whole blocks) of its one K=V head."""
    assert arch.compressed is not None
    return (cached_tokens(min(context, arch.compressed.window), block_size) * arch.head_dim
            * bytes_per_element(dtypes.kv_cache))


def _capped_bytes(arch: Architecture, dtypes: ModelDTypes, tensor_parallel: int, block_size: int) -> float:
    """What a request's window and chunk layers hold once its context passes their span."""
    if arch.compressed is not None:  # every layer's window, its entries growing apart
        window = _window_bytes(arch, dtypes, arch.compressed.window, block_size)
        return sum(g.count for g in arch.groups if g.attends) * window
    return sum(g.count * cached_tokens(g.sliding_window or g.chunk or 0, block_size)
               * kv_bytes_per_token_per_layer(arch, dtypes, tensor_parallel, g) for g in arch.groups if g.attends)


def routed_expert_bytes(arch: Architecture, dtypes: ModelDTypes) -> float:
    """Every routed expert's weights in their stored type (with their scales), over the whole model."""
    experts = dtypes.expert_dtypes()
    return model_params(arch).routed_experts * (experts.weight_bytes_per_element() or bytes_per_element(experts.weights))


@by_identity(objects=1)
def weight_bytes(arch: Architecture, dtypes: ModelDTypes, tensor_parallel: int = 1) -> float:
    """All parameters (every expert) as the checkpoint stores them: the routed experts in their type, the other
    quantised linear layers in the weights', the modules a quantised checkpoint keeps in 16 bits (its attention,
    shared experts or dense MLPs where its lists say: ModelDTypes.kept) and what every engine keeps so (the
    embedding table, norms, routers, a vision tower) in 16 bits; an untied LM head in its own type
    (ModelDTypes.head_dtype), as the analysis reads it."""
    params = model_params(arch)
    s_w = dtypes.weight_bytes_per_element() or bytes_per_element(dtypes.weights)
    s_16 = bytes_per_element(dtypes.unquantised)
    head = dtypes.head(arch.tied_embeddings)
    s_head = head.weight_bytes_per_element() or bytes_per_element(head.weights)
    classes = module_params(arch)

    def stored(name: str) -> float:
        return s_16 if name in dtypes.kept else s_w

    linear = sum(count * stored(name) for name, count in classes.items() if name in KEPT_MODULES)
    always_16 = params.embedding + params.vision + params.final_norm + classes["norms"] + classes["routers"]
    return ((linear + always_16 * s_16 + routed_expert_bytes(arch, dtypes) + params.lm_head * s_head) / tensor_parallel
            + replicated_kv_params(arch, tensor_parallel) * stored("attention"))


def module_params(arch: Architecture) -> dict[str, int]:
    """The decoder's parameters beside its routed experts, by the module classes a checkpoint stores apart: its
    token mixers (attention, or a recurrent layer's), dense MLPs, shared experts (with a latent MoE's projections),
    routers and norms."""
    out = dict.fromkeys(("attention", "dense_mlp", "shared_experts", "routers", "norms"), 0)
    moe = arch.moe
    for group in arch.groups:
        layer = layer_params(arch, group)
        router = router_params(arch, moe, group.hash_routed) if group.moe and moe else 0
        out["attention"] += group.count * layer.attention
        out["norms"] += group.count * layer.norms
        out["routers"] += group.count * router
        out["shared_experts" if group.moe else "dense_mlp"] += group.count * (layer.mlp_total - layer.routed - router)
    return out


def replicated_kv_params(arch: Architecture, tensor_parallel: int) -> float:
    """The K and V projections' parameters a device holds beyond its even share, where tensor parallelism exceeds
    the K/V heads and each device keeps one replicated head: (1 - kv_heads / t) of one head's K and V a layer."""
    t = tensor_parallel
    if arch.latent is not None:
        return 0.0
    return sum(group.count * arch.hidden * (arch.head_dim_of(group) + arch.projected_value_dim(group))
               * (1 - arch.kv_heads_of(group) / t) for group in arch.groups if group.attends and arch.kv_heads_of(group) < t)


@dataclass(frozen=True)
class Capacity:
    usable_bytes: float
    weights_bytes: float
    workspace_bytes: float
    activation_reserve_bytes: float  # the engine's profiling step's peak, held back before the KV cache
    kv_bytes_per_token: float  # what each further token adds: the layers that keep every token
    kv_bytes_per_request: float
    # The recurrent layers' state: a request holds it whatever its length.
    state_bytes_per_request: float
    # What a request's window and chunk layers hold once its context passes their span, whatever its length after.
    kv_bytes_capped_per_request: float
    available_kv_bytes: float
    max_concurrent_requests: int
    max_context_len: int | None  # None: neither memory (sliding windows) nor the model bounds it
    max_context_len_bound_by: str | None  # "memory", "model", or None
    fits: bool
    shortfall_bytes: float
    block_size: int = 1


def kv_capacity(arch: Architecture, dtypes: ModelDTypes, *, context_len: int, capacity_bytes: float,
                memory_utilization: float = 1.0, workspace_bytes: float = 0.0, tensor_parallel: int = 1,
                block_size: int = 1, profile_tokens: int = 0) -> Capacity:
    if tensor_parallel > 1 and arch.heads % tensor_parallel:
        raise CostModelError("tensor_parallel", f"num_attention_heads ({arch.heads}) is not divisible by {tensor_parallel}")
    check_positions(arch, context_len, "context_len")
    usable = capacity_bytes * memory_utilization
    weights = weight_bytes(arch, dtypes, tensor_parallel)
    per_request = kv_bytes_per_request(arch, dtypes, context_len, tensor_parallel, block_size)
    reserved = profile_activation_bytes(arch, dtypes, profile_tokens, tensor_parallel)
    available = usable - weights - reserved - workspace_bytes
    fits = available > 0
    max_requests = math.floor(available / per_request) if fits else 0
    longest: int | None = 0
    bound_by: str | None = "memory"
    if fits:
        longest = _longest_context(arch, dtypes, available, tensor_parallel, block_size)
        bound_by = "memory" if longest is not None else None
        if arch.max_positions is not None and (longest is None or arch.max_positions < longest):
            longest, bound_by = arch.max_positions, "model"
    return Capacity(
        usable_bytes=usable, weights_bytes=weights, workspace_bytes=workspace_bytes, activation_reserve_bytes=reserved,
        kv_bytes_per_token=kv_bytes_per_token(arch, dtypes, tensor_parallel),
        kv_bytes_capped_per_request=_capped_bytes(arch, dtypes, tensor_parallel, block_size),
        kv_bytes_per_request=per_request,
        state_bytes_per_request=recurrent_state_bytes(arch, dtypes, tensor_parallel),
        available_kv_bytes=available, max_concurrent_requests=max_requests,
        max_context_len=longest, max_context_len_bound_by=bound_by,
        fits=fits, shortfall_bytes=0.0 if fits else -available, block_size=block_size,
    )


@dataclass(frozen=True)
class MixCapacity:
    mean_kv_bytes_per_request: float
    max_concurrent_requests: int  # at the mix's mean cache per request
    p95_context_len: int
    max_concurrent_requests_at_p95: int  # as if every request were as long as the 95th percentile


def mix_capacity(arch: Architecture, dtypes: ModelDTypes, mix: list[tuple[int, float]], available_bytes: float,
                 tensor_parallel: int = 1, block_size: int = 1) -> MixCapacity:
    """Concurrency for requests whose context lengths follow `mix` ((length, share) pairs, shares summing to 1):
    at the mean cache per request (what a long-running server holds on average) and at the 95th percentile
    length (what planners size for)."""
    for length, _ in mix:
        check_positions(arch, length, "context_mix")
    mean = sum(share * kv_bytes_per_request(arch, dtypes, length, tensor_parallel, block_size) for length, share in mix)
    cumulative, p95 = 0.0, max(length for length, _ in mix)
    for length, share in sorted(mix):
        cumulative += share
        if cumulative >= 0.95 - 1e-12:
            p95 = length
            break
    at_p95 = kv_bytes_per_request(arch, dtypes, p95, tensor_parallel, block_size)
    fits = available_bytes > 0
    return MixCapacity(mean, math.floor(available_bytes / mean) if fits else 0, p95,
                       math.floor(available_bytes / at_p95) if fits else 0)


def activation_bytes(arch: Architecture, dtypes: ModelDTypes, *, tokens: int, batch: int, tensor_parallel: int = 1) -> float:
    """An estimate of the live activations of an inference step: layers run one at a time, so the residual
    stream plus the widest buffer of one layer (the fused QKV output, the MLP's gate and up halves of the k
    experts a token visits) for every token in the step, and the LM head's fp32 logits for the last token of
    each sequence. A floor for planning, not a profile: frameworks add workspaces of their own."""
    return _activations(tokens, batch, *activation_widths(arch, dtypes, tensor_parallel))


def _activations(tokens: int, batch: int, stream: float, element_bytes: float, vocab: int, tensor_parallel: int) -> float:
    return tokens * stream * element_bytes + batch * vocab / tensor_parallel * 4


def activation_widths(arch: Architecture, dtypes: ModelDTypes,
                      tensor_parallel: int = 1) -> tuple[float, float, int, int]:
    """What activation_bytes multiplies by the step's tokens and sequences: (the residual stream and the widest
    buffer of a token, the activations' bytes an element, the vocabulary, the tensor-parallel size)."""
    t = tensor_parallel
    s = bytes_per_element(dtypes.activations)
    qkv = max((arch.heads * arch.head_dim_of(g) + arch.kv_heads_of(g) * (arch.head_dim_of(g) + arch.value_dim_of(g))
               for g in arch.groups if g.attends), default=0) / t
    widths = [arch.intermediate]
    if arch.recurrent is not None:  # its input projection: q, k, v, the output gate and the per-head gates
        mixer = arch.recurrent
        qkv = max(qkv, (mixer.conv_channels + mixer.heads * (mixer.value_dim + 2)) / t)
    if arch.moe is not None:
        widths.append(arch.moe.top_k * arch.moe.expert_intermediate + arch.moe.shared_intermediate)
    widest = max(arch.hidden, qkv, 2 * max(widths) / t)
    return arch.hidden + widest, s, arch.vocab, t


@dataclass(frozen=True)
class StepMemory:
    capacity_bytes: float  # as built
    usable_bytes: float  # what the runtime exposes, times the utilisation
    weights_bytes: float
    kv_cache_bytes: float
    activation_bytes: float
    workspace_bytes: float
    required_bytes: float
    fits: bool
    headroom_bytes: float
    shortfall_bytes: float
    block_size: int


@dataclass(frozen=True)
class MemoryBudget:
    """What a device holds for one model, dtypes and parallelism, worked out once (the weights' bytes walk the
    whole parameter count); `at` then places any batch and context against it (a sweep or a plan asks for
    thousands)."""

    arch: Architecture
    dtypes: ModelDTypes
    capacity_bytes: float
    usable_bytes: float
    workspace_bytes: float
    tensor_parallel: int
    block_size: int
    weights_bytes: float
    reserved_activation_bytes: float = 0.0  # the profiling step's peak an engine holds back before its KV cache

    @cached_property
    def _cache_layers(self) -> tuple[tuple[int, int | None, float], ...] | None:
        """(layers, window or chunk, one token's bytes in one layer) of each attending group, and None where a
        layer's cache is not tokens x bytes (DeepSeek-V4's compressed entries): what kv_bytes_per_request walks
        for every request, worked out once a budget (a sweep or a batch asks `at` thousands of times)."""
        arch, t = self.arch, self.tensor_parallel
        if arch.compressed is not None:
            return None
        return tuple((g.count, g.sliding_window or g.chunk or None, kv_bytes_per_token_per_layer(arch, self.dtypes, t, g))
                     for g in arch.groups if g.attends)

    @cached_property
    def _fixed_state_bytes(self) -> float:
        return recurrent_state_bytes(self.arch, self.dtypes, self.tensor_parallel)

    @cached_property
    def _activation_widths(self) -> tuple[float, float, int, int]:
        return activation_widths(self.arch, self.dtypes, self.tensor_parallel)

    def kv_bytes_per_request(self, context: int) -> float:
        """kv_bytes_per_request at this budget's model, dtypes, parallelism and blocks, in the same arithmetic."""
        layers = self._cache_layers
        if layers is None:
            return kv_bytes_per_request(self.arch, self.dtypes, context, self.tensor_parallel, self.block_size)
        block = self.block_size
        return (sum(count * windowed_cache_bytes(context, window, block, per_token) for count, window, per_token in layers)
                + self._fixed_state_bytes)

    def at(self, *, batch: int, context: int, step_tokens: int) -> StepMemory:
        """Per device: weights + batch x kv(context) + activations + workspace against the usable memory; the
        activations are the step's own or the engine's reserve for its profiling step, whichever is larger."""
        kv = batch * self.kv_bytes_per_request(context)
        activations = max(_activations(step_tokens, batch, *self._activation_widths), self.reserved_activation_bytes)
        required = self.weights_bytes + kv + activations + self.workspace_bytes
        spare = self.usable_bytes - required
        return StepMemory(self.capacity_bytes, self.usable_bytes, self.weights_bytes, kv, activations,
                          self.workspace_bytes, required, spare >= 0, max(spare, 0.0), max(-spare, 0.0), self.block_size)


# The sequences of the profiling step whose logits an engine holds (vLLM's max_num_seqs default).
PROFILE_SEQUENCES = 256


def profile_activation_bytes(arch: Architecture, dtypes: ModelDTypes, tokens: int, tensor_parallel: int = 1) -> float:
    """The activation peak of an engine's profiling step of `tokens` tokens (over at most PROFILE_SEQUENCES
    sequences), which it reserves before sizing the KV cache; 0 for none."""
    if tokens <= 0:
        return 0.0
    return activation_bytes(arch, dtypes, tokens=tokens, batch=min(tokens, PROFILE_SEQUENCES),
                            tensor_parallel=tensor_parallel)


def memory_budget(arch: Architecture, dtypes: ModelDTypes, *, capacity_bytes: float, usable_bytes: float,
                  workspace_bytes: float = 0.0, tensor_parallel: int = 1, block_size: int = 1,
                  profile_tokens: int = 0) -> MemoryBudget:
    return MemoryBudget(arch, dtypes, capacity_bytes, usable_bytes, workspace_bytes, tensor_parallel, block_size,
                        weight_bytes(arch, dtypes, tensor_parallel),
                        profile_activation_bytes(arch, dtypes, profile_tokens, tensor_parallel))


def _longest_context(arch: Architecture, dtypes: ModelDTypes, available: float, tensor_parallel: int,
                     block_size: int = 1) -> int | None:
    if kv_bytes_per_request(arch, dtypes, MAX_CONTEXT, tensor_parallel, block_size) <= available:
        return None
    low, high = 0, MAX_CONTEXT  # per-request bytes never decrease with the context: bisect
    while low < high:
        middle = (low + high + 1) // 2
        if kv_bytes_per_request(arch, dtypes, middle, tensor_parallel, block_size) <= available:
            low = middle
        else:
            high = middle - 1
    return low


def check_positions(arch: Architecture, tokens: int, field: str) -> None:
    """A context beyond the model's positions is refused, not sized."""
    if arch.max_positions is not None and tokens > arch.max_positions:
        raise CostModelError(field, f"{tokens:,} tokens exceed the model's max_position_embeddings "
                                    f"({arch.max_positions:,})")
