"""DeepSeek-V4's attention and hyper-connections, as transformers 5.25.0's DeepseekV4Attention and
DeepseekV4HyperConnection build them (Architecture.compressed), and the cache they keep.

One layer on one device (tensor parallelism t splits the query heads and the output groups; the rest is whole on
every device, as the latent attention's compressed projections are):
- queries: q_a_proj (hidden -> q_lora_rank) and its norm; q_b_proj (q_lora_rank -> heads/t x head_dim) and a
  weightless norm per head;
- one head serving as both key and value: kv_proj (hidden -> head_dim) and its norm; RoPE on rope_dim of each;
- on a layer that compresses (LayerGroup.compress = c): every c tokens pooled into one cached entry by kv_proj and
  gate_proj (hidden -> w x head_dim: w = 2 on the compressed-sparse layers, c = 4, whose entries span two windows;
  1 on the heavily compressed ones, c = 128), a learned position bias (c x w x head_dim) and a norm; the
  compressed-sparse layers add an indexer: the same pooling at index_head_dim, a q_b_proj (q_lora_rank ->
  index_heads x index_head_dim) and weights_proj (hidden -> index_heads), scoring every entry;
- attention: each query over its last `window` tokens and over its entries (the indexer's best index_topk on a
  compressed-sparse layer, all of them on a heavily compressed one), with a sink logit per head;
- output: o_a_proj in o_groups/t groups (heads/o_groups x head_dim -> o_lora_rank each), then o_b_proj
  (o_groups/t x o_lora_rank -> hidden), row-parallel.
The cache per request and layer (capacity.layer_cache_bytes): its last `window` tokens of head_dim, and one entry
of entry_width per c tokens. A query at position p sees floor((p + 1) / c) entries: the
steps below count each query's own, so a prefill's pairs are exact, not the last query's for all.

The residual stream is hyper_streams (N) streams of the hidden size; before each block (attention, MLP) a mixing
matmul (N x hidden -> (2 + N) x N weights: pre, post and the N x N combination) collapses them into the block's
input, and after it the output is spread back and the streams recombined.
"""

from __future__ import annotations

from typing import Any

from service.core.operators import attention_cost, sparse_index_cost
from service.core.transformer.architecture import Architecture, CompressedAttention, LayerGroup


def entries_seen(compress: int, q_len: int, kv_len: int, top_k: int | None = None) -> int:
    """The compressed entries the step's queries attend to, summed over its queries (the last q_len positions of
    kv_len): query p sees floor((p + 1) / compress) of them, at most top_k where an indexer picks them."""

    def below(n: int) -> int:  # sum of floor(m / c) for m = 0..n
        whole = n // compress
        return compress * whole * (whole - 1) // 2 + whole * (n - whole * compress + 1)

    low, high = kv_len - q_len + 1, kv_len  # the queries' (p + 1)
    if top_k is None:
        return below(high) - below(low - 1)
    capped = top_k * compress  # from here on a query sees top_k or more
    uncapped_high = min(high, capped - 1)
    total = below(uncapped_high) - below(low - 1) if low <= uncapped_high else 0
    return total + top_k * max(0, high - max(low, capped) + 1)


def projections(arch: Architecture, spec: CompressedAttention, heads: int, groups: int, indexer: bool,
                pooled: int) -> list[tuple[str, int, int]]:
    """(name, n, k) of the layer's matmuls on a device holding `heads` query heads and `groups` output groups;
    `pooled`: the compressor's width multiple (0: none)."""
    h, d = arch.hidden, arch.head_dim
    out = [("q_a_proj", spec.q_lora_rank, h), ("q_b_proj", heads * d, spec.q_lora_rank), ("kv_proj", d, h)]
    if pooled:
        out.append(("compressor_proj", 2 * pooled * d, h))  # kv_proj and gate_proj, one read of the input
    if indexer:
        out += [("indexer_compressor_proj", 2 * 2 * spec.index_head_dim, h),
                ("indexer_q_proj", spec.index_heads * spec.index_head_dim, spec.q_lora_rank),
                ("indexer_weights_proj", spec.index_heads, h)]
    per_group = arch.heads * d // spec.o_groups
    out += [("o_a_proj", groups * spec.o_lora_rank, per_group), ("o_b_proj", h, groups * spec.o_lora_rank)]
    return out


def small_params(arch: Architecture, spec: CompressedAttention, group: LayerGroup, heads: int) -> dict[str, int]:
    """The layer's parameters beside its matmuls' weights: norms, position biases and sinks (o_a_proj's grouped
    weight counts per group: its matmul row reads groups x o_lora_rank x its input, not the full product)."""
    d, pooled = arch.head_dim, pooling_width(group)
    out = {"q_a_norm": spec.q_lora_rank, "kv_norm": d, "sinks": heads}
    if group.compress:
        out["compressor_bias_and_norm"] = group.compress * pooled * d + d
    if indexer_on(group):
        out["indexer_bias_and_norm"] = group.compress * 2 * spec.index_head_dim + spec.index_head_dim
    return out


def pooling_width(group: LayerGroup) -> int:
    """How many head_dim-wide series a compressing layer pools (its entries overlap two windows where an indexer
    scores them)."""
    return 0 if not group.compress else 2 if indexer_on(group) else 1


def indexer_on(group: LayerGroup) -> bool:
    return bool(group.compress) and group.compress < COMPRESSED_SPARSE_MAX


# Compressed-sparse layers pool a few tokens an entry and pick among them (4 in both V4 releases); heavily
# compressed ones pool many and read them all (128).
COMPRESSED_SPARSE_MAX = 16


def attention_costs(arch: Architecture, spec: CompressedAttention, group: LayerGroup, *, batch: int, heads: int,
                    q_len: int, kv_len: int, dtype: str, kv_dtype: str, implementation: str):
    """(the window's attention, the compressed entries' attention or None, the indexer's scoring or None) with
    the parameters each was built from."""
    d = arch.head_dim
    common: dict[str, Any] = {"batch": batch, "heads": heads, "kv_heads": 1, "head_dim": d, "dtype": dtype, "kv_dtype": kv_dtype,
              "shared_kv": True, "implementation": implementation}
    window: dict[str, Any] = {**common, "q_len": q_len, "kv_len": kv_len, "causal": True, "window": spec.window}
    if not group.compress:
        return (window, attention_cost(**window)), None, None
    top_k = spec.index_topk if indexer_on(group) else None
    # The step's entry pairs over its queries, as a non-causal attention of q_len queries over their mean count
    # (rounded down: a bound never counts more than the step does).
    seen = entries_seen(group.compress, q_len, kv_len, top_k)
    mean = seen // q_len
    entries: dict[str, Any] | None = ({**common, "q_len": q_len, "kv_len": mean, "causal": False} if mean else None)
    index: dict[str, Any] | None = None
    if indexer_on(group):
        scored = entries_seen(group.compress, q_len, kv_len) // q_len
        if scored:
            index = {"batch": batch, "heads": spec.index_heads, "head_dim": spec.index_head_dim, "q_len": q_len,
                     "kv_len": scored, "top_k": spec.index_topk, "dtype": dtype, "kv_dtype": kv_dtype,
                     "causal": False}
    return ((window, attention_cost(**window)),
            (entries, attention_cost(**entries)) if entries else None,
            (index, sparse_index_cost(**index)) if index else None)


def entry_width(arch: Architecture, spec: CompressedAttention, group: LayerGroup) -> int:
    """One compressed entry's cached width in the group's layers: head_dim, and the indexer's key where an indexer
    scores the entries; 0 where the layer keeps its window alone."""
    if not group.compress:
        return 0
    return arch.head_dim + (spec.index_head_dim if indexer_on(group) else 0)


def hyper_mix_params(arch: Architecture, spec: CompressedAttention) -> int:
    """One hyper-connection's weights: the (2 + N) x N mixes from N x hidden, their base and three scales."""
    n = spec.hyper_streams
    mixes = (2 + n) * n
    return mixes * n * arch.hidden + mixes + 3


def hyper_head_params(arch: Architecture, spec: CompressedAttention) -> int:
    """The head's collapse of the N streams before the final norm: N x (N x hidden) weights, N biases, a scale."""
    n = spec.hyper_streams
    return n * n * arch.hidden + n + 1
